// AVX2 matrix kernels for the weight types beyond the common K-quants:
// Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 against Q8_0 activation rows, and Q2_K,
// Q3_K and IQ4_XS against Q8_K rows (block_layouts.h), with integer dot
// products per block as the Q4_0 and Q4_K kernels. Included only by the x86
// kernel translation units, each of which compiles its own copy for its
// instruction set (the anonymous namespace keeps them apart) and runs them
// through its GemmTileDispatch, NA activation rows at a time.
#pragma once

#include <immintrin.h>

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/cpu/block_layouts.h"
#include "backend/cpu/stream_prefetch.h"

namespace moetier::cpu {
namespace {
namespace low_bit_x86 {

#define MOETIER_LOW_BIT_UNROLL _Pragma("GCC unroll 16")

inline float HsumF(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HalfF(uint16_t h) { return _cvtsh_ss(h); }

// 2^(e − 128), the MXFP4 block scale for the doubled E2M1 levels; e = 0 and 1
// give the subnormals 2^-128 and 2^-127.
constexpr float E8M0HalfOf(uint8_t e) {
  return std::bit_cast<float>(e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23));
}

// Every scale, so that a block's costs one load (decode reads a scale per
// 17 bytes of weights; the branch and the moves were a third of the dot).
inline constexpr std::array<float, 256> kE8M0Half = [] {
  std::array<float, 256> table{};
  for (int e = 0; e < 256; ++e) table[static_cast<size_t>(e)] = E8M0HalfOf(static_cast<uint8_t>(e));
  return table;
}();

inline float E8M0Half(uint8_t e) { return kE8M0Half[e]; }

// The 32 nibbles of a 32-element block in element order: the low nibbles of
// qs[0..15], then their high nibbles.
inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

// 0x10 in byte j where bit j of the little-endian u32 at qh is set.
inline __m256i FifthBits(const uint8_t* qh) {
  uint32_t x;
  std::memcpy(&x, qh, sizeof(x));
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)),
                          _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                            0x0101010101010101, 0x0000000000000000));
  // Byte i of each 8 has every bit but bit i set: all ones where bit i is.
  const __m256i all = _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_and_si256(_mm256_cmpeq_epi8(all, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

inline __m256i LookUp16(const int8_t* table, __m256i nibbles) {
  const __m256i t =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
  return _mm256_shuffle_epi8(t, nibbles);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
// Two 32-element blocks of 4-bit table indices as the unsigned bytes
// table[index] + offset, in element order (block 0's low nibbles, its high
// nibbles, then block 1's), from one shift, one mask and one lookup for
// both.
template <const int8_t* kTable, int kOffset>
inline __m512i LookUpPairUnsigned(const uint8_t* qs0, const uint8_t* qs1) {
  static constexpr std::array<uint8_t, 16> kUnsigned = [] {
    std::array<uint8_t, 16> t{};
    for (int i = 0; i < 16; ++i) t[static_cast<size_t>(i)] = static_cast<uint8_t>(kTable[i] + kOffset);
    return t;
  }();
  const __m256i q = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0)));
  // [q0, q1, q0 >> 4, q1 >> 4], then lanes 0, 2, 1, 3.
  __m512i n = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
  n = _mm512_and_si512(_mm512_shuffle_i64x2(n, n, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
  const __m512i table = _mm512_broadcast_i32x4(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kUnsigned.data())));
  return _mm512_shuffle_epi8(table, n);
}
#endif

// Pairwise int16 sums of w * a: unsigned weights go straight into maddubs;
// signed ones as |w| times a with w's sign. No pair exceeds 2 · 127 · 127.
template <bool kSigned>
inline __m256i PairProducts(__m256i w, __m256i a) {
  if constexpr (kSigned) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
  } else {
    return _mm256_maddubs_epi16(w, a);
  }
}

// --- 32-element blocks against Q8_0 rows -------------------------------------
// A weight format gives one block's 32 values as int8 (Values), its scale and,
// for the affine types, its offset m: y = scale · value + m.

