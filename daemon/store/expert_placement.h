// Where an expert's bytes go in a slot. O_DIRECT reads need 4096-aligned
// file offsets, lengths and memory; expert matrices in a GGUF file are only
// 32-aligned. So each of the expert's file ranges is widened to the aligned
// range that covers it and read straight into the slot, one after another;
// the matrices then sit at small per-expert offsets inside the slot. No
// staging buffer and no copy: the bytes a worker sees are the bytes the
// kernel read.
#pragma once

#include <array>
#include <cstdint>

#include "manifest/model_manifest.h"

namespace moetier {

inline constexpr uint64_t kReadAlignmentBytes = 4096;

struct ExpertPlacement {
  uint32_t n_reads = 0;
  std::array<FileRange, 3> reads;           // aligned ranges to read
  std::array<uint64_t, 3> read_slot_offset{};  // where read i lands in the slot (aligned)
  std::array<uint64_t, 3> needed_bytes{};   // read i must return at least this much
  std::array<uint32_t, 3> slice_offset{};   // gate, up, down within the slot
  uint64_t span_bytes = 0;                  // sum of the aligned read lengths
};

// Precondition: manifest.HasExperts(layer), expert < manifest.n_expert.
ExpertPlacement PlaceExpert(const ModelManifest& manifest, uint32_t layer, uint32_t expert);

// The largest span of any expert of `layer` (0 for a layer without experts).
uint64_t MaxSpanBytes(const ModelManifest& manifest, uint32_t layer);

}  // namespace moetier
