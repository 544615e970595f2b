// AVX-512 kernels (F, BW, VL, DQ and VNNI). Compiled with the matching -m
// flags; everything here has internal linkage and calls no inline library
// code, so nothing compiled for these instructions can leak into code that
// runs elsewhere.
//
// The integer products use VNNI: vpdpbusd sums four u8*s8 products into an
// int32 lane, and vpdpwssd then applies the per-sub-block scale while
// accumulating. Every such partial sum fits in 16 bits (at most 4 * 63 * 127),
// so the 16-bit multiply of vpdpwssd is exact when the scale vector keeps its
// upper 16 bits zero.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics build their "undefined" operands as
// self-initialized locals, which -Wuninitialized flags at every inlined use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

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

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

inline float Hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// [lo x 8 lanes, hi x 8 lanes]
inline __m512 TwoHalves(float lo, float hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(lo)), _mm256_set1_ps(hi), 1);
}

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

// ---------------------------------------------------------------- float rows

inline __m512 LoadF32(const uint8_t* w, int64_t j, __mmask16 mask) {
  return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(w) + j);
}
inline __m512 LoadF16(const uint8_t* w, int64_t j, __mmask16 mask) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, w + 2 * j));
}
inline __m512 LoadBf16(const uint8_t* w, int64_t j, __mmask16 mask) {
  const __m256i h = _mm256_maskz_loadu_epi16(mask, w + 2 * j);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <int NA, __m512 (*kLoad)(const uint8_t*, int64_t, __mmask16), int kElemBytes>
void GemmFloatNA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                 size_t act_stride, float* out, int64_t ldo) {
  const __mmask16 all = 0xFFFF;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* wrow = w + r * w_stride;
    __m512 acc0[NA], acc1[NA];
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) {
      acc0[m] = _mm512_setzero_ps();
      acc1[m] = _mm512_setzero_ps();
    }
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
      PrefetchAhead(wrow + j * kElemBytes, 32 * kElemBytes);
      const __m512 w0 = kLoad(wrow, j, all);
      const __m512 w1 = kLoad(wrow, j + 16, all);
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const float* a = reinterpret_cast<const float*>(act + m * act_stride);
        acc0[m] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(a + j), acc0[m]);
        acc1[m] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(a + j + 16), acc1[m]);
      }
    }
    for (; j < k; j += 16) {
      const int64_t left = k - j;
      const __mmask16 mask = left >= 16 ? all : static_cast<__mmask16>((1u << left) - 1u);
      const __m512 w0 = kLoad(wrow, j, mask);
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const float* a = reinterpret_cast<const float*>(act + m * act_stride);
        acc0[m] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(mask, a + j), acc0[m]);
      }
    }
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m)
      out[m * ldo + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[m], acc1[m]));
  }
}

// ---------------------------------------------------------------- Q8_0 / Q4_0

template <int NA>
void GemmQ8_0NA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                size_t act_stride, float* out, int64_t ldo) {
  const int64_t nb = k / kQK8_0;
  for (int64_t r = 0; r < n_rows; ++r) {
    const BlockQ8_0* x = reinterpret_cast<const BlockQ8_0*>(w + r * w_stride);
    __m512 acc[NA];
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) acc[m] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      PrefetchAhead(x + b, 2 * sizeof(BlockQ8_0));
      const __m512i wq = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b + 1].qs)), 1);
      // |w| as the unsigned operand; w's sign moves onto the activation.
      const __m512i wabs = _mm512_abs_epi8(wq);
      const __mmask64 neg = _mm512_movepi8_mask(wq);
      const __m512 dw = TwoHalves(Half(x[b].d), Half(x[b + 1].d));
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const uint8_t* a = act + m * act_stride;
        const __m512i aq = _mm512_load_si512(a + b * kQK8_0);
        const __m512i as = _mm512_mask_sub_epi8(aq, neg, _mm512_setzero_si512(), aq);
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wabs, as);
        const __m512 da = _mm512_loadu_ps(reinterpret_cast<const float*>(a + k) + b * kActRepeat);
        acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(p), acc[m]);
      }
    }
    float tail[NA] = {};
    if (b < nb) {
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
      const __m256i wabs = _mm256_abs_epi8(wq);
      const float dw = Half(x[b].d);
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const uint8_t* a = act + m * act_stride;
        const __m256i aq = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + b * kQK8_0));
        const __m256i p =
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), wabs, _mm256_sign_epi8(aq, wq));
        tail[m] = dw * reinterpret_cast<const float*>(a + k)[b * kActRepeat] *
                  Hsum256(_mm256_cvtepi32_ps(p));
      }
    }
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = _mm512_reduce_add_ps(acc[m]) + tail[m];
  }
}

