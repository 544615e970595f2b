// Q4_K, Q5_K and Q6_K (SPEC.md §2.3). Quantization follows the design of these
// formats as llama-quantize applies it without an importance matrix:
//   * Q4_K/Q5_K: per 32-element sub-block, a weighted least-squares fit of
//     x ≈ scale·L + min over a sweep of candidate scales (L unsigned); then the
//     8 scales and 8 mins are themselves quantized to 6 bits against the
//     super-block's d and dmin, and the levels recomputed against those. A
//     sub-block whose scale rounds to 0 keeps its mean instead of its minimum.
//   * Q6_K: per 16-element sub-block, a signed scale chosen from a sweep around
//     max/-32 by weighted least squares; the 16 scales become int8 against d.
// Everything is plain float arithmetic in a fixed order, so it is
// deterministic.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "gguf/tensor/codec_internal.h"
#include "gguf/tensor/half.h"

namespace moetier::codec_internal {
namespace {

constexpr int kSubK45 = 32;                 // Q4_K/Q5_K sub-block
constexpr int kNumSubK45 = kQKK / kSubK45;  // 8
constexpr int kSubQ6 = 16;                  // Q6_K sub-block
constexpr int kNumSubQ6 = kQKK / kSubQ6;    // 16
constexpr int kScaleMax6Bit = 63;

// ---------------------------------------------------------------------------
// Dequantization

void DecodeK45Scales(const uint8_t* packed, float d, float dmin, float* scale, float* min) {
  for (int j = 0; j < kNumSubK45; ++j) {
    uint8_t sc;
    uint8_t m;
    GetScaleMinK4(j, packed, &sc, &m);
    scale[j] = d * static_cast<float>(sc);
    min[j] = dmin * static_cast<float>(m);
  }
}

// ---------------------------------------------------------------------------
// Q4_K / Q5_K quantization

// Inverse of GetScaleMinK4.
void PackK45Scales(const uint8_t* ls, const uint8_t* lm, uint8_t* packed) {
  for (int k = 0; k < 4; ++k) {
    packed[k] = static_cast<uint8_t>(ls[k] | ((ls[k + 4] >> 4) << 6));
    packed[k + 4] = static_cast<uint8_t>(lm[k] | ((lm[k + 4] >> 4) << 6));
    packed[k + 8] = static_cast<uint8_t>((ls[k + 4] & 0x0F) | ((lm[k + 4] & 0x0F) << 4));
  }
}

struct K45SuperBlock {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t levels[kQKK];  // 0..nmax
};

void QuantizeK45SuperBlock(const float* x, int nmax, float rmin, float rdelta, int nstep,
                           K45SuperBlock* out) {
  float scale[kNumSubK45];
  float min[kNumSubK45];  // the negated offset, >= 0
  float max_scale = 0.0f;
  float max_min = 0.0f;
  for (int j = 0; j < kNumSubK45; ++j) {
    const float* xs = x + j * kSubK45;
    // Weights favour large magnitudes, which dominate a matmul's output, while
    // the mean-square term keeps small values from being ignored.
    float sum_x2 = 0.0f;
    for (int i = 0; i < kSubK45; ++i) sum_x2 += xs[i] * xs[i];
    const float av_x = std::sqrt(sum_x2 / static_cast<float>(kSubK45));
    float w[kSubK45];
    for (int i = 0; i < kSubK45; ++i) w[i] = av_x + std::fabs(xs[i]);
    const AffineFit fit = FitScaleOffset(xs, w, kSubK45, nmax, rmin, rdelta, nstep);
    scale[j] = fit.scale;
    min[j] = -fit.offset;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, min[j]);
  }

  // The 6-bit scales and mins are quantized against d and dmin as stored
  // (rounded to halves), which matters once d is a subnormal half.
  out->d = SuperBlockScale(max_scale, kScaleMax6Bit);
  out->dmin = SuperBlockScale(max_min, kScaleMax6Bit);
  const float d = HalfToFloat(out->d);
  const float dmin = HalfToFloat(out->dmin);
  uint8_t ls[kNumSubK45];
  uint8_t lm[kNumSubK45];
  for (int j = 0; j < kNumSubK45; ++j) {
    ls[j] = static_cast<uint8_t>(d > 0.0f ? RoundClamp(scale[j] / d, 0, kScaleMax6Bit) : 0);
    float target_min = min[j];
    if (ls[j] == 0) {
      // A sub-block whose scale rounds to zero (next to an outlier, say)
      // decodes to the single value −min. Its own minimum would then be the
      // worst choice; the mean, clipped to the format's offset <= 0, is the
      // least-squares one.
      float sum = 0.0f;
      for (int i = 0; i < kSubK45; ++i) sum += x[j * kSubK45 + i];
      target_min = std::max(0.0f, -sum / static_cast<float>(kSubK45));
    }
    lm[j] = static_cast<uint8_t>(dmin > 0.0f ? RoundClamp(target_min / dmin, 0, kScaleMax6Bit) : 0);
  }
  PackK45Scales(ls, lm, out->scales);

