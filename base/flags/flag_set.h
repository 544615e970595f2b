// The command-line parser of the client, the tools and the benchmarks:
// flags take their value as the next argument or after '='; errors are one
// line naming the flag. Every flag carries its help text, so `--help` lists
// exactly the flags that parse. (moetier-worker keeps its own table, whose
// usage documents a flag differently per mode, and moetierd derives its
// flags from its config file's schema; both follow the same rules.)
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"

namespace moetier {

class FlagSet {
 public:
  // Receives the flag as typed (for messages) and its value.
  using Setter = std::function<absl::Status(std::string_view flag, std::string_view value)>;

  // A flag with a value. `names` are the spellings ("-n", "--max-new-tokens");
  // `value_name` is shown in the help ("N").
  void Add(std::vector<std::string> names, std::string value_name, std::string help, Setter set);
  // A flag without a value.
  void AddSwitch(std::vector<std::string> names, std::string help, std::function<void()> set);
  void AddSwitch(std::vector<std::string> names, std::string help, bool* out);

  // Typed flags: the value must parse and lie in [min, max]; errors name
  // the flag and the range.
  template <typename Int>
  void AddInt(std::vector<std::string> names, std::string value_name, std::string help, Int* out,
              Int min = std::numeric_limits<Int>::min(), Int max = std::numeric_limits<Int>::max());
  template <typename Float>
  void AddFloat(std::vector<std::string> names, std::string value_name, std::string help,
                Float* out, double min, double max);
  void AddString(std::vector<std::string> names, std::string value_name, std::string help,
                 std::string* out);

  // Text printed as it is, after a blank line, between the flags added
  // before and after it: a heading ("Output:") or a preformatted table.
  void AddText(std::string text);

  // Other spellings of the flag `name` (llama.cpp's -m, -c, ...): they parse
  // like it, and its help lists them last, so one spelling stays the
  // documented one.
  void Alias(std::string_view name, std::vector<std::string> aliases);

  struct Parsed {
    std::vector<std::string> positionals;
    // Everything after a lone "--", untouched.
    std::vector<std::string> after_dashes;
  };
  // Parses `args` (no program or command name). With `stop_at_positional`,
  // the first positional and everything after it are returned as
  // positionals without being parsed.
  absl::Status Parse(const std::vector<std::string>& args, Parsed* parsed,
                     bool stop_at_positional = false) const;

  // Whether `name` (any spelling or alias) is a flag that takes a value.
  bool TakesValue(std::string_view name) const;

  // The flags, one entry each, help text indented under the names. With
  // `help_flag`, a line for -h/--help follows the last flag.
  std::string Help(bool help_flag = false) const;

 private:
  struct Flag {
    std::vector<std::string> names;  // empty: a text block (AddText), `help` is its text
    std::string value_name;          // empty: a switch
    std::string help;
    Setter set;
    std::vector<std::string> aliases;
  };
  const Flag* Find(std::string_view name) const;
  Flag* FindDocumented(std::string_view name);

  std::vector<Flag> flags_;
};

// "flag --x: what" as an InvalidArgument status.
absl::Status FlagError(std::string_view flag, std::string_view what);

// Value parsers for setters; errors name the flag.
absl::Status ParseIntFlag(std::string_view flag, std::string_view value, int64_t min, int64_t max,
                          int64_t* out);
absl::Status ParseUint64Flag(std::string_view flag, std::string_view value, uint64_t* out);
absl::Status ParseFloatFlag(std::string_view flag, std::string_view value, float* out);
absl::Status ParseDoubleFlag(std::string_view flag, std::string_view value, double min, double max,
                             double* out);
// Comma- or space-separated non-negative token ids.
absl::Status ParseTokenIds(std::string_view flag, std::string_view value,
                           std::vector<int32_t>* out);

// `usage`, a blank line, the flag list and the line for -h/--help.
std::string ProgramHelp(const FlagSet& flags, std::string_view usage);

// For a program's main(): parses argv[1..]. "-h" or "--help" where a flag
// stands (before any "--", and not as another flag's value) prints `usage`,
// then the flag list, to stdout and exits 0; a bad
// command line prints "<program>: <error>" to stderr and exits 2. Returns
// the positional arguments.
std::vector<std::string> ParseFlagsOrExit(const FlagSet& flags, std::string_view program,
                                          std::string_view usage, int argc,
                                          const char* const* argv);
// The same for a program that takes no positional arguments: one is a
// usage error.
void ParseOnlyFlagsOrExit(const FlagSet& flags, std::string_view program, std::string_view usage,
                          int argc, const char* const* argv);
// A check after parsing failed: prints "<program>: <message>" to stderr and
// exits 2, the usage-error status.
[[noreturn]] void ExitWithUsageError(std::string_view program, const absl::Status& status);

template <typename Int>
void FlagSet::AddInt(std::vector<std::string> names, std::string value_name, std::string help,
                     Int* out, Int min, Int max) {
  static_assert(std::is_integral_v<Int>);
  if constexpr (std::is_same_v<Int, uint64_t>) {
    Add(std::move(names), std::move(value_name), std::move(help),
        [out, min, max](std::string_view flag, std::string_view value) -> absl::Status {
          uint64_t v = 0;
          if (absl::Status s = ParseUint64Flag(flag, value, &v); !s.ok()) return s;
          if (v < min || v > max) {
            return FlagError(flag, std::to_string(v) + " is outside " + std::to_string(min) + ".." +
                                       std::to_string(max));
          }
          *out = v;
          return absl::OkStatus();
        });
  } else {
    static_assert(sizeof(Int) < sizeof(int64_t) || std::is_signed_v<Int>,
                  "unsigned 64-bit flags use uint64_t");
    Add(std::move(names), std::move(value_name), std::move(help),
        [out, min, max](std::string_view flag, std::string_view value) -> absl::Status {
          int64_t v = 0;
          if (absl::Status s = ParseIntFlag(flag, value, static_cast<int64_t>(min),
                                            static_cast<int64_t>(max), &v);
              !s.ok()) {
            return s;
          }
          *out = static_cast<Int>(v);
          return absl::OkStatus();
        });
  }
}

template <typename Float>
void FlagSet::AddFloat(std::vector<std::string> names, std::string value_name, std::string help,
                       Float* out, double min, double max) {
  static_assert(std::is_floating_point_v<Float>);
  Add(std::move(names), std::move(value_name), std::move(help),
      [out, min, max](std::string_view flag, std::string_view value) -> absl::Status {
        double v = 0;
        if (absl::Status s = ParseDoubleFlag(flag, value, min, max, &v); !s.ok()) return s;
        *out = static_cast<Float>(v);
        return absl::OkStatus();
      });
}

}  // namespace moetier
