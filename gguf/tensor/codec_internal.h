// Shared by the codec translation units only; not part of the public API.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "base/check.h"
#include "gguf/tensor/quant_blocks.h"

namespace moetier::codec_internal {

// Round half to even, like ggml's nearest_int, clamped to [lo, hi] before the
// conversion so that huge or non-finite products cannot overflow an int.
// Clamping before rounding gives the same result because lo and hi are
// integers. The rounding adds 1.5·2^23, which leaves the rounded value in the
// low mantissa bits: std::nearbyint is an out-of-line call on baseline x86-64
// and dominated quantization time. Valid while |lo|, |hi| < 2^22.
inline int RoundClamp(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;  // also catches NaN
  if (v > static_cast<float>(hi)) return hi;
  const float shifted = v + 12582912.0f;
  return std::bit_cast<int32_t>(shifted) - 0x4B400000;
}

// Per-type row codecs over n_blocks whole blocks. Blocks are copied in and out
// with memcpy, so rows need no particular alignment.
void DequantizeQ8_0(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ4_0(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ4_K(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ5_K(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ6_K(const void* src, float* dst, int64_t n_blocks);

void QuantizeQ8_0(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ4_0(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ4_K(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ5_K(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ6_K(const float* src, void* dst, int64_t n_blocks);

}  // namespace moetier::codec_internal