template <int NA>
void GemmQ4_0NA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                size_t act_stride, float* out, int64_t ldo) {
  const int64_t nb = k / kQK8_0;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // Shift counts per 128-bit lane [0, 4, 0, 4]: lanes hold [q_b, q_b, q_b+1,
  // q_b+1] and become [low nibbles, high nibbles] of each block.
  const __m512i shifts = _mm512_set_epi32(0x40004, 0x40004, 0x40004, 0x40004, 0, 0, 0, 0, 0x40004,
                                          0x40004, 0x40004, 0x40004, 0, 0, 0, 0);
  const __m256i m4y = _mm256_set1_epi8(0x0F);
  for (int64_t r = 0; r < n_rows; ++r) {
    const BlockQ4_0* x = reinterpret_cast<const BlockQ4_0*>(w + r * w_stride);
    __m512 acc[NA];
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) acc[m] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      PrefetchAhead(x + b, 2 * sizeof(BlockQ4_0));
      const __m256i pair =
          _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b + 1].qs)),
                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs)));
      const __m512i pz = _mm512_castsi256_si512(pair);
      const __m512i spread = _mm512_shuffle_i64x2(pz, pz, 0x50);
      const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(spread, shifts), m4);
      const __m512 dw = TwoHalves(Half(x[b].d), Half(x[b + 1].d));
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const uint8_t* a = act + m * act_stride;
        const __m512i aq = _mm512_load_si512(a + b * kQK8_0);
        // Starting from -sum(a) in each of a block's 8 lanes subtracts the
        // 8 * sum(a) that the +8 offset of the nibbles adds.
        const __m512i nsum =
            _mm512_loadu_si512(reinterpret_cast<const int32_t*>(a + 2 * k) + b * kActRepeat);
        const __m512i p = _mm512_dpbusd_epi32(nsum, nib, aq);
        const __m512 da = _mm512_loadu_ps(reinterpret_cast<const float*>(a + k) + b * kActRepeat);
        acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(p), acc[m]);
      }
    }
    float tail[NA] = {};
    if (b < nb) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs));
      const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4y);
      const float dw = Half(x[b].d);
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const uint8_t* a = act + m * act_stride;
        const __m256i aq = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + b * kQK8_0));
        const __m256i nsum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
            reinterpret_cast<const int32_t*>(a + 2 * k) + b * kActRepeat));
        const __m256i p = _mm256_dpbusd_epi32(nsum, nib, aq);
        tail[m] = dw * reinterpret_cast<const float*>(a + k)[b * kActRepeat] *
                  Hsum256(_mm256_cvtepi32_ps(p));
      }
    }
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = _mm512_reduce_add_ps(acc[m]) + tail[m];
  }
}

// ---------------------------------------------------------------- K-quants

// Lane indices [2c x 8, 2c+1 x 8] that spread sub-block scales 2c, 2c+1 over
// the two 256-bit halves.
inline __m512i PairIndex(int c) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * c)),
                            _mm256_set1_epi32(2 * c + 1), 1);
}

