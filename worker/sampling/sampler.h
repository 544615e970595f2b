// Token sampling with llama.cpp's semantics and order: repetition penalty,
// top-k, top-p, min-p, temperature, then a seeded draw. Temperature <= 0 is
// greedy (argmax after the penalty). All buffers are sized at creation, so
// sampling a token never allocates.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace moetier {

struct SamplingParams {
  float temperature = 0.8f;     // <= 0: greedy
  int top_k = 40;               // <= 0: off
  float top_p = 0.95f;          // >= 1: off; else in (0, 1)
  float min_p = 0.05f;          // <= 0: off; else in (0, 1]
  float repeat_penalty = 1.0f;  // 1: off; > 0
  int repeat_last_n = 64;       // how many recent tokens the penalty looks at; 0: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  // Checks the parameters (errors name the bad one and its valid range).
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

  Sampler(int n_vocab, const SamplingParams& params);
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
