// Where every region of the store segment goes, and how many expert slots
// the RAM budget buys (store_layout.h describes the regions).
//
// The budget bounds the whole segment — what gets locked in RAM: header,
// tables, dense weights and slots. If it covers one slot per expert the
// store is fully resident (each slot exactly its expert's span, everything
// preloaded); otherwise it is a cache of equal slots sized for the largest
// span (expert_placement.h).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "manifest/model_manifest.h"
#include "store/store_layout.h"

namespace moetier {

struct SegmentPlan {
  store::StoreMode mode = store::StoreMode::kFullyResident;
  uint32_t n_slot = 0;
  uint64_t layer_table_offset = 0;
  uint64_t expert_table_offset = 0;
  uint64_t slot_table_offset = 0;
  uint64_t dense_table_offset = 0;
  uint64_t worker_region_offset = 0;
  uint64_t dense_data_offset = 0;
  uint64_t dense_data_bytes = 0;
  uint64_t slot_area_offset = 0;
  uint64_t slot_area_bytes = 0;
  uint64_t segment_bytes = 0;
  uint64_t max_span_bytes = 0;
  std::vector<uint64_t> dense_offsets;  // per manifest.dense entry, from the segment start
  std::vector<store::SlotDesc> slots;
  // Fully resident: the slot of each expert (linear index layer*n_expert+e),
  // kNoSlot for layers without experts. Empty in cache mode.
  std::vector<uint32_t> home_slot;
};

// Everything but the slots: header, tables, worker regions, dense data.
uint64_t FixedSegmentBytes(const ModelManifest& manifest);

// The smallest number of slots a cache may have: one worker must be able to
// pin every expert a token uses in one layer (expert_used_count).
uint32_t MinCacheSlots(const ModelManifest& manifest);

// ram_budget_bytes == 0: fully resident, whatever it takes.
absl::StatusOr<SegmentPlan> PlanSegment(const ModelManifest& manifest, uint64_t ram_budget_bytes);

}  // namespace moetier
