// Seeded random inputs for the CUDA kernel tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace moetier::cuda_test {

// n values drawn from N(0, sigma^2), the same for the same seed.
inline std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = gauss(rng);
  return v;
}

}  // namespace moetier::cuda_test
