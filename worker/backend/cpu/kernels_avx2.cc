// AVX2 + FMA + F16C kernels. Compiled with -mavx2 -mfma -mf16c; everything
// here has internal linkage and calls no inline library code, so nothing
// compiled for these instructions can leak into code that runs elsewhere.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/block_layouts.h"
#include "backend/cpu/gemm_iq_grids.h"
#include "backend/cpu/gemm_low_bit_x86.h"
#include "backend/cpu/kernel_table.h"
#include "backend/cpu/kv_values_x86.h"
#include "backend/cpu/stream_prefetch.h"

namespace moetier::cpu {
namespace {

// The loops over the activation tile and over a block's chunks must be
// unrolled so that their vectors stay in registers; -O2 leaves them rolled
// and spills every accumulator array to the stack.
#define MOETIER_UNROLL _Pragma("GCC unroll 16")

inline float HsumPs(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

// The 8 six-bit scales and 8 mins of a Q4_K / Q5_K block (SPEC §2.3), from
// the 12 packed bytes at `b`: bytes 0..7 of the result are the scales, 8..15
// the mins. Reads 16 bytes (the block continues past the scales).
inline __m128i UnpackScalesMins(const uint8_t* b) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));  // u0 u1 u2 .
  const __m128i low6 = _mm_set1_epi32(0x3f3f3f3f);
  const __m128i low4 = _mm_set1_epi32(0x0f0f0f0f);
  const __m128i low2 = _mm_set1_epi32(0x03030303);
  const __m128i lo = _mm_and_si128(v, low6);  // sc0-3, mn0-3
  const __m128i u2 = _mm_shuffle_epi32(v, 0xAA);
  const __m128i nib = _mm_and_si128(_mm_srlv_epi32(u2, _mm_setr_epi32(0, 4, 0, 0)), low4);
  const __m128i top = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(v, 6), low2), 4);
  const __m128i hi = _mm_or_si128(nib, top);  // sc4-7, mn4-7
  return _mm_unpacklo_epi32(lo, hi);
}

// Shuffle masks broadcasting int16 lane j of a 128-bit lane.
inline __m256i BroadcastWordMask(int j) {
  return _mm256_set1_epi16(static_cast<int16_t>((2 * j) | ((2 * j + 1) << 8)));
}

// ---------------------------------------------------------------- float rows

// Loaders of 8 weights as floats, and of one weight for the row's tail.
inline __m256 LoadF32(const uint8_t* w, int64_t j) {
  return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + j);
}
inline __m256 LoadF32One(const uint8_t* w, int64_t j) {
  return _mm256_castps128_ps256(_mm_load_ss(reinterpret_cast<const float*>(w) + j));
}
inline __m256 LoadF16(const uint8_t* w, int64_t j) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * j)));
}
inline __m256 LoadF16One(const uint8_t* w, int64_t j) {
  uint16_t h;
  std::memcpy(&h, w + 2 * j, 2);
  return _mm256_castps128_ps256(_mm_set_ss(_cvtsh_ss(h)));
}
inline __m256 LoadBf16(const uint8_t* w, int64_t j) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * j));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 LoadBf16One(const uint8_t* w, int64_t j) {
  uint16_t h;
  std::memcpy(&h, w + 2 * j, 2);
  return _mm256_castps128_ps256(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(h) << 16)));
}

template <int NA, __m256 (*kLoad)(const uint8_t*, int64_t),
          __m256 (*kLoadOne)(const uint8_t*, int64_t), int kElemBytes>
