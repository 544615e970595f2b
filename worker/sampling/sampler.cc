#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/check.h"

namespace moetier {

absl::StatusOr<Sampler> Sampler::Create(int n_vocab, const SamplingParams& params) {
  if (n_vocab < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("vocabulary size %d must be >= 1", n_vocab));
  }
  if (absl::Status s = ValidateSamplingParams(params); !s.ok()) return s;
  return Sampler(n_vocab, params);
}

Sampler::Sampler(int n_vocab, const SamplingParams& params)
    : n_vocab_(n_vocab), params_(params), rng_(params.seed) {
  MOETIER_CHECK(n_vocab >= 1);
  MOETIER_CHECK(ValidateSamplingParams(params).ok());
  candidates_.resize(static_cast<size_t>(n_vocab));
  probs_.resize(static_cast<size_t>(n_vocab));
  window_.resize(static_cast<size_t>(params.repeat_last_n));
  penalized_.assign(static_cast<size_t>(n_vocab), 0);
  in_best_.assign(static_cast<size_t>(n_vocab), 0);
  penalized_list_.reserve(std::min(window_.size(), static_cast<size_t>(n_vocab)));
}

void Sampler::Reset() {
  window_next_ = 0;
  window_count_ = 0;
  rng_.seed(params_.seed);
}

void Sampler::Accept(int32_t token) {
  MOETIER_CHECK(token >= 0 && token < n_vocab_);
  if (window_.empty()) return;
  window_[window_next_] = token;
  window_next_ = (window_next_ + 1) % window_.size();
  window_count_ = std::min(window_count_ + 1, window_.size());
}

double Sampler::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

void Sampler::MarkPenalized() {
  penalized_list_.clear();
  if (params_.repeat_penalty == 1.0f) return;
  // Each distinct token is penalized once, however often it occurs.
  for (size_t i = 0; i < window_count_; ++i) {
    const int32_t id = window_[i];
    if (penalized_[id]) continue;
    penalized_[id] = 1;
    penalized_list_.push_back(id);
  }
}

void Sampler::ClearPenalized() {
  for (const int32_t id : penalized_list_) penalized_[id] = 0;
}

float Sampler::Penalized(float logit) const {
  const float penalty = params_.repeat_penalty;
  return logit <= 0.0f ? logit * penalty : logit / penalty;
}

bool Sampler::Before(const Candidate& a, const Candidate& b) {
  // A NaN logit ranks below every number (as the CUDA engine's candidate
  // keys have it), NaNs among themselves by id: a strict order either way.
  const bool a_nan = std::isnan(a.logit);
  const bool b_nan = std::isnan(b.logit);
  if (a_nan || b_nan) return a_nan != b_nan ? b_nan : a.id < b.id;
  return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

int32_t Sampler::Sample(std::span<const float> logits) {
  MOETIER_CHECK(logits.size() == static_cast<size_t>(n_vocab_));
  for (int32_t id = 0; id < n_vocab_; ++id) candidates_[id] = {logits[id], id};
  MarkPenalized();
  for (const int32_t id : penalized_list_) candidates_[id].logit = Penalized(candidates_[id].logit);
  ClearPenalized();

  if (params_.temperature <= 0.0f) {
    return std::min_element(candidates_.begin(), candidates_.end(), Before)->id;
  }
  size_t size = candidates_.size();
  bool sorted = false;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < size) {
    size = params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + size, candidates_.end(), Before);
    sorted = true;
  }
  return Draw(size, sorted);
}

int Sampler::CandidatesNeeded() { return CandidatesFor(PenalizedTokens().size()); }

int Sampler::CandidatesFor(size_t n_penalized) const {
  const int64_t k = params_.temperature <= 0.0f ? 1 : params_.top_k;
  if (k <= 0) return 0;
  const int64_t needed = k + static_cast<int64_t>(n_penalized);
  // Where the full path would not cut the row to k, it draws in id order;
  // only the whole row gives that.
  return needed < n_vocab_ && k < n_vocab_ ? static_cast<int>(needed) : 0;
}