// Q4_K and Q5_K share everything but the fifth bit.
template <int NA, bool kFiveBit>
void GemmQ45KNA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                size_t act_stride, float* out, int64_t ldo) {
  const int64_t nb = k / kQK_K;
  const size_t block_bytes = kFiveBit ? sizeof(BlockQ5K) : sizeof(BlockQ4K);
  const size_t qs_offset = kFiveBit ? offsetof(BlockQ5K, qs) : offsetof(BlockQ4K, qs);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // The 32 bytes of a chunk are broadcast to both halves; the upper half is
  // shifted down 4 bits so it yields the high nibbles.
  const __m512i nib_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  // Offsets inside an activation row (block_layouts.h).
  const uint8_t* bsums0 = act + k;
  const uint8_t* d0 = act + k + k / 8;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* wrow = w + r * w_stride;
    // One accumulator per activation row: the scales part in all 16 lanes,
    // minus the mins part in the lower 8.
    __m512 acc[NA];
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wrow + b * block_bytes;
      PrefetchAhead(blk, block_bytes);
      uint16_t d_bits, dmin_bits;
      std::memcpy(&d_bits, blk, 2);
      std::memcpy(&dmin_bits, blk + 2, 2);
      const __m128i scmn = UnpackScalesMins(blk + 4);
      const __m512i scv = _mm512_cvtepu8_epi32(scmn);  // lanes 0..7: the scales
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scmn, scmn));
      const __m512 dw = _mm512_set1_ps(Half(d_bits));
      const __m512 neg_dmin = _mm512_set1_ps(-Half(dmin_bits));
      __m512i nib[4];
      __m512i scale[4];
      MOETIER_UNROLL
      for (int c = 0; c < 4; ++c) {
        const __m512i q = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qs_offset + 32 * c)));
        nib[c] = _mm512_and_si512(_mm512_srlv_epi16(q, nib_shift), m4);
        scale[c] = _mm512_permutexvar_epi32(PairIndex(c), scv);
      }
      if constexpr (kFiveBit) {
        const __m512i qh = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + offsetof(BlockQ5K, qh))));
        const __m512i sixteen = _mm512_set1_epi8(0x10);
        MOETIER_UNROLL
        for (int c = 0; c < 4; ++c) {
          const __m512i bit = _mm512_inserti64x4(
              _mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << (2 * c)))),
              _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1))), 1);
          nib[c] = _mm512_mask_add_epi8(nib[c], _mm512_test_epi8_mask(qh, bit), nib[c], sixteen);
        }
      }
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const uint8_t* a = act + m * act_stride + b * kQK_K;
        __m512i sumi = _mm512_setzero_si512();
        MOETIER_UNROLL
        for (int c = 0; c < 4; ++c) {
          const __m512i p =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), nib[c], _mm512_load_si512(a + 64 * c));
          sumi = _mm512_dpwssd_epi32(sumi, p, scale[c]);
        }
        const __m256i bs =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums0 + m * act_stride + b * 32));
        const __m512 da = _mm512_set1_ps(reinterpret_cast<const float*>(d0 + m * act_stride)[b]);
        const __m512 minsum =
            _mm512_zextps256_ps512(_mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins)));
        acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(sumi), acc[m]);
        acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(neg_dmin, da), minsum, acc[m]);
      }
    }
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = _mm512_reduce_add_ps(acc[m]);
  }
}