  // Re-derive the levels against the scales as they will be decoded.
  float dec_scale[kNumSubK45];
  float dec_min[kNumSubK45];
  DecodeK45Scales(out->scales, d, dmin, dec_scale, dec_min);
  for (int j = 0; j < kNumSubK45; ++j) {
    uint8_t* levels = out->levels + j * kSubK45;
    const float* xs = x + j * kSubK45;
    if (dec_scale[j] == 0.0f) {
      std::fill(levels, levels + kSubK45, uint8_t{0});
      continue;
    }
    for (int i = 0; i < kSubK45; ++i) {
      levels[i] = static_cast<uint8_t>(RoundClamp((xs[i] + dec_min[j]) / dec_scale[j], 0, nmax));
    }
  }
}

// ---------------------------------------------------------------------------
// Q6_K quantization

}  // namespace

void DequantizeQ4_K(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQKK) {
    BlockQ4_K block;
    std::memcpy(&block, bytes + b * sizeof(BlockQ4_K), sizeof(block));
    float scale[kNumSubK45];
    float min[kNumSubK45];
    DecodeK45Scales(block.scales, HalfToFloat(block.d), HalfToFloat(block.dmin), scale, min);
    // Each 32 bytes of qs carry two sub-blocks: low nibbles, then high nibbles.
    for (int c = 0; c < kQKK / 64; ++c) {
      const uint8_t* q = block.qs + 32 * c;
      float* y = dst + 64 * c;
      const int j = 2 * c;
      for (int l = 0; l < 32; ++l) {
        y[l] = scale[j] * static_cast<float>(q[l] & 0x0F) - min[j];
        y[l + 32] = scale[j + 1] * static_cast<float>(q[l] >> 4) - min[j + 1];
      }
    }
  }
}

void DequantizeQ5_K(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQKK) {
    BlockQ5_K block;
    std::memcpy(&block, bytes + b * sizeof(BlockQ5_K), sizeof(block));
    float scale[kNumSubK45];
    float min[kNumSubK45];
    DecodeK45Scales(block.scales, HalfToFloat(block.d), HalfToFloat(block.dmin), scale, min);
    for (int c = 0; c < kQKK / 64; ++c) {
      const uint8_t* q = block.qs + 32 * c;
      float* y = dst + 64 * c;
      const int j = 2 * c;
      for (int l = 0; l < 32; ++l) {
        const int lo = (q[l] & 0x0F) | (((block.qh[l] >> j) & 1) << 4);
        const int hi = (q[l] >> 4) | (((block.qh[l] >> (j + 1)) & 1) << 4);
        y[l] = scale[j] * static_cast<float>(lo) - min[j];
        y[l + 32] = scale[j + 1] * static_cast<float>(hi) - min[j + 1];
      }
    }
  }
}

void DequantizeQ6_K(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQKK) {
    BlockQ6_K block;
    std::memcpy(&block, bytes + b * sizeof(BlockQ6_K), sizeof(block));
    const float d = HalfToFloat(block.d);
    for (int h = 0; h < kQKK / 128; ++h) {
      const uint8_t* ql = block.ql + 64 * h;
      const uint8_t* qh = block.qh + 32 * h;
      const int8_t* sc = block.scales + 8 * h;
      float* y = dst + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;  // sub-block within each 32-element quarter
        const int q0 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        // (d·scale)·q in this order, as ggml rounds it.
        y[l] = d * static_cast<float>(sc[s]) * static_cast<float>(q0);
        y[l + 32] = d * static_cast<float>(sc[s + 2]) * static_cast<float>(q1);
        y[l + 64] = d * static_cast<float>(sc[s + 4]) * static_cast<float>(q2);
        y[l + 96] = d * static_cast<float>(sc[s + 6]) * static_cast<float>(q3);
      }
    }
  }
}

