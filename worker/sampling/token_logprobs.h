// The log-probabilities an API's logprobs / top_logprobs report for each
// generated token: of the model's own distribution, log_softmax of the raw
// logits row, before the repetition penalty, temperature and filters shape
// the draw (what vLLM reports by default, and what a caller comparing
// models wants: the same numbers whatever the sampling settings).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "request/sampling_params.h"

namespace moetier {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct TokenLogprobs {
  float chosen = 0.0f;            // the sampled token's
  std::vector<TokenLogprob> top;  // the most likely tokens, most likely first, ties to the lower id
};

// Fills `out` for the token `chosen` of `logits` (one row, n_vocab floats)
// and its top_n alternatives, top_n in [0, kMaxTopLogprobs] (more is
// clamped to the row). The sum runs in double, so a row of large logits
// does not overflow. `out->top` keeps its capacity between calls.
void ComputeTokenLogprobs(std::span<const float> logits, int32_t chosen, int top_n,
                          TokenLogprobs* out);

}  // namespace moetier
