// Helpers of the codec round-trip tests: seeded normal rows, a row encoded
// and decoded, and the relative error of one against the other.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gguf/tensor/quant_codec.h"

namespace moetier::testing {

inline std::vector<float> Normal(int64_t n, uint32_t seed, float mean = 0.0f, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

inline std::vector<uint8_t> Quantize(TensorType type, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(static_cast<size_t>(TensorRowBytes(type, n)));
  QuantizeRow(type, x.data(), q.data(), n);
  return q;
}

inline std::vector<float> Dequantize(TensorType type, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  DequantizeRow(type, q.data(), y.data(), n);
  return y;
}

inline std::vector<float> RoundTrip(TensorType type, const std::vector<float>& x) {
  return Dequantize(type, Quantize(type, x), static_cast<int64_t>(x.size()));
}

// sqrt(Σ(y−x)² / Σx²)
inline double RelativeRmse(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0.0;
  double ref = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(y[i]) - static_cast<double>(x[i]);
    err += d * d;
    ref += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  }
  return std::sqrt(err / ref);
}

}  // namespace moetier::testing
