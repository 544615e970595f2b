#include "cache/expert_cache_policy.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/check.h"

namespace moetier {

ExpertCacheShape ExpertCacheShape::Uniform(uint32_t n_layer, uint32_t n_expert, uint32_t top_k,
                                           uint32_t slots_per_layer) {
  ExpertCacheShape shape;
  shape.n_layer = n_layer;
  shape.n_expert = n_expert;
  shape.top_k = top_k;
  shape.slot_budget.assign(n_layer, std::min(slots_per_layer, n_expert));
  return shape;
}

uint32_t ExpertCacheShape::total_slots() const {
  uint64_t sum = 0;
  for (const uint32_t b : slot_budget) sum += b;
  return static_cast<uint32_t>(std::min<uint64_t>(sum, INT32_MAX));
}

absl::Status ExpertCacheShape::Validate() const {
  // Slot ids are int32 and expert ids must leave kNoExpert free; these
  // bounds are far above any real model (Qwen3-Next: 48 x 512).
  constexpr uint32_t kMaxLayers = 4096;
  constexpr uint32_t kMaxExperts = 65536;
  if (n_layer == 0 || n_layer > kMaxLayers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("expert cache: n_layer %u is outside [1, %u]", n_layer, kMaxLayers));
  }
  if (n_expert == 0 || n_expert > kMaxExperts) {
    return absl::InvalidArgumentError(
        absl::StrFormat("expert cache: n_expert %u is outside [1, %u]", n_expert, kMaxExperts));
  }
  if (top_k == 0 || top_k > n_expert) {
    return absl::InvalidArgumentError(
        absl::StrFormat("expert cache: top_k %u is outside [1, n_expert = %u]", top_k, n_expert));
  }
  if (slot_budget.size() != n_layer) {
    return absl::InvalidArgumentError(absl::StrFormat("expert cache: %u slot budgets for %u layers",
                                                      slot_budget.size(), n_layer));
  }
  uint64_t sum = 0;
  for (uint32_t l = 0; l < n_layer; ++l) {
    // Fewer slots than top_k could not hold one token's experts at once; 0
    // is a layer without routed experts, which never routes.
    if ((slot_budget[l] != 0 && slot_budget[l] < top_k) || slot_budget[l] > n_expert) {
      return absl::InvalidArgumentError(
          absl::StrFormat("expert cache: layer %u has a budget of %u slots, outside [top_k = %u, "
                          "n_expert = %u] (or 0 for a layer without experts)",
                          l, slot_budget[l], top_k, n_expert));
    }
    sum += slot_budget[l];
  }
  if (sum == 0) return absl::InvalidArgumentError("expert cache: no layer has slots");
  if (sum > static_cast<uint64_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("expert cache: more than 2^31 slots in all");
  }
  return absl::OkStatus();
}

ExpertCachePolicy::ExpertCachePolicy(const ExpertCacheShape& shape)
    : shape_(shape),
      budget_(shape.slot_budget),
      resident_(shape.n_layer, 0),
      step_(shape.n_layer, 0),
      step_open_(shape.n_layer, 0),
      counters_(shape.n_layer),
      slot_of_(static_cast<size_t>(shape.n_layer) * shape.n_expert, kNoSlot),
      routed_step_(slot_of_.size(), 0),
      prefetch_step_(slot_of_.size(), 0),
      prefetched_(slot_of_.size(), 0),
      pins_(slot_of_.size(), 0),
      slot_layer_(shape.total_slots(), kNoLayer),
      slot_expert_(shape.total_slots(), kNoExpert) {
  // Factories validate; a bad shape here is a caller bug.
  MOETIER_CHECK(shape.Validate().ok());
  free_slots_.reserve(slot_layer_.size());
  // Pop order hands out slot 0 first.
  for (size_t s = slot_layer_.size(); s > 0; --s)
    free_slots_.push_back(static_cast<int32_t>(s - 1));
}

