// The scale searches behind the K-quant encoders (codec_kquants.cc,
// codec_kquants_low.cc). Everything is plain float arithmetic in a fixed order,
// so it is deterministic on every instruction set.
#include <algorithm>
#include <cmath>

#include "gguf/tensor/codec_internal.h"
#include "gguf/tensor/half.h"

namespace moetier::codec_internal {
namespace {

// The candidate sweeps below sum in kLanes interleaved partial sums, combined
// in a fixed order: the compiler can then run the lanes as one vector (the
// sweeps are nearly all of a quantizer's time) while the result stays the same
// on every instruction set.
constexpr int kLanes = 8;

float SumLanes(const float* lane) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// RoundClamp as float arithmetic without branches, so it vectorizes; the same
// value for every input (NaN included: it clamps to lo).
inline float RoundClampFloat(float v, float lo, float hi) {
  float c = v >= lo ? v : lo;
  c = c > hi ? hi : c;
  return (c + 12582912.0f) - 12582912.0f;
}

// FitScaleOffset for a group size known at compile time, so that the sweeps
// unroll into whole vectors.
template <int n>
AffineFit FitScaleOffsetOf(const float* x, const float* w, int nmax, float rmin, float rdelta,
                           int nstep) {
  float lo = x[0];
  float hi = x[0];
  float sum_w = 0.0f;
  float sum_x = 0.0f;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  // The format has no positive offset: an all-positive group starts at 0.
  lo = std::min(lo, 0.0f);
  AffineFit best;
  if (hi - lo < kTinyRange) {
    best.offset = lo;
    return best;
  }

  const float range = hi - lo;
  float iscale = static_cast<float>(nmax) / range;
  best.scale = 1.0f / iscale;
  best.offset = lo;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = RoundClamp(iscale * (x[i] - lo), 0, nmax);
    const float diff = best.scale * static_cast<float>(l) + lo - x[i];
    best_error += w[i] * diff * diff;
  }

  static_assert(n % kLanes == 0);
  const float level_max = static_cast<float>(nmax);
  float trial[n];
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / range;
    float lane_l[kLanes] = {};
    float lane_l2[kLanes] = {};
    float lane_xl[kLanes] = {};
    for (int i0 = 0; i0 < n; i0 += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        const int i = i0 + j;
        const float l = RoundClampFloat(iscale * (x[i] - lo), 0.0f, level_max);
        trial[i] = l;
        lane_l[j] += w[i] * l;
        lane_l2[j] += w[i] * l * l;
        lane_xl[j] += w[i] * l * x[i];
      }
    }
    const float sum_l = SumLanes(lane_l);
    const float sum_l2 = SumLanes(lane_l2);
    const float sum_xl = SumLanes(lane_xl);
    // Normal equations of the 2-parameter weighted least squares.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0.0f)) continue;
    float scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float offset = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (offset > 0.0f) {
      // Constrained optimum on the boundary offset = 0.
      offset = 0.0f;
      scale = sum_xl / sum_l2;
    }
    float lane_error[kLanes] = {};
    for (int i0 = 0; i0 < n; i0 += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        const int i = i0 + j;
        const float diff = scale * trial[i] + offset - x[i];
        lane_error[j] += w[i] * diff * diff;
      }
    }
    const float error = SumLanes(lane_error);
    if (error < best_error) {
      best_error = error;
      best.scale = scale;
      best.offset = offset;
    }
  }
  return best;
}

}  // namespace

AffineFit FitScaleOffset(const float* x, const float* w, int n, int nmax, float rmin, float rdelta,
                         int nstep) {
  if (n == 16) return FitScaleOffsetOf<16>(x, w, nmax, rmin, rdelta, nstep);
  MOETIER_CHECK(n == 32);
  return FitScaleOffsetOf<32>(x, w, nmax, rmin, rdelta, nstep);
}

// The half nearest `value / steps`, except that when rounding lands so far
// below that `value` would need more than `steps` (+0.5) of it, the next half
// up is taken. Only subnormal halves (super-block scales below 6.1e-5) are
// coarse enough for that; there nearest rounding would clip the largest
// sub-block, or zero a block whose values are merely small.
uint16_t SuperBlockScale(float value, float steps) {
  uint16_t h = FloatToHalf(value / steps);
  if (std::fabs(value) > (steps + 0.5f) * std::fabs(HalfToFloat(h)) && (h & 0x7FFF) < 0x7BFF) ++h;
  return h;
}

float FitSignedScale(const float* x, int n, int nmax) {
  const SignedExtreme e = FindSignedExtreme(x, n);
  if (e.magnitude < kTinyRange) return 0.0f;
  const float extreme = e.value;
  // With L fixed, the best scale is Σwxl/Σwl² and the error it leaves is
  // Σwx² − (Σwxl)²/Σwl², so maximizing (Σwxl)²/Σwl² picks the best candidate.
  const float level_lo = -static_cast<float>(nmax);
  const float level_hi = static_cast<float>(nmax - 1);
  auto evaluate = [&](float iscale, float* sum_xl, float* sum_l2) {
    float lane_xl[kLanes] = {};
    float lane_l2[kLanes] = {};
    int i0 = 0;
    for (; i0 + kLanes <= n; i0 += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        const float xi = x[i0 + j];
        const float l = RoundClampFloat(iscale * xi, level_lo, level_hi);
        const float w = xi * xi;
        lane_xl[j] += w * xi * l;
        lane_l2[j] += w * l * l;
      }
    }
    for (int j = 0; i0 + j < n; ++j) {  // a tail shorter than kLanes
      const float xi = x[i0 + j];
      const float l = RoundClampFloat(iscale * xi, level_lo, level_hi);
      lane_xl[j] += xi * xi * xi * l;
      lane_l2[j] += xi * xi * l * l;
    }
    *sum_xl = SumLanes(lane_xl);
    *sum_l2 = SumLanes(lane_l2);
  };

  float iscale = -static_cast<float>(nmax) / extreme;
  float sum_xl;
  float sum_l2;
  evaluate(iscale, &sum_xl, &sum_l2);
  float scale = sum_l2 > 0.0f ? sum_xl / sum_l2 : 0.0f;
  float best = scale * sum_xl;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / extreme;
    evaluate(iscale, &sum_xl, &sum_l2);
    if (sum_l2 > 0.0f && sum_xl * sum_xl > best * sum_l2) {
      scale = sum_xl / sum_l2;
      best = scale * sum_xl;
    }
  }
  return scale;
}

}  // namespace moetier::codec_internal
