// The i-quant grid blocks read 32 values at a time, straight from their
// file bytes: the one statement of their bit layouts (quant_blocks.h
// describes them) that the float decoder (iq_grid_blocks.cc) and the CPU
// kernels, compiled for several instruction sets, all use. Internal linkage
// only: every including translation unit compiles its own copy, so code built
// for one instruction set cannot be linked into another.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gguf/tensor/iq_grids.h"
#include "gguf/tensor/quant_blocks.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {
namespace {
namespace iq_chunks {

static_assert(std::endian::native == std::endian::little, "values are read as little-endian words");

// Values 32c .. 32c+31 of a block, as four words of eight values (byte j of
// word l is value 32c + 8l + j) and the scales (2s + 1) of its two halves.
// For IQ1 the words hold the signed q values, 8 * (grid + delta), and
// `negative` is zero; for the other types they hold codebook magnitudes and
// `negative` has 0xFF bytes where a value is negative.
struct Chunk {
  uint64_t words[4];
  uint64_t negative[4];
  int16_t scale[2];
};

template <typename T>
inline T Read(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline uint64_t Word8(const IqGrid8& entry) { return Read<uint64_t>(entry.data()); }
inline uint64_t Word4x2(const IqGrid4& lo, const IqGrid4& hi) {
  return Read<uint32_t>(lo.data()) | (static_cast<uint64_t>(Read<uint32_t>(hi.data())) << 32);
}

inline void SameScale(int ls, Chunk* out) {
  out->scale[0] = static_cast<int16_t>(ls);
  out->scale[1] = static_cast<int16_t>(ls);
}

inline void NibbleScales(uint8_t byte, Chunk* out) {
  out->scale[0] = static_cast<int16_t>(2 * (byte & 0x0F) + 1);
  out->scale[1] = static_cast<int16_t>(2 * (byte >> 4) + 1);
}

template <TensorType kType>
inline void Decode(const uint8_t* blk, int c, Chunk* out);

template <>
inline void Decode<TensorType::kIQ2_XXS>(const uint8_t* blk, int c, Chunk* out) {
  const uint8_t* group = blk + offsetof(BlockIQ2_XXS, qs) + 8 * c;
  const uint32_t signs_scale = Read<uint32_t>(group + 4);
  SameScale(2 * static_cast<int>(signs_scale >> 28) + 1, out);
  _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
    out->words[l] = Word8(kIq2XxsGrid[group[l]]);
    out->negative[l] = kIqSevenBitSignMasks[(signs_scale >> (7 * l)) & 127];
  }
}

template <>
inline void Decode<TensorType::kIQ2_XS>(const uint8_t* blk, int c, Chunk* out) {
  NibbleScales(blk[offsetof(BlockIQ2_XS, scales) + c], out);
  _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
    const uint16_t q = Read<uint16_t>(blk + offsetof(BlockIQ2_XS, qs) + 2 * (4 * c + l));
    out->words[l] = Word8(kIq2XsGrid[q & 511]);
    out->negative[l] = kIqSevenBitSignMasks[q >> 9];
  }
}

template <>
inline void Decode<TensorType::kIQ2_S>(const uint8_t* blk, int c, Chunk* out) {
  NibbleScales(blk[offsetof(BlockIQ2_S, scales) + c], out);
  const uint8_t* qs = blk + offsetof(BlockIQ2_S, qs);
  const int qh = blk[offsetof(BlockIQ2_S, qh) + c];
  _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
    out->words[l] = Word8(kIq2SGrid[qs[4 * c + l] | (((qh >> (2 * l)) & 3) << 8)]);
    out->negative[l] = kIqSignMasks[qs[32 + 4 * c + l]];
  }
}

template <>
inline void Decode<TensorType::kIQ3_XXS>(const uint8_t* blk, int c, Chunk* out) {
  const uint8_t* idx = blk + offsetof(BlockIQ3_XXS, qs) + 8 * c;
  const uint32_t signs_scale = Read<uint32_t>(blk + offsetof(BlockIQ3_XXS, qs) + 64 + 4 * c);
  SameScale(2 * static_cast<int>(signs_scale >> 28) + 1, out);
  _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
    out->words[l] = Word4x2(kIq3XxsGrid[idx[2 * l]], kIq3XxsGrid[idx[2 * l + 1]]);
    out->negative[l] = kIqSevenBitSignMasks[(signs_scale >> (7 * l)) & 127];
  }
}