uint32_t ExpertCachePolicy::Route(uint32_t layer, absl::Span<const uint32_t> experts,
                                  absl::Span<const float> weights) {
  MOETIER_CHECK(layer < shape_.n_layer);
  MOETIER_CHECK(experts.size() <= shape_.top_k);
  MOETIER_CHECK(weights.empty() || weights.size() == experts.size());
  const uint64_t now = ++step_[layer];
  step_open_[layer] = 1;
  ExpertCacheCounters& c = counters_[layer];
  uint32_t hits = 0;
  for (const uint32_t e : experts) {
    MOETIER_CHECK(e < shape_.n_expert);
    const size_t i = Index(layer, e);
    // A duplicate would make the hit count and the protection lie.
    MOETIER_CHECK(routed_step_[i] != now);
    routed_step_[i] = now;
    if (slot_of_[i] != kNoSlot) {
      ++hits;
      if (prefetched_[i]) ++c.prefetch_hits;
    }
    prefetched_[i] = 0;
  }
  c.requests += experts.size();
  c.hits += hits;
  OnRoute(layer, experts, weights, now);
  return hits;
}

bool ExpertCachePolicy::Evictable(uint32_t layer, uint32_t expert) const {
  const size_t i = Index(layer, expert);
  const uint64_t now = step_[layer];
  return slot_of_[i] != kNoSlot && pins_[i] == 0 &&
         !(step_open_[layer] && routed_step_[i] == now) && prefetch_step_[i] != now + 1;
}

uint32_t ExpertCachePolicy::ChooseVictim(uint32_t layer) {
  MOETIER_CHECK(layer < shape_.n_layer);
  const uint32_t v = PickVictim(layer);
  MOETIER_CHECK(v == kNoExpert || Evictable(layer, v));
  return v;
}

void ExpertCachePolicy::Remove(uint32_t layer, uint32_t expert) {
  const size_t i = Index(layer, expert);
  const int32_t slot = slot_of_[i];
  MOETIER_CHECK(slot != kNoSlot && pins_[i] == 0);
  OnEvict(layer, expert);
  slot_of_[i] = kNoSlot;
  prefetched_[i] = 0;
  slot_layer_[slot] = kNoLayer;
  slot_expert_[slot] = kNoExpert;
  free_slots_.push_back(slot);
  --resident_[layer];
  ++counters_[layer].evictions;
}

int32_t ExpertCachePolicy::Evict(uint32_t layer, uint32_t expert) {
  MOETIER_CHECK(layer < shape_.n_layer && expert < shape_.n_expert);
  const int32_t slot = slot_of_[Index(layer, expert)];
  Remove(layer, expert);
  return slot;
}

SlotGrant ExpertCachePolicy::Place(uint32_t layer, uint32_t expert, bool prefetched) {
  SlotGrant grant;
  uint32_t from_layer = kNoLayer;
  if (resident_[layer] >= budget_[layer]) {
    from_layer = layer;
  } else if (free_slots_.empty()) {
    // Under budget but the pool is full: some layer still holds slots a
    // budget change took from it. Rare (only after SetSlotBudgets), so a
    // scan is fine.
    for (uint32_t l = 0; l < shape_.n_layer; ++l) {
      if (resident_[l] > budget_[l]) {
        from_layer = l;
        break;
      }
    }
    MOETIER_CHECK(from_layer != kNoLayer);
  }
  if (from_layer != kNoLayer) {
    const uint32_t victim = ChooseVictim(from_layer);
    if (victim == kNoExpert) return grant;
    if (prefetched && !PrefetchWorthVictim(layer, expert, victim)) return grant;
    Remove(from_layer, victim);
    grant.evicted_layer = from_layer;
    grant.evicted_expert = victim;
  }
  MOETIER_CHECK(!free_slots_.empty());
  const int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  const size_t i = Index(layer, expert);
  slot_of_[i] = slot;
  slot_layer_[slot] = layer;
  slot_expert_[slot] = expert;
  ++resident_[layer];
  prefetched_[i] = prefetched ? 1 : 0;
  OnInsert(layer, expert, prefetched);
  grant.slot = slot;
  return grant;
}