template <int NA>
void GemmQ6KNA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
               size_t act_stride, float* out, int64_t ldo) {
  const int64_t nb = k / kQK_K;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m2 = _mm512_set1_epi8(0x03);
  // qh bit pairs: sub-blocks 0/1 of a half take bits 0-1 / 2-3, sub-blocks
  // 2/3 bits 4-5 / 6-7; the lower 256 bits hold the even sub-block.
  const __m512i sh01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i sh23 =
      _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(4)), _mm256_set1_epi16(6), 1);
  // Scale lanes: each 16-element group covers 4 int32 lanes.
  __m512i group_index[4];
  MOETIER_UNROLL
  for (int p = 0; p < 4; ++p) {
    group_index[p] = _mm512_set_epi32(4 * p + 3, 4 * p + 3, 4 * p + 3, 4 * p + 3, 4 * p + 2,
                                      4 * p + 2, 4 * p + 2, 4 * p + 2, 4 * p + 1, 4 * p + 1,
                                      4 * p + 1, 4 * p + 1, 4 * p, 4 * p, 4 * p, 4 * p);
  }
  Q8KRow rows[NA];
  MOETIER_UNROLL
  for (int m = 0; m < NA; ++m) rows[m] = Q8KRowAt(act + m * act_stride, k);
  for (int64_t r = 0; r < n_rows; ++r) {
    const BlockQ6K* x = reinterpret_cast<const BlockQ6K*>(w + r * w_stride);
    __m512 acc[NA];
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      PrefetchAhead(x + b, sizeof(BlockQ6K));
      const __m256i sc16 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales)));
      // Signed scales with the upper 16 bits of each lane zero (see top).
      const __m512i scv = _mm512_cvtepu16_epi32(sc16);
      const float dw = Half(x[b].d);
      __m512i sumi[NA];
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        const __m256i bs =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[m].bsums + b * 16));
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
        sumi[m] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), offset));
      }
      MOETIER_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m512i q4 = _mm512_loadu_si512(x[b].ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qh + 32 * h)));
        const __m512i q01 = _mm512_or_si512(
            _mm512_and_si512(q4, m4),
            _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh01), m2), 4));
        const __m512i q23 = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16(q4, 4), m4),
            _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh23), m2), 4));
        const __m512i s01 = _mm512_permutexvar_epi32(group_index[2 * h], scv);
        const __m512i s23 = _mm512_permutexvar_epi32(group_index[2 * h + 1], scv);
        MOETIER_UNROLL
        for (int m = 0; m < NA; ++m) {
          const int8_t* a = rows[m].qs + b * kQK_K + 128 * h;
          const __m512i p01 =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), q01, _mm512_load_si512(a));
          const __m512i p23 =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), q23, _mm512_load_si512(a + 64));
          sumi[m] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sumi[m], p01, s01), p23, s23);
        }
      }
      MOETIER_UNROLL
      for (int m = 0; m < NA; ++m) {
        acc[m] =
            _mm512_fmadd_ps(_mm512_set1_ps(dw * rows[m].d[b]), _mm512_cvtepi32_ps(sumi[m]), acc[m]);
      }
    }
    MOETIER_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = _mm512_reduce_add_ps(acc[m]);
  }
}

// ---------------------------------------------------------------- dispatch

template <template <int> class K>
void GemmTileDispatch(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows,
                      const uint8_t* act, size_t act_stride, int n_act, float* out, int64_t ldo) {
  using Fn =
      void (*)(int64_t, const uint8_t*, size_t, int64_t, const uint8_t*, size_t, float*, int64_t);
  static constexpr Fn kByRows[kMaxActTile] = {K<1>::Run, K<2>::Run, K<3>::Run, K<4>::Run,
                                              K<5>::Run, K<6>::Run, K<7>::Run, K<8>::Run};
  kByRows[n_act - 1](k, w, w_stride, n_rows, act, act_stride, out, ldo);
}

#define MOETIER_GEMM_KERNEL(Name, Fn)                                                 \
  template <int NA>                                                                   \
  struct Name {                                                                       \
    static void Run(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows,     \
                    const uint8_t* act, size_t act_stride, float* out, int64_t ldo) { \
      Fn(k, w, w_stride, n_rows, act, act_stride, out, ldo);                          \
    }                                                                                 \
  };

