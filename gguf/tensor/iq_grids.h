// The codebooks of the i-quant types IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS and IQ3_S (ggml-common.h): each block stores, per group of 8 (or 4)
// values, the index of one codebook entry, and the entry holds the values'
// magnitudes (signs are stored beside them; IQ1's entries are signed).
// Entry i's values are grid[i][0..n), first value first.
#pragma once

#include <array>
#include <cstdint>

namespace moetier {

using IqGrid8 = std::array<uint8_t, 8>;
using IqGrid4 = std::array<uint8_t, 4>;

// Magnitudes 8, 25, 43.
extern const std::array<IqGrid8, 256> kIq2XxsGrid;
extern const std::array<IqGrid8, 512> kIq2XsGrid;
extern const std::array<IqGrid8, 1024> kIq2SGrid;
// Magnitudes 4, 12, 20, 28, 36, 44, 52, 62.
extern const std::array<IqGrid4, 256> kIq3XxsGrid;
// Magnitudes 1, 3, 5, ..., 15.
extern const std::array<IqGrid4, 512> kIq3SGrid;
// Values -1, 0, 1.
extern const std::array<std::array<int8_t, 8>, 2048> kIq1SGrid;

// The sign byte of IQ2_XXS, IQ2_XS and IQ3_XXS, whose blocks store 7 sign
// bits per 8 values: the 8th makes the count of negative values even (ggml's
// ksigns_iq2xs). Bit j set: value j is negative.
constexpr uint8_t IqSignsFromSevenBits(uint32_t seven_bits) {
  const uint32_t b = seven_bits & 127;
  uint32_t parity = 0;
  for (int j = 0; j < 7; ++j) parity ^= (b >> j) & 1;
  return static_cast<uint8_t>(b | (parity << 7));
}

// IQ1_S and IQ1_M add ±1/8 to every grid value of a group.
inline constexpr float kIq1Delta = 0.125f;

// Tables for decoding eight values at a time as one little-endian word
// (byte j: value j).
// kIqSignMasks[s]: byte j is 0xFF where bit j of s is set.
extern const std::array<uint64_t, 256> kIqSignMasks;
// kIqSevenBitSignMasks[b] = kIqSignMasks[IqSignsFromSevenBits(b)].
extern const std::array<uint64_t, 128> kIqSevenBitSignMasks;
// kIq1Words[n][i]: 8 * (grid value + delta) of IQ1 entry i, delta +1/8 for
// n = 0 and -1/8 for n = 1, as int8 bytes.
extern const std::array<std::array<uint64_t, 2048>, 2> kIq1Words;

}  // namespace moetier