void GemmFloatNA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                 size_t act_stride, float* out, int64_t ldo) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* wrow = w + r * w_stride;
    __m256 acc0[NA], acc1[NA];
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) {
      acc0[m] = _mm256_setzero_ps();
      acc1[m] = _mm256_setzero_ps();
    }
    int64_t j = 0;
    for (; j + 16 <= k; j += 16) {
      PrefetchAhead(wrow + j * kElemBytes, 16 * kElemBytes);
      const __m256 w0 = kLoad(wrow, j);
      const __m256 w1 = kLoad(wrow, j + 8);
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const float* a = reinterpret_cast<const float*>(act + m * act_stride);
        acc0[m] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(a + j), acc0[m]);
        acc1[m] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(a + j + 8), acc1[m]);
      }
    }
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) {
      const float* a = reinterpret_cast<const float*>(act + m * act_stride);
      float sum = HsumPs(_mm256_add_ps(acc0[m], acc1[m]));
      for (int64_t t = j; t < k; ++t) {
        sum += _mm_cvtss_f32(_mm256_castps256_ps128(kLoadOne(wrow, t))) * a[t];
      }
      out[m * ldo + r] = sum;
    }
  }
}

// ---------------------------------------------------------------- Q8_0 / Q4_0

// Sum of the 8 int32 lanes of int8 products of one 32-element block, per lane
// pair: |w| * (a with w's sign) keeps maddubs' unsigned operand non-negative.
inline __m256i DotI8(__m256i w_abs, __m256i w, __m256i a) {
  const __m256i p16 = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(a, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

template <int NA>
void GemmQ8_0NA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                size_t act_stride, float* out, int64_t ldo) {
  const int64_t nb = k / kQK8_0;
  for (int64_t r = 0; r < n_rows; ++r) {
    const BlockQ8_0* x = reinterpret_cast<const BlockQ8_0*>(w + r * w_stride);
    __m256 acc[NA];
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      PrefetchAhead(x + b, sizeof(BlockQ8_0));
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
      const __m256i wabs = _mm256_sign_epi8(wq, wq);
      const __m256 dw = _mm256_set1_ps(Half(x[b].d));
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const uint8_t* a = act + m * act_stride;
        const __m256i aq = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + b * kQK8_0));
        const __m256 da = _mm256_loadu_ps(reinterpret_cast<const float*>(a + k) + b * kActRepeat);
        const __m256 p = _mm256_cvtepi32_ps(DotI8(wabs, wq, aq));
        acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), p, acc[m]);
      }
    }
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = HsumPs(acc[m]);
  }
}

template <int NA>
void GemmQ4_0NA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                size_t act_stride, float* out, int64_t ldo) {
  const int64_t nb = k / kQK8_0;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t r = 0; r < n_rows; ++r) {
    const BlockQ4_0* x = reinterpret_cast<const BlockQ4_0*>(w + r * w_stride);
    __m256 acc[NA];
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      PrefetchAhead(x + b, sizeof(BlockQ4_0));
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs));
      const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);  // 0..15
      const __m256 dw = _mm256_set1_ps(Half(x[b].d));
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const uint8_t* a = act + m * act_stride;
        const __m256i aq = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + b * kQK8_0));
        const __m256 da = _mm256_loadu_ps(reinterpret_cast<const float*>(a + k) + b * kActRepeat);
        const __m256i nsum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
            reinterpret_cast<const int32_t*>(a + 2 * k) + b * kActRepeat));
        // sum (nib - 8) * a = sum nib * a - 8 * sum a; each of the 8 lanes
        // carries -sum a once.
        const __m256i p =
            _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(nib, aq), ones), nsum);
        acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(p), acc[m]);
      }
    }
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = HsumPs(acc[m]);
  }
}

// ---------------------------------------------------------------- K-quants

