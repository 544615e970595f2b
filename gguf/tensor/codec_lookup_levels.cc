// The types whose 4-bit codes index a table of non-uniform levels: IQ4_NL,
// IQ4_XS and MXFP4 (SPEC.md §2.3). Quantization follows ggml's reference
// rules without an importance matrix:
//   * IQ4_NL / IQ4_XS: per 32-element group, the scale maximizing the x²-
//     weighted fit over 15 candidates around max/-127 (each level the table
//     entry nearest x/scale); IQ4_XS then stores the 8 group scales as 6-bit
//     multiples of a super-block d and re-picks the levels against them.
//   * MXFP4: the power-of-two scale 2^(floor(log2 max) - 2), or twice that
//     where it fits the block better, and the nearest E2M1 level.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "gguf/tensor/codec_internal.h"
#include "gguf/tensor/half.h"

namespace moetier::codec_internal {
namespace {

constexpr int kGroup = 32;
constexpr int kIq4XsGroups = kQKK / kGroup;  // 8

// The 16 levels times the block's scale, each product rounded as the
// per-element formula rounds it.
std::array<float, 16> ScaledLevels(const int8_t* levels, float scale) {
  std::array<float, 16> out;
  for (int i = 0; i < 16; ++i) out[i] = scale * static_cast<float>(levels[i]);
  return out;
}

// 32 elements: the low nibbles of qs[0..15], then their high nibbles.
void DecodeNibbles(const uint8_t* qs, const float* scaled_levels, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = scaled_levels[qs[j] & 0x0F];
    y[j + 16] = scaled_levels[qs[j] >> 4];
  }
}

void PackNibbles(const uint8_t* codes, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(codes[j] | (codes[j + 16] << 4));
}

// For each integer n in [-128, 127], the last level index whose value is at
// most n (0 below the first level): the bracket of a value in one lookup.
constexpr std::array<uint8_t, 256> BuildIq4Floor() {
  std::array<uint8_t, 256> table{};
  for (int n = -128; n < 128; ++n) {
    int i = 0;
    while (i < 15 && kIq4NlLevels[i + 1] <= n) ++i;
    table[static_cast<size_t>(n + 128)] = static_cast<uint8_t>(i);
  }
  return table;
}
constexpr std::array<uint8_t, 256> kIq4Floor = BuildIq4Floor();

// Index of the IQ4_NL level nearest v (the upper one on a tie, as ggml's
// best_index_int8).
uint8_t NearestIq4Level(float v) {
  const int8_t* t = kIq4NlLevels;
  if (!(v > t[0])) return 0;  // also NaN
  if (v >= t[15]) return 15;
  // t[0] < v < t[15]: floor(v) is in [-127, 112] and t[lo] <= v < t[lo + 1].
  // v + 128 is positive, so truncation floors it (std::floor is a library
  // call on baseline x86-64); where the sum rounds up to the next integer lo
  // may be one too high, which the comparison below still settles, except
  // past the last level.
  const int lo = std::min<int>(kIq4Floor[static_cast<size_t>(static_cast<int>(v + 128.0f))], 14);
  const int hi = lo + 1;
  return static_cast<uint8_t>(v - t[lo] < t[hi] - v ? lo : hi);
}

// The IQ4_NL scale of one group: the best of the start max/-127 and 15
// candidates (itry - 127)/max, itry in -7..7, by Σw·x·q)² / Σw·q² with w = x².
float FitIq4Scale(const float* x) {
  const SignedExtreme e = FindSignedExtreme(x, kGroup);
  if (e.magnitude < kTinyRange) return 0.0f;
  const float extreme = e.value;
  auto evaluate = [x](float id, float* sum_qx, float* sum_q2) {
    float qx = 0.0f;
    float q2 = 0.0f;
    for (int j = 0; j < kGroup; ++j) {
      const float q = kIq4NlLevels[NearestIq4Level(id * x[j])];
      const float w = x[j] * x[j];
      qx += w * q * x[j];
      q2 += w * q * q;
    }
    *sum_qx = qx;
    *sum_q2 = q2;
  };
  const float first = static_cast<float>(kIq4NlLevels[0]);
  float sum_qx;
  float sum_q2;
  evaluate(first / extreme, &sum_qx, &sum_q2);
  float d = sum_q2 > 0.0f ? sum_qx / sum_q2 : 0.0f;
  float best = d * sum_qx;
  for (int itry = -7; itry <= 7; ++itry) {
    evaluate((static_cast<float>(itry) + first) / extreme, &sum_qx, &sum_q2);
    if (sum_q2 > 0.0f && sum_qx * sum_qx > best * sum_q2) {
      d = sum_qx / sum_q2;
      best = d * sum_qx;
    }
  }
  return d;
}

void Iq4Codes(const float* x, float d, uint8_t* codes) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kGroup; ++j) codes[j] = NearestIq4Level(id * x[j]);
}

// 2^(e − 128): the MXFP4 scale for the doubled E2M1 levels.
float Mxfp4Scale(uint8_t e) { return std::ldexp(1.0f, static_cast<int>(e) - 128); }

