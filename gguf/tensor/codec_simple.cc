// The 32-element types with a linear scale: Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1
// (SPEC.md §2.3), with ggml's reference quantization rules so that files
// written here match llama-quantize's bytes for the same input.
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
    const float d = FindSignedExtreme(src, kQK4_0).value / -8.0f;
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

namespace {

// The 5-bit values of a Q5_0 / Q5_1 block in element order: element j takes
// the low nibble of qs[j] when j < 16, the high nibble of qs[j - 16]
// otherwise, and as its fifth bit bit j of qh read as a little-endian u32.
void FiveBitValues(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  const uint32_t qh =
      static_cast<uint32_t>(qh_bytes[0]) | (static_cast<uint32_t>(qh_bytes[1]) << 8) |
      (static_cast<uint32_t>(qh_bytes[2]) << 16) | (static_cast<uint32_t>(qh_bytes[3]) << 24);
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    q[j] = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
  }
}

// Levels of an affine block, x ≈ d·L + min with L in [0, nmax]: d spans
// [min, max] (ggml's rule, rounding half up). Returns d; levels[j] set.
float AffineLevels(const float* x, int nmax, float* min_out, uint8_t* levels) {
  float lo = x[0];
  float hi = x[0];
  for (int e = 1; e < kQK4_0; ++e) {
    lo = std::min(lo, x[e]);
    hi = std::max(hi, x[e]);
  }
  const float d = (hi - lo) / static_cast<float>(nmax);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int e = 0; e < kQK4_0; ++e) {
    const float l = std::floor((x[e] - lo) * id + 0.5f);
    levels[e] = std::isnan(l) ? uint8_t{0}
                              : static_cast<uint8_t>(std::clamp(l, 0.0f, static_cast<float>(nmax)));
  }
  *min_out = lo;
  return d;
}

void PackNibbles(const uint8_t* levels, uint8_t* qs) {
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    qs[j] = static_cast<uint8_t>((levels[j] & 0x0F) | ((levels[j + 16] & 0x0F) << 4));
  }
}

void PackFifthBits(const uint8_t* levels, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < kQK4_0; ++j) bits |= static_cast<uint32_t>((levels[j] >> 4) & 1) << j;
  for (int i = 0; i < 4; ++i) qh[i] = static_cast<uint8_t>(bits >> (8 * i));
}

}  // namespace

void DequantizeQ4_1(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK4_0) {
    BlockQ4_1 block;
    std::memcpy(&block, bytes + b * sizeof(block), sizeof(block));
    const float d = HalfToFloat(block.d);
    const float m = HalfToFloat(block.m);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      dst[j] = d * static_cast<float>(block.qs[j] & 0x0F) + m;
      dst[j + 16] = d * static_cast<float>(block.qs[j] >> 4) + m;
    }
  }
}

void QuantizeQ4_1(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK4_0) {
    uint8_t levels[kQK4_0];
    float min;
    const float d = AffineLevels(src, 15, &min, levels);
    BlockQ4_1 block;
    block.d = FloatToHalf(d);
    block.m = FloatToHalf(min);
    PackNibbles(levels, block.qs);
    std::memcpy(bytes + b * sizeof(block), &block, sizeof(block));
  }
}

void DequantizeQ5_0(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK4_0) {
    BlockQ5_0 block;
    std::memcpy(&block, bytes + b * sizeof(block), sizeof(block));
    const float d = HalfToFloat(block.d);
    int q[kQK4_0];
    FiveBitValues(block.qs, block.qh, q);
    for (int j = 0; j < kQK4_0; ++j) dst[j] = d * static_cast<float>(q[j] - 16);
  }
}

void QuantizeQ5_0(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK4_0) {
    // As Q4_0: the signed extreme takes -16, the level without a twin.
    const float d = FindSignedExtreme(src, kQK4_0).value / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t levels[kQK4_0];
    for (int e = 0; e < kQK4_0; ++e) {
      const float l = std::floor(src[e] * id + 16.5f);
      levels[e] = std::isnan(l) ? uint8_t{0} : static_cast<uint8_t>(std::clamp(l, 0.0f, 31.0f));
    }
    BlockQ5_0 block;
    block.d = FloatToHalf(d);
    PackFifthBits(levels, block.qh);
    PackNibbles(levels, block.qs);
    std::memcpy(bytes + b * sizeof(block), &block, sizeof(block));
  }
}

void DequantizeQ5_1(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK4_0) {
    BlockQ5_1 block;
    std::memcpy(&block, bytes + b * sizeof(block), sizeof(block));
    const float d = HalfToFloat(block.d);
    const float m = HalfToFloat(block.m);
    int q[kQK4_0];
    FiveBitValues(block.qs, block.qh, q);
    for (int j = 0; j < kQK4_0; ++j) dst[j] = d * static_cast<float>(q[j]) + m;
  }
}

void QuantizeQ5_1(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK4_0) {
    uint8_t levels[kQK4_0];
    float min;
    const float d = AffineLevels(src, 31, &min, levels);
    BlockQ5_1 block;
    block.d = FloatToHalf(d);
    block.m = FloatToHalf(min);
    PackFifthBits(levels, block.qh);
    PackNibbles(levels, block.qs);
    std::memcpy(bytes + b * sizeof(block), &block, sizeof(block));
  }
}

}  // namespace moetier::codec_internal