MOETIER_GEMM_KERNEL(KF32, (GemmFloatNA<NA, LoadF32, 4>))
MOETIER_GEMM_KERNEL(KF16, (GemmFloatNA<NA, LoadF16, 2>))
MOETIER_GEMM_KERNEL(KBf16, (GemmFloatNA<NA, LoadBf16, 2>))
MOETIER_GEMM_KERNEL(KQ8_0, GemmQ8_0NA<NA>)
MOETIER_GEMM_KERNEL(KQ4_0, GemmQ4_0NA<NA>)
MOETIER_GEMM_KERNEL(KQ4K, (GemmQ45KNA<NA, false>))
MOETIER_GEMM_KERNEL(KQ5K, (GemmQ45KNA<NA, true>))
MOETIER_GEMM_KERNEL(KQ6K, GemmQ6KNA<NA>)
MOETIER_GEMM_KERNEL(KQ4_1, (low_bit_x86::GemmBlock32x2NA<low_bit_x86::Q4_1Weights, NA>))
MOETIER_GEMM_KERNEL(KQ5_0, (low_bit_x86::GemmBlock32x2NA<low_bit_x86::Q5_0Weights, NA>))
MOETIER_GEMM_KERNEL(KQ5_1, (low_bit_x86::GemmBlock32x2NA<low_bit_x86::Q5_1Weights, NA>))
MOETIER_GEMM_KERNEL(KIQ4NL, (low_bit_x86::GemmBlock32x2NA<low_bit_x86::IQ4NLWeights, NA>))
MOETIER_GEMM_KERNEL(KMXFP4, (low_bit_x86::GemmBlock32x2NA<low_bit_x86::MXFP4Weights, NA>))
MOETIER_GEMM_KERNEL(KQ2K, (low_bit_x86::GemmQ23Kx2NA<false, NA>))
MOETIER_GEMM_KERNEL(KQ3K, (low_bit_x86::GemmQ23Kx2NA<true, NA>))
MOETIER_GEMM_KERNEL(KIQ4XS, low_bit_x86::GemmIQ4XSNA<NA>)
#undef MOETIER_GEMM_KERNEL

float DotF32(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + j), _mm512_loadu_ps(b + j), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + j + 16), _mm512_loadu_ps(b + j + 16), acc1);
  }
  for (; j < n; j += 16) {
    const int64_t left = n - j;
    const __mmask16 mask = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1u);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a + j), _mm512_maskz_loadu_ps(mask, b + j),
                           acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void AxpyF32(float a, const float* x, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t left = n - j;
    const __mmask16 mask = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1u);
    const __m512 v =
        _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(mask, x + j), _mm512_maskz_loadu_ps(mask, y + j));
    _mm512_mask_storeu_ps(y + j, mask, v);
  }
}

void ScaleF32(float a, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t left = n - j;
    const __mmask16 mask = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1u);
    _mm512_mask_storeu_ps(y + j, mask, _mm512_mul_ps(va, _mm512_maskz_loadu_ps(mask, y + j)));
  }
}

float SumF32(const float* x, int64_t n) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    MOETIER_UNROLL
    for (int i = 0; i < 4; ++i) acc[i] = _mm512_add_ps(acc[i], _mm512_loadu_ps(x + j + 16 * i));
  }
  for (; j < n; j += 16) {
    const int64_t left = n - j;
    const __mmask16 mask = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1u);
    acc[0] = _mm512_add_ps(acc[0], _mm512_maskz_loadu_ps(mask, x + j));
  }
  return _mm512_reduce_add_ps(
      _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

// e^x for x <= 0 (softmax inputs after subtracting the maximum), within 2
// ulp: x = n ln2 + r with |r| <= ln2/2, a degree-6 Taylor polynomial for
// e^r, then scaling by 2^n. Inputs below -87 give results below 2^-125.
inline __m512 ExpNonPositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// The sums of the 16 lanes of a, b, c and d, as one 4-lane vector.
inline __m128 Sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // Halves: [a_lo + a_hi | b_lo + b_hi] in 256-bit halves, then quarters.
  const __m512 ab =
      _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd =
      _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  // 128-bit lane i now holds 4 partial sums of a, b, c, d respectively.
  __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
  q = _mm512_add_ps(q, _mm512_permute_ps(q, 0x4E));
  q = _mm512_add_ps(q, _mm512_permute_ps(q, 0xB1));
  // Element 0 of each 128-bit lane.
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), q));
}

