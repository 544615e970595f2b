#include "model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moetier {
namespace {

// ggml_rope_yarn_corr_dim: the pair index whose rotation over n_ctx_orig
// positions is `rotations` full turns.
float CorrectionDim(int n_rot, int n_ctx_orig, float rotations, float freq_base) {
  return static_cast<float>(n_rot) *
         std::log(static_cast<float>(n_ctx_orig) / (rotations * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(freq_base));
}

// YaRN's attention factor (llama.cpp get_mscale with mscale 1).
float YarnMagnitude(float factor) { return factor <= 1.0f ? 1.0f : 0.1f * std::log(factor) + 1.0f; }

}  // namespace

RopeScalingKeys Overridden(const RopeScalingKeys& file, const RopeScalingOverride& flags) {
  RopeScalingKeys keys = file;
  if (flags.type) keys.type = *flags.type;
  if (flags.factor) keys.factor = *flags.factor;
  if (flags.original_context) keys.original_context = *flags.original_context;
  return keys;
}

int64_t ScaledContext(const RopeScalingKeys& keys) {
  if ((keys.type != "linear" && keys.type != "yarn") || !(keys.factor > 1.0)) return 0;
  return static_cast<int64_t>(std::llround(keys.original_context * keys.factor));
}

absl::StatusOr<RopeScaling> MakeRopeScaling(const RopeScalingKeys& keys, int n_rot, float freq_base,
                                            const std::string& key_prefix) {
  const bool yarn = keys.type == "yarn";
  if (keys.type != "none" && keys.type != "linear" && !yarn) {
    return absl::UnimplementedError(absl::StrFormat(
        "%stype = '%s' is not supported (none, linear and yarn are)", key_prefix, keys.type));
  }
  if (!std::isfinite(keys.factor) || keys.factor < 0.0 || keys.factor > 1e6) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sfactor = %g must be positive and at most 1e6 (0: unscaled)", key_prefix, keys.factor));
  }
  if (!std::isfinite(keys.attn_factor) || keys.attn_factor <= 0.0 || keys.attn_factor > 1e3) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sattn_factor = %g must be positive and at most 1000", key_prefix, keys.attn_factor));
  }
  RopeScaling s;
  // llama.cpp: a factor of 0 means unscaled, and type none never scales.
  const float factor = keys.factor == 0.0 ? 1.0f : static_cast<float>(keys.factor);
  s.freq_scale = keys.type == "none" ? 1.0f : 1.0f / factor;
  float magnitude = 1.0f;
  if (yarn) {
    if (keys.original_context < 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%soriginal_context_length = %d must be positive for yarn", key_prefix,
                          keys.original_context));
    }
    s.ext_factor = 1.0f;
    const float low =
        std::floor(CorrectionDim(n_rot, keys.original_context, 32.0f, freq_base));  // beta_fast
    const float high =
        std::ceil(CorrectionDim(n_rot, keys.original_context, 1.0f, freq_base));  // beta_slow
    s.ramp_low = std::max(0.0f, low);
    s.ramp_high = std::min(static_cast<float>(n_rot - 1), high);
    // llama.cpp passes get_mscale / (1 + 0.1 ln factor) to the rope, which
    // multiplies by 1 + 0.1 ln(1 / freq_scale) again.
    const float inverse_scale = 1.0f / s.freq_scale;
    magnitude = YarnMagnitude(inverse_scale) * (1.0f / (1.0f + 0.1f * std::log(inverse_scale)));
    magnitude *= static_cast<float>(keys.attn_factor);
    magnitude *= 1.0f + 0.1f * std::log(inverse_scale);
  } else {
    magnitude = static_cast<float>(keys.attn_factor);
  }
  s.magnitude = magnitude;
  return s;
}

}  // namespace moetier
