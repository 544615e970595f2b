// Q8_K activation blocks: ggml's rule (d = extreme / -127, round to nearest
// even, cap at 127), bsums, and the round-trip error.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier {
namespace {

std::vector<float> Normal(size_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

TEST(Q8KTest, BsumsAreSumsOfSixteenQs) {
  const std::vector<float> x = Normal(256 * 8, 21, 2.0f);
  std::vector<BlockQ8K> q(8);
  QuantizeRowQ8K(x.data(), q.data(), 256 * 8);
  for (const BlockQ8K& b : q) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += b.qs[16 * g + i];
      EXPECT_EQ(b.bsums[g], sum) << g;
    }
  }
}

TEST(Q8KTest, ExtremeMapsToMinus127AndErrorIsHalfAStep) {
  const std::vector<float> x = Normal(256 * 8, 22, 0.7f);
  std::vector<BlockQ8K> q(8);
  QuantizeRowQ8K(x.data(), q.data(), 256 * 8);
  std::vector<float> y(x.size());
  DequantizeRowQ8K(q.data(), y.data(), 256 * 8);
  double err = 0.0;
  double ref = 0.0;
  for (size_t b = 0; b < 8; ++b) {
    size_t arg = 0;
    for (size_t i = 0; i < 256; ++i) {
      if (std::fabs(x[256 * b + i]) > std::fabs(x[256 * b + arg])) arg = i;
    }
    EXPECT_EQ(q[b].qs[arg], -127);
    EXPECT_FLOAT_EQ(q[b].d, x[256 * b + arg] / -127.0f);
    for (size_t i = 0; i < 256; ++i) {
      const size_t k = 256 * b + i;
      EXPECT_LE(std::fabs(y[k] - x[k]), 0.5f * std::fabs(q[b].d) * 1.0001f) << k;
      err += (y[k] - x[k]) * (y[k] - x[k]);
      ref += x[k] * x[k];
    }
  }
  // Step ≈ 2.9σ/127 for 256 normals; measured 0.0063.
  EXPECT_LT(std::sqrt(err / ref), 0.008);
}

TEST(Q8KTest, RoundsHalfToEvenAndCapsAt127) {
  std::vector<float> x(256, 0.0f);
  x[0] = -127.0f;  // d = 1 exactly
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -2.5f;
  x[4] = 126.5f;
  x[5] = 127.0f;  // the positive twin of the extreme
  BlockQ8K q;
  QuantizeRowQ8K(x.data(), &q, 256);
  EXPECT_EQ(q.d, 1.0f);
  EXPECT_EQ(q.qs[0], -127);
  EXPECT_EQ(q.qs[1], 2);
  EXPECT_EQ(q.qs[2], 4);
  EXPECT_EQ(q.qs[3], -2);
  EXPECT_EQ(q.qs[4], 126);
  EXPECT_EQ(q.qs[5], 127);
  EXPECT_EQ(q.bsums[0], -127 + 2 + 4 - 2 + 126 + 127);
  // A positive extreme gives a negative d, so it too lands on -127.
  for (float& v : x) v = -v;
  QuantizeRowQ8K(x.data(), &q, 256);
  EXPECT_EQ(q.d, -1.0f);
  EXPECT_EQ(q.qs[0], -127);
  EXPECT_EQ(q.qs[1], 2);
}

TEST(Q8KTest, ZeroBlockIsAllZero) {
  std::vector<float> x(512, 0.0f);
  x[300] = 0.25f;  // second block only
  std::vector<BlockQ8K> q(2);
  QuantizeRowQ8K(x.data(), q.data(), 512);
  EXPECT_EQ(q[0].d, 0.0f);
  for (int8_t v : q[0].qs) EXPECT_EQ(v, 0);
  for (int16_t v : q[0].bsums) EXPECT_EQ(v, 0);
  std::vector<float> y(512);
  DequantizeRowQ8K(q.data(), y.data(), 512);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], x[i]) << i;
}

}  // namespace
}  // namespace moetier
