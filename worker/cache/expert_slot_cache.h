// The worker's expert cache, independent of the device: which expert sits
// in which slot of a fixed pool, where each routed expert is computed, what
// must be copied, and the counters the status page shows. The engine owns
// the slot memory and performs the copies this class asks for; the GPU
// worker's slots are VRAM, the CPU worker's are RAM (where the cache serves
// to test the same logic everywhere).
//
// Per MoE layer and batch:
//
//   cache.Route(layer, topk_ids);                 // the router's choice
//   for each group of the layer's distinct experts:
//     cache.Place(layer, group, rows, placements); // pins the slot ones
//     copy every placement with fill = true into its slot, then compute
//     each expert in its slot (kSlot) or from the store (kHost)
//     cache.Release(layer);
//   cache.Prefetch(layer + 1, predicted, fills);   // optional; copy them
//
// A device engine whose copies and kernels run asynchronously must order
// each fill after the device work that still reads the slot's previous
// expert (work enqueued before that expert's Release), and each kernel that
// reads a slot after the fill that wrote it (a prefetch fill included).
//
// Placement modes:
// - dynamic (default): slots are spread evenly over the layers; misses are
//   handled by the MissPolicy and victims chosen by the replacement policy
//   (cache/expert_cache_policy.h).
// - static (static_host_layers = N >= 0, like llama.cpp's --n-cpu-moe N):
//   every expert of layers < N is computed on the host, every expert of the
//   other layers has its own slot, filled once by InitialFills().
//
// Not thread-safe; the worker's forward thread drives it. No call allocates
// after Create.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/expert_cache_control.h"
#include "cache/expert_cache_policy.h"
#include "cache/miss_cost_model.h"

namespace moetier {

struct ExpertSlotCacheOptions {
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint32_t top_k = 0;
  // Bytes one fill copies for an expert of each layer (gate, up and down);
  // n_layer entries. Layers may differ (quantization mixes); 0 marks a layer
  // without routed experts (FfnKind::kDense), which gets no slots.
  std::vector<uint64_t> expert_bytes;
  uint64_t slot_bytes = 0;  // one slot; at least the largest expert_bytes
  uint64_t pool_bytes = 0;  // the pool: pool_bytes / slot_bytes slots
  ExpertPolicyKind policy = kDefaultExpertPolicy;
  MissPolicy miss_policy = MissPolicy::kCopy;
  bool prefetch = true;
  int static_host_layers = -1;  // >= 0: static placement (see above)
  MissCostModel cost;           // used by MissPolicy::kAuto
};

// The pool a dynamic cache needs at least (top_k slots per layer with
// experts), the one that holds every expert, and the one static placement
// with N host layers needs.
uint64_t MinDynamicPoolBytes(const ExpertSlotCacheOptions& options);
uint64_t FullPoolBytes(const ExpertSlotCacheOptions& options);
uint64_t StaticPoolBytes(const ExpertSlotCacheOptions& options, int host_layers);

enum class ExpertSite : uint8_t {
  kSlot,  // computed from its slot
  kHost,  // computed on host cores straight from the store
};

struct ExpertPlacement {
  ExpertSite site = ExpertSite::kHost;
  int32_t slot = kNoSlot;  // kSlot only
  bool fill = false;       // kSlot: copy the expert into `slot` first
};

struct SlotFill {
  uint32_t layer = 0;
  uint32_t expert = 0;
  int32_t slot = kNoSlot;
};

// Counted per expert and layer pass: an expert routed by several tokens of
// one batch counts once.
struct ExpertSlotCacheStats {
  uint64_t hits = 0;             // in a slot when placed (filled by then)
  uint64_t misses = 0;
  uint64_t misses_on_host = 0;   // of the misses, computed on the host
  uint64_t demand_fills = 0;     // of the misses, copied into a slot
  uint64_t prefetch_issued = 0;  // fills for predicted experts
  uint64_t prefetch_used = 0;    // of those, placed before being evicted
  uint64_t prefetch_wasted = 0;  // of those, evicted unused
  uint64_t evictions = 0;
  uint64_t warm_fills = 0;       // fills of the warm start (WarmFills)
  uint64_t bytes_filled = 0;     // demand, prefetch, initial and warm fills
};

class ExpertSlotCache {
 public:
  // Fails, naming the option and the size it needs, when the pool cannot
  // hold top_k experts per layer (dynamic) or every expert of the device
  // layers (static), or when a field is out of range.
  static absl::StatusOr<std::unique_ptr<ExpertSlotCache>> Create(
      const ExpertSlotCacheOptions& options);

