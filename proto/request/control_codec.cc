#include "request/control_codec.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace moetier {

control_v1::Sampling SamplingToControl(const SamplingParams& p) {
  control_v1::Sampling s;
  s.set_temperature(p.temperature);
  s.set_top_k(p.top_k);
  s.set_top_p(p.top_p);
  s.set_min_p(p.min_p);
  s.set_repeat_penalty(p.repeat_penalty);
  s.set_repeat_last_n(p.repeat_last_n);
  s.set_seed(p.seed);
  return s;
}

absl::StatusOr<SamplingParams> SamplingFromControl(const control_v1::Sampling& s) {
  const struct {
    bool present;
    const char* name;
  } fields[] = {
      {s.has_temperature(), "temperature"},       {s.has_top_k(), "top_k"},
      {s.has_top_p(), "top_p"},                   {s.has_min_p(), "min_p"},
      {s.has_repeat_penalty(), "repeat_penalty"}, {s.has_repeat_last_n(), "repeat_last_n"},
      {s.has_seed(), "seed"},
  };
  for (const auto& field : fields) {
    if (!field.present) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the sampling settings lack %s (every field is sent)", field.name));
    }
  }
  return SamplingParams{
      .temperature = s.temperature(),
      .top_k = s.top_k(),
      .top_p = s.top_p(),
      .min_p = s.min_p(),
      .repeat_penalty = s.repeat_penalty(),
      .repeat_last_n = s.repeat_last_n(),
      .seed = s.seed(),
  };
}

control_v1::StopReason StopReasonToControl(StopReason reason) {
  switch (reason) {
    case StopReason::kEndOfGeneration:
      return control_v1::STOP_END_OF_GENERATION;
    case StopReason::kMaxTokens:
      return control_v1::STOP_MAX_TOKENS;
    case StopReason::kContextFull:
      return control_v1::STOP_CONTEXT_FULL;
    case StopReason::kCancelled:
      return control_v1::STOP_CANCELLED;
    case StopReason::kError:
      return control_v1::STOP_ERROR;
    case StopReason::kComplete:
      return control_v1::STOP_COMPLETE;
  }
  return control_v1::STOP_UNSPECIFIED;
}

absl::StatusOr<StopReason> StopReasonFromControl(control_v1::StopReason reason) {
  switch (reason) {
    case control_v1::STOP_END_OF_GENERATION:
      return StopReason::kEndOfGeneration;
    case control_v1::STOP_MAX_TOKENS:
      return StopReason::kMaxTokens;
    case control_v1::STOP_CONTEXT_FULL:
      return StopReason::kContextFull;
    case control_v1::STOP_CANCELLED:
      return StopReason::kCancelled;
    case control_v1::STOP_ERROR:
      return StopReason::kError;
    case control_v1::STOP_COMPLETE:
      return StopReason::kComplete;
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("stop reason %d is not one this build knows", static_cast<int>(reason)));
  }
}

}  // namespace moetier
