// Matrix kernels for the i-quant grid types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S) against Q8_K activation rows, as llama.cpp pairs
// them. Where the including translation unit is compiled for AVX2, each
// block is decoded 32 values at a time straight into vectors
// (gguf/tensor/iq_grid_chunks.h) that every activation row of the call then
// uses; otherwise each block is unpacked once to 8-bit values
// (iq_grid_blocks.h) and dotted in plain loops. Included by
// every kernel translation unit (the anonymous namespace keeps their copies
// apart) and by the dispatcher, for the table index.
#pragma once

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/block_layouts.h"
#include "backend/cpu/kernel_table.h"
#include "backend/cpu/stream_prefetch.h"
#include "gguf/tensor/iq_grid_blocks.h"
#include "gguf/tensor/iq_grid_chunks.h"

namespace moetier::cpu {
namespace {
namespace iq_grids {

// KernelTable::gemm_iq_grid's slot for `type`, -1 when it is not a grid type.
inline int TableIndex(TensorType type) {
  switch (type) {
    case TensorType::kIQ2_XXS:
      return 0;
    case TensorType::kIQ2_XS:
      return 1;
    case TensorType::kIQ2_S:
      return 2;
    case TensorType::kIQ3_XXS:
      return 3;
    case TensorType::kIQ3_S:
      return 4;
    case TensorType::kIQ1_S:
      return 5;
    case TensorType::kIQ1_M:
      return 6;
    default:
      return -1;
  }
}

#if defined(__AVX2__)

// Four words into a vector, each read on its own: Decode has just stored
// them 8 bytes at a time, and one 32-byte load over four fresh stores would
// wait for them to retire.
inline __m256i FourWords(const uint64_t* w) {
  const __m128i lo = _mm_insert_epi64(_mm_cvtsi64_si128(static_cast<int64_t>(w[0])),
                                      static_cast<int64_t>(w[1]), 1);
  const __m128i hi = _mm_insert_epi64(_mm_cvtsi64_si128(static_cast<int64_t>(w[2])),
                                      static_cast<int64_t>(w[3]), 1);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

// One chunk of 32 values as vectors: codebook magnitudes, signs (bytes +1
// or -1) and the two halves' scales (int16).
struct ChunkVectors {
  __m256i magnitudes;
  __m256i signs;
  __m256i scales;
};

// Byte j of the result is -1 where bit j % 8 of byte j / 8 of `bits` is set,
// else +1.
inline __m256i SignsFromBits(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(bits)),
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(set, _mm256_set1_epi8(1));
}

// kFewRows: the chunk serves one or two activation rows. Gathering IQ2_S's
// entries is then faster (22 ns a block instead of 28 on one core); with
// more rows the gather's registers cost the accumulators more than it saves
// (58 ns instead of 47 at eight).
template <TensorType kType, bool kFewRows>
inline ChunkVectors LoadChunk(const uint8_t* blk, int c) {
  ChunkVectors v;
  if constexpr (kType == TensorType::kIQ2_S && kFewRows) {
    const uint8_t* qs = blk + offsetof(BlockIQ2_S, qs);
    uint32_t low;
    uint32_t sign_bits;
    std::memcpy(&low, qs + 4 * c, 4);
    std::memcpy(&sign_bits, qs + 32 + 4 * c, 4);
    const __m128i high =
        _mm_and_si128(_mm_sllv_epi32(_mm_set1_epi32(blk[offsetof(BlockIQ2_S, qh) + c]),
                                     _mm_setr_epi32(8, 6, 4, 2)),
                      _mm_set1_epi32(0x300));
    const __m128i indices =
        _mm_or_si128(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(low))), high);
    v.magnitudes =
        _mm256_i32gather_epi64(reinterpret_cast<const long long*>(kIq2SGrid.data()), indices, 8);
    v.signs = SignsFromBits(sign_bits);
    const int nibbles = blk[offsetof(BlockIQ2_S, scales) + c];
    v.scales = _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(2 * (nibbles & 0x0F) + 1)),
                                 _mm_set1_epi16(static_cast<int16_t>(2 * (nibbles >> 4) + 1)));
    return v;
  } else if constexpr (kType == TensorType::kIQ3_S) {
    // Eight 9-bit indices gathered at once: the low bytes widened, bit i of
    // qh moved to bit 8 of index i.
    const __m256i low = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + offsetof(BlockIQ3_S, qs) + 8 * c)));
    const __m256i high =
        _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32(blk[offsetof(BlockIQ3_S, qh) + c]),
                                           _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1)),
                         _mm256_set1_epi32(256));
    v.magnitudes = _mm256_i32gather_epi32(reinterpret_cast<const int*>(kIq3SGrid.data()),
                                          _mm256_or_si256(low, high), 4);
    uint32_t sign_bits;
    std::memcpy(&sign_bits, blk + offsetof(BlockIQ3_S, signs) + 4 * c, 4);
    v.signs = SignsFromBits(sign_bits);
    const int nibbles = blk[offsetof(BlockIQ3_S, scales) + c / 2];
    v.scales = _mm256_set1_epi16(static_cast<int16_t>(2 * ((nibbles >> (4 * (c % 2))) & 0x0F) + 1));
    return v;
  } else {
    iq_chunks::Chunk chunk;
    iq_chunks::Decode<kType>(blk, c, &chunk);
    const __m256i words = FourWords(chunk.words);
    if constexpr (iq_chunks::SignedWords(kType)) {
      v.magnitudes = _mm256_sign_epi8(words, words);
      v.signs = words;  // never 0: 8 * grid ± 1
    } else {
      v.magnitudes = words;
      v.signs = _mm256_or_si256(FourWords(chunk.negative), _mm256_set1_epi8(1));
    }
    v.scales = _mm256_setr_m128i(_mm_set1_epi16(chunk.scale[0]), _mm_set1_epi16(chunk.scale[1]));
    return v;
  }
}

