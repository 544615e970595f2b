#include "cli/flag_set.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/check.h"

namespace moetier::client {
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
  if (!absl::SimpleAtoi(AbslView(value), &v)) {
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

std::string FlagSet::Help() const {
  std::string out;
  for (const Flag& f : flags_) {
    std::string head = "  " + absl::StrJoin(f.names, ", ");
    if (!f.value_name.empty()) head += " " + f.value_name;
    if (head.size() + 2 > kHelpColumn) {
      out += head + "\n" + std::string(kHelpColumn, ' ');
    } else {
      out += head + std::string(kHelpColumn - head.size(), ' ');
    }
    // Word-wrapped to kHelpWidth columns.
    size_t column = kHelpColumn;
    bool first = true;
    for (absl::string_view word :
         absl::StrSplit(f.help, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
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
    if (!f.aliases.empty()) {
      out += "\n" + std::string(kHelpColumn, ' ') + "(also " + absl::StrJoin(f.aliases, ", ") + ")";
    }
    out.push_back('\n');
  }
  return out;
}

}  // namespace moetier::client