template <int NA>
void GemmQ4KNA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
               size_t act_stride, float* out, int64_t ldo) {
  const int64_t nb = k / kQK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  Q8KRow rows[NA];
  MOETIER_UNROLL
  for (int m = 0; m < NA; ++m) rows[m] = Q8KRowAt(act + m * act_stride, k);
  for (int64_t r = 0; r < n_rows; ++r) {
    const BlockQ4K* x = reinterpret_cast<const BlockQ4K*>(w + r * w_stride);
    __m256 acc[NA], accm[NA];
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) {
      acc[m] = _mm256_setzero_ps();
      accm[m] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
      PrefetchAhead(x + b, sizeof(BlockQ4K));
      const __m128i scmn = UnpackScalesMins(x[b].scales);
      // scales as int16 in both 128-bit lanes; mins as 16 int16 lanes, each
      // repeated for its two 16-sums.
      const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scmn));
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scmn, scmn));
      const float dw = Half(x[b].d);
      const float dminw = Half(x[b].dmin);
      __m256i sumi[NA];
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) sumi[m] = _mm256_setzero_si256();
      MOETIER_UNROLL
      for (int c = 0; c < 4; ++c) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 32 * c));
        const __m256i lo = _mm256_and_si256(q, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        const __m256i s_lo = _mm256_shuffle_epi8(sc16, BroadcastWordMask(2 * c));
        const __m256i s_hi = _mm256_shuffle_epi8(sc16, BroadcastWordMask(2 * c + 1));
        MOETIER_UNROLL
        for (int m = 0; m < NA; ++m) {
          const int8_t* a = rows[m].qs + b * kQK_K + 64 * c;
          const __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(a));
          const __m256i a1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + 32));
          const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), s_lo);
          const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), s_hi);
          sumi[m] = _mm256_add_epi32(sumi[m], _mm256_add_epi32(p0, p1));
        }
      }
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const float da = rows[m].d[b];
        const __m256i bs =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[m].bsums + b * 16));
        acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da), _mm256_cvtepi32_ps(sumi[m]), acc[m]);
        accm[m] = _mm256_fmadd_ps(_mm256_set1_ps(dminw * da),
                                  _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins)), accm[m]);
      }
    }
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = HsumPs(_mm256_sub_ps(acc[m], accm[m]));
  }
}

template <int NA>
void GemmQ5KNA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
               size_t act_stride, float* out, int64_t ldo) {
  const int64_t nb = k / kQK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i bit16 = _mm256_set1_epi8(0x10);
  Q8KRow rows[NA];
  MOETIER_UNROLL
  for (int m = 0; m < NA; ++m) rows[m] = Q8KRowAt(act + m * act_stride, k);
  for (int64_t r = 0; r < n_rows; ++r) {
    const BlockQ5K* x = reinterpret_cast<const BlockQ5K*>(w + r * w_stride);
    __m256 acc[NA], accm[NA];
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) {
      acc[m] = _mm256_setzero_ps();
      accm[m] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
      PrefetchAhead(x + b, sizeof(BlockQ5K));
      const __m128i scmn = UnpackScalesMins(x[b].scales);
      const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scmn));
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scmn, scmn));
      const float dw = Half(x[b].d);
      const float dminw = Half(x[b].dmin);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qh));
      __m256i sumi[NA];
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) sumi[m] = _mm256_setzero_si256();
      MOETIER_UNROLL
      for (int c = 0; c < 4; ++c) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 32 * c));
        // Bit 2c of qh[l] is the 5th bit of element l of sub-block 2c, bit
        // 2c+1 that of sub-block 2c+1: shift it to bit 4 of each byte.
        const __m256i h_lo =
            _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c), 4), bit16);
        const __m256i h_hi =
            _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c + 1), 4), bit16);
        const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), h_lo);
        const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h_hi);
        const __m256i s_lo = _mm256_shuffle_epi8(sc16, BroadcastWordMask(2 * c));
        const __m256i s_hi = _mm256_shuffle_epi8(sc16, BroadcastWordMask(2 * c + 1));
        MOETIER_UNROLL
        for (int m = 0; m < NA; ++m) {
          const int8_t* a = rows[m].qs + b * kQK_K + 64 * c;
          const __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(a));
          const __m256i a1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + 32));
          const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), s_lo);
          const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), s_hi);
          sumi[m] = _mm256_add_epi32(sumi[m], _mm256_add_epi32(p0, p1));
        }
      }
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const float da = rows[m].d[b];
        const __m256i bs =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[m].bsums + b * 16));
        acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da), _mm256_cvtepi32_ps(sumi[m]), acc[m]);
        accm[m] = _mm256_fmadd_ps(_mm256_set1_ps(dminw * da),
                                  _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins)), accm[m]);
      }
    }
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = HsumPs(_mm256_sub_ps(acc[m], accm[m]));
  }
}