// The nearest level of each value at `scale` (the first of equals, as ggml's
// best_index_mxfp4); returns the squared error.
float NearestMxfp4Codes(const float* x, float scale, uint8_t* codes) {
  float total = 0.0f;
  for (int j = 0; j < kGroup; ++j) {
    int best = 0;
    float best_err = std::fabs(x[j]);  // level 0
    for (int c = 1; c < 16; ++c) {
      const float err = std::fabs(static_cast<float>(kMxfp4Levels[c]) * scale - x[j]);
      if (err < best_err) {
        best = c;
        best_err = err;
      }
    }
    codes[j] = static_cast<uint8_t>(best);
    total += best_err * best_err;
  }
  return total;
}

}  // namespace

void DequantizeIQ4_NL(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kGroup) {
    BlockIQ4_NL block;
    std::memcpy(&block, bytes + b * sizeof(block), sizeof(block));
    DecodeNibbles(block.qs, ScaledLevels(kIq4NlLevels, HalfToFloat(block.d)).data(), dst);
  }
}

void QuantizeIQ4_NL(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kGroup) {
    BlockIQ4_NL block;
    block.d = FloatToHalf(FitIq4Scale(src));
    uint8_t codes[kGroup];
    // Against the scale as stored.
    Iq4Codes(src, HalfToFloat(block.d), codes);
    PackNibbles(codes, block.qs);
    std::memcpy(bytes + b * sizeof(block), &block, sizeof(block));
  }
}

void DequantizeIQ4_XS(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQKK) {
    BlockIQ4_XS block;
    std::memcpy(&block, bytes + b * sizeof(block), sizeof(block));
    const float d = HalfToFloat(block.d);
    for (int ib = 0; ib < kIq4XsGroups; ++ib) {
      const int ls = ((block.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) |
                     (((block.scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      DecodeNibbles(block.qs + 16 * ib, ScaledLevels(kIq4NlLevels, dl).data(), dst + kGroup * ib);
    }
  }
}

void QuantizeIQ4_XS(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    float scale[kIq4XsGroups];
    for (int ib = 0; ib < kIq4XsGroups; ++ib) scale[ib] = FitIq4Scale(src + kGroup * ib);
    const float extreme = FindSignedExtreme(scale, kIq4XsGroups).value;
    BlockIQ4_XS block;
    std::memset(&block, 0, sizeof(block));
    // The extreme group scale takes the six-bit level without a twin, −32
    // (rounded so that it still fits when d is a subnormal half).
    block.d = SuperBlockScale(-extreme, 32.0f);
    const float d = HalfToFloat(block.d);
    for (int ib = 0; ib < kIq4XsGroups; ++ib) {
      const int l = d != 0.0f ? RoundClamp(scale[ib] / d, -32, 31) : 0;
      uint8_t codes[kGroup];
      Iq4Codes(src + kGroup * ib, d * static_cast<float>(l), codes);
      PackNibbles(codes, block.qs + 16 * ib);
      const int stored = l + 32;
      block.scales_l[ib / 2] =
          static_cast<uint8_t>(block.scales_l[ib / 2] | ((stored & 0x0F) << (4 * (ib % 2))));
      block.scales_h = static_cast<uint16_t>(block.scales_h | ((stored >> 4) << (2 * ib)));
    }
    std::memcpy(bytes + b * sizeof(block), &block, sizeof(block));
  }
}

void DequantizeMXFP4(const void* src, float* dst, int64_t n_blocks) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kGroup) {
    BlockMXFP4 block;
    std::memcpy(&block, bytes + b * sizeof(block), sizeof(block));
    DecodeNibbles(block.qs, ScaledLevels(kMxfp4Levels, Mxfp4Scale(block.e)).data(), dst);
  }
}

void QuantizeMXFP4(const float* src, void* dst, int64_t n_blocks) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kGroup) {
    float amax = 0.0f;
    for (int j = 0; j < kGroup; ++j) amax = std::max(amax, std::fabs(src[j]));
    BlockMXFP4 block;
    // ggml's exponent puts the largest level, 12, at 1.5·2^floor(log2 max), so
    // a block whose largest value is above that clips it; the next exponent
    // up is taken when it loses less over the block.
    // (A non-finite block, outside the encoders' contract, gets the largest
    // exponent rather than undefined behaviour.)
    const int e = !(amax <= 3.0e38f) ? 254
                  : amax > 0.0f      ? static_cast<int>(std::floor(std::log2(amax))) - 2 + 127
                                     : 0;
    uint8_t codes[kGroup] = {};
    block.e = 0;
    float best_error = INFINITY;
    for (int candidate = e; candidate <= e + 1; ++candidate) {
      const auto stored = static_cast<uint8_t>(std::clamp(candidate, 0, 254));
      uint8_t trial[kGroup];
      const float error = NearestMxfp4Codes(src, Mxfp4Scale(stored), trial);
      if (error < best_error) {
        best_error = error;
        block.e = stored;
        std::memcpy(codes, trial, sizeof(codes));
      }
    }
    PackNibbles(codes, block.qs);
    std::memcpy(bytes + b * sizeof(block), &block, sizeof(block));
  }
}

}  // namespace moetier::codec_internal
