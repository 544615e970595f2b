// A small command-line parser in the style of moetier-worker's: flags take
// their value as the next argument or after '='; errors are one line naming
// the flag. Every flag carries its help text, so `--help` lists exactly the
// flags that parse.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace moetier::client {

class FlagSet {
 public:
  // Receives the flag as typed (for messages) and its value.
  using Setter = std::function<absl::Status(std::string_view flag, std::string_view value)>;

  // A flag with a value. `names` are the spellings ("-n", "--max-new-tokens");
  // `value_name` is shown in the help ("N").
  void Add(std::vector<std::string> names, std::string value_name, std::string help, Setter set);
  // A flag without a value.
  void AddSwitch(std::vector<std::string> names, std::string help, std::function<void()> set);
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

  // The flags, one entry each, help text indented under the names.
  std::string Help() const;

 private:
  struct Flag {
    std::vector<std::string> names;
    std::string value_name;  // empty: a switch
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
absl::Status ParseFloatFlag(std::string_view flag, std::string_view value, float* out);
// Comma- or space-separated non-negative token ids.
absl::Status ParseTokenIds(std::string_view flag, std::string_view value,
                           std::vector<int32_t>* out);

}  // namespace moetier::client