// Unsigned: the values plus kOffset (a multiple of 8) as unsigned bytes, for
// instructions that take one operand unsigned (VNNI).
struct Q4_1Weights {
  using Block = BlockQ4_1;
  static constexpr bool kSigned = false;
  static constexpr bool kHasMin = true;
  static constexpr int kOffset = 0;
  static __m256i Values(const Block& x) { return Nibbles32(x.qs); }
  static __m256i Unsigned(const Block& x) { return Values(x); }
  static float Scale(const Block& x) { return HalfF(x.d); }
  static float Min(const Block& x) { return HalfF(x.m); }
};

struct Q5_0Weights {
  using Block = BlockQ5_0;
  static constexpr bool kSigned = true;
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 16;
  static __m256i Unsigned(const Block& x) {
    return _mm256_or_si256(Nibbles32(x.qs), FifthBits(x.qh));
  }
  static __m256i Values(const Block& x) {
    return _mm256_sub_epi8(Unsigned(x), _mm256_set1_epi8(kOffset));
  }
  static float Scale(const Block& x) { return HalfF(x.d); }
  static float Min(const Block&) { return 0.0f; }
};

struct Q5_1Weights {
  using Block = BlockQ5_1;
  static constexpr bool kSigned = false;
  static constexpr bool kHasMin = true;
  static constexpr int kOffset = 0;
  static __m256i Values(const Block& x) {
    return _mm256_or_si256(Nibbles32(x.qs), FifthBits(x.qh));
  }
  static __m256i Unsigned(const Block& x) { return Values(x); }
  static float Scale(const Block& x) { return HalfF(x.d); }
  static float Min(const Block& x) { return HalfF(x.m); }
};

