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

  // Sample's token from part of the row, for an engine that keeps the row
  // elsewhere (a GPU) and would rather not copy all of it.
  //
  // With a top-k filter (or greedy), Sample only ever looks at the k best
  // logits after the repetition penalty. Every one of those is either a
  // penalized token or among the row's k + |penalized| best raw logits, so
  // those two sets carry everything Sample needs, and the token drawn is
  // the same, bit for bit.
  //
  // CandidatesNeeded(): how many of the row's best logits that is (k + the
  // distinct penalized tokens; k = 1 when greedy), or 0 when Sample needs
  // the whole row (no top-k, or the count reaches the row).
  int CandidatesNeeded();
  // The distinct tokens the penalty applies to next, in a fixed order.
  std::span<const int32_t> PenalizedTokens();
  // With CandidatesNeeded() > 0: `best_ids` / `best_logits` are the row's
  // CandidatesNeeded() best (higher logit first, equal logits lower id
  // first; given in any order), `penalized_logits` the row's logit of each
  // PenalizedTokens() entry, in its order.
  int32_t SampleFromBest(std::span<const int32_t> best_ids, std::span<const float> best_logits,
                         std::span<const float> penalized_logits);

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
  // Higher logit first; equal logits keep the lower id first; NaN last.
  static bool Before(const Candidate& a, const Candidate& b);

  // Fills penalized_list_ with the window's distinct tokens (flags in
  // penalized_ set for them until ClearPenalized).
  void MarkPenalized();
  void ClearPenalized();
  float Penalized(float logit) const;
  // CandidatesNeeded for a window of n_penalized distinct tokens.
  int CandidatesFor(size_t n_penalized) const;
  // Top-p, min-p, temperature and the draw over candidates_[0, size),
  // sorted best first when `sorted` (else in id order).
  int32_t Draw(size_t size, bool sorted);
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
  std::vector<int32_t> penalized_list_;  // distinct window tokens, window order
  std::vector<uint8_t> in_best_;         // [n_vocab], SampleFromBest's, cleared after use
};

}  // namespace moetier
