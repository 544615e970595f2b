#include "store/segment_plan.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "store/expert_placement.h"
#include "util/byte_size.h"

namespace moetier {
namespace {

using store::AlignUp;
using store::kPageBytes;

// Lays out every region before the slot area; returns where slots may start.
uint64_t PlanFixed(const ModelManifest& m, uint32_t n_slot, SegmentPlan* plan) {
  uint64_t at = sizeof(store::SegmentHeader);
  auto place = [&at](uint64_t bytes) {
    const uint64_t offset = AlignUp(at, kPageBytes);
    at = offset + bytes;
    return offset;
  };
  plan->layer_table_offset = place(uint64_t{m.n_layer} * sizeof(store::LayerDesc));
  plan->expert_table_offset =
      place(uint64_t{m.n_layer} * m.n_expert * sizeof(store::ExpertEntry));
  plan->slot_table_offset = place(uint64_t{n_slot} * sizeof(store::SlotDesc));
  plan->dense_table_offset = place(m.dense.size() * sizeof(store::DenseTensorEntry));
  plan->worker_region_offset = place(uint64_t{store::kMaxWorkers} * sizeof(store::WorkerRegion));
  plan->dense_data_offset = AlignUp(at, kPageBytes);
  plan->dense_offsets.clear();
  uint64_t dense_at = plan->dense_data_offset;
  for (const DenseTensor& d : m.dense) {
    dense_at = AlignUp(dense_at, store::kDenseAlignmentBytes);
    plan->dense_offsets.push_back(dense_at);
    dense_at += d.size_bytes;
  }
  plan->dense_data_bytes = dense_at - plan->dense_data_offset;
  plan->slot_area_offset = AlignUp(dense_at, kPageBytes);
  return plan->slot_area_offset;
}

}  // namespace

uint64_t FixedSegmentBytes(const ModelManifest& manifest) {
  SegmentPlan plan;
  // The slot table's size depends on n_slot; count it at its largest.
  return PlanFixed(manifest, static_cast<uint32_t>(manifest.expert_count), &plan);
}

uint32_t MinCacheSlots(const ModelManifest& manifest) { return manifest.hparams.n_expert_used; }

absl::StatusOr<SegmentPlan> PlanSegment(const ModelManifest& m, uint64_t ram_budget_bytes) {
  SegmentPlan plan;
  // Fully resident: one slot per expert, exactly as large as its reads.
  std::vector<uint64_t> spans(uint64_t{m.n_layer} * m.n_expert, 0);
  uint64_t full_slot_bytes = 0;
  uint64_t max_span = 0;
  for (uint32_t l = 0; l < m.n_layer; ++l) {
    if (!m.HasExperts(l)) continue;
    for (uint32_t e = 0; e < m.n_expert; ++e) {
      const uint64_t span = PlaceExpert(m, l, e).span_bytes;
      spans[store::ExpertIndex(l, e, m.n_expert)] = span;
      full_slot_bytes += span;
      max_span = std::max(max_span, span);
    }
  }
  const uint32_t n_full = static_cast<uint32_t>(m.expert_count);
  const uint64_t full_slots_at = PlanFixed(m, n_full, &plan);
  const uint64_t full_bytes = full_slots_at + full_slot_bytes;
  if (ram_budget_bytes == 0 || ram_budget_bytes >= full_bytes) {
    plan.mode = store::StoreMode::kFullyResident;
    plan.n_slot = n_full;
    plan.max_span_bytes = max_span;
    plan.home_slot.assign(uint64_t{m.n_layer} * m.n_expert, store::kNoSlot);
    uint64_t at = plan.slot_area_offset;
    for (uint32_t l = 0; l < m.n_layer; ++l) {
      if (!m.HasExperts(l)) continue;
      for (uint32_t e = 0; e < m.n_expert; ++e) {
        const uint64_t x = store::ExpertIndex(l, e, m.n_expert);
        plan.home_slot[x] = static_cast<uint32_t>(plan.slots.size());
        plan.slots.push_back({at, spans[x]});
        at += spans[x];
      }
    }
    plan.slot_area_bytes = at - plan.slot_area_offset;
    plan.segment_bytes = at;
    return plan;
  }

  // Cache: equal slots, as many as the budget buys after the fixed part.
  const uint64_t capacity = max_span;
  const uint32_t min_slots = MinCacheSlots(m);
  // The slot table grows with n_slot, so solve for the largest count that fits.
  uint32_t n_slot = 0;
  for (uint64_t lo = 0, hi = n_full; lo <= hi;) {
    const uint64_t mid = lo + (hi - lo) / 2;
    SegmentPlan probe;
    const uint64_t need = PlanFixed(m, static_cast<uint32_t>(mid), &probe) + mid * capacity;
    if (need <= ram_budget_bytes) {
      n_slot = static_cast<uint32_t>(mid);
      lo = mid + 1;
    } else {
      if (mid == 0) break;
      hi = mid - 1;
    }
  }
  if (n_slot < min_slots) {
    SegmentPlan probe;
    const uint64_t min_bytes = PlanFixed(m, min_slots, &probe) + uint64_t{min_slots} * capacity;
    return absl::InvalidArgumentError(absl::StrFormat(
        "ram_budget_bytes=%d (%s) is too small for this model: tables and dense weights take "
        "%s, one expert slot takes %s, and at least %d slots (expert_used_count) are needed, "
        "so the budget must be at least %d bytes (%s); holding every expert takes %d bytes "
        "(%s)",
        ram_budget_bytes, FormatBytes(ram_budget_bytes), FormatBytes(probe.slot_area_offset),
        FormatBytes(capacity), min_slots, min_bytes, FormatBytes(min_bytes), full_bytes,
        FormatBytes(full_bytes)));
  }
  plan.mode = store::StoreMode::kCache;
  plan.n_slot = n_slot;
  plan.max_span_bytes = max_span;
  PlanFixed(m, n_slot, &plan);
  for (uint32_t s = 0; s < n_slot; ++s) {
    plan.slots.push_back({plan.slot_area_offset + uint64_t{s} * capacity, capacity});
  }
  plan.slot_area_bytes = uint64_t{n_slot} * capacity;
  plan.segment_bytes = plan.slot_area_offset + plan.slot_area_bytes;
  return plan;
}

}  // namespace moetier