struct IQ4NLWeights {
  using Block = BlockIQ4NL;
  static constexpr bool kSigned = true;
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 128;
  static __m256i Values(const Block& x) { return LookUp16(kIq4NlValues, Nibbles32(x.qs)); }
  static __m256i Unsigned(const Block& x) {  // + 128: the sign bit flipped
    return _mm256_xor_si256(Values(x), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  static float Scale(const Block& x) { return HalfF(x.d); }
  static float Min(const Block&) { return 0.0f; }
#if defined(__AVX512F__) && defined(__AVX512BW__)
  static __m512i UnsignedPair(const Block* x) {
    return LookUpPairUnsigned<kIq4NlValues, kOffset>(x[0].qs, x[1].qs);
  }
#endif
};

struct MXFP4Weights {
  using Block = BlockMXFP4;
  static constexpr bool kSigned = true;
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 16;
  static __m256i Values(const Block& x) { return LookUp16(kMxfp4Values, Nibbles32(x.qs)); }
  static __m256i Unsigned(const Block& x) {
    return _mm256_add_epi8(Values(x), _mm256_set1_epi8(kOffset));
  }
  static float Scale(const Block& x) { return E8M0Half(x.e); }
  static float Min(const Block&) { return 0.0f; }
#if defined(__AVX512F__) && defined(__AVX512BW__)
  static __m512i UnsignedPair(const Block* x) {
    return LookUpPairUnsigned<kMxfp4Values, kOffset>(x[0].qs, x[1].qs);
  }
#endif
};

template <class W, int NA>
void GemmBlock32NA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                   size_t act_stride, float* out, int64_t ldo) {
  const int64_t nb = k / kQK8_0;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* x = reinterpret_cast<const typename W::Block*>(w + r * w_stride);
    __m256 acc[NA];
    MOETIER_LOW_BIT_UNROLL
    for (int m = 0; m < NA; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      PrefetchAhead(x + b, sizeof(x[b]));
      const __m256i wq = W::Values(x[b]);
      const __m256 dw = _mm256_set1_ps(W::Scale(x[b]));
      MOETIER_LOW_BIT_UNROLL
      for (int m = 0; m < NA; ++m) {
        const uint8_t* a = act + m * act_stride;
        const __m256i aq = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + b * kQK8_0));
        const __m256 da = _mm256_loadu_ps(reinterpret_cast<const float*>(a + k) + b * kActRepeat);
        const __m256i p = _mm256_madd_epi16(PairProducts<W::kSigned>(wq, aq), ones);
        acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(p), acc[m]);
        if constexpr (W::kHasMin) {
          // m · da · Σa: each of the 8 lanes of nsum8 holds −Σa.
          const __m256i nsum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
              reinterpret_cast<const int32_t*>(a + 2 * k) + b * kActRepeat));
          const __m256 mw = _mm256_set1_ps(-0.125f * W::Min(x[b]));
          acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(mw, da), _mm256_cvtepi32_ps(nsum), acc[m]);
        }
      }
    }
    MOETIER_LOW_BIT_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = HsumF(acc[m]);
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__)
// GemmBlock32NA for the AVX-512 table: two blocks per 512-bit vector and one
// VNNI instruction per 64 products. VNNI takes the weights unsigned, so each
// block's int32 lanes start from kOffset/8 times the activation row's −Σa
// (8 lanes a block), which takes the offset back out: Σ (w + o)·a − o·Σa.
template <class W, int NA>
void GemmBlock32x2NA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows,
                     const uint8_t* act, size_t act_stride, float* out, int64_t ldo) {
  static_assert(W::kOffset % 8 == 0);
  constexpr int kOffsetShift = std::countr_zero(static_cast<unsigned>(W::kOffset / 8 + 0));
  static_assert(W::kOffset == 0 || W::kOffset / 8 == (1 << kOffsetShift));
  const int64_t nb = k / kQK8_0;
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* x = reinterpret_cast<const typename W::Block*>(w + r * w_stride);
    __m512 acc[NA];
    MOETIER_LOW_BIT_UNROLL
    for (int m = 0; m < NA; ++m) acc[m] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      PrefetchAhead(x + b, 2 * sizeof(x[b]));
      __m512i u;
      if constexpr (requires { W::UnsignedPair(x); }) {
        u = W::UnsignedPair(x + b);
      } else {
        u = _mm512_inserti64x4(_mm512_castsi256_si512(W::Unsigned(x[b])), W::Unsigned(x[b + 1]), 1);
      }
      const __m512 dw =
          _mm512_insertf32x8(_mm512_set1_ps(W::Scale(x[b])), _mm256_set1_ps(W::Scale(x[b + 1])), 1);
      MOETIER_LOW_BIT_UNROLL
      for (int m = 0; m < NA; ++m) {
        const uint8_t* a = act + m * act_stride;
        const __m512i aq = _mm512_load_si512(a + b * kQK8_0);
        const __m512 da = _mm512_loadu_ps(reinterpret_cast<const float*>(a + k) + b * kActRepeat);
        const __m512i nsum =
            _mm512_loadu_si512(reinterpret_cast<const int32_t*>(a + 2 * k) + b * kActRepeat);
        const __m512i start =
            W::kOffset == 0 ? _mm512_setzero_si512() : _mm512_slli_epi32(nsum, kOffsetShift);
        const __m512i p = _mm512_dpbusd_epi32(start, u, aq);
        acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(p), acc[m]);
        if constexpr (W::kHasMin) {
          const __m512 mw = _mm512_insertf32x8(_mm512_set1_ps(-0.125f * W::Min(x[b])),
                                               _mm256_set1_ps(-0.125f * W::Min(x[b + 1])), 1);
          acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(mw, da), _mm512_cvtepi32_ps(nsum), acc[m]);
        }
      }
    }
    float tail[NA] = {};
    if (b < nb) {  // an odd last block, at 256 bits
      const __m256i wq = W::Values(x[b]);
      MOETIER_LOW_BIT_UNROLL
      for (int m = 0; m < NA; ++m) {
        const uint8_t* a = act + m * act_stride;
        const __m256i aq = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + b * kQK8_0));
        const __m256i p = _mm256_madd_epi16(PairProducts<W::kSigned>(wq, aq), _mm256_set1_epi16(1));
        const float da = reinterpret_cast<const float*>(a + k)[b * kActRepeat];
        tail[m] = W::Scale(x[b]) * da * HsumF(_mm256_cvtepi32_ps(p));
        if constexpr (W::kHasMin) {
          const int32_t sum = -reinterpret_cast<const int32_t*>(a + 2 * k)[b * kActRepeat];
          tail[m] += W::Min(x[b]) * da * static_cast<float>(sum);
        }
      }
    }
    MOETIER_LOW_BIT_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = _mm512_reduce_add_ps(acc[m]) + tail[m];
  }
}
#endif