template <int NA>
void GemmQ6KNA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
               size_t act_stride, float* out, int64_t ldo) {
  const int64_t nb = k / kQK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x03);
  Q8KRow rows[NA];
  MOETIER_UNROLL
  for (int m = 0; m < NA; ++m) rows[m] = Q8KRowAt(act + m * act_stride, k);
  for (int64_t r = 0; r < n_rows; ++r) {
    const BlockQ6K* x = reinterpret_cast<const BlockQ6K*>(w + r * w_stride);
    __m256 acc[NA];
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      PrefetchAhead(x + b, sizeof(BlockQ6K));
      const __m256i sc16 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales)));
      const float dw = Half(x[b].d);
      __m256i sumi[NA];
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        // The -32 offset: -32 * sum_g scale_g * bsum_g.
        const __m256i bs =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[m].bsums + b * 16));
        sumi[m] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                   _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5));
      }
      MOETIER_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m256i q4a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].ql + 64 * h));
        const __m256i q4b =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qh + 32 * h));
        __m256i q6[4];
        q6[0] = _mm256_or_si256(_mm256_and_si256(q4a, m4),
                                _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
        q6[1] =
            _mm256_or_si256(_mm256_and_si256(q4b, m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
        q6[2] =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4a, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
        q6[3] =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4b, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
        MOETIER_UNROLL
        for (int s = 0; s < 4; ++s) {
          // Sub-block s covers 16-element groups 8h+2s (low lane) and 8h+2s+1.
          const int g = 8 * h + 2 * s;
          const __m256i scale =
              _mm256_set_m128i(_mm_set1_epi16(x[b].scales[g + 1]), _mm_set1_epi16(x[b].scales[g]));
          MOETIER_UNROLL
          for (int m = 0; m < NA; ++m) {
            const __m256i a = _mm256_load_si256(
                reinterpret_cast<const __m256i*>(rows[m].qs + b * kQK_K + 128 * h + 32 * s));
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q6[s], a), scale);
            sumi[m] = _mm256_add_epi32(sumi[m], p);
          }
        }
      }
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        acc[m] =
            _mm256_fmadd_ps(_mm256_set1_ps(dw * rows[m].d[b]), _mm256_cvtepi32_ps(sumi[m]), acc[m]);
      }
    }
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = HsumPs(acc[m]);
  }
}

// ---------------------------------------------------------------- dispatch

template <template <int> class K>
void GemmTileDispatch(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows,
                      const uint8_t* act, size_t act_stride, int n_act, float* out, int64_t ldo) {
  using Fn =
      void (*)(int64_t, const uint8_t*, size_t, int64_t, const uint8_t*, size_t, float*, int64_t);
  static constexpr Fn kByRows[4] = {K<1>::Run, K<2>::Run, K<3>::Run, K<4>::Run};
  // 16 vector registers hold the accumulators of at most 4 rows.
  while (n_act > 0) {
    const int na = n_act < 4 ? n_act : 4;
    kByRows[na - 1](k, w, w_stride, n_rows, act, act_stride, out, ldo);
    n_act -= na;
    act += na * act_stride;
    out += na * ldo;
  }
}

#define MOETIER_GEMM_KERNEL(Name, Fn)                                                 \
  template <int NA>                                                                   \
  struct Name {                                                                       \
    static void Run(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows,     \
                    const uint8_t* act, size_t act_stride, float* out, int64_t ldo) { \
      Fn(k, w, w_stride, n_rows, act, act_stride, out, ldo);                          \
    }                                                                                 \
  };

