// Shared by the codec translation units only; not part of the public API.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "base/check.h"
#include "gguf/tensor/quant_blocks.h"
#include "gguf/tensor/tensor_type.h"

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

// The value of largest magnitude among x[0..n) (the first of equals) and that
// magnitude; both 0 when every value is 0 (NaNs never win). The formats
// whose levels are symmetric but for one extra negative level map this
// value onto that level.
struct SignedExtreme {
  float magnitude = 0.0f;
  float value = 0.0f;
};

inline SignedExtreme FindSignedExtreme(const float* x, int n) {
  SignedExtreme e;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > e.magnitude) {
      e.magnitude = std::fabs(x[i]);
      e.value = x[i];
    }
  }
  return e;
}

// Per-type row codecs over n_blocks whole blocks. Blocks are copied in and out
// with memcpy, so rows need no particular alignment.
void DequantizeQ8_0(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ4_0(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ4_K(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ5_K(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ6_K(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ4_1(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ5_0(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ5_1(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ2_K(const void* src, float* dst, int64_t n_blocks);
void DequantizeQ3_K(const void* src, float* dst, int64_t n_blocks);
void DequantizeIQ4_NL(const void* src, float* dst, int64_t n_blocks);
void DequantizeIQ4_XS(const void* src, float* dst, int64_t n_blocks);
void DequantizeMXFP4(const void* src, float* dst, int64_t n_blocks);

void QuantizeQ8_0(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ4_0(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ4_K(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ5_K(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ6_K(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ4_1(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ5_0(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ5_1(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ2_K(const float* src, void* dst, int64_t n_blocks);
void QuantizeQ3_K(const float* src, void* dst, int64_t n_blocks);
void QuantizeIQ4_NL(const float* src, void* dst, int64_t n_blocks);
void QuantizeIQ4_XS(const float* src, void* dst, int64_t n_blocks);
void QuantizeMXFP4(const float* src, void* dst, int64_t n_blocks);

// The i-quant grid types (IsIqGridType), codec_iq_grids.cc.
void DequantizeIqGrid(TensorType type, const void* src, float* dst, int64_t n_blocks);
void QuantizeIqGrid(TensorType type, const float* src, void* dst, int64_t n_blocks);

// --- scale searches the K-quant encoders share (codec_scale_fits.cc) ---------

// A group whose values span less than this is treated as constant: its scale
// would round to a zero half anyway, and 1/range would overflow.
inline constexpr float kTinyRange = 1e-15f;

struct AffineFit {
  float scale = 0.0f;   // x ≈ scale·L + offset
  float offset = 0.0f;  // always <= 0, stored negated as the block "min"
};

// Fits the n values x ≈ scale·L + offset with L in [0, nmax] and offset <= 0,
// minimizing Σ w·(scale·L + offset − x)². Starts from the min/max mapping, then
// tries the grid iscale = (nmax + rmin + rdelta·k)/(max − min), k = 0..nstep:
// for each candidate the levels are fixed by rounding and (scale, offset) are
// solved in closed form; the best weighted error wins. n is 16 or 32.
AffineFit FitScaleOffset(const float* x, const float* w, int n, int nmax, float rmin, float rdelta,
                         int nstep);

// Fits x[0..n) ≈ scale·L with signed L in [-nmax, nmax-1], weights x², and
// returns the scale (signed; the element of largest magnitude gets a negative
// level, which uses the format's extra level −nmax). Tries iscale =
// −(nmax + 0.1k)/max for k = −9..9 and keeps the one whose least-squares scale
// explains most of Σw·x².
float FitSignedScale(const float* x, int n, int nmax);

// The half nearest `value / steps`, except that when rounding lands so far
// below that `value` would need more than `steps` (+0.5) of it, the next half
// up is taken. Only subnormal halves (super-block scales below 6.1e-5) are
// coarse enough for that; there nearest rounding would clip the largest
// sub-block, or zero a block whose values are merely small.
uint16_t SuperBlockScale(float value, float steps);

}  // namespace moetier::codec_internal