std::span<const int32_t> Sampler::PenalizedTokens() {
  MarkPenalized();
  ClearPenalized();
  return penalized_list_;
}

int32_t Sampler::SampleFromBest(std::span<const int32_t> best_ids,
                                std::span<const float> best_logits,
                                std::span<const float> penalized_logits) {
  // The penalized tokens' flags stay set until the penalty is applied below.
  MarkPenalized();
  const int needed = CandidatesFor(penalized_list_.size());
  MOETIER_CHECK(needed > 0 && best_ids.size() == static_cast<size_t>(needed) &&
                best_logits.size() == best_ids.size() &&
                penalized_logits.size() == penalized_list_.size());
  // The union of the best and the penalized tokens, each once.
  size_t size = 0;
  for (size_t i = 0; i < best_ids.size(); ++i) {
    const int32_t id = best_ids[i];
    MOETIER_CHECK(id >= 0 && id < n_vocab_ && !in_best_[id]);
    in_best_[id] = 1;
    candidates_[size++] = {best_logits[i], id};
  }
  for (size_t i = 0; i < penalized_list_.size(); ++i) {
    const int32_t id = penalized_list_[i];
    if (!in_best_[id]) candidates_[size++] = {penalized_logits[i], id};
  }
  for (const int32_t id : best_ids) in_best_[id] = 0;
  for (size_t i = 0; i < size; ++i) {
    if (penalized_[candidates_[i].id]) candidates_[i].logit = Penalized(candidates_[i].logit);
  }
  ClearPenalized();

  if (params_.temperature <= 0.0f) {
    return std::min_element(candidates_.begin(), candidates_.begin() + size, Before)->id;
  }
  // The full path's partial sort gives these same k, in this same order.
  std::sort(candidates_.begin(), candidates_.begin() + size, Before);
  return Draw(std::min(size, static_cast<size_t>(params_.top_k)), /*sorted=*/true);
}

int32_t Sampler::Draw(size_t size, bool sorted) {
  if (params_.top_p < 1.0f) {
    if (!sorted) std::sort(candidates_.begin(), candidates_.begin() + size, Before);
    sorted = true;
    // Probabilities of the untempered logits of the surviving candidates.
    const float max = candidates_[0].logit;
    double sum = 0.0;
    for (size_t i = 0; i < size; ++i) {
      probs_[i] = std::exp(candidates_[i].logit - max);
      sum += probs_[i];
    }
    double cumulative = 0.0;
    for (size_t i = 0; i < size; ++i) {
      cumulative += probs_[i] / sum;
      if (cumulative >= params_.top_p) {
        size = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    float max = candidates_[0].logit;
    if (!sorted) {
      for (size_t i = 1; i < size; ++i) max = std::max(max, candidates_[i].logit);
    }
    // p_i >= min_p · p_max  <=>  logit_i >= logit_max + ln(min_p).
    const float threshold = max + std::log(params_.min_p);
    size_t kept = 0;
    for (size_t i = 0; i < size; ++i) {
      if (candidates_[i].logit >= threshold) candidates_[kept++] = candidates_[i];
    }
    size = kept;  // the maximum itself always passes, so kept >= 1
  }

  const float inv_temp = 1.0f / params_.temperature;
  float max = candidates_[0].logit * inv_temp;
  for (size_t i = 1; i < size; ++i) max = std::max(max, candidates_[i].logit * inv_temp);
  double sum = 0.0;
  for (size_t i = 0; i < size; ++i) {
    probs_[i] = std::exp(candidates_[i].logit * inv_temp - max);
    sum += probs_[i];
  }
  const double target = NextUniform() * sum;
  double cumulative = 0.0;
  for (size_t i = 0; i < size; ++i) {
    cumulative += probs_[i];
    if (target < cumulative) return candidates_[i].id;
  }
  // Rounding can leave target at the very top of the range.
  return candidates_[size - 1].id;
}

}  // namespace moetier