MOETIER_GEMM_KERNEL(KF32, (GemmFloatNA<NA, LoadF32, LoadF32One, 4>))
MOETIER_GEMM_KERNEL(KF16, (GemmFloatNA<NA, LoadF16, LoadF16One, 2>))
MOETIER_GEMM_KERNEL(KBf16, (GemmFloatNA<NA, LoadBf16, LoadBf16One, 2>))
MOETIER_GEMM_KERNEL(KQ8_0, GemmQ8_0NA<NA>)
MOETIER_GEMM_KERNEL(KQ4_0, GemmQ4_0NA<NA>)
MOETIER_GEMM_KERNEL(KQ4K, GemmQ4KNA<NA>)
MOETIER_GEMM_KERNEL(KQ5K, GemmQ5KNA<NA>)
MOETIER_GEMM_KERNEL(KQ6K, GemmQ6KNA<NA>)
MOETIER_GEMM_KERNEL(KQ4_1, (low_bit_x86::GemmBlock32NA<low_bit_x86::Q4_1Weights, NA>))
MOETIER_GEMM_KERNEL(KQ5_0, (low_bit_x86::GemmBlock32NA<low_bit_x86::Q5_0Weights, NA>))
MOETIER_GEMM_KERNEL(KQ5_1, (low_bit_x86::GemmBlock32NA<low_bit_x86::Q5_1Weights, NA>))
MOETIER_GEMM_KERNEL(KIQ4NL, (low_bit_x86::GemmBlock32NA<low_bit_x86::IQ4NLWeights, NA>))
MOETIER_GEMM_KERNEL(KMXFP4, (low_bit_x86::GemmBlock32NA<low_bit_x86::MXFP4Weights, NA>))
MOETIER_GEMM_KERNEL(KQ2K, (low_bit_x86::GemmQ23KNA<false, NA>))
MOETIER_GEMM_KERNEL(KQ3K, (low_bit_x86::GemmQ23KNA<true, NA>))
MOETIER_GEMM_KERNEL(KIQ4XS, low_bit_x86::GemmIQ4XSNA<NA>)
#undef MOETIER_GEMM_KERNEL

float DotF32(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 8), _mm256_loadu_ps(b + j + 8), acc1);
  }
  float sum = HsumPs(_mm256_add_ps(acc0, acc1));
  for (; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

void AxpyF32(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(y + j, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + j), _mm256_loadu_ps(y + j)));
  }
  for (; j < n; ++j) y[j] += a * x[j];
}

void ScaleF32(float a, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, _mm256_mul_ps(va, _mm256_loadu_ps(y + j)));
  for (; j < n; ++j) y[j] *= a;
}

float SumF32(const float* x, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    MOETIER_UNROLL
    for (int i = 0; i < 4; ++i) acc[i] = _mm256_add_ps(acc[i], _mm256_loadu_ps(x + j + 8 * i));
  }
  float sum = HsumPs(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; j < n; ++j) sum += x[j];
  return sum;
}

// e^x for x <= 0 (softmax inputs after subtracting the maximum), within 2
// ulp: x = n ln2 + r with |r| <= ln2/2, a degree-6 Taylor polynomial for
// e^r, then 2^n built in the exponent field. Inputs are clamped at -87, so
// 2^n stays a normal float.
inline __m256 ExpNonPositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

void SoftmaxF32(float* s, int64_t n) {
  float max = -__builtin_inff();
  for (int64_t t = 0; t < n; ++t) max = s[t] > max ? s[t] : max;
  const __m256 vmax = _mm256_set1_ps(max);
  __m256 vsum = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m256 e = ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(s + t), vmax));
    vsum = _mm256_add_ps(vsum, e);
    _mm256_storeu_ps(s + t, e);
  }
  float sum = HsumPs(vsum);
  if (t < n) {
    float tail[8] = {};
    for (int64_t j = t; j < n; ++j) tail[j - t] = s[j];
    _mm256_storeu_ps(tail, ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(tail), vmax)));
    for (int64_t j = t; j < n; ++j) {
      s[j] = tail[j - t];
      sum += tail[j - t];
    }
  }
  const float inv = 1.0f / sum;
  for (t = 0; t < n; ++t) s[t] *= inv;
}

