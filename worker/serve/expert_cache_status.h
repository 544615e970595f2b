// Shows the worker's expert cache on its status page (store_layout.h,
// WorkerStatusPage): hits, misses, prefetch and copy counters and the
// residency bitmap, which moetierd reads for `moetier status`; and its
// prefix cache's figures.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "cache/expert_slot_cache.h"
#include "engine/forward_engine.h"
#include "generation/prefix_pool.h"
#include "store/store_layout.h"

namespace moetier {

// Writes the cache's state into `page` (relaxed stores: the daemon reads a
// snapshot, and each field on its own is consistent).
void PublishExpertCacheStatus(const ExpertCacheReport& cache, store::WorkerStatusPage& page);
// The same for the prefix cache's figures.
void PublishPrefixCacheStatus(const PrefixCacheReport& report, store::WorkerStatusPage& page);

// An engine that publishes the cache's state after every Forward, so the
// page follows the cache token by token.
class CacheStatusEngine final : public ForwardEngine {
 public:
  // `engine`, `cache` and `page` must outlive this.
  CacheStatusEngine(ForwardEngine& engine, const ExpertCacheReport& cache,
                    store::WorkerStatusPage& page);

  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence() override {
    return engine_.NewSequence();
  }
  absl::Status Forward(Sequence& seq, std::span<const int32_t> tokens, LogitRows host_rows,
                       float* host_logits) override;
  absl::Status ForwardMany(std::span<const SequenceStep> steps) override;
  absl::Status SaveCheckpoint(Sequence& seq) override { return engine_.SaveCheckpoint(seq); }
  absl::Status RestoreCheckpoint(Sequence& seq) override {
    return engine_.RestoreCheckpoint(seq);
  }
  absl::StatusOr<std::unique_ptr<SequenceState>> CopyState(const Sequence& seq) override {
    return engine_.CopyState(seq);
  }
  absl::Status LoadState(Sequence& seq, const SequenceState& state, int length) override {
    return engine_.LoadState(seq, state, length);
  }
  absl::StatusOr<int32_t> Sample(Sampler& sampler) override { return engine_.Sample(sampler); }
  bool SamplesStepsInPlace() const override { return engine_.SamplesStepsInPlace(); }
  absl::StatusOr<int32_t> SampleStep(size_t step, Sampler& sampler) override {
    return engine_.SampleStep(step, sampler);
  }
  absl::StatusOr<std::span<const float>> LastLogitsRow() override {
    return engine_.LastLogitsRow();
  }
  int n_vocab() const override { return engine_.n_vocab(); }
  int max_ctx() const override { return engine_.max_ctx(); }
  int max_sequences() const override { return engine_.max_sequences(); }

 private:
  ForwardEngine& engine_;
  const ExpertCacheReport& cache_;
  store::WorkerStatusPage& page_;
};

}  // namespace moetier