// Masked 16-lane access to the tail of an array of n floats.
inline __mmask16 TailMask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

void SoftmaxF32(float* s, int64_t n) {
  __m512 vmax = _mm512_set1_ps(-__builtin_inff());
  for (int64_t t = 0; t < n; t += 16) {
    const __mmask16 mask = TailMask(n - t);
    vmax = _mm512_mask_max_ps(vmax, mask, vmax, _mm512_maskz_loadu_ps(mask, s + t));
  }
  const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t t = 0; t < n; t += 16) {
    const __mmask16 mask = TailMask(n - t);
    const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + t), max));
    vsum = _mm512_mask_add_ps(vsum, mask, vsum, e);
    _mm512_mask_storeu_ps(s + t, mask, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  for (int64_t t = 0; t < n; t += 16) {
    const __mmask16 mask = TailMask(n - t);
    _mm512_mask_storeu_ps(s + t, mask, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, s + t), inv));
  }
}

// Attention with head_dim = 16 * kVecs. The positions are taken in blocks of
// 16 KiB of keys (or values), and every query head of the group passes over a
// block while it is in L1, so the cache is read from memory once per group
// rather than once per head. A head's q row, or its running output, stays in
// registers while it passes over a block.
template <int kVecs>
void AttendVecs(const float* q, int n_q, const float* k, const float* v, int64_t kv_stride,
                int64_t n_kv, float scale, float* scores, float* out, const float* sinks) {
  // A head's scores are followed by its sink, where it has one.
  const int64_t stride = sinks != nullptr ? n_kv + 1 : n_kv;
  constexpr int64_t kBlock = 16 * 1024 / (64 * kVecs);
  for (int64_t t0 = 0; t0 < n_kv; t0 += kBlock) {
    const int64_t t1 = t0 + kBlock < n_kv ? t0 + kBlock : n_kv;
    for (int i = 0; i < n_q; ++i) {
      __m512 qi[kVecs];
      MOETIER_UNROLL
      for (int j = 0; j < kVecs; ++j) qi[j] = _mm512_loadu_ps(q + i * 16 * kVecs + 16 * j);
      float* s = scores + i * stride;
      // Four positions at a time: four independent FMA chains.
      int64_t t = t0;
      for (; t + 4 <= t1; t += 4) {
        __m512 acc[4];
        MOETIER_UNROLL
        for (int u = 0; u < 4; ++u)
          acc[u] = _mm512_mul_ps(qi[0], _mm512_loadu_ps(k + (t + u) * kv_stride));
        MOETIER_UNROLL
        for (int j = 1; j < kVecs; ++j) {
          MOETIER_UNROLL
          for (int u = 0; u < 4; ++u) {
            acc[u] =
                _mm512_fmadd_ps(qi[j], _mm512_loadu_ps(k + (t + u) * kv_stride + 16 * j), acc[u]);
          }
        }
        _mm_storeu_ps(s + t, _mm_mul_ps(Sum4(acc[0], acc[1], acc[2], acc[3]), _mm_set1_ps(scale)));
      }
      for (; t < t1; ++t) {
        const float* kt = k + t * kv_stride;
        __m512 acc = _mm512_mul_ps(qi[0], _mm512_loadu_ps(kt));
        MOETIER_UNROLL
        for (int j = 1; j < kVecs; ++j) {
          acc = _mm512_fmadd_ps(qi[j], _mm512_loadu_ps(kt + 16 * j), acc);
        }
        s[t] = scale * _mm512_reduce_add_ps(acc);
      }
    }
  }
  // Softmax of each head's scores, normalized in place.
  for (int i = 0; i < n_q; ++i) {
    float* s = scores + i * stride;
    if (sinks != nullptr) s[n_kv] = sinks[i];
    SoftmaxF32(s, stride);
  }
  for (int64_t t0 = 0; t0 < n_kv; t0 += kBlock) {
    const int64_t t1 = t0 + kBlock < n_kv ? t0 + kBlock : n_kv;
    for (int i = 0; i < n_q; ++i) {
      float* oi = out + i * 16 * kVecs;
      const float* s = scores + i * stride;
      // Even and odd positions accumulate separately (two FMA chains per
      // output vector) when the registers allow it.
      constexpr int kSets = kVecs <= 8 ? 2 : 1;
      __m512 o[kSets][kVecs];
      MOETIER_UNROLL
      for (int j = 0; j < kVecs; ++j) {
        o[0][j] = t0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(oi + 16 * j);
        if constexpr (kSets == 2) o[1][j] = _mm512_setzero_ps();
      }
      int64_t t = t0;
      for (; t + kSets <= t1; t += kSets) {
        MOETIER_UNROLL
        for (int u = 0; u < kSets; ++u) {
          const float* vt = v + (t + u) * kv_stride;
          const __m512 p = _mm512_set1_ps(s[t + u]);
          MOETIER_UNROLL
          for (int j = 0; j < kVecs; ++j) {
            o[u][j] = _mm512_fmadd_ps(p, _mm512_loadu_ps(vt + 16 * j), o[u][j]);
          }
        }
      }
      for (; t < t1; ++t) {
        const float* vt = v + t * kv_stride;
        const __m512 p = _mm512_set1_ps(s[t]);
        MOETIER_UNROLL
        for (int j = 0; j < kVecs; ++j) {
          o[0][j] = _mm512_fmadd_ps(p, _mm512_loadu_ps(vt + 16 * j), o[0][j]);
        }
      }
      MOETIER_UNROLL
      for (int j = 0; j < kVecs; ++j) {
        if constexpr (kSets == 2) o[0][j] = _mm512_add_ps(o[0][j], o[1][j]);
        _mm512_storeu_ps(oi + 16 * j, o[0][j]);
      }
    }
  }
}

