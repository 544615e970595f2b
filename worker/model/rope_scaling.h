// Rope scaling (SPEC.md §3.0, §3.0.1): how a file's rope.scaling.* keys
// stretch the rotary angles past the trained context, as llama.cpp applies
// them, so that a long-context release (a YaRN-extended Qwen3, a linearly
// scaled Mixtral) gives llama.cpp's logits.
//
//   none    the plain angles pos · base^(-2i / n_rot).
//   linear  every angle divided by rope.scaling.factor.
//   yarn    pairs turning many times over the original context keep their
//           angle, pairs turning less than once are divided by the factor,
//           the pairs between blend linearly; cos and sin grow by
//           1 + 0.1 ln(factor).
//
// The angle formula is one function for the reference, the CPU and the CUDA
// kernels (MOETIER_HOST_DEVICE), so that the backends cannot drift apart.
#pragma once

#include <cmath>
#include <string>

#include "absl/status/statusor.h"
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

// The rope.scaling.* keys of a file, as read.
struct RopeScalingKeys {
  std::string type = "none";  // rope.scaling.type: none, linear or yarn
  double factor = 0.0;        // rope.scaling.factor (or rope.scale_linear); 0: absent
  int original_context = 0;   // rope.scaling.original_context_length
  double attn_factor = 1.0;   // rope.scaling.attn_factor
};

// The scaling the keys ask for, with llama.cpp's float arithmetic for the
// ramp and the magnitude. Errors name the offending key (`key_prefix` is
// "<arch>.rope.scaling.").
absl::StatusOr<RopeScaling> MakeRopeScaling(const RopeScalingKeys& keys, int n_rot, float freq_base,
                                            const std::string& key_prefix);

// The angle per position of rotated pair i (0 <= i < n_rot / 2).
MOETIER_HOST_DEVICE inline double RopePairFrequency(int i, int n_rot, double freq_base,
                                                    const RopeScaling& s) {
  const double unscaled = pow(freq_base, -2.0 * i / n_rot);
  double keep = 0.0;  // YaRN: the share of the unscaled angle
  if (s.ext_factor != 0.0f) {
    const double y = (i - static_cast<double>(s.ramp_low)) /
                     fmax(0.001, static_cast<double>(s.ramp_high) - s.ramp_low);
    keep = (1.0 - fmin(1.0, fmax(0.0, y))) * s.ext_factor;
  }
  return unscaled * (s.freq_scale * (1.0 - keep) + keep);
}

}  // namespace moetier
