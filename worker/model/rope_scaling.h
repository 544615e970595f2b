// Rope scaling (SPEC.md §3.0, §3.0.1) from a file's rope.scaling.* keys, as
// llama.cpp reads and applies them, so that a long-context release (a
// YaRN-extended Qwen3, a linearly scaled Mixtral) gives llama.cpp's logits.
// The angles themselves are base/rope_angles.h's.
#pragma once

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

// The scaling the keys ask for, with llama.cpp's float arithmetic for the
// ramp and the magnitude. Errors name the offending key (`key_prefix` is
// "<arch>.rope.scaling.").
absl::StatusOr<RopeScaling> MakeRopeScaling(const RopeScalingKeys& keys, int n_rot, float freq_base,
                                            const std::string& key_prefix);

}  // namespace moetier