void AttendF32(const float* q, int n_q, const float* k, const float* v, int64_t kv_stride,
               int64_t n_kv, int head_dim, float scale, float* scores, float* out,
               const float* sinks) {
  switch (head_dim) {
    case 16:
      return AttendVecs<1>(q, n_q, k, v, kv_stride, n_kv, scale, scores, out, sinks);
    case 32:
      return AttendVecs<2>(q, n_q, k, v, kv_stride, n_kv, scale, scores, out, sinks);
    case 64:
      return AttendVecs<4>(q, n_q, k, v, kv_stride, n_kv, scale, scores, out, sinks);
    case 128:
      return AttendVecs<8>(q, n_q, k, v, kv_stride, n_kv, scale, scores, out, sinks);
    case 256:
      return AttendVecs<16>(q, n_q, k, v, kv_stride, n_kv, scale, scores, out, sinks);
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
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 m = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16)
    m = _mm512_max_ps(m, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + j)));
  return _mm512_reduce_max_ps(m);
}

inline __m512i QuantizeSixteen(const float* x, __m512 id) {
  const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), id));
  return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
}

void QuantizeQ8_0(const float* x, int64_t k, uint8_t* dst) {
  float* d8 = reinterpret_cast<float*>(dst + k);
  int32_t* nsum8 = reinterpret_cast<int32_t*>(dst + 2 * k);
  for (int64_t b = 0; b < k / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    const float amax = AbsMax(xb, kQK8_0);
    const float d = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const __m512i q0 = QuantizeSixteen(xb, id);
    const __m512i q1 = QuantizeSixteen(xb + 16, id);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + b * kQK8_0), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + b * kQK8_0 + 16), _mm512_cvtepi32_epi8(q1));
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
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
    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    for (int g = 0; g < kQK_K / 16; ++g) {
      const __m512i q = QuantizeSixteen(xb + 16 * g, id);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + b * kQK_K + 16 * g),
                       _mm512_cvtepi32_epi8(q));
      bsums[b * (kQK_K / 16) + g] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
  }
}