// Attention with head_dim = 8 * kVecs, in blocks of 16 KiB of keys or
// values that every query head of the group passes over while they are in
// L1 (see the AVX-512 version).
template <int kVecs>
void AttendVecs(const float* q, int n_q, const float* k, const float* v, int64_t kv_stride,
                int64_t n_kv, float scale, float* scores, float* out, const float* sinks) {
  // A head's scores are followed by its sink, where it has one.
  const int64_t stride = sinks != nullptr ? n_kv + 1 : n_kv;
  constexpr int64_t kBlock = 16 * 1024 / (32 * kVecs);
  for (int64_t t0 = 0; t0 < n_kv; t0 += kBlock) {
    const int64_t t1 = t0 + kBlock < n_kv ? t0 + kBlock : n_kv;
    for (int i = 0; i < n_q; ++i) {
      const float* qi = q + i * 8 * kVecs;
      float* s = scores + i * stride;
      for (int64_t t = t0; t < t1; ++t) {
        const float* kt = k + t * kv_stride;
        __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(qi), _mm256_loadu_ps(kt));
        MOETIER_UNROLL
        for (int j = 1; j < kVecs; ++j) {
          acc = _mm256_fmadd_ps(_mm256_loadu_ps(qi + 8 * j), _mm256_loadu_ps(kt + 8 * j), acc);
        }
        s[t] = scale * HsumPs(acc);
      }
    }
  }
  // Softmax of each head's scores, normalized in place.
  for (int i = 0; i < n_q; ++i) {
    float* s = scores + i * stride;
    if (sinks != nullptr) s[n_kv] = sinks[i];
    SoftmaxF32(s, stride);
  }
  // At most 8 output vectors per pass, so that the accumulators stay in the
  // 16 registers.
  constexpr int kChunk = kVecs < 8 ? kVecs : 8;
  for (int64_t t0 = 0; t0 < n_kv; t0 += kBlock) {
    const int64_t t1 = t0 + kBlock < n_kv ? t0 + kBlock : n_kv;
    for (int i = 0; i < n_q; ++i) {
      const float* s = scores + i * stride;
      for (int base = 0; base < kVecs; base += kChunk) {
        float* oi = out + i * 8 * kVecs + 8 * base;
        __m256 o[kChunk];
        MOETIER_UNROLL
        for (int j = 0; j < kChunk; ++j) {
          o[j] = t0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(oi + 8 * j);
        }
        for (int64_t t = t0; t < t1; ++t) {
          const float* vt = v + t * kv_stride + 8 * base;
          const __m256 p = _mm256_set1_ps(s[t]);
          MOETIER_UNROLL
          for (int j = 0; j < kChunk; ++j) {
            o[j] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + 8 * j), o[j]);
          }
        }
        MOETIER_UNROLL
        for (int j = 0; j < kChunk; ++j) _mm256_storeu_ps(oi + 8 * j, o[j]);
      }
    }
  }
}

void AttendF32(const float* q, int n_q, const float* k, const float* v, int64_t kv_stride,
               int64_t n_kv, int head_dim, float scale, float* scores, float* out,
               const float* sinks) {
  switch (head_dim) {
    case 16:
      return AttendVecs<2>(q, n_q, k, v, kv_stride, n_kv, scale, scores, out, sinks);
    case 32:
      return AttendVecs<4>(q, n_q, k, v, kv_stride, n_kv, scale, scores, out, sinks);
    case 64:
      return AttendVecs<8>(q, n_q, k, v, kv_stride, n_kv, scale, scores, out, sinks);
    case 128:
      return AttendVecs<16>(q, n_q, k, v, kv_stride, n_kv, scale, scores, out, sinks);
    case 256:
      return AttendVecs<32>(q, n_q, k, v, kv_stride, n_kv, scale, scores, out, sinks);
    default:
      return kScalarKernels.attend_f32(q, n_q, k, v, kv_stride, n_kv, head_dim, scale, scores, out,
                                       sinks);
  }
}

// Activation quantizers. They must produce the scalar quantizers' bytes
// exactly: the same d and 1/d computed in scalar float, the same products
// x * (1/d), and round-to-nearest-even (vcvtps2dq in the default rounding
// mode).
inline float AbsMax(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < n; j += 8)
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

