// The value half of attention over a stored KV cache (KernelTable::
// accumulate_kv_values) with AVX2, FMA and F16C. Included only by the x86
// kernel translation units, each of which compiles its own copy for its
// instruction set (the anonymous namespace keeps them apart).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/block_layouts.h"
#include "backend/cpu/stream_prefetch.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier::cpu {
namespace {

inline void DecodeF16ValueRow(const uint8_t* row, int n, float* out) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(row);
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(out + j,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + j))));
  }
  for (; j < n; ++j) out[j] = _cvtsh_ss(h[j]);
}

// n is a multiple of 32 (CheckKvCacheTypes).
inline void DecodeQ8_0ValueRow(const uint8_t* row, int n, float* out) {
  const BlockQ8_0* blocks = reinterpret_cast<const BlockQ8_0*>(row);
  for (int b = 0; b < n / 32; ++b) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(blocks[b].d));
    for (int c = 0; c < 4; ++c) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blocks[b].qs + 8 * c));
      _mm256_storeu_ps(out + 32 * b + 8 * c,
                       _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
    }
  }
}

// Values 0..15 of a block are the low nibbles of qs, 16..31 the high ones.
inline void DecodeQ4_0ValueRow(const uint8_t* row, int n, float* out) {
  const BlockQ4_0* blocks = reinterpret_cast<const BlockQ4_0*>(row);
  const __m128i low_mask = _mm_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi32(8);
  for (int b = 0; b < n / 32; ++b) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(blocks[b].d));
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs));
    const __m128i halves[2] = {_mm_and_si128(packed, low_mask),
                               _mm_and_si128(_mm_srli_epi16(packed, 4), low_mask)};
    for (int h = 0; h < 2; ++h) {
      for (int c = 0; c < 2; ++c) {
        const __m128i q = _mm_srli_si128(halves[h], 8 * c);
        const __m256i v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(q), eight);
        _mm256_storeu_ps(out + 32 * b + 16 * h + 8 * c, _mm256_mul_ps(d, _mm256_cvtepi32_ps(v)));
      }
    }
  }
}

// A stored value row as floats: F32 rows in place, the others decoded into
// `scratch` (head_dim floats).
inline const float* DecodeValueRow(TensorType type, const uint8_t* row, int head_dim,
                                   float* scratch) {
  switch (type) {
    case TensorType::kF32:
      return reinterpret_cast<const float*>(row);
    case TensorType::kF16:
      DecodeF16ValueRow(row, head_dim, scratch);
      return scratch;
    case TensorType::kQ8_0:
      DecodeQ8_0ValueRow(row, head_dim, scratch);
      return scratch;
    default:
      DecodeQ4_0ValueRow(row, head_dim, scratch);
      return scratch;
  }
}

// Value rows are decoded this many at a time, into L1, before the heads add
// them in.
inline constexpr int kValueRows = 16;

// Rows t0 .. t0 + nr - 1 (nr <= kValueRows) as floats: row_values[r] points
// at row t0 + r, decoded into `decoded` (kValueRows * head_dim floats) where
// it is not F32. Each row asks for the one 2 KiB further on.
inline void DecodeValueRows(TensorType type, const uint8_t* rows, int64_t row_stride, int64_t t0,
                            int nr, int head_dim, float* decoded, const float** row_values) {
  for (int r = 0; r < nr; ++r) {
    const uint8_t* row = rows + (t0 + r) * row_stride;
    PrefetchAhead(row, static_cast<size_t>(row_stride));
    row_values[r] = DecodeValueRow(type, row, head_dim, decoded + r * head_dim);
  }
}

// Rows are decoded kValueRows at a time; each head's output then stays in
// registers, 64 values at a time, while the block's rows are added in.
inline void AccumulateKvValuesX86(TensorType type, const uint8_t* rows, int64_t row_stride,
                                  int64_t n_rows, const float* weights, int64_t w_stride, int n_q,
                                  int head_dim, float* out) {
  alignas(32) float decoded[kValueRows * kMaxKvHeadDim];
  const float* row_values[kValueRows];
  for (int64_t t0 = 0; t0 < n_rows; t0 += kValueRows) {
    const int nr = static_cast<int>(n_rows - t0 < kValueRows ? n_rows - t0 : kValueRows);
    DecodeValueRows(type, rows, row_stride, t0, nr, head_dim, decoded, row_values);
    for (int i = 0; i < n_q; ++i) {
      const float* w = weights + i * w_stride + t0;
      float* o = out + static_cast<int64_t>(i) * head_dim;
      int j = 0;
      for (; j + 64 <= head_dim; j += 64) {
        __m256 acc[8];
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u) acc[u] = _mm256_loadu_ps(o + j + 8 * u);
        for (int r = 0; r < nr; ++r) {
          const __m256 p = _mm256_set1_ps(w[r]);
          const float* v = row_values[r] + j;
#pragma GCC unroll 8
          for (int u = 0; u < 8; ++u) acc[u] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * u), acc[u]);
        }
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u) _mm256_storeu_ps(o + j + 8 * u, acc[u]);
      }
      for (; j + 8 <= head_dim; j += 8) {
        __m256 acc = _mm256_loadu_ps(o + j);
        for (int r = 0; r < nr; ++r) {
          acc = _mm256_fmadd_ps(_mm256_set1_ps(w[r]), _mm256_loadu_ps(row_values[r] + j), acc);
        }
        _mm256_storeu_ps(o + j, acc);
      }
      for (; j < head_dim; ++j) {
        for (int r = 0; r < nr; ++r) o[j] += w[r] * row_values[r][j];
      }
    }
  }
}

}  // namespace
}  // namespace moetier::cpu
