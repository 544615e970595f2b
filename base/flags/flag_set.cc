#include "base/flags/flag_set.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/check.h"

namespace moetier {
namespace {

constexpr size_t kMaxTokenIds = size_t{1} << 24;
constexpr size_t kHelpColumn = 26;
constexpr size_t kHelpWidth = 80;

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

absl::Status FlagError(std::string_view flag, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrFormat("flag %s: %s", flag, what));
}

absl::Status ParseIntFlag(std::string_view flag, std::string_view value, int64_t min, int64_t max,
                          int64_t* out) {
  int64_t v = 0;
  // Digits with an optional '-': SimpleAtoi alone also takes '+' and spaces.
  const std::string_view digits = value.substr(value.starts_with('-') ? 1 : 0);
  if (digits.empty() || digits.find_first_not_of("0123456789") != digits.npos ||
      !absl::SimpleAtoi(AbslView(value), &v)) {
    return FlagError(flag, absl::StrFormat("'%s' is not an integer", value));
  }
  if (v < min || v > max) {
    return FlagError(flag, absl::StrFormat("%d is outside %d..%d", v, min, max));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ParseFloatFlag(std::string_view flag, std::string_view value, float* out) {
  float v = 0.0f;
  if (!absl::SimpleAtof(AbslView(value), &v) || !std::isfinite(v)) {
    return FlagError(flag, absl::StrFormat("'%s' is not a finite number", value));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ParseUint64Flag(std::string_view flag, std::string_view value, uint64_t* out) {
  uint64_t v = 0;
  // SimpleAtoi accepts a leading '+' and surrounding spaces; a seed or a
  // count is digits only.
  const bool digits_only = !value.empty() && value.find_first_not_of("0123456789") == value.npos;
  if (!digits_only || !absl::SimpleAtoi(AbslView(value), &v)) {
    return FlagError(flag, absl::StrFormat("'%s' is not an unsigned integer", value));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ParseDoubleFlag(std::string_view flag, std::string_view value, double min, double max,
                             double* out) {
  double v = 0;
  if (!absl::SimpleAtod(AbslView(value), &v) || !std::isfinite(v)) {
    return FlagError(flag, absl::StrFormat("'%s' is not a finite number", value));
  }
  if (v < min || v > max) {
    return FlagError(flag, absl::StrFormat("%s is outside [%g, %g]", value, min, max));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ParseTokenIds(std::string_view flag, std::string_view value,
                           std::vector<int32_t>* out) {
  std::vector<int32_t> ids;
  for (absl::string_view part :
       absl::StrSplit(AbslView(value), absl::ByAnyChar(", \t\n"), absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id) || id < 0) {
      return FlagError(flag, absl::StrFormat("'%s' is not a token id (expected comma-separated "
                                             "non-negative integers)",
                                             part));
    }
    if (ids.size() == kMaxTokenIds) {
      return FlagError(flag, absl::StrFormat("more than %d token ids", kMaxTokenIds));
    }
    ids.push_back(id);
  }
  if (ids.empty()) return FlagError(flag, "no token ids given");
  *out = std::move(ids);
  return absl::OkStatus();
}

void FlagSet::Add(std::vector<std::string> names, std::string value_name, std::string help,
                  Setter set) {
  flags_.push_back({std::move(names), std::move(value_name), std::move(help), std::move(set), {}});
}

void FlagSet::AddSwitch(std::vector<std::string> names, std::string help,
                        std::function<void()> set) {
  flags_.push_back({std::move(names),
                    "",
                    std::move(help),
                    [set = std::move(set)](std::string_view, std::string_view) {
                      set();
                      return absl::OkStatus();
                    },
                    {}});
}

void FlagSet::AddSwitch(std::vector<std::string> names, std::string help, bool* out) {
  AddSwitch(std::move(names), std::move(help), [out] { *out = true; });
}

void FlagSet::AddString(std::vector<std::string> names, std::string value_name, std::string help,
                        std::string* out) {
  Add(std::move(names), std::move(value_name), std::move(help),
      [out](std::string_view, std::string_view value) {
        *out = std::string(value);
        return absl::OkStatus();
      });
}

void FlagSet::AddText(std::string text) {
  flags_.push_back({{}, "", std::move(text), nullptr, {}});
}

void FlagSet::Alias(std::string_view name, std::vector<std::string> aliases) {
  Flag* flag = FindDocumented(name);
  MOETIER_CHECK(flag != nullptr);
  for (std::string& alias : aliases) {
    MOETIER_CHECK(Find(alias) == nullptr);
    flag->aliases.push_back(std::move(alias));
  }
}

FlagSet::Flag* FlagSet::FindDocumented(std::string_view name) {
  for (Flag& f : flags_) {
    for (const std::string& n : f.names) {
      if (n == name) return &f;
    }
  }
  return nullptr;
}

const FlagSet::Flag* FlagSet::Find(std::string_view name) const {
  for (const Flag& f : flags_) {
    for (const std::string& n : f.names) {
      if (n == name) return &f;
    }
    for (const std::string& n : f.aliases) {
      if (n == name) return &f;
    }
  }
  return nullptr;
}

bool FlagSet::TakesValue(std::string_view name) const {
  const Flag* flag = Find(name);
  return flag != nullptr && !flag->value_name.empty();
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args, Parsed* parsed,
                            bool stop_at_positional) const {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--") {
      parsed->after_dashes.assign(args.begin() + static_cast<ptrdiff_t>(i) + 1, args.end());
      return absl::OkStatus();
    }
    // A lone "-" is a value ("read stdin"), not a flag.
    if (arg.size() < 2 || arg[0] != '-') {
      if (stop_at_positional) {
        parsed->positionals.assign(args.begin() + static_cast<ptrdiff_t>(i), args.end());
        return absl::OkStatus();
      }
      parsed->positionals.emplace_back(arg);
      continue;
    }
    std::string_view name = arg;
    std::string_view value;
    bool inline_value = false;
    if (const size_t eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    const Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("unknown flag '%s' (see --help)", name));
    }
    const bool takes_value = !flag->value_name.empty();
    if (takes_value && !inline_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrFormat("flag %s needs a value", name));
      }
      value = args[++i];
    } else if (!takes_value && inline_value) {
      return absl::InvalidArgumentError(absl::StrFormat("flag %s takes no value", name));
    }
    if (absl::Status s = flag->set(name, value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

namespace {

// Appends `text` word-wrapped to kHelpWidth columns, continuation lines
// indented to kHelpColumn; `column` is where the output stands.
void AppendWrapped(std::string_view text, size_t column, std::string& out) {
  bool first = true;
  for (absl::string_view word :
       absl::StrSplit(AbslView(text), absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    if (!first && column + 1 + word.size() > kHelpWidth) {
      out += "\n" + std::string(kHelpColumn, ' ');
      column = kHelpColumn;
      first = true;
    }
    if (!first) {
      out.push_back(' ');
      ++column;
    }
    out.append(word.data(), word.size());
    column += word.size();
    first = false;
  }
}

}  // namespace

std::string FlagSet::Help(bool help_flag) const {
  size_t last_flag = flags_.size();
  for (size_t i = 0; i < flags_.size(); ++i) {
    if (!flags_[i].names.empty()) last_flag = i;
  }
  std::string out;
  for (size_t i = 0; i < flags_.size(); ++i) {
    const Flag& f = flags_[i];
    if (f.names.empty()) {
      if (!out.empty()) out.push_back('\n');
      out += f.help + "\n";
    } else {
      std::string head = "  " + absl::StrJoin(f.names, ", ");
      if (!f.value_name.empty()) head += " " + f.value_name;
      if (head.size() + 2 > kHelpColumn) {
        out += head + "\n" + std::string(kHelpColumn, ' ');
      } else {
        out += head + std::string(kHelpColumn - head.size(), ' ');
      }
      AppendWrapped(f.help, kHelpColumn, out);
      if (!f.aliases.empty()) {
        out +=
            "\n" + std::string(kHelpColumn, ' ') + "(also " + absl::StrJoin(f.aliases, ", ") + ")";
      }
      out.push_back('\n');
    }
    if (help_flag && (i == last_flag || (last_flag == flags_.size() && i + 1 == flags_.size()))) {
      out += "  -h, --help" + std::string(kHelpColumn - 12, ' ') + "this text, then exit\n";
    }
  }
  if (help_flag && flags_.empty()) {
    out += "  -h, --help" + std::string(kHelpColumn - 12, ' ') + "this text, then exit\n";
  }
  return out;
}

[[noreturn]] void ExitWithUsageError(std::string_view program, const absl::Status& status) {
  std::fprintf(stderr, "%.*s: %.*s\n", static_cast<int>(program.size()), program.data(),
               static_cast<int>(status.message().size()), status.message().data());
  std::exit(2);
}

std::string ProgramHelp(const FlagSet& flags, std::string_view usage) {
  std::string text(usage);
  if (!text.empty() && text.back() != '\n') text.push_back('\n');
  return text + "\n" + flags.Help(/*help_flag=*/true);
}

std::vector<std::string> ParseFlagsOrExit(const FlagSet& flags, std::string_view program,
                                          std::string_view usage, int argc,
                                          const char* const* argv) {
  const std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.find('=') == std::string::npos && flags.TakesValue(arg)) {
      ++i;  // its value, whatever it looks like
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      const std::string text = ProgramHelp(flags, usage);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::exit(0);
    }
  }
  FlagSet::Parsed parsed;
  if (absl::Status s = flags.Parse(args, &parsed); !s.ok()) ExitWithUsageError(program, s);
  for (std::string& rest : parsed.after_dashes) parsed.positionals.push_back(std::move(rest));
  return parsed.positionals;
}

void ParseOnlyFlagsOrExit(const FlagSet& flags, std::string_view program, std::string_view usage,
                          int argc, const char* const* argv) {
  const std::vector<std::string> positionals = ParseFlagsOrExit(flags, program, usage, argc, argv);
  if (!positionals.empty()) {
    ExitWithUsageError(program, absl::InvalidArgumentError(absl::StrFormat(
                                    "unexpected argument '%s' (see --help)", positionals[0])));
  }
}

}  // namespace moetier