template <>
inline void Decode<TensorType::kIQ3_S>(const uint8_t* blk, int c, Chunk* out) {
  const int nibbles = blk[offsetof(BlockIQ3_S, scales) + c / 2];
  SameScale(2 * ((nibbles >> (4 * (c % 2))) & 0x0F) + 1, out);
  const uint8_t* idx = blk + offsetof(BlockIQ3_S, qs) + 8 * c;
  const int qh = blk[offsetof(BlockIQ3_S, qh) + c];
  _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
    const int i0 = 2 * l;
    const int i1 = 2 * l + 1;
    out->words[l] = Word4x2(kIq3SGrid[idx[i0] | (((qh >> i0) & 1) << 8)],
                            kIq3SGrid[idx[i1] | (((qh >> i1) & 1) << 8)]);
    out->negative[l] = kIqSignMasks[blk[offsetof(BlockIQ3_S, signs) + 4 * c + l]];
  }
}

template <>
inline void Decode<TensorType::kIQ1_S>(const uint8_t* blk, int c, Chunk* out) {
  const uint16_t qh = Read<uint16_t>(blk + offsetof(BlockIQ1_S, qh) + 2 * c);
  SameScale(2 * ((qh >> 12) & 7) + 1, out);
  const uint8_t* qs = blk + offsetof(BlockIQ1_S, qs) + 4 * c;
  _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
    out->words[l] = kIq1Words[qh >> 15][qs[l] | (((qh >> (3 * l)) & 7) << 8)];
    out->negative[l] = 0;
  }
}

template <>
inline void Decode<TensorType::kIQ1_M>(const uint8_t* blk, int c, Chunk* out) {
  const uint16_t sc = Read<uint16_t>(blk + offsetof(BlockIQ1_M, scales) + 2 * (c / 2));
  const int shift = 6 * (c % 2);
  out->scale[0] = static_cast<int16_t>(2 * ((sc >> shift) & 7) + 1);
  out->scale[1] = static_cast<int16_t>(2 * ((sc >> (shift + 3)) & 7) + 1);
  const uint8_t* qs = blk + offsetof(BlockIQ1_M, qs) + 4 * c;
  const uint8_t* qh = blk + offsetof(BlockIQ1_M, qh) + 2 * c;
  _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
    const int nibble = (qh[l / 2] >> (4 * (l % 2))) & 0x0F;
    out->words[l] = kIq1Words[nibble >> 3][qs[l] | ((nibble & 7) << 8)];
    out->negative[l] = 0;
  }
}

// Whether Decode's words are signed q values (IQ1) rather than magnitudes.
constexpr bool SignedWords(TensorType type) {
  return type == TensorType::kIQ1_S || type == TensorType::kIQ1_M;
}

// The bits of the block's half scale d; y = d * factor * scale * q.
inline uint16_t ScaleBits(TensorType type, const uint8_t* blk) {
  if (type != TensorType::kIQ1_M) return Read<uint16_t>(blk);
  const uint8_t* sc = blk + offsetof(BlockIQ1_M, scales);
  return static_cast<uint16_t>(
      (Read<uint16_t>(sc) >> 12) | ((Read<uint16_t>(sc + 2) >> 8) & 0x00F0) |
      ((Read<uint16_t>(sc + 4) >> 4) & 0x0F00) | (Read<uint16_t>(sc + 6) & 0xF000));
}

// Stores `bits` as the block's half scale, ScaleBits' inverse: IQ1_M keeps
// it in the top nibbles of its four scale words, the others in bytes 0..1.
inline void PutScaleBits(TensorType type, uint8_t* blk, uint16_t bits) {
  if (type != TensorType::kIQ1_M) {
    std::memcpy(blk, &bits, sizeof(bits));
    return;
  }
  uint8_t* high_bytes = blk + offsetof(BlockIQ1_M, scales) + 1;
  for (int w = 0; w < 4; ++w) {
    high_bytes[2 * w] =
        static_cast<uint8_t>((high_bytes[2 * w] & 0x0F) | (((bits >> (4 * w)) & 0x0F) << 4));
  }
}

constexpr float ScaleFactor(TensorType type) {
  switch (type) {
    case TensorType::kIQ3_S:
      return 1.0f;
    case TensorType::kIQ3_XXS:
      return 0.25f;
    default:
      return 0.125f;
  }
}

}  // namespace iq_chunks
}  // namespace
}  // namespace moetier
