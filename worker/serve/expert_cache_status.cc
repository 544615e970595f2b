#include "serve/expert_cache_status.h"

#include <algorithm>
#include <atomic>

namespace moetier {
namespace {

void Store(uint64_t& field, uint64_t value) {
  store::Shared(field).store(value, std::memory_order_relaxed);
}

}  // namespace

void PublishPrefixCacheStatus(const PrefixCacheReport& report, store::WorkerStatusPage& page) {
  Store(page.prefix_cache_states, report.states);
  Store(page.prefix_cache_bytes, report.bytes);
  Store(page.prompt_tokens_reused, report.prompt_tokens_reused);
}

void PublishExpertCacheStatus(const ExpertCacheReport& report, store::WorkerStatusPage& page) {
  const ExpertSlotCache& cache = report.cache();
  const ExpertSlotCacheStats& s = cache.stats();
  Store(page.vram_hits, s.hits);
  Store(page.vram_misses, s.misses);
  Store(page.vram_bytes_copied, s.bytes_filled);
  Store(page.expert_cache_bytes, uint64_t{cache.n_slots()} * cache.options().slot_bytes);
  Store(page.misses_computed_on_host, s.misses_on_host);
  Store(page.prefetch_issued, s.prefetch_issued);
  Store(page.prefetch_used, s.prefetch_used);
  Store(page.prefetch_wasted, s.prefetch_wasted);
  Store(page.copy_busy_ns, report.copy_busy_ns());
  const uint32_t n_layer = std::min(cache.options().n_layer, store::kMaxLayers);
  const uint32_t n_expert = std::min(cache.options().n_expert, store::kMaxExpertsPerLayer);
  for (uint32_t l = 0; l < n_layer; ++l) {
    const uint32_t first_word = store::ResidencyBit(l, 0) / 64;
    for (uint32_t w = 0; w * 64 < n_expert; ++w) {
      uint64_t bits = 0;
      for (uint32_t b = 0; b < 64 && w * 64 + b < n_expert; ++b) {
        if (cache.Resident(l, w * 64 + b)) bits |= uint64_t{1} << b;
      }
      Store(page.vram_residency[first_word + w], bits);
    }
  }
}

CacheStatusEngine::CacheStatusEngine(ForwardEngine& engine, const ExpertCacheReport& cache,
                                     store::WorkerStatusPage& page)
    : engine_(engine), cache_(cache), page_(page) {
  PublishExpertCacheStatus(cache_, page_);
}

absl::Status CacheStatusEngine::Forward(Sequence& seq, std::span<const int32_t> tokens,
                                        LogitRows host_rows, float* host_logits) {
  absl::Status status = engine_.Forward(seq, tokens, host_rows, host_logits);
  PublishExpertCacheStatus(cache_, page_);
  return status;
}

absl::Status CacheStatusEngine::ForwardMany(std::span<const SequenceStep> steps) {
  absl::Status status = engine_.ForwardMany(steps);
  PublishExpertCacheStatus(cache_, page_);
  return status;
}

}  // namespace moetier
