// Byte layouts of the weight blocks the CPU kernels read (SPEC.md §2.2) and of
// the quantized activation rows they pair them with. Plain structs, and
// functions only with internal linkage (static): this header is included by
// translation units compiled for different instruction sets, and the
// out-of-line copies of an inline function could be merged across those
// units by the linker.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moetier::cpu {

inline constexpr int kQK8_0 = 32;  // elements per Q8_0 / Q4_0 block
inline constexpr int kQK_K = 256;  // elements per K-quant super-block

struct BlockQ8_0 {
  uint16_t d;  // binary16
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK8_0 / 2];  // element j: low nibble of qs[j]; j+16: high nibble
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];  // 8 six-bit scales and 8 six-bit mins, packed
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4K) == 144);
static_assert(offsetof(BlockQ4K, qs) == 16);

struct BlockQ5K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5K) == 176);
static_assert(offsetof(BlockQ5K, qh) == 16 && offsetof(BlockQ5K, qs) == 48);

struct BlockQ6K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6K) == 210);
static_assert(offsetof(BlockQ6K, scales) == 192 && offsetof(BlockQ6K, d) == 208);

// The types below pair with Q8_0 activations (Q4_1, Q5_0, Q5_1, IQ4_NL,
// MXFP4) or Q8_K ones (Q2_K, Q3_K, IQ4_XS); element formulas in SPEC.md §2.3.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK8_0 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit j: the fifth bit of element j
  uint8_t qs[kQK8_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK8_0 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

struct BlockIQ4NL {
  uint16_t d;
  uint8_t qs[kQK8_0 / 2];  // indices into kIq4NlValues
};
static_assert(sizeof(BlockIQ4NL) == 18);

struct BlockMXFP4 {
  uint8_t e;  // E8M0: the block's scale is 2^(e - 128) with kMxfp4Values
  uint8_t qs[kQK8_0 / 2];
};
static_assert(sizeof(BlockMXFP4) == 17);

struct BlockQ2K {
  uint8_t scales[kQK_K / 16];  // low nibble scale, high nibble min, per 16
  uint8_t qs[kQK_K / 4];       // element 128h + 32j + l: bits 2j of qs[32h + l]
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2K) == 84 && offsetof(BlockQ2K, d) == 80);

struct BlockQ3K {
  uint8_t hmask[kQK_K / 8];  // element 128h + 32j + l: bit 4h + j of hmask[l]
  uint8_t qs[kQK_K / 4];     // low two bits, as Q2_K
  uint8_t scales[12];        // 16 six-bit scales, offset by 32
  uint16_t d;
};
static_assert(sizeof(BlockQ3K) == 110 && offsetof(BlockQ3K, d) == 108);

struct BlockIQ4XS {
  uint16_t d;
  uint16_t scales_h;             // bits 2i..2i+1: high bits of group i's scale
  uint8_t scales_l[kQK_K / 64];  // nibble i % 2 of byte i / 2: low bits
  uint8_t qs[kQK_K / 2];         // 16 bytes per group of 32, as IQ4_NL
};
static_assert(sizeof(BlockIQ4XS) == 136 && offsetof(BlockIQ4XS, qs) == 8);

// The int8 levels of IQ4_NL / IQ4_XS, and of MXFP4 (E2M1 values doubled).
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// Quantized activation rows. A row of k activations is stored as parallel
// arrays (not interleaved blocks) so that SIMD loads of the int8 values are
// contiguous and aligned, and it is padded to a multiple of kActRowAlign.
//
// Q8_0 row (pairs with Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4
// weights), per 32-element block i:
//   int8_t  qs[k]             qs[32i..32i+31] = round(x / d_i), |q| <= 127
//   float   d8[k / 4]         d_i repeated 8 times (one per SIMD lane group)
//   int32_t nsum8[k / 4]      -(sum of the block's qs) repeated 8 times
// Q8_K row (pairs with Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights), per
// 256-element block i:
//   int8_t  qs[k]
//   int16_t bsums[k / 16]     sum of each 16-element group of qs
//   float   d[k / 256]
// The repeated per-block values let the kernels read a lane-wide vector with
// one load instead of broadcasting a scalar per block per row.
inline constexpr size_t kActRowAlign = 64;
inline constexpr int kActRepeat = 8;

// The three arrays of a Q8_K row of k activations.
struct Q8KRow {
  const int8_t* qs;
  const int16_t* bsums;
  const float* d;
};

static inline Q8KRow Q8KRowAt(const uint8_t* a, int64_t k) {
  return {reinterpret_cast<const int8_t*>(a), reinterpret_cast<const int16_t*>(a + k),
          reinterpret_cast<const float*>(a + k + k / 8)};
}

}  // namespace moetier::cpu
