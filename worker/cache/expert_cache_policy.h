// The replacement policy of the worker's VRAM expert cache.
//
// The cache is a pool of equal-sized VRAM slots, each able to hold one
// expert (gate, up and down matrices of one layer). Every layer owns at most
// slot_budget(layer) of them at a time; a miss in a full layer evicts one of
// that layer's own experts. The policy owns the bookkeeping (which expert of
// which layer sits in which slot, which slots are free) and the choice of
// victims; the worker owns the bytes and the copies.
//
// The per-layer protocol, once per token and MoE layer:
//
//   policy.Route(layer, experts, weights);         // the router's top-k
//   for (uint32_t e : experts) {
//     int32_t slot = policy.Lookup(layer, e);
//     if (slot == kNoSlot) {
//       const SlotGrant grant = policy.Admit(layer, e);  // may evict
//       if (grant.slot == kNoSlot) { /* everything pinned: compute on CPU */ }
//       else { /* grant.evicted_* lost its slot; copy e into grant.slot */ }
//     }
//   }
//
// Route first, then the misses: the router has chosen all k experts before
// any of them runs, so no expert the current token needs is ever evicted to
// make room for another one of the same token (they are "protected" until the
// layer's next Route or Prefetch). Prefetch (the next layer's router applied
// to the current hidden state) calls Prefetch(layer + 1, e) for predicted
// experts; a prefetched expert is protected until that layer's next Route.
//
// Costs: construction allocates everything; no call allocates. Route is
// O(k log n) and Admit O(log n) (n = experts per layer) plus, at worst, the
// protected and pinned experts skipped while looking for a victim.
// Deterministic: the same calls give the same slots and victims.
// Not thread-safe: one worker thread drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace moetier {

inline constexpr int32_t kNoSlot = -1;
inline constexpr uint32_t kNoExpert = UINT32_MAX;
inline constexpr uint32_t kNoLayer = UINT32_MAX;

