// The expert cache in front of an engine's expert source, with slots in
// host RAM: the CPU worker's form of the cache the GPU worker keeps in VRAM.
// It runs the same ExpertSlotCache (placement, replacement and miss
// policies, prefetch, static placement) with memcpy in place of DMA, so the
// whole cache logic is exercised, and its results checked bit for bit,
// wherever the CPU worker runs. A slot (kSlot) and the store (kHost) hold
// the same bytes, so the engine computes the same numbers from either.
//
// The pool is anonymous memory advised for transparent huge pages. Each
// slot holds one expert: gate at offset 0, up and down each at the next
// 64-byte boundary.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/expert_slot_cache.h"
#include "cache/expert_slot_layout.h"
#include "engine/expert_source.h"

namespace moetier {

struct HostSlotCacheOptions {
  uint64_t pool_bytes = 0;
  ExpertPolicyKind policy = kDefaultExpertPolicy;
  MissPolicy miss_policy = MissPolicy::kCopy;
  bool prefetch = true;
  int static_host_layers = -1;  // >= 0: --n-cpu-moe N
};

// The slot geometry for experts of these `shapes`: expert_bytes per layer and the slot size,
// filled into a cache's options (the remaining fields from `host`).
ExpertSlotCacheOptions SlotCacheOptionsFor(const RoutedExpertShapes& shapes,
                                           const HostSlotCacheOptions& host);

class SlotCachedExpertSource final : public ExpertWeightSource,
                                     public ExpertCacheReport,
                                     public ExpertCacheControl {
 public:
  // `inner` (not owned; outlives this) serves the host copies: the store in
  // daemon mode, the model's mapping otherwise. Static placement fills its
  // slots here, reading every expert of the device layers through `inner`.
  static absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> Create(
      ExpertWeightSource& inner, const RoutedExpertShapes& shapes,
      const HostSlotCacheOptions& options);
  ~SlotCachedExpertSource() override;
  SlotCachedExpertSource(const SlotCachedExpertSource&) = delete;
  SlotCachedExpertSource& operator=(const SlotCachedExpertSource&) = delete;

  absl::Status Acquire(int layer, std::span<const int32_t> experts,
                       std::span<ExpertMatrices> out) override;
  void Release(int layer) override;
  // In waves that fit the cache (ExpertSlotCache::max_group).
  int max_experts_held() const override;
  void Route(int layer, std::span<const int32_t> topk_ids) override;
  bool wants_prefetch() const override;
  absl::Status Prefetch(int layer, std::span<const int32_t> experts) override;

  const ExpertSlotCache& cache() const override { return *cache_; }
  uint64_t copy_busy_ns() const override { return copy_busy_ns_; }

  // A new pool of whole slots, mapped before the old one is unmapped
  // (ExpertCacheControl). Only between engine calls: aborts while experts
  // are held.
  absl::StatusOr<uint64_t> ResizeExpertCache(uint64_t pool_bytes) override;

 private:
  SlotCachedExpertSource(ExpertWeightSource& inner, std::unique_ptr<ExpertSlotCache> cache,
                         std::vector<ExpertSlotLayout> geometry, uint8_t* pool, uint64_t pool_bytes);
  // An anonymous pool of `bytes` (none for 0), advised for huge pages.
  static absl::StatusOr<uint8_t*> MapPool(uint64_t bytes);
  absl::Status FillInitialSlots();
  // Copies the experts of `fills` (all of `layer`) into their slots, reading
  // them through inner_ in groups; on error the failed fills are discarded.
  absl::Status FillFromInner(int layer, std::span<const SlotFill> fills);
  void CopyIntoSlot(int layer, int32_t slot, const ExpertMatrices& from);
  ExpertMatrices SlotMatrices(int layer, int32_t slot) const;

  ExpertWeightSource& inner_;
  std::unique_ptr<ExpertSlotCache> cache_;
  std::vector<ExpertSlotLayout> geometry_;
  uint8_t* pool_ = nullptr;
  uint64_t pool_bytes_ = 0;
  uint64_t copy_busy_ns_ = 0;
  bool inner_held_ = false;  // inner_ holds held_layer_'s host copies
  int held_layer_ = -1;

  // Scratch, sized at creation ([n_expert] each).
  int route_layer_ = -1;
  std::vector<uint32_t> route_rows_;  // token rows per expert at route_layer_
  std::vector<uint32_t> rows_;
  std::vector<ExpertPlacement> placements_;
  std::vector<int32_t> inner_ids_;
  std::vector<int32_t> inner_index_;  // position in the request of inner_ids_[i]
  std::vector<ExpertMatrices> inner_mats_;
  std::vector<SlotFill> fills_;
};

}  // namespace moetier