inline __m256i QuantizeEight(const float* x, __m256 id) {
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
  return _mm256_min_epi32(_mm256_max_epi32(q, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
}

inline int32_t HsumEpi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// 32 int32 values in [-127, 127] (four vectors, in order) to 32 bytes.
inline __m256i PackBytes(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
  // packs work within 128-bit lanes; the final permute restores the order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void QuantizeQ8_0(const float* x, int64_t k, uint8_t* dst) {
  float* d8 = reinterpret_cast<float*>(dst + k);
  int32_t* nsum8 = reinterpret_cast<int32_t*>(dst + 2 * k);
  for (int64_t b = 0; b < k / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    const float amax = AbsMax(xb, kQK8_0);
    const float d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const __m256i q0 = QuantizeEight(xb, id), q1 = QuantizeEight(xb + 8, id);
    const __m256i q2 = QuantizeEight(xb + 16, id), q3 = QuantizeEight(xb + 24, id);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + b * kQK8_0), PackBytes(q0, q1, q2, q3));
    const int32_t sum =
        HsumEpi32(_mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3)));
    _mm256_storeu_ps(d8 + b * kActRepeat, _mm256_set1_ps(d));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(nsum8 + b * kActRepeat),
                        _mm256_set1_epi32(-sum));
  }
}

void QuantizeQ8K(const float* x, int64_t k, uint8_t* dst) {
  int16_t* bsums = reinterpret_cast<int16_t*>(dst + k);
  float* dd = reinterpret_cast<float*>(dst + k + k / 8);
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    const float amax = AbsMax(xb, kQK_K);
    dd[b] = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    for (int g = 0; g < kQK_K / 32; ++g) {
      const float* xg = xb + 32 * g;
      const __m256i q0 = QuantizeEight(xg, id), q1 = QuantizeEight(xg + 8, id);
      const __m256i q2 = QuantizeEight(xg + 16, id), q3 = QuantizeEight(xg + 24, id);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + b * kQK_K + 32 * g),
                          PackBytes(q0, q1, q2, q3));
      bsums[b * (kQK_K / 16) + 2 * g] = static_cast<int16_t>(HsumEpi32(_mm256_add_epi32(q0, q1)));
      bsums[b * (kQK_K / 16) + 2 * g + 1] =
          static_cast<int16_t>(HsumEpi32(_mm256_add_epi32(q2, q3)));
    }
  }
}

#undef MOETIER_UNROLL

}  // namespace

const KernelTable kAvx2Kernels = {
    .gemm_f32 = GemmTileDispatch<KF32>,
    .gemm_f16 = GemmTileDispatch<KF16>,
    .gemm_bf16 = GemmTileDispatch<KBf16>,
    .gemm_q8_0 = GemmTileDispatch<KQ8_0>,
    .gemm_q4_0 = GemmTileDispatch<KQ4_0>,
    .gemm_q4_k = GemmTileDispatch<KQ4K>,
    .gemm_q5_k = GemmTileDispatch<KQ5K>,
    .gemm_q6_k = GemmTileDispatch<KQ6K>,
    .gemm_q4_1 = GemmTileDispatch<KQ4_1>,
    .gemm_q5_0 = GemmTileDispatch<KQ5_0>,
    .gemm_q5_1 = GemmTileDispatch<KQ5_1>,
    .gemm_iq4_nl = GemmTileDispatch<KIQ4NL>,
    .gemm_mxfp4 = GemmTileDispatch<KMXFP4>,
    .gemm_q2_k = GemmTileDispatch<KQ2K>,
    .gemm_q3_k = GemmTileDispatch<KQ3K>,
    .gemm_iq4_xs = GemmTileDispatch<KIQ4XS>,
    .gemm_iq_grid = MOETIER_IQ_GRID_GEMMS,
    .quantize_q8_0 = QuantizeQ8_0,
    .quantize_q8_k = QuantizeQ8K,
    .dot_f32 = DotF32,
    .axpy_f32 = AxpyF32,
    .scale_f32 = ScaleF32,
    .sum_f32 = SumF32,
    .attend_f32 = AttendF32,
    .softmax_f32 = SoftmaxF32,
    .accumulate_kv_values = AccumulateKvValuesX86,
};

}  // namespace moetier::cpu