// Heap bytes a vector holds (for StateBytes).
template <typename T>
size_t VectorBytes(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

// The model and the cache size the policy is built for.
struct ExpertCacheShape {
  uint32_t n_layer = 0;   // MoE layers
  uint32_t n_expert = 0;  // routed experts per layer
  uint32_t top_k = 0;     // experts the router selects per token and layer
  // Slots each layer may hold, each in [top_k, n_expert]; their sum is the
  // size of the slot pool (slot ids are 0 .. sum - 1).
  std::vector<uint32_t> slot_budget;

  // Every layer gets `slots_per_layer` (clamped to n_expert).
  static ExpertCacheShape Uniform(uint32_t n_layer, uint32_t n_expert, uint32_t top_k,
                                  uint32_t slots_per_layer);
  uint32_t total_slots() const;
  // Checks the limits above; says which field is wrong.
  absl::Status Validate() const;
};

// Where Admit or Prefetch put an expert, and whom it displaced.
struct SlotGrant {
  int32_t slot = kNoSlot;             // kNoSlot: nothing evictable (all pinned)
  uint32_t evicted_layer = kNoLayer;  // kNoLayer when a free slot was used
  uint32_t evicted_expert = kNoExpert;
};

// Running totals, per layer; the worker publishes them on its status page.
struct ExpertCacheCounters {
  uint64_t requests = 0;       // experts routed (k per Route)
  uint64_t hits = 0;           // of those, resident at Route
  uint64_t prefetch_hits = 0;  // of the hits, resident only thanks to Prefetch
  uint64_t admissions = 0;     // demand copies (Admit)
  uint64_t prefetches = 0;     // prefetch copies (Prefetch that took a slot)
  uint64_t evictions = 0;
};

class ExpertCachePolicy {
 public:
  explicit ExpertCachePolicy(const ExpertCacheShape& shape);
  virtual ~ExpertCachePolicy() = default;
  ExpertCachePolicy(const ExpertCachePolicy&) = delete;
  ExpertCachePolicy& operator=(const ExpertCachePolicy&) = delete;

  // Short lower-case name, as accepted by MakeExpertCachePolicy.
  virtual std::string_view name() const = 0;

  // --- the per-token protocol ------------------------------------------------

  // Records the router's choice for the next token at `layer`: the distinct
  // experts it selected (at most top_k, highest score first) and their router
  // weights (same length, or empty when unknown). Updates the recency and
  // frequency state of every listed expert, resident or not, counts the
  // hits, and protects the listed experts from eviction until this layer's
  // next Route or Prefetch. Returns how many of them are resident. A
  // duplicate or out-of-range id is a caller bug (aborts).
  uint32_t Route(uint32_t layer, absl::Span<const uint32_t> experts,
                 absl::Span<const float> weights = {});

  // Ends the protection of `layer`'s latest Route before its next one. For
  // callers that route a whole batch (one Route per token) and then place
  // its experts in waves under pins: only the last token's experts would be
  // protected, and they would block the waves.
  void EndProtection(uint32_t layer) { step_open_[layer] = 0; }

  // The slot holding `expert` of `layer`, or kNoSlot.
  int32_t Lookup(uint32_t layer, uint32_t expert) const { return slot_of_[Index(layer, expert)]; }
  bool Resident(uint32_t layer, uint32_t expert) const { return Lookup(layer, expert) != kNoSlot; }

  // Gives a non-resident `expert` of `layer` a slot: a free one while the
  // layer is under budget, else the slot of the victim the policy picks
  // among the layer's unprotected, unpinned experts (or, after a budget
  // shrink, of another layer that is over budget). The expert is resident on
  // return unless grant.slot == kNoSlot.
  SlotGrant Admit(uint32_t layer, uint32_t expert);

  // Prefetch: offers `expert` of `layer` ahead of its Route. Takes a slot
  // (as Admit) only where the policy judges it worth its victim; a free slot
  // always is. Returns the grant, slot == kNoSlot when declined (or when the
  // expert is resident already). The expert stays protected until the
  // layer's next Route. Call it only once the layer has finished computing
  // its previous token (true for the next layer's router): the first
  // Prefetch of a step ends the protection of the previous token's experts.
  SlotGrant Prefetch(uint32_t layer, uint32_t expert);

  // The expert Admit would evict now in `layer`, or kNoExpert. Changes
  // nothing; for callers that want to look before they leap.
  uint32_t ChooseVictim(uint32_t layer);

  // Removes a resident expert (e.g. its slot is needed elsewhere); returns
  // the slot it held. It must not be pinned.
  int32_t Evict(uint32_t layer, uint32_t expert);

  // A pinned expert is never a victim (an in-flight copy or kernel reads
  // it). Pins nest.
  void Pin(uint32_t layer, uint32_t expert);
  void Unpin(uint32_t layer, uint32_t expert);

  // --- budgets ---------------------------------------------------------------

  // Moves slots between layers. The new budgets must keep the pool size and
  // the per-layer limits. A layer above its new budget keeps its experts
  // and gives slots up as other layers Admit.
  absl::Status SetSlotBudgets(absl::Span<const uint32_t> slot_budget);
  uint32_t slot_budget(uint32_t layer) const { return budget_[layer]; }
  uint32_t resident_count(uint32_t layer) const { return resident_[layer]; }
  const ExpertCacheShape& shape() const { return shape_; }
  const ExpertCacheCounters& counters(uint32_t layer) const { return counters_[layer]; }
  ExpertCacheCounters TotalCounters() const;

  // Memory of the bookkeeping, in bytes: the protocol's own (slots,
  // protection, pins) plus the policy's scores and structures. What the lab
  // prints per expert; the worker's real cost is this, not the slot data.
  size_t StateBytes() const { return ProtocolStateBytes() + PolicyStateBytes(); }

 protected:
  // --- what a policy implements --------------------------------------------
  // Called by Route after hits are counted; `step` counts this layer's
  // Routes from 1 and is the policy's clock.
  virtual void OnRoute(uint32_t layer, absl::Span<const uint32_t> experts,
                       absl::Span<const float> weights, uint64_t step) = 0;
  virtual void OnInsert(uint32_t layer, uint32_t expert, bool prefetched) = 0;
  virtual void OnEvict(uint32_t layer, uint32_t expert) = 0;
  // The resident, evictable (see Evictable) expert of `layer` to evict
  // next, or kNoExpert when there is none. Must not change residency.
  virtual uint32_t PickVictim(uint32_t layer) = 0;
  // Whether prefetching `expert` is worth evicting `victim` (both of
  // `layer`). The default says yes: the next layer's router predicts well,
  // and the victim is what the policy values least.
  virtual bool PrefetchWorthVictim(uint32_t layer, uint32_t expert, uint32_t victim);
  // Bytes of the policy's own state (see StateBytes).
  virtual size_t PolicyStateBytes() const = 0;

  bool Evictable(uint32_t layer, uint32_t expert) const;
  // True while `expert` is among the ones the layer's latest Route listed.
  bool RoutedNow(uint32_t layer, uint32_t expert) const {
    return routed_step_[Index(layer, expert)] == step_[layer];
  }
  uint64_t step(uint32_t layer) const { return step_[layer]; }
  size_t Index(uint32_t layer, uint32_t expert) const {
    return static_cast<size_t>(layer) * shape_.n_expert + expert;
  }

  const ExpertCacheShape shape_;

 private:
  SlotGrant Place(uint32_t layer, uint32_t expert, bool prefetched);
  void Remove(uint32_t layer, uint32_t expert);
  size_t ProtocolStateBytes() const;

  std::vector<uint32_t> budget_;    // per layer
  std::vector<uint32_t> resident_;  // per layer
  std::vector<uint64_t> step_;      // per layer: Routes so far
  std::vector<uint8_t> step_open_;  // per layer: its last Route's experts are protected
  std::vector<ExpertCacheCounters> counters_;
  std::vector<int32_t> slot_of_;         // [layer][expert] -> slot
  std::vector<uint64_t> routed_step_;    // [layer][expert]: step of its last Route
  std::vector<uint64_t> prefetch_step_;  // [layer][expert]: step it was prefetched for
  std::vector<uint8_t> prefetched_;      // [layer][expert]: resident by Prefetch, not yet routed
  std::vector<uint32_t> pins_;           // [layer][expert]
  std::vector<uint32_t> slot_layer_;     // [slot] -> layer or kNoLayer
  std::vector<uint32_t> slot_expert_;    // [slot] -> expert or kNoExpert
  std::vector<int32_t> free_slots_;      // stack
};

// The policies, by name:
//   lru       least recently used.
//   lfu       frequency with aging: LRFU with a slow decay (half-life 64 steps).
//   lrfu      LRFU (Lee et al. 2001): each reference adds 1 to an expert's
//             score, which halves every 1/lambda steps; lambda 0.1.
//   reuse     reuse distance: predicts each expert's next use from a moving
//             average of its past reuse distances; evicts the furthest, and
//             experts overdue by twice their usual distance first.
//   adaptive  LRFU whose lambda each layer picks for itself from shadow
//             caches (expert ids only) under four lambdas, 1/64 .. 1 (LFU-like
//             .. LRU), following the one with the most recent shadow hits.
//   optgen    Hawkeye-style: reconstructs what Belady's MIN would have kept
//             over the recent past (OPTgen) and learns per expert whether
//             MIN keeps it; evicts the experts MIN would not, then by LRFU.
// The default, adaptive, is the one that wins in moetier-policy-lab across
// real and generated traces (tools/policy_lab/README.md has the tables).
enum class ExpertPolicyKind { kLru, kLfu, kLrfu, kReuseDistance, kAdaptive, kOptGen };

inline constexpr ExpertPolicyKind kDefaultExpertPolicy = ExpertPolicyKind::kAdaptive;

std::string_view ExpertPolicyName(ExpertPolicyKind kind);
absl::StatusOr<ExpertPolicyKind> ParseExpertPolicyKind(std::string_view name);
std::vector<ExpertPolicyKind> AllExpertPolicyKinds();

absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> MakeExpertCachePolicy(
    ExpertPolicyKind kind, const ExpertCacheShape& shape);

// LRFU with an explicit lambda in (0, 1]; for experiments.
absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> MakeLrfuPolicy(const ExpertCacheShape& shape,
                                                                  double lambda);

}  // namespace moetier
