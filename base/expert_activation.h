// The activation between an expert's gate/up products and its down product,
// one formula for the reference and the CPU kernels (MOETIER_HOST_DEVICE so
// that device code can share it; the CUDA engine does not run kSwigluOai
// yet):
//
//   kSwiglu     silu(g) * u (every architecture but gpt-oss);
//   kSwigluOai  gpt-oss's clamped variant (llama.cpp's ggml_swiglu_oai with
//               the alpha and limit its graph hard-codes):
//               g' = min(g, 7), u' = clamp(u, -7, 7),
//               g' * sigmoid(1.702 g') * (u' + 1).
#pragma once

#include <cmath>
#include <cstdint>

#include "base/host_device.h"

namespace moetier {

enum class ExpertActivation : uint8_t {
  kSwiglu,
  kSwigluOai,
};

inline constexpr float kSwigluOaiAlpha = 1.702f;
inline constexpr float kSwigluOaiLimit = 7.0f;

MOETIER_HOST_DEVICE inline float SwigluOai(float gate, float up) {
  const float g = fminf(gate, kSwigluOaiLimit);
  const float u = fminf(fmaxf(up, -kSwigluOaiLimit), kSwigluOaiLimit);
  return g / (1.0f + expf(-kSwigluOaiAlpha * g)) * (u + 1.0f);
}

}  // namespace moetier
