// Rope scaling (SPEC.md §3.0, §3.0.1) from a file's rope.scaling.* keys, as
// llama.cpp reads and applies them, so that a long-context release (a
// YaRN-extended Qwen3, a linearly scaled Mixtral) gives llama.cpp's logits.
// The angles themselves are base/rope_angles.h's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "base/rope_angles.h"

namespace moetier {

// The rope.scaling.* keys of a file, as read.
struct RopeScalingKeys {
  std::string type = "none";  // rope.scaling.type: none, linear or yarn
  double factor = 0.0;        // rope.scaling.factor (or rope.scale_linear); 0: absent
  int original_context = 0;   // rope.scaling.original_context_length
  double attn_factor = 1.0;   // rope.scaling.attn_factor
};

// Command-line flags over a file's keys (llama.cpp's --rope-scaling,
// --rope-scale and --yarn-orig-ctx): each field given replaces its key.
struct RopeScalingOverride {
  std::optional<std::string> type;
  std::optional<double> factor;
  std::optional<int> original_context;

  bool given() const { return type || factor || original_context; }
};

// The keys with the override's fields in place of the file's.
RopeScalingKeys Overridden(const RopeScalingKeys& file, const RopeScalingOverride& flags);

// The context the scaling stretches the angles to: original context x
// factor for linear and YaRN with a factor above 1, else 0.
int64_t ScaledContext(const RopeScalingKeys& keys);

// The scaling the keys ask for, with llama.cpp's float arithmetic for the
// ramp and the magnitude. Errors name the offending key (`key_prefix` is
// "<arch>.rope.scaling.").
absl::StatusOr<RopeScaling> MakeRopeScaling(const RopeScalingKeys& keys, int n_rot, float freq_base,
                                            const std::string& key_prefix);

}  // namespace moetier