// Where BlockSums takes a block's chunks from: decoded as they are needed,
// or decoded before, once for all passes over the block.
template <TensorType kType, bool kFewRows>
struct DecodedOnUse {
  const uint8_t* blk;
  ChunkVectors operator[](int c) const { return LoadChunk<kType, kFewRows>(blk, c); }
};

struct DecodedBefore {
  ChunkVectors chunks[kQK_K / 32];
  const ChunkVectors& operator[](int c) const { return chunks[c]; }
};

// The integer sums of one block against kNA activation rows (act_m: the
// block's 256 activations of row m). Each chunk's vectors serve every row:
// |q| * (a with q's sign) keeps maddubs' unsigned operand non-negative;
// |q| <= 62 and |a| <= 127 keep its pair sums below 2^14, and madd multiplies
// them by the scales (<= 31) without overflow. kNA rows at a time, so that
// their accumulators stay in registers.
template <int kNA, typename Chunks>
inline void BlockSums(const Chunks& chunks, const uint8_t* act, size_t act_stride, int32_t* sums) {
  __m256i acc[kNA];
  _Pragma("GCC unroll 8") for (int m = 0; m < kNA; ++m) acc[m] = _mm256_setzero_si256();
  for (int c = 0; c < kQK_K / 32; ++c) {
    const ChunkVectors v = chunks[c];
    _Pragma("GCC unroll 8") for (int m = 0; m < kNA; ++m) {
      const __m256i a =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act + m * act_stride + 32 * c));
      const __m256i pairs = _mm256_maddubs_epi16(v.magnitudes, _mm256_sign_epi8(a, v.signs));
      acc[m] = _mm256_add_epi32(acc[m], _mm256_madd_epi16(pairs, v.scales));
    }
  }
  _Pragma("GCC unroll 8") for (int m = 0; m < kNA; ++m) {
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(acc[m]), _mm256_extracti128_si256(acc[m], 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    sums[m] = _mm_cvtsi128_si32(s4);
  }
}