void QuantizeQ4_K(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    K45SuperBlock sb;
    QuantizeK45SuperBlock(src, /*nmax=*/15, /*rmin=*/-1.0f, /*rdelta=*/0.1f, /*nstep=*/20, &sb);
    BlockQ4_K block;
    block.d = sb.d;
    block.dmin = sb.dmin;
    std::memcpy(block.scales, sb.scales, kKScaleBytes);
    for (int c = 0; c < kQKK / 64; ++c) {
      const uint8_t* levels = sb.levels + 64 * c;
      for (int l = 0; l < 32; ++l) {
        block.qs[32 * c + l] = static_cast<uint8_t>(levels[l] | (levels[l + 32] << 4));
      }
    }
    std::memcpy(bytes + b * sizeof(BlockQ4_K), &block, sizeof(block));
  }
}

void QuantizeQ5_K(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    K45SuperBlock sb;
    QuantizeK45SuperBlock(src, /*nmax=*/31, /*rmin=*/-0.5f, /*rdelta=*/0.1f, /*nstep=*/15, &sb);
    BlockQ5_K block;
    block.d = sb.d;
    block.dmin = sb.dmin;
    std::memcpy(block.scales, sb.scales, kKScaleBytes);
    std::memset(block.qh, 0, sizeof(block.qh));
    for (int c = 0; c < kQKK / 64; ++c) {
      const uint8_t* levels = sb.levels + 64 * c;
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = levels[l];
        const uint8_t hi = levels[l + 32];
        block.qs[32 * c + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
        block.qh[l] = static_cast<uint8_t>(block.qh[l] | ((lo >> 4) << (2 * c)) |
                                           ((hi >> 4) << (2 * c + 1)));
      }
    }
    std::memcpy(bytes + b * sizeof(BlockQ5_K), &block, sizeof(block));
  }
}

void QuantizeQ6_K(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  constexpr int kNmax = 32;
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    uint8_t levels[kQKK];  // 0..63, value + 32
    float scale[kNumSubQ6];
    for (int s = 0; s < kNumSubQ6; ++s) scale[s] = FitSignedScale(src + s * kSubQ6, kSubQ6, kNmax);
    const SignedExtreme extreme = FindSignedExtreme(scale, kNumSubQ6);

    BlockQ6_K block;
    if (extreme.magnitude < kTinyRange) {
      std::memset(&block, 0, sizeof(block));
      std::memcpy(bytes + b * sizeof(BlockQ6_K), &block, sizeof(block));
      continue;
    }
    // As with Q4_0, the extreme scale takes the int8 level without a twin.
    block.d = SuperBlockScale(-extreme.value, 128.0f);
    const float d = HalfToFloat(block.d);
    for (int s = 0; s < kNumSubQ6; ++s) {
      // Against d as stored, as for the Q4_K scales.
      block.scales[s] = static_cast<int8_t>(d != 0.0f ? RoundClamp(scale[s] / d, -128, 127) : 0);
      const float ds = d * static_cast<float>(block.scales[s]);
      uint8_t* lv = levels + s * kSubQ6;
      const float* xs = src + s * kSubQ6;
      if (ds == 0.0f) {
        std::fill(lv, lv + kSubQ6, static_cast<uint8_t>(kNmax));
        continue;
      }
      for (int i = 0; i < kSubQ6; ++i) {
        lv[i] = static_cast<uint8_t>(RoundClamp(xs[i] / ds, -kNmax, kNmax - 1) + kNmax);
      }
    }

    for (int h = 0; h < kQKK / 128; ++h) {
      const uint8_t* lv = levels + 128 * h;
      uint8_t* ql = block.ql + 64 * h;
      uint8_t* qh = block.qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((lv[l] & 0x0F) | ((lv[l + 64] & 0x0F) << 4));
        ql[l + 32] = static_cast<uint8_t>((lv[l + 32] & 0x0F) | ((lv[l + 96] & 0x0F) << 4));
        qh[l] = static_cast<uint8_t>((lv[l] >> 4) | ((lv[l + 32] >> 4) << 2) |
                                     ((lv[l + 64] >> 4) << 4) | ((lv[l + 96] >> 4) << 6));
      }
    }
    std::memcpy(bytes + b * sizeof(BlockQ6_K), &block, sizeof(block));
  }
}

}  // namespace moetier::codec_internal
