// The rotary angles of a head's pairs, with rope scaling (SPEC.md §3.0,
// §3.0.1), as one formula for the fp32 reference, the CPU kernels and the
// CUDA kernels (MOETIER_HOST_DEVICE), so that the backends cannot drift
// apart. worker/model/rope_scaling.h fills RopeScaling from a file's
// rope.scaling.* keys.
//
//   unscaled  pair i turns by pos · base^(-2i / n_rot).
//   linear    every angle divided by the factor (freq_scale = 1 / factor).
//   YaRN      pairs turning many times over the original context keep their
//             angle, pairs turning less than once are divided by the factor,
//             the pairs between blend linearly; cos and sin grow by
//             1 + 0.1 ln(factor) (the magnitude).
#pragma once

#include <cmath>

#include "base/host_device.h"

namespace moetier {

struct RopeScaling {
  float freq_scale = 1.0f;  // 1 / rope.scaling.factor; 1 when unscaled
  float ext_factor = 0.0f;  // YaRN: 1, its ramp applies; 0 otherwise
  // YaRN: pairs i <= ramp_low keep their angle, pairs i >= ramp_high take
  // the interpolated one (llama.cpp's "correction dims").
  float ramp_low = 0.0f;
  float ramp_high = 0.0f;
  // cos and sin are multiplied by this: YaRN's attention factor times
  // rope.scaling.attn_factor. Pairs held at position 0 (multi-section rope)
  // are multiplied too, as llama.cpp's cos(0) · magnitude does; the dims past
  // n_rot are not.
  float magnitude = 1.0f;

  bool scaled() const { return freq_scale != 1.0f || ext_factor != 0.0f || magnitude != 1.0f; }
};

// The angle per position of rotated pair i (0 <= i < n_rot / 2). A file's
// per-pair frequency factor (llama's rope_freqs.weight, 1 when it has none)
// divides the unscaled angle first, as llama.cpp's rope does.
MOETIER_HOST_DEVICE inline double RopePairFrequency(int i, int n_rot, double freq_base,
                                                    const RopeScaling& s,
                                                    float freq_factor = 1.0f) {
  const double unscaled = pow(freq_base, -2.0 * i / n_rot) / freq_factor;
  double keep = 0.0;  // YaRN: the share of the unscaled angle
  if (s.ext_factor != 0.0f) {
    const double y = (i - static_cast<double>(s.ramp_low)) /
                     fmax(0.001, static_cast<double>(s.ramp_high) - s.ramp_low);
    keep = (1.0 - fmin(1.0, fmax(0.0, y))) * s.ext_factor;
  }
  return unscaled * (s.freq_scale * (1.0 - keep) + keep);
}

}  // namespace moetier