// --- 256-element blocks against Q8_K rows ------------------------------------

// Scales i and i + 1 of 16 int8 scales, as int16 in the low and the high
// 128-bit lane: the two 16-element sub-blocks one vector of 32 covers.
inline __m256i TwoScales(__m128i scales8, int i) {
  const __m128i pick = _mm_set_epi64x(static_cast<int64_t>((i + 1) * 0x0101010101010101ull),
                                      static_cast<int64_t>(i * 0x0101010101010101ull));
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales8, pick));
}

// The 16 six-bit Q3_K scales minus 32, as int8 (SPEC §2.3 table): low
// nibbles from bytes 0..7 (scales 0..7) and their high nibbles (8..15); bits
// 4..5 of scale 4r + k are bits 2r..2r+1 of byte 8 + k.
inline __m128i Q3Scales(const uint8_t* s) {
  uint64_t low;
  uint32_t high;
  std::memcpy(&low, s, sizeof(low));
  std::memcpy(&high, s + 8, sizeof(high));
  const __m128i v = _mm_cvtsi64_si128(static_cast<int64_t>(low));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i nibbles =
      _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
  const __m128i top = _mm_and_si128(
      _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(high)), _mm_setr_epi32(0, 2, 4, 6)),
      _mm_set1_epi8(0x03));
  return _mm_sub_epi8(_mm_or_si128(nibbles, _mm_slli_epi16(top, 4)), _mm_set1_epi8(32));
}

// A Q2_K / Q3_K block's 16 sub-block scales as int8, what multiplies its
// 16-element activation sums (Q2_K: the mins; Q3_K: the scales, for the −4
// taken back out) and that product's factor.
struct Q23Scales {
  __m128i scales8;
  __m256i mins;
  float min_unit;
};

template <bool kQ3, class Block>
inline Q23Scales Q23BlockScales(const Block& x) {
  if constexpr (kQ3) {
    const __m128i scales8 = Q3Scales(x.scales);
    return {scales8, _mm256_cvtepi8_epi16(scales8), 4.0f * HalfF(x.d)};
  } else {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    return {_mm_and_si128(packed, m4),
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4)), HalfF(x.dmin)};
  }
}

