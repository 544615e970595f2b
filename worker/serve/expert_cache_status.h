// Shows the worker's expert cache on its status page (store_layout.h,
// WorkerStatusPage): hits, misses, prefetch and copy counters and the
// residency bitmap, which moetierd reads for `moetier status`.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "cache/expert_slot_cache.h"
#include "engine/forward_engine.h"
#include "store/store_layout.h"

namespace moetier {

// Writes the cache's state into `page` (relaxed stores: the daemon reads a
// snapshot, and each field on its own is consistent).
void PublishExpertCacheStatus(const ExpertCacheReport& cache, store::WorkerStatusPage& page);

// An engine that publishes the cache's state after every Forward, so the
// page follows the cache token by token.
class CacheStatusEngine final : public ForwardEngine {
 public:
  // `engine`, `cache` and `page` must outlive this.
  CacheStatusEngine(ForwardEngine& engine, const ExpertCacheReport& cache,
                    store::WorkerStatusPage& page);

  absl::Status Forward(std::span<const int32_t> tokens, int pos0, LogitRows rows,
                       float* logits) override;
  void Reset() override { engine_.Reset(); }
  int n_vocab() const override { return engine_.n_vocab(); }
  int max_ctx() const override { return engine_.max_ctx(); }
  int cached_tokens() const override { return engine_.cached_tokens(); }

 private:
  ForwardEngine& engine_;
  const ExpertCacheReport& cache_;
  store::WorkerStatusPage& page_;
};

}  // namespace moetier
