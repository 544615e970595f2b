// Q2_K and Q3_K (SPEC.md §2.3), the 2- and 3-bit K-quants of llama.cpp's
// Q2_K and Q3_K_S/M/L mixes. Quantization follows the formats' design as
// llama-quantize applies it without an importance matrix:
//   * Q2_K: per 16-element sub-block, a least-squares fit x ≈ scale·L + min
//     (L in 0..3, weights |x|) over a sweep of candidate scales; the 16 scales
//     and 16 mins become 4-bit against d and dmin, and the levels are
//     recomputed against those. A sub-block whose scale rounds to 0 keeps its
//     mean instead of its minimum.
//   * Q3_K: per 16-element sub-block, a signed scale (L in -4..3) chosen by
//     the Q6_K sweep; the 16 scales become 6-bit (offset by 32) against d.
// ggml fits Q2_K by absolute and Q3_K by iterated squared error; these fits
// are the K-quant searches of codec_scale_fits.cc, so bytes can differ from
// llama-quantize's while decoding to the same kind of approximation.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "gguf/tensor/codec_internal.h"
#include "gguf/tensor/half.h"

namespace moetier::codec_internal {
namespace {

constexpr int kSub = 16;              // sub-block of both types
constexpr int kNumSub = kQKK / kSub;  // 16
constexpr int kScaleMax4Bit = 15;

// The two-bit planes both types share: element e = 128h + 32j + l sits in
// bits 2j of qs[32h + l].
void PackLowBits(const uint8_t* levels, uint8_t* qs) {
  for (int h = 0; h < kQKK / 128; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* lv = levels + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>((lv[0] & 3) | ((lv[32] & 3) << 2) |
                                            ((lv[64] & 3) << 4) | ((lv[96] & 3) << 6));
    }
  }
}

// The 16 six-bit Q3_K scales (SPEC.md §2.3 table), as stored (0..63).
void UnpackQ3Scales(const uint8_t* b, int* s) {
  for (int k = 0; k < 4; ++k) {
    s[k] = (b[k] & 0x0F) | ((b[8 + k] & 3) << 4);
    s[4 + k] = (b[4 + k] & 0x0F) | (((b[8 + k] >> 2) & 3) << 4);
    s[8 + k] = (b[k] >> 4) | (((b[8 + k] >> 4) & 3) << 4);
    s[12 + k] = (b[4 + k] >> 4) | (((b[8 + k] >> 6) & 3) << 4);
  }
}

void PackQ3Scales(const int* s, uint8_t* b) {
  for (int k = 0; k < 4; ++k) {
    b[k] = static_cast<uint8_t>((s[k] & 0x0F) | ((s[8 + k] & 0x0F) << 4));
    b[4 + k] = static_cast<uint8_t>((s[4 + k] & 0x0F) | ((s[12 + k] & 0x0F) << 4));
    b[8 + k] = static_cast<uint8_t>((s[k] >> 4) | ((s[4 + k] >> 4) << 2) | ((s[8 + k] >> 4) << 4) |
                                    ((s[12 + k] >> 4) << 6));
  }
}

}  // namespace

void DequantizeQ2_K(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQKK) {
    BlockQ2_K block;
    std::memcpy(&block, bytes + b * sizeof(block), sizeof(block));
    const float d = HalfToFloat(block.d);
    const float dmin = HalfToFloat(block.dmin);
    // Element 128h + 32j + l; its sub-block is 8h + 2j + l/16.
    for (int h = 0; h < kQKK / 128; ++h) {
      const uint8_t* qs = block.qs + 32 * h;
      for (int j = 0; j < 4; ++j) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = block.scales[8 * h + 2 * j + half];
          // (d·sc)·q − dmin·m, each product rounded on its own as ggml does.
          const float scale = d * static_cast<float>(sc & 0x0F);
          const float min = dmin * static_cast<float>(sc >> 4);
          float* y = dst + 128 * h + 32 * j + 16 * half;
          const uint8_t* q = qs + 16 * half;
          for (int l = 0; l < 16; ++l)
            y[l] = scale * static_cast<float>((q[l] >> (2 * j)) & 3) - min;
        }
      }
    }
  }
}

