// Stop strings ("stop" in the OpenAI API): generation ends where the text
// first contains one, and the text handed on never holds it, nor anything
// after it. Text that may still turn out to be the start of a stop string
// is held back until the next piece settles it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace moetier {

inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;

// INVALID_ARGUMENT naming `field` for too many, empty or too long strings.
absl::Status ValidateStopStrings(const std::vector<std::string>& stops, std::string_view field);

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Takes the next piece of text; returns what can be handed on now. Once a
  // stop string matched, stopped() is true and every later Push returns "".
  std::string Push(std::string_view text);
  // At the end of generation: what was held back.
  std::string Flush();

  bool stopped() const { return stopped_; }
  // The stop string that matched; empty before.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace moetier