SlotGrant ExpertCachePolicy::Admit(uint32_t layer, uint32_t expert) {
  MOETIER_CHECK(layer < shape_.n_layer && expert < shape_.n_expert);
  MOETIER_CHECK(slot_of_[Index(layer, expert)] == kNoSlot);
  const SlotGrant grant = Place(layer, expert, /*prefetched=*/false);
  if (grant.slot != kNoSlot) ++counters_[layer].admissions;
  return grant;
}

SlotGrant ExpertCachePolicy::Prefetch(uint32_t layer, uint32_t expert) {
  MOETIER_CHECK(layer < shape_.n_layer && expert < shape_.n_expert);
  step_open_[layer] = 0;
  const size_t i = Index(layer, expert);
  if (slot_of_[i] != kNoSlot) {
    // Already resident: only keep it for the coming step.
    prefetch_step_[i] = step_[layer] + 1;
    return SlotGrant{};
  }
  // Protect before placing so that a later prefetch of the same step cannot
  // take this one's slot; undone if no slot is granted.
  const uint64_t old = prefetch_step_[i];
  prefetch_step_[i] = step_[layer] + 1;
  const SlotGrant grant = Place(layer, expert, /*prefetched=*/true);
  if (grant.slot == kNoSlot) {
    prefetch_step_[i] = old;
  } else {
    ++counters_[layer].prefetches;
  }
  return grant;
}

bool ExpertCachePolicy::PrefetchWorthVictim(uint32_t, uint32_t, uint32_t) { return true; }

void ExpertCachePolicy::Pin(uint32_t layer, uint32_t expert) {
  MOETIER_CHECK(layer < shape_.n_layer && expert < shape_.n_expert);
  const size_t i = Index(layer, expert);
  MOETIER_CHECK(slot_of_[i] != kNoSlot);
  ++pins_[i];
}

void ExpertCachePolicy::Unpin(uint32_t layer, uint32_t expert) {
  MOETIER_CHECK(layer < shape_.n_layer && expert < shape_.n_expert);
  const size_t i = Index(layer, expert);
  MOETIER_CHECK(pins_[i] > 0);
  --pins_[i];
}

absl::Status ExpertCachePolicy::SetSlotBudgets(absl::Span<const uint32_t> slot_budget) {
  ExpertCacheShape next = shape_;
  next.slot_budget.assign(slot_budget.begin(), slot_budget.end());
  if (absl::Status s = next.Validate(); !s.ok()) return s;
  if (next.total_slots() != shape_.total_slots()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("expert cache: new budgets add up to %u slots, the pool has %u",
                        next.total_slots(), shape_.total_slots()));
  }
  budget_ = next.slot_budget;
  return absl::OkStatus();
}

size_t ExpertCachePolicy::ProtocolStateBytes() const {
  return VectorBytes(budget_) + VectorBytes(resident_) + VectorBytes(step_) +
         VectorBytes(step_open_) + VectorBytes(counters_) + VectorBytes(slot_of_) +
         VectorBytes(routed_step_) + VectorBytes(prefetch_step_) + VectorBytes(prefetched_) +
         VectorBytes(pins_) + VectorBytes(slot_layer_) + VectorBytes(slot_expert_) +
         VectorBytes(free_slots_);
}

ExpertCacheCounters ExpertCachePolicy::TotalCounters() const {
  ExpertCacheCounters t;
  for (const ExpertCacheCounters& c : counters_) {
    t.requests += c.requests;
    t.hits += c.hits;
    t.prefetch_hits += c.prefetch_hits;
    t.admissions += c.admissions;
    t.prefetches += c.prefetches;
    t.evictions += c.evictions;
  }
  return t;
}

}  // namespace moetier