// Q2_K and Q3_K share the element order: the 32 elements 128h + 32j + l
// (l = 0..31) are bits 2j of qs[32h + l], sub-blocks 8h + 2j and 8h + 2j + 1.
// Both run unsigned: Q2_K's levels are 0..3 with a min per sub-block; Q3_K's
// q = (low + 4·high) − 4 contributes Σ s·(low + 4·high)·a − 4·Σ s·Σa, the
// second sum from the activation row's 16-element sums, like Q2_K's mins.
template <bool kQ3, int NA>
void GemmQ23KNA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                size_t act_stride, float* out, int64_t ldo) {
  using Block = std::conditional_t<kQ3, BlockQ3K, BlockQ2K>;
  const int64_t nb = k / kQK_K;
  const __m256i m2 = _mm256_set1_epi8(0x03);
  Q8KRow rows[NA];
  MOETIER_LOW_BIT_UNROLL
  for (int m = 0; m < NA; ++m) rows[m] = Q8KRowAt(act + m * act_stride, k);
  for (int64_t r = 0; r < n_rows; ++r) {
    const Block* x = reinterpret_cast<const Block*>(w + r * w_stride);
    __m256 acc[NA], accm[NA];
    MOETIER_LOW_BIT_UNROLL
    for (int m = 0; m < NA; ++m) {
      acc[m] = _mm256_setzero_ps();
      accm[m] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
      PrefetchAhead(x + b, sizeof(x[b]));
      const auto [scales8, mins, min_unit] = Q23BlockScales<kQ3>(x[b]);
      __m256i hmask = _mm256_setzero_si256();
      if constexpr (kQ3) hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].hmask));
      __m256i sumi[NA];
      MOETIER_LOW_BIT_UNROLL
      for (int m = 0; m < NA; ++m) sumi[m] = _mm256_setzero_si256();
      MOETIER_LOW_BIT_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 32 * h));
        MOETIER_LOW_BIT_UNROLL
        for (int j = 0; j < 4; ++j) {
          // 16-bit shifts, then a byte mask: bits never cross into a byte's
          // low bits from its neighbour.
          __m256i wq = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m2);
          if constexpr (kQ3) {
            const __m256i high =
                _mm256_and_si256(_mm256_srli_epi16(hmask, 4 * h + j), _mm256_set1_epi8(0x01));
            wq = _mm256_or_si256(wq, _mm256_slli_epi16(high, 2));  // 0..7
          }
          const __m256i sc = TwoScales(scales8, 8 * h + 2 * j);
          MOETIER_LOW_BIT_UNROLL
          for (int m = 0; m < NA; ++m) {
            const __m256i a = _mm256_load_si256(
                reinterpret_cast<const __m256i*>(rows[m].qs + b * kQK_K + 128 * h + 32 * j));
            sumi[m] = _mm256_add_epi32(sumi[m], _mm256_madd_epi16(PairProducts<false>(wq, a), sc));
          }
        }
      }
      const float dw = HalfF(x[b].d);
      MOETIER_LOW_BIT_UNROLL
      for (int m = 0; m < NA; ++m) {
        const float da = rows[m].d[b];
        acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da), _mm256_cvtepi32_ps(sumi[m]), acc[m]);
        const __m256i bs =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[m].bsums + b * 16));
        accm[m] = _mm256_fmadd_ps(_mm256_set1_ps(min_unit * da),
                                  _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins)), accm[m]);
      }
    }
    MOETIER_LOW_BIT_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = HsumF(_mm256_sub_ps(acc[m], accm[m]));
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
// GemmQ23KNA for the AVX-512 table: the 64 elements of j and j + 1 (same qs
// bytes, shifted two bits further; contiguous activations) per vector, with
// four sub-block scales.
template <bool kQ3, int NA>
void GemmQ23Kx2NA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                  size_t act_stride, float* out, int64_t ldo) {
  using Block = std::conditional_t<kQ3, BlockQ3K, BlockQ2K>;
  const int64_t nb = k / kQK_K;
  const __m512i m2 = _mm512_set1_epi8(0x03);
  Q8KRow rows[NA];
  MOETIER_LOW_BIT_UNROLL
  for (int m = 0; m < NA; ++m) rows[m] = Q8KRowAt(act + m * act_stride, k);
  for (int64_t r = 0; r < n_rows; ++r) {
    const Block* x = reinterpret_cast<const Block*>(w + r * w_stride);
    __m512 acc[NA];
    __m256 accm[NA];
    MOETIER_LOW_BIT_UNROLL
    for (int m = 0; m < NA; ++m) {
      acc[m] = _mm512_setzero_ps();
      accm[m] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
      PrefetchAhead(x + b, sizeof(x[b]));
      const auto [scales8, mins, min_unit] = Q23BlockScales<kQ3>(x[b]);
      const __m256i scales8x2 = _mm256_broadcastsi128_si256(scales8);
      __m512i hmask = _mm512_setzero_si512();
      if constexpr (kQ3) {
        hmask = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].hmask)));
      }
      __m512i sumi[NA];
      MOETIER_LOW_BIT_UNROLL
      for (int m = 0; m < NA; ++m) sumi[m] = _mm512_setzero_si512();
      MOETIER_LOW_BIT_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m512i q = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 32 * h)));
        MOETIER_LOW_BIT_UNROLL
        for (int j = 0; j < 4; j += 2) {
          // Low half: j, high half: j + 1 (16-bit shifts, then a byte mask).
          const __m512i shift =
              _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(2 * j)),
                                 _mm256_set1_epi16(static_cast<int16_t>(2 * j + 2)), 1);
          __m512i wq = _mm512_and_si512(_mm512_srlv_epi16(q, shift), m2);
          if constexpr (kQ3) {
            const __m512i bit =
                _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(4 * h + j)),
                                   _mm256_set1_epi16(static_cast<int16_t>(4 * h + j + 1)), 1);
            const __m512i high =
                _mm512_and_si512(_mm512_srlv_epi16(hmask, bit), _mm512_set1_epi8(0x01));
            wq = _mm512_or_si512(wq, _mm512_slli_epi16(high, 2));  // 0..7
          }
          // Sub-blocks i .. i + 3, eight int16 lanes each.
          const int i = 8 * h + 2 * j;
          const __m256i pick =
              _mm256_set_epi64x(static_cast<int64_t>((i + 3) * 0x0101010101010101ull),
                                static_cast<int64_t>((i + 2) * 0x0101010101010101ull),
                                static_cast<int64_t>((i + 1) * 0x0101010101010101ull),
                                static_cast<int64_t>(i * 0x0101010101010101ull));
          const __m512i sc = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(scales8x2, pick));
          MOETIER_LOW_BIT_UNROLL
          for (int m = 0; m < NA; ++m) {
            const __m512i a = _mm512_load_si512(rows[m].qs + b * kQK_K + 128 * h + 32 * j);
            sumi[m] = _mm512_add_epi32(sumi[m], _mm512_madd_epi16(_mm512_maddubs_epi16(wq, a), sc));
          }
        }
      }
      const float dw = HalfF(x[b].d);
      MOETIER_LOW_BIT_UNROLL
      for (int m = 0; m < NA; ++m) {
        const float da = rows[m].d[b];
        acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(dw * da), _mm512_cvtepi32_ps(sumi[m]), acc[m]);
        const __m256i bs =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[m].bsums + b * 16));
        accm[m] = _mm256_fmadd_ps(_mm256_set1_ps(min_unit * da),
                                  _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins)), accm[m]);
      }
    }
    MOETIER_LOW_BIT_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = _mm512_reduce_add_ps(acc[m]) - HsumF(accm[m]);
  }
}
#endif

