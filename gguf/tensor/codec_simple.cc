// Q8_0 and Q4_0 (SPEC.md §2.3), with ggml's reference quantization rules so
// that files written here match llama-quantize's bytes for the same input.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "gguf/tensor/codec_internal.h"
#include "gguf/tensor/half.h"

namespace moetier::codec_internal {

void DequantizeQ8_0(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK8_0) {
    BlockQ8_0 block;
    std::memcpy(&block, bytes + b * sizeof(BlockQ8_0), sizeof(block));
    const float d = HalfToFloat(block.d);
    for (int e = 0; e < kQK8_0; ++e) dst[e] = d * static_cast<float>(block.qs[e]);
  }
}

void QuantizeQ8_0(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK8_0) {
    float amax = 0.0f;
    for (int e = 0; e < kQK8_0; ++e) amax = std::max(amax, std::fabs(src[e]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 block;
    block.d = FloatToHalf(d);
    // Rounds half away from zero, as ggml's reference does for this type.
    // A scale so small that 1/d overflows makes 0 * inf a NaN: level 0.
    for (int e = 0; e < kQK8_0; ++e) {
      const float r = std::round(src[e] * id);
      block.qs[e] = std::isnan(r) ? 0 : static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
    }
    std::memcpy(bytes + b * sizeof(BlockQ8_0), &block, sizeof(block));
  }
}

void DequantizeQ4_0(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  constexpr int kHalf = kQK4_0 / 2;
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK4_0) {
    BlockQ4_0 block;
    std::memcpy(&block, bytes + b * sizeof(BlockQ4_0), sizeof(block));
    const float d = HalfToFloat(block.d);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = d * static_cast<float>((block.qs[j] & 0x0F) - 8);
      dst[j + kHalf] = d * static_cast<float>((block.qs[j] >> 4) - 8);
    }
  }
}

void QuantizeQ4_0(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  constexpr int kHalf = kQK4_0 / 2;
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK4_0) {
    // The signed extreme maps to -8, the one level without a positive twin,
    // so the whole range [-8, 7] is used on the side where the extreme lies.
    float amax = 0.0f;
    float extreme = 0.0f;
    for (int e = 0; e < kQK4_0; ++e) {
      if (std::fabs(src[e]) > amax) {
        amax = std::fabs(src[e]);
        extreme = src[e];
      }
    }
    const float d = extreme / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 block;
    block.d = FloatToHalf(d);
    // x*id lies in [-8, 8]; floor(x*id + 8.5) rounds half up, capped at 15
    // (a NaN from 0 * inf, when 1/d overflows, is level 0).
    auto level = [id](float x) {
      const float l = std::floor(x * id + 8.5f);
      return std::isnan(l) ? uint8_t{0} : static_cast<uint8_t>(std::clamp(l, 0.0f, 15.0f));
    };
    for (int j = 0; j < kHalf; ++j) {
      block.qs[j] = static_cast<uint8_t>(level(src[j]) | (level(src[j + kHalf]) << 4));
    }
    std::memcpy(bytes + b * sizeof(BlockQ4_0), &block, sizeof(block));
  }
}

}  // namespace moetier::codec_internal
