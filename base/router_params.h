// How a MoE router turns its logits into the k chosen experts and their
// mixing weights, as one description the reference, the CPU kernels and the
// CUDA kernels all read (llama.cpp's build_moe_ffn, SPEC.md §3.0):
//
//   probs     softmax over all experts, each expert's own sigmoid, or the
//             logits as they are (kSoftmaxOfChosen);
//   choice    the k largest of probs + the layer's selection bias where it
//             has one (ties to the lower id); the bias picks, it never
//             weighs;
//   weights   probs of the chosen (kSoftmaxOfChosen: their softmax),
//             divided by max(their sum, 2^-14) when renormalized, then
//             multiplied by weights_scale.
#pragma once

#include <cstdint>

namespace moetier {

enum class RouterGating : uint8_t {
  kSoftmax,  // qwen3moe, Mixtral, olmoe, qwen2moe, qwen35moe
  kSigmoid,  // glm4moe (expert_gating_func 2)
  // Top k of the raw logits, weighted by the softmax over those k alone
  // (gpt-oss; llama.cpp's SOFTMAX_WEIGHT).
  kSoftmaxOfChosen,
};

struct RouterParams {
  RouterGating gating = RouterGating::kSoftmax;
  bool renormalize = true;     // qwen3moe, Mixtral, glm4moe; not olmoe, qwen2moe
  float weights_scale = 1.0f;  // glm4moe's expert_weights_scale
};

// The floor of the renormalizing sum: the smallest normal fp16, as llama.cpp
// clamps it.
inline constexpr float kMinRouterWeightSum = 6.103515625e-5f;

}  // namespace moetier
