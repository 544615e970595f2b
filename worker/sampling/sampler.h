// Token sampling with llama.cpp's semantics and order: repetition penalty,
// top-k, top-p, min-p, temperature, then a seeded draw. Temperature 0 is
// greedy (argmax after the penalty). All buffers are sized at creation, so
// sampling a token never allocates.
//
// The settings are proto/request/sampling_params.h's, checked where the
// request entered the system (the daemon's front door, the standalone
// worker's flags); the sampler takes them as they are.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "request/sampling_params.h"

namespace moetier {

class Sampler {
 public:
  // `params` must pass ValidateSamplingParams and n_vocab be >= 1: a
  // violation is a bug of the caller and aborts.
  Sampler(int n_vocab, const SamplingParams& params);

  // For callers that are their own edge (benchmarks, tests): checks the
  // settings with ValidateSamplingParams, then constructs.
  static absl::StatusOr<Sampler> Create(int n_vocab, const SamplingParams& params);

  // Picks the next token from one row of n_vocab logits, which are left
  // unchanged. Does not record the token; call Accept for that.
  int32_t Sample(std::span<const float> logits);

  // Adds a token (prompt or generated) to the repetition-penalty window.
  void Accept(int32_t token);

  // Clears the penalty window and reseeds the generator.
  void Reset();

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };

  void ApplyRepeatPenalty();
  // Uniform in [0, 1), from the generator's raw bits so the same seed gives
  // the same draws with any standard library.
  double NextUniform();

  int n_vocab_ = 0;
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;  // [n_vocab]
  std::vector<float> probs_;           // [n_vocab]
  std::vector<int32_t> window_;        // ring buffer of the last repeat_last_n tokens
  size_t window_next_ = 0;
  size_t window_count_ = 0;
  std::vector<uint8_t> penalized_;  // [n_vocab], cleared after each use
};

}  // namespace moetier