void QuantizeQ2_K(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    float scale[kNumSub];
    float min[kNumSub];  // the negated offset, >= 0
    float max_scale = 0.0f;
    float max_min = 0.0f;
    for (int s = 0; s < kNumSub; ++s) {
      const float* xs = src + kSub * s;
      float w[kSub];
      for (int i = 0; i < kSub; ++i) w[i] = std::fabs(xs[i]);
      const AffineFit fit = FitScaleOffset(xs, w, kSub, /*nmax=*/3, /*rmin=*/-0.5f,
                                           /*rdelta=*/0.1f, /*nstep=*/15);
      scale[s] = fit.scale;
      min[s] = -fit.offset;
      max_scale = std::max(max_scale, scale[s]);
      max_min = std::max(max_min, min[s]);
    }
    BlockQ2_K block;
    block.d = SuperBlockScale(max_scale, kScaleMax4Bit);
    block.dmin = SuperBlockScale(max_min, kScaleMax4Bit);
    const float d = HalfToFloat(block.d);
    const float dmin = HalfToFloat(block.dmin);
    uint8_t levels[kQKK];
    for (int s = 0; s < kNumSub; ++s) {
      const int ls = d > 0.0f ? RoundClamp(scale[s] / d, 0, kScaleMax4Bit) : 0;
      float target_min = min[s];
      if (ls == 0) {
        // As in Q4_K: a sub-block whose scale rounds to zero (next to an
        // outlier) decodes to the single value −min, so its mean, clipped to
        // the format's offset <= 0, is the least-squares choice.
        float sum = 0.0f;
        for (int i = 0; i < kSub; ++i) sum += src[kSub * s + i];
        target_min = std::max(0.0f, -sum / static_cast<float>(kSub));
      }
      const int lm = dmin > 0.0f ? RoundClamp(target_min / dmin, 0, kScaleMax4Bit) : 0;
      block.scales[s] = static_cast<uint8_t>(ls | (lm << 4));
      // Levels against the scale and min as they will be decoded.
      const float ds = d * static_cast<float>(ls);
      const float dm = dmin * static_cast<float>(lm);
      for (int i = 0; i < kSub; ++i) {
        const int e = kSub * s + i;
        levels[e] = static_cast<uint8_t>(ds > 0.0f ? RoundClamp((src[e] + dm) / ds, 0, 3) : 0);
      }
    }
    PackLowBits(levels, block.qs);
    std::memcpy(bytes + b * sizeof(block), &block, sizeof(block));
  }
}

void DequantizeQ3_K(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQKK) {
    BlockQ3_K block;
    std::memcpy(&block, bytes + b * sizeof(block), sizeof(block));
    const float d = HalfToFloat(block.d);
    int s[kNumSub];
    UnpackQ3Scales(block.scales, s);
    // Element 128h + 32j + l: sub-block 8h + 2j + l/16; its high bit is bit
    // 4h + j of hmask[l].
    for (int h = 0; h < kQKK / 128; ++h) {
      const uint8_t* qs = block.qs + 32 * h;
      for (int j = 0; j < 4; ++j) {
        const int bit = 4 * h + j;
        for (int half = 0; half < 2; ++half) {
          const float scale = d * static_cast<float>(s[8 * h + 2 * j + half] - 32);
          float* y = dst + 128 * h + 32 * j + 16 * half;
          const uint8_t* q = qs + 16 * half;
          const uint8_t* hm = block.hmask + 16 * half;
          for (int l = 0; l < 16; ++l) {
            const int low = (q[l] >> (2 * j)) & 3;
            const int high = (hm[l] >> bit) & 1;
            y[l] = scale * static_cast<float>(low - 4 + 4 * high);
          }
        }
      }
    }
  }
}

void QuantizeQ3_K(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  constexpr int kNmax = 4;
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    float scale[kNumSub];
    for (int g = 0; g < kNumSub; ++g) scale[g] = FitSignedScale(src + kSub * g, kSub, kNmax);
    const SignedExtreme extreme = FindSignedExtreme(scale, kNumSub);
    BlockQ3_K block;
    std::memset(&block, 0, sizeof(block));
    int stored[kNumSub];
    uint8_t levels[kQKK];  // 0..7, value + 4
    if (extreme.magnitude < kTinyRange) {
      // All scales decode to d·(32 − 32) = 0.
      std::fill(stored, stored + kNumSub, 32);
      std::fill(levels, levels + kQKK, static_cast<uint8_t>(kNmax));
    } else {
      // The extreme scale takes the six-bit level without a twin, −32.
      block.d = SuperBlockScale(-extreme.value, 32.0f);
      const float d = HalfToFloat(block.d);
      for (int g = 0; g < kNumSub; ++g) {
        const int l = d != 0.0f ? RoundClamp(scale[g] / d, -32, 31) : 0;
        stored[g] = l + 32;
        const float ds = d * static_cast<float>(l);
        for (int i = 0; i < kSub; ++i) {
          const int e = kSub * g + i;
          levels[e] = static_cast<uint8_t>(
              (ds != 0.0f ? RoundClamp(src[e] / ds, -kNmax, kNmax - 1) : 0) + kNmax);
        }
      }
    }
    PackQ3Scales(stored, block.scales);
    // A level of 4 or more keeps its high bit set and its low two bits as is;
    // below 4 the bit is clear and the decoder subtracts 4.
    for (int e = 0; e < kQKK; ++e) {
      if (levels[e] >= 4) {
        block.hmask[e % 32] = static_cast<uint8_t>(block.hmask[e % 32] | (1 << (e / 32)));
        levels[e] = static_cast<uint8_t>(levels[e] - 4);
      }
    }
    PackLowBits(levels, block.qs);
    std::memcpy(bytes + b * sizeof(block), &block, sizeof(block));
  }
}

}  // namespace moetier::codec_internal
