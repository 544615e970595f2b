// The sampling settings of one generation, as every process holds them: the
// daemon's front door fills them from an API request, the standalone worker
// from its flags, the control protocol carries them field for field, and
// the worker's Sampler uses them as they are.
//
// Every value is explicit: there is no "0 means off" here. Each edge turns
// what it was given into these values once, checks them with
// ValidateSamplingParams once, and everything past the edge trusts them.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace moetier {

// The most alternatives a generate request may ask logprobs for (OpenAI's
// top_logprobs limit); the worker refuses more, the front door before it.
inline constexpr int kMaxTopLogprobs = 20;

struct SamplingParams {
  float temperature = 0.0f;     // finite, >= 0; 0: greedy
  int32_t top_k = 0;            // >= 0; 0: off
  float top_p = 1.0f;           // in [0, 1]; 1: off
  float min_p = 0.0f;           // in [0, 1]; 0: off
  float repeat_penalty = 1.0f;  // finite, > 0; 1: off
  int32_t repeat_last_n = 64;   // in 0..kMaxRepeatLastN: recent tokens the penalty looks at; 0: off
  uint64_t seed = 0;
};

// The penalty window is allocated per request: a bound on its size.
inline constexpr int32_t kMaxRepeatLastN = 1 << 20;

// The command-line tools' defaults (llama.cpp's): what `moetier generate`
// and `moetier-worker --standalone --prompt` sample with unless told.
inline constexpr SamplingParams kCommandLineSamplingDefaults{
    .temperature = 0.8f,
    .top_k = 40,
    .top_p = 0.95f,
    .min_p = 0.05f,
    .repeat_penalty = 1.0f,
    .repeat_last_n = 64,
    .seed = 0,
};

// What an edge calls each field in its messages: an API field path, a flag.
struct SamplingFieldNames {
  std::string_view temperature = "temperature";
  std::string_view top_k = "top_k";
  std::string_view top_p = "top_p";
  std::string_view min_p = "min_p";
  std::string_view repeat_penalty = "repeat_penalty";
  std::string_view repeat_last_n = "repeat_last_n";
};

// OK when every field is in its range; otherwise INVALID_ARGUMENT naming
// the first bad field (as `names` call it), its value and its valid range.
absl::Status ValidateSamplingParams(const SamplingParams& params,
                                    const SamplingFieldNames& names = {});

}  // namespace moetier