  const ExpertSlotCacheOptions& options() const { return options_; }
  uint32_t n_slots() const { return n_slots_; }
  bool is_static() const { return options_.static_host_layers >= 0; }
  // Slots per layer (dynamic); n_expert or 0 per layer (static).
  uint32_t slot_budget(uint32_t layer) const;
  // The most experts one Place should take: the smallest layer budget
  // (dynamic), so that a batch's misses are placed in waves that each fit;
  // n_expert (static). Larger groups work, but their overflow misses are
  // computed on the host.
  uint32_t max_group() const;
  // A one-line description for logs: mode, slots, per-layer budget, policies.
  std::string Describe() const;

  // Static placement: the fills that make every expert of the device layers
  // resident; they must complete before the first forward pass. Empty for a
  // dynamic cache. Counted in bytes_filled.
  std::vector<SlotFill> InitialFills();

  // A dynamic cache's warm start: gives the hottest experts of each layer
  // (warm_rank[layer * n_expert + expert]: 1 the hottest, 0 unknown) the
  // free slots of their layer, up to its budget, and returns the fills to
  // perform, grouped by layer. The coldest of them is admitted first, so a
  // recency-ordered policy evicts it first. Empty for a static cache or
  // empty ranks; counted in warm_fills and bytes_filled. A fill that fails
  // is Discard()ed, and the cache goes on without it.
  std::vector<SlotFill> WarmFills(std::span<const uint32_t> warm_rank);

  // The batch's top-k choice at `layer`, token-major (n_tokens * top_k ids).
  // Feeds the replacement policy; call once per layer pass, before Place.
  void Route(uint32_t layer, std::span<const int32_t> topk_ids);

  // Decides where each of `experts` (distinct ids of `layer`; rows[i] token
  // rows go to experts[i]) is computed and pins the slot ones until
  // Release(layer). A miss that finds no evictable slot is computed on the
  // host whatever the miss policy.
  void Place(uint32_t layer, std::span<const int32_t> experts, std::span<const uint32_t> rows,
             std::span<ExpertPlacement> out);
  void Release(uint32_t layer);

  // Offers experts predicted for `layer`'s next pass; writes the fills to
  // start into `fills` (room for experts.size()) and returns their number.
  // Declined where prefetch is off, in static mode, for resident experts
  // and where the policy values the victim more.
  size_t Prefetch(uint32_t layer, std::span<const int32_t> experts, std::span<SlotFill> fills);

  // Forgets a dynamic cache's resident, unpinned expert whose fill failed
  // (its slot holds no valid copy).
  void Discard(uint32_t layer, uint32_t expert);

  bool Resident(uint32_t layer, uint32_t expert) const;
  const ExpertSlotCacheStats& stats() const { return stats_; }

  // Takes over the counters of the cache this one replaces (a resize), so
  // that the status page's counters keep counting up; the replaced cache's
  // prefetched experts that were never used count as wasted. Call before
  // the first Place.
  void ContinueCountsOf(const ExpertSlotCache& replaced);

 private:
  ExpertSlotCache(const ExpertSlotCacheOptions& options, uint32_t n_slots);
  size_t Index(uint32_t layer, uint32_t expert) const {
    return static_cast<size_t>(layer) * options_.n_expert + expert;
  }
  void NoteEviction(const SlotGrant& grant);

  ExpertSlotCacheOptions options_;
  uint32_t n_slots_ = 0;
  std::unique_ptr<ExpertCachePolicy> policy_;  // dynamic only
  ExpertSlotCacheStats stats_;
  std::vector<uint8_t> prefetched_unused_;  // [layer][expert]
  // Static placement: the first slot of each layer's experts; -1 for layers
  // on the host or without experts.
  std::vector<int32_t> static_slot_base_;
  // Pins taken by Place, released by Release: (layer, expert) pairs.
  std::vector<uint32_t> pinned_;
  uint32_t pinned_layer_ = 0;
  std::vector<uint32_t> routed_;            // one token's distinct experts
  // Place's misses: their index in the request, costs and sites.
  std::vector<uint32_t> miss_index_;
  std::vector<MissCost> miss_costs_;
  std::unique_ptr<bool[]> miss_on_host_;
  std::vector<uint32_t> scratch_;
};

// What a worker publishes about its cache: implemented by whatever owns
// the cache and its slot memory (the CPU worker's SlotCachedExpertSource,
// the CUDA engine), read by the status page writer.
class ExpertCacheReport {
 public:
  virtual ~ExpertCacheReport() = default;
  virtual const ExpertSlotCache& cache() const = 0;
  // Nanoseconds during which at least one fill was in flight.
  virtual uint64_t copy_busy_ns() const = 0;
};

// The checks every ExpertCacheControl::ResizeExpertCache
// (cache/expert_cache_control.h) makes before allocating, and the cache it
// then installs: `current`'s options with `pool_bytes`, its counters
// continued. Errors as ExpertCacheControl::ResizeExpertCache describes.
absl::StatusOr<std::unique_ptr<ExpertSlotCache>> ResizedExpertSlotCache(
    const ExpertSlotCache& current, uint64_t pool_bytes);

}  // namespace moetier