#if defined(__AVX512BW__)
// BlockSums with two chunks per 512-bit vector, for passes of more than two
// rows (with one or two the 256-bit loop is as fast: 15-16 ns a block of
// IQ2_XXS on one core; at eight rows this takes 32 ns instead of 39). A
// value's sign negates its activation under a byte mask, as AVX-512 has no
// sign_epi8.
template <int kNA, typename Chunks>
inline void BlockSums512(const Chunks& chunks, const uint8_t* act, size_t act_stride,
                         int32_t* sums) {
  __m512i acc[kNA];
  _Pragma("GCC unroll 8") for (int m = 0; m < kNA; ++m) acc[m] = _mm512_setzero_si512();
  for (int c = 0; c < kQK_K / 32; c += 2) {
    const ChunkVectors lo = chunks[c];
    const ChunkVectors hi = chunks[c + 1];
    const __m512i magnitudes =
        _mm512_inserti64x4(_mm512_castsi256_si512(lo.magnitudes), hi.magnitudes, 1);
    const __mmask64 negative =
        _mm512_movepi8_mask(_mm512_inserti64x4(_mm512_castsi256_si512(lo.signs), hi.signs, 1));
    const __m512i scales = _mm512_inserti64x4(_mm512_castsi256_si512(lo.scales), hi.scales, 1);
    _Pragma("GCC unroll 8") for (int m = 0; m < kNA; ++m) {
      const __m512i a = _mm512_loadu_si512(act + m * act_stride + 32 * c);
      const __m512i signed_a = _mm512_mask_sub_epi8(a, negative, _mm512_setzero_si512(), a);
      acc[m] = _mm512_add_epi32(
          acc[m], _mm512_madd_epi16(_mm512_maddubs_epi16(magnitudes, signed_a), scales));
    }
  }
  _Pragma("GCC unroll 8") for (int m = 0; m < kNA; ++m) sums[m] = _mm512_reduce_add_epi32(acc[m]);
}
#endif

// BlockSums for a pass of kNA rows, in 512-bit vectors where AVX-512 is
// there and the pass has more than two rows.
template <int kNA, typename Chunks>
inline void PassSums(const Chunks& chunks, const uint8_t* act, size_t act_stride, int32_t* sums) {
#if defined(__AVX512BW__)
  if constexpr (kNA > 2) {
    BlockSums512<kNA>(chunks, act, act_stride, sums);
    return;
  }
#endif
  BlockSums<kNA>(chunks, act, act_stride, sums);
}

template <TensorType kType, int kNA>
void GemmRows(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
              size_t act_stride, float* out, int64_t ldo) {
  const int64_t block_bytes = GetTensorTypeInfo(kType).block_bytes;
  const int64_t n_blocks = k / kQK_K;
  for (int64_t r = 0; r < n_rows; ++r) {
    float sum[kNA] = {};
    const uint8_t* row = w + r * w_stride;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const uint8_t* blk = row + b * block_bytes;
      PrefetchAhead(blk, static_cast<size_t>(block_bytes));
      int32_t sums[kNA];
      // Passes of one or two rows gather IQ2_S's entries (LoadChunk).
      PassSums<kNA>(DecodedOnUse<kType, (kNA <= 2)>{blk}, act + b * kQK_K, act_stride, sums);
      const float d = _cvtsh_ss(iq_chunks::ScaleBits(kType, blk)) * iq_chunks::ScaleFactor(kType);
      _Pragma("GCC unroll 8") for (int m = 0; m < kNA; ++m) {
        const Q8KRow a = Q8KRowAt(act + m * act_stride, k);
        sum[m] += a.d[b] * d * static_cast<float>(sums[m]);
      }
    }
    for (int m = 0; m < kNA; ++m) out[m * ldo + r] = sum[m];
  }
}

// More rows than one pass (prompts; MatMul hands these kernels all of a
// batch's rows): each block is decoded once into its chunks' vectors, which
// every pass of 8 rows then reads.
template <TensorType kType>
void GemmManyRows(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                  size_t act_stride, int n_act, float* out, int64_t ldo) {
  const int64_t block_bytes = GetTensorTypeInfo(kType).block_bytes;
  const int64_t n_blocks = k / kQK_K;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int m = 0; m < n_act; ++m) out[m * ldo + r] = 0.0f;
    const uint8_t* row = w + r * w_stride;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const uint8_t* blk = row + b * block_bytes;
      DecodedBefore chunks;
      for (int c = 0; c < kQK_K / 32; ++c) chunks.chunks[c] = LoadChunk<kType, false>(blk, c);
      const float d = _cvtsh_ss(iq_chunks::ScaleBits(kType, blk)) * iq_chunks::ScaleFactor(kType);
      for (int m0 = 0; m0 < n_act; m0 += 8) {
        const uint8_t* a = act + m0 * act_stride + b * kQK_K;
        int32_t sums[8];
        const int na = std::min(8, n_act - m0);
        switch (na) {
          case 1:
            PassSums<1>(chunks, a, act_stride, sums);
            break;
          case 2:
            PassSums<2>(chunks, a, act_stride, sums);
            break;
          case 3:
            PassSums<3>(chunks, a, act_stride, sums);
            break;
          case 4:
            PassSums<4>(chunks, a, act_stride, sums);
            break;
          case 5:
            PassSums<5>(chunks, a, act_stride, sums);
            break;
          case 6:
            PassSums<6>(chunks, a, act_stride, sums);
            break;
          case 7:
            PassSums<7>(chunks, a, act_stride, sums);
            break;
          default:
            PassSums<8>(chunks, a, act_stride, sums);
            break;
        }
        for (int m = 0; m < na; ++m) {
          const Q8KRow q8 = Q8KRowAt(act + (m0 + m) * act_stride, k);
          out[(m0 + m) * ldo + r] += q8.d[b] * d * static_cast<float>(sums[m]);
        }
      }
    }
  }
}

