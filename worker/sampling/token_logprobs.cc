#include "sampling/token_logprobs.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace moetier {

void ComputeTokenLogprobs(std::span<const float> logits, int32_t chosen, int top_n,
                          TokenLogprobs* out) {
  MOETIER_CHECK(!logits.empty() && chosen >= 0 && static_cast<size_t>(chosen) < logits.size());
  MOETIER_CHECK(top_n >= 0);
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  const double log_norm = max_logit + std::log(sum);
  out->chosen = static_cast<float>(logits[static_cast<size_t>(chosen)] - log_norm);

  // A bounded min-heap of the best top_n: one pass, no copy of the row.
  const size_t n = std::min<size_t>(static_cast<size_t>(top_n), logits.size());
  auto better = [&](const TokenLogprob& a, const TokenLogprob& b) {
    return a.logprob != b.logprob ? a.logprob > b.logprob : a.token_id < b.token_id;
  };
  out->top.clear();
  if (n == 0) return;
  for (size_t i = 0; i < logits.size(); ++i) {
    const TokenLogprob candidate{static_cast<int32_t>(i), logits[i]};
    if (out->top.size() < n) {
      out->top.push_back(candidate);
      std::push_heap(out->top.begin(), out->top.end(), better);
    } else if (better(candidate, out->top.front())) {
      std::pop_heap(out->top.begin(), out->top.end(), better);
      out->top.back() = candidate;
      std::push_heap(out->top.begin(), out->top.end(), better);
    }
  }
  std::sort_heap(out->top.begin(), out->top.end(), better);
  for (TokenLogprob& t : out->top) t.logprob = static_cast<float>(t.logprob - log_norm);
}

}  // namespace moetier
