// Counter-based random numbers for synthetic weights. Element i of a tensor
// is a pure function of (stream key, i), so the bytes of a tensor do not
// depend on how it is cut into chunks or spread over threads.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace moetier {

// The SplitMix64 output function: a bijective 64-bit mixer.
inline uint64_t SplitMix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline constexpr uint64_t kSplitMixGamma = 0x9E3779B97F4A7C15ull;

// One stream per (seed, tensor name): FNV-1a of the name, mixed with the seed.
inline uint64_t SynthStreamKey(uint64_t seed, std::string_view tensor_name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : tensor_name) {
    h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  }
  return SplitMix64(SplitMix64(seed + kSplitMixGamma) ^ h);
}

// Approximately standard normal: the Irwin–Hall sum of the four 16-bit lanes
// of one 64-bit hash, centred and scaled to unit variance. Its tails stop at
// ±3.46, which keeps synthetic activations bounded, and it costs one hash.
inline float SynthNormal(uint64_t key, uint64_t index) {
  const uint64_t h = SplitMix64(key + (index + 1) * kSplitMixGamma);
  const uint32_t sum = static_cast<uint32_t>(h & 0xFFFF) + static_cast<uint32_t>((h >> 16) & 0xFFFF) +
                       static_cast<uint32_t>((h >> 32) & 0xFFFF) + static_cast<uint32_t>(h >> 48);
  // Mean 4 * 65535/2; variance 4 * (65536^2 - 1)/12, so sigma = 37837.2258...
  constexpr float kMean = 131070.0f;
  constexpr float kInvSigma = 1.0f / 37837.2258f;
  return (static_cast<float>(sum) - kMean) * kInvSigma;
}

// dst[j] = mean + stddev * SynthNormal(key, first_index + j) for j < count.
inline void SynthFill(uint64_t key, uint64_t first_index, int64_t count, float mean, float stddev,
                      float* dst) {
  for (int64_t j = 0; j < count; ++j) {
    dst[j] = mean + stddev * SynthNormal(key, first_index + static_cast<uint64_t>(j));
  }
}

// Uniform in [0, 1): the top 24 bits of one hash, from a stream of its own
// (a different mix than SynthNormal's, so the two never correlate).
inline float SynthUniform(uint64_t key, uint64_t index) {
  const uint64_t h = SplitMix64(~key + (index + 1) * kSplitMixGamma);
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

// dst[j] = -exp(lo + (hi - lo) * SynthUniform(key, first_index + j)): strictly
// negative values in [-e^hi, -e^lo], as real files store decay rates
// (ssm_a = -exp(A_log)).
inline void SynthFillNegativeExpUniform(uint64_t key, uint64_t first_index, int64_t count, float lo,
                                        float hi, float* dst) {
  for (int64_t j = 0; j < count; ++j) {
    const float u = SynthUniform(key, first_index + static_cast<uint64_t>(j));
    dst[j] = -std::exp(lo + (hi - lo) * u);
  }
}

// exp(lo + (hi - lo) * U), U uniform on [0, 1): positive factors spread
// evenly in log scale (rope frequency factors).
inline void SynthFillExpUniform(uint64_t key, uint64_t first_index, int64_t count, float lo,
                                float hi, float* dst) {
  SynthFillNegativeExpUniform(key, first_index, count, lo, hi, dst);
  for (int64_t j = 0; j < count; ++j) dst[j] = -dst[j];
}

}  // namespace moetier
