// Where one routed expert's matrices sit in a cache slot (or in any buffer
// that holds experts one after another): gate at offset 0, up and down each
// at the next `align`-byte boundary, every matrix in the model file's
// encoding. The CPU worker's RAM slots use 64-byte alignment, the CUDA
// engine's VRAM slots 256.
#pragma once

#include <cstdint>

#include "cache/expert_slot_cache.h"
#include "engine/expert_source.h"

namespace moetier {

struct ExpertSlotLayout {
  uint64_t gate_bytes = 0, up_bytes = 0, down_bytes = 0;
  uint64_t up_offset = 0, down_offset = 0;
  uint64_t copy_bytes() const { return gate_bytes + up_bytes + down_bytes; }
  uint64_t end() const { return down_offset + down_bytes; }
};

inline uint64_t AlignUp(uint64_t n, uint64_t align) { return (n + align - 1) / align * align; }

ExpertSlotLayout ExpertSlotLayoutOf(const ExpertLayerShape& layer, uint64_t align);

// A cache's model geometry for experts of these `shapes`: the shape, each layer's expert bytes
// (what a fill copies) and the slot size (the largest layout's end, rounded
// to `align`). The remaining fields keep their defaults.
ExpertSlotCacheOptions ExpertSlotGeometry(const RoutedExpertShapes& shapes, uint64_t align);

}  // namespace moetier
