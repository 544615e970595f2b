// Byte layouts of the weight blocks the CPU kernels read (SPEC.md §2.2) and of
// the quantized activation rows they pair them with. Plain structs only: this
// header is included by translation units compiled for different instruction
// sets, so it must not define inline functions (their out-of-line copies
// could be merged across those units by the linker).
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

// Quantized activation rows. A row of k activations is stored as parallel
// arrays (not interleaved blocks) so that SIMD loads of the int8 values are
// contiguous and aligned, and it is padded to a multiple of kActRowAlign.
//
// Q8_0 row (pairs with Q8_0 and Q4_0 weights), per 32-element block i:
//   int8_t  qs[k]             qs[32i..32i+31] = round(x / d_i), |q| <= 127
//   float   d8[k / 4]         d_i repeated 8 times (one per SIMD lane group)
//   int32_t nsum8[k / 4]      -(sum of the block's qs) repeated 8 times
// Q8_K row (pairs with Q4_K, Q5_K, Q6_K weights), per 256-element block i:
//   int8_t  qs[k]
//   int16_t bsums[k / 16]     sum of each 16-element group of qs
//   float   d[k / 256]
// The repeated per-block values let the kernels read a lane-wide vector with
// one load instead of broadcasting a scalar per block per row.
inline constexpr size_t kActRowAlign = 64;
inline constexpr int kActRepeat = 8;

}  // namespace moetier::cpu