template <int NA>
void GemmIQ4XSNA(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                 size_t act_stride, float* out, int64_t ldo) {
  const int64_t nb = k / kQK_K;
  Q8KRow rows[NA];
  MOETIER_LOW_BIT_UNROLL
  for (int m = 0; m < NA; ++m) rows[m] = Q8KRowAt(act + m * act_stride, k);
  for (int64_t r = 0; r < n_rows; ++r) {
    const BlockIQ4XS* x = reinterpret_cast<const BlockIQ4XS*>(w + r * w_stride);
    __m256 acc[NA];
    MOETIER_LOW_BIT_UNROLL
    for (int m = 0; m < NA; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      PrefetchAhead(x + b, sizeof(x[b]));
      __m256i sumi[NA];
      MOETIER_LOW_BIT_UNROLL
      for (int m = 0; m < NA; ++m) sumi[m] = _mm256_setzero_si256();
      MOETIER_LOW_BIT_UNROLL
      for (int g = 0; g < 8; ++g) {
        const int ls = ((x[b].scales_l[g / 2] >> (4 * (g % 2))) & 0x0F) |
                       (((x[b].scales_h >> (2 * g)) & 3) << 4);
        const __m256i sc = _mm256_set1_epi16(static_cast<int16_t>(ls - 32));
        const __m256i wq = LookUp16(kIq4NlValues, Nibbles32(x[b].qs + 16 * g));
        MOETIER_LOW_BIT_UNROLL
        for (int m = 0; m < NA; ++m) {
          const __m256i a =
              _mm256_load_si256(reinterpret_cast<const __m256i*>(rows[m].qs + b * kQK_K + 32 * g));
          sumi[m] = _mm256_add_epi32(sumi[m], _mm256_madd_epi16(PairProducts<true>(wq, a), sc));
        }
      }
      const float dw = HalfF(x[b].d);
      MOETIER_LOW_BIT_UNROLL
      for (int m = 0; m < NA; ++m) {
        acc[m] =
            _mm256_fmadd_ps(_mm256_set1_ps(dw * rows[m].d[b]), _mm256_cvtepi32_ps(sumi[m]), acc[m]);
      }
    }
    MOETIER_LOW_BIT_UNROLL
    for (int m = 0; m < NA; ++m) out[m * ldo + r] = HsumF(acc[m]);
  }
}

#undef MOETIER_LOW_BIT_UNROLL

}  // namespace low_bit_x86
}  // namespace
}  // namespace moetier::cpu