// Any number of activation rows (kernel_table.h).
template <TensorType kType>
void Gemm(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
          size_t act_stride, int n_act, float* out, int64_t ldo) {
  // Up to 8 rows in one pass, each decoded chunk used by all of them while
  // it is in registers: 8 accumulators and the chunk's 3 vectors fit AVX2's
  // 16 registers.
  switch (n_act) {
    case 1:
      return GemmRows<kType, 1>(k, w, w_stride, n_rows, act, act_stride, out, ldo);
    case 2:
      return GemmRows<kType, 2>(k, w, w_stride, n_rows, act, act_stride, out, ldo);
    case 3:
      return GemmRows<kType, 3>(k, w, w_stride, n_rows, act, act_stride, out, ldo);
    case 4:
      return GemmRows<kType, 4>(k, w, w_stride, n_rows, act, act_stride, out, ldo);
    case 5:
      return GemmRows<kType, 5>(k, w, w_stride, n_rows, act, act_stride, out, ldo);
    case 6:
      return GemmRows<kType, 6>(k, w, w_stride, n_rows, act, act_stride, out, ldo);
    case 7:
      return GemmRows<kType, 7>(k, w, w_stride, n_rows, act, act_stride, out, ldo);
    case 8:
      return GemmRows<kType, 8>(k, w, w_stride, n_rows, act, act_stride, out, ldo);
    default:
      return GemmManyRows<kType>(k, w, w_stride, n_rows, act, act_stride, n_act, out, ldo);
  }
}

#else

// Σ over the block of scale[g] · Σ_{e in group g} q[e]·a[e].
inline int32_t BlockDot(const IqGridValues& w, const int8_t* a) {
  int32_t total = 0;
  for (int g = 0; g < kQK_K / kIqGridScaleGroup; ++g) {
    int32_t s = 0;
    for (int j = 0; j < kIqGridScaleGroup; ++j) {
      s += w.q[g * kIqGridScaleGroup + j] * a[g * kIqGridScaleGroup + j];
    }
    total += w.scale[g] * s;
  }
  return total;
}

// Each weight block is unpacked once for all activation rows of the call,
// any number of them (kernel_table.h).
template <TensorType kType>
void Gemm(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
          size_t act_stride, int n_act, float* out, int64_t ldo) {
  const int64_t block_bytes = GetTensorTypeInfo(kType).block_bytes;
  const int64_t n_blocks = k / kQK_K;
  IqGridValues unpacked;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int m = 0; m < n_act; ++m) out[m * ldo + r] = 0.0f;
    const uint8_t* row = w + r * w_stride;
    for (int64_t b = 0; b < n_blocks; ++b) {
      UnpackIqGridBlock(kType, row + b * block_bytes, &unpacked);
      for (int m = 0; m < n_act; ++m) {
        const Q8KRow a = Q8KRowAt(act + m * act_stride, k);
        out[m * ldo + r] +=
            a.d[b] * unpacked.d * static_cast<float>(BlockDot(unpacked, a.qs + b * kQK_K));
      }
    }
  }
}

#endif

}  // namespace iq_grids
}  // namespace

// The table entries, in TableIndex order.
#define MOETIER_IQ_GRID_GEMMS                                                     \
  {                                                                               \
    iq_grids::Gemm<TensorType::kIQ2_XXS>, iq_grids::Gemm<TensorType::kIQ2_XS>,    \
        iq_grids::Gemm<TensorType::kIQ2_S>, iq_grids::Gemm<TensorType::kIQ3_XXS>, \
        iq_grids::Gemm<TensorType::kIQ3_S>, iq_grids::Gemm<TensorType::kIQ1_S>,   \
        iq_grids::Gemm<TensorType::kIQ1_M>                                        \
  }

}  // namespace moetier::cpu
