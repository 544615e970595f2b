#include "frontdoor/stop_strings.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace moetier {

absl::Status ValidateStopStrings(const std::vector<std::string>& stops, std::string_view field) {
  if (stops.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s holds %d strings; the limit is %d", field, stops.size(), kMaxStopStrings));
  }
  for (const std::string& stop : stops) {
    if (stop.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s holds an empty string", field));
    }
    if (stop.size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s holds a string of %d bytes; the limit is %d", field, stop.size(),
          kMaxStopStringBytes));
    }
  }
  return absl::OkStatus();
}

std::string StopStringMatcher::Push(std::string_view text) {
  if (stopped_) return {};
  if (stops_.empty()) return std::string(text);
  held_.append(text);
  size_t first_match = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = held_.find(stop);
    if (at < first_match) {
      first_match = at;
      matched_ = stop;
    }
  }
  if (first_match != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first_match);
    held_.clear();
    return out;
  }
  // Keep the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, held_.size());
    for (size_t n = longest; n > keep; --n) {
      if (held_.compare(held_.size() - n, n, stop, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::Flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

}  // namespace moetier