// The value half of stored-KV attention with the heads' outputs in
// registers: each value row's 32-value slice is loaded once and added into
// up to 8 heads (16 accumulators), where AccumulateKvValuesX86 reloads it for
// every head. The same fused multiply-adds in the same row order, so the
// results are those of AccumulateKvValuesX86 bit for bit.
template <int NQ>
void AddValueRowsToHeads(const float* const* row_values, int nr, const float* weights,
                         int64_t w_stride, int head_dim, float* out) {
  for (int j = 0; j < head_dim; j += 32) {
    __m512 acc[NQ][2];
    MOETIER_UNROLL
    for (int i = 0; i < NQ; ++i) {
      acc[i][0] = _mm512_loadu_ps(out + static_cast<int64_t>(i) * head_dim + j);
      acc[i][1] = _mm512_loadu_ps(out + static_cast<int64_t>(i) * head_dim + j + 16);
    }
    for (int r = 0; r < nr; ++r) {
      const __m512 v0 = _mm512_loadu_ps(row_values[r] + j);
      const __m512 v1 = _mm512_loadu_ps(row_values[r] + j + 16);
      MOETIER_UNROLL
      for (int i = 0; i < NQ; ++i) {
        const __m512 p = _mm512_set1_ps(weights[i * w_stride + r]);
        acc[i][0] = _mm512_fmadd_ps(p, v0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(p, v1, acc[i][1]);
      }
    }
    MOETIER_UNROLL
    for (int i = 0; i < NQ; ++i) {
      _mm512_storeu_ps(out + static_cast<int64_t>(i) * head_dim + j, acc[i][0]);
      _mm512_storeu_ps(out + static_cast<int64_t>(i) * head_dim + j + 16, acc[i][1]);
    }
  }
}

void AccumulateKvValues(TensorType type, const uint8_t* rows, int64_t row_stride, int64_t n_rows,
                        const float* weights, int64_t w_stride, int n_q, int head_dim,
                        float* out) {
  if (head_dim % 32 != 0) {
    return AccumulateKvValuesX86(type, rows, row_stride, n_rows, weights, w_stride, n_q, head_dim,
                                 out);
  }
  using AddFn = void (*)(const float* const*, int, const float*, int64_t, int, float*);
  static constexpr AddFn kByHeads[8] = {AddValueRowsToHeads<1>, AddValueRowsToHeads<2>,
                                        AddValueRowsToHeads<3>, AddValueRowsToHeads<4>,
                                        AddValueRowsToHeads<5>, AddValueRowsToHeads<6>,
                                        AddValueRowsToHeads<7>, AddValueRowsToHeads<8>};
  alignas(64) float decoded[kValueRows * kMaxKvHeadDim];
  const float* row_values[kValueRows];
  for (int64_t t0 = 0; t0 < n_rows; t0 += kValueRows) {
    const int nr = static_cast<int>(n_rows - t0 < kValueRows ? n_rows - t0 : kValueRows);
    DecodeValueRows(type, rows, row_stride, t0, nr, head_dim, decoded, row_values);
    for (int i0 = 0; i0 < n_q; i0 += 8) {
      const int heads = n_q - i0 < 8 ? n_q - i0 : 8;
      kByHeads[heads - 1](row_values, nr, weights + i0 * w_stride + t0, w_stride, head_dim,
                          out + static_cast<int64_t>(i0) * head_dim);
    }
  }
}

#undef MOETIER_UNROLL

}  // namespace

const KernelTable kAvx512Kernels = {
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
    .accumulate_kv_values = AccumulateKvValues,
};

}  // namespace moetier::cpu
