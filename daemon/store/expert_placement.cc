#include "store/expert_placement.h"

#include <algorithm>

#include "base/check.h"

namespace moetier {

ExpertPlacement PlaceExpert(const ModelManifest& manifest, uint32_t layer, uint32_t expert) {
  const ExpertReadPlan plan = manifest.PlanExpertReads(layer, expert);
  ExpertPlacement p;
  p.n_reads = plan.n_reads;
  uint64_t at = 0;
  std::array<uint64_t, 3> skip{};
  for (uint32_t i = 0; i < plan.n_reads; ++i) {
    const FileRange& r = plan.reads[i];
    const uint64_t start = r.offset / kReadAlignmentBytes * kReadAlignmentBytes;
    const uint64_t end = store::AlignUp(r.offset + r.size, kReadAlignmentBytes);
    p.reads[i] = {r.shard, start, end - start};
    p.read_slot_offset[i] = at;
    skip[i] = r.offset - start;
    p.needed_bytes[i] = skip[i] + r.size;
    at += end - start;
  }
  p.span_bytes = at;
  for (int s = 0; s < 3; ++s) {
    const SliceInRead& slice = plan.slices[s];
    const uint64_t offset =
        p.read_slot_offset[slice.read_index] + skip[slice.read_index] + slice.offset_in_read;
    MOETIER_CHECK(offset + slice.size <= p.span_bytes && offset <= UINT32_MAX);
    p.slice_offset[s] = static_cast<uint32_t>(offset);
  }
  MOETIER_CHECK(p.span_bytes <= UINT32_MAX);
  return p;
}

uint64_t MaxSpanBytes(const ModelManifest& manifest, uint32_t layer) {
  if (!manifest.HasExperts(layer)) return 0;
  uint64_t span = 0;
  for (uint32_t e = 0; e < manifest.n_expert; ++e) {
    span = std::max(span, PlaceExpert(manifest, layer, e).span_bytes);
  }
  return span;
}

}  // namespace moetier
