#include "request/sampling_params.h"

#include <cmath>
#include <string>
#include <type_traits>

#include "absl/strings/str_format.h"

namespace moetier {

absl::Status ValidateSamplingParams(const SamplingParams& p, const SamplingFieldNames& names) {
  const auto bad = [](std::string_view name, auto value, std::string_view range) {
    // %g for the floats, as a person would write them; %d for the counts.
    std::string text;
    if constexpr (std::is_floating_point_v<decltype(value)>) {
      text = absl::StrFormat("%g", value);
    } else {
      text = absl::StrFormat("%d", value);
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is %s; it must be %s", name, text, range));
  };
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return bad(names.temperature, p.temperature, "finite and >= 0");
  }
  if (p.top_k < 0) return bad(names.top_k, p.top_k, ">= 0");
  // Written so that NaN fails too.
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) return bad(names.top_p, p.top_p, "in [0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad(names.min_p, p.min_p, "in [0, 1]");
  if (!std::isfinite(p.repeat_penalty) || p.repeat_penalty <= 0.0f) {
    return bad(names.repeat_penalty, p.repeat_penalty, "finite and > 0");
  }
  if (p.repeat_last_n < 0 || p.repeat_last_n > kMaxRepeatLastN) {
    return bad(names.repeat_last_n, p.repeat_last_n,
               absl::StrFormat("in 0..%d", kMaxRepeatLastN));
  }
  return absl::OkStatus();
}

}  // namespace moetier
