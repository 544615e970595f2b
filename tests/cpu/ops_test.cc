// Row operations against straightforward double-precision formulas.
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_ops.h"
#include "gtest/gtest.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier::cpu {
namespace {

std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = gauss(rng);
  return v;
}

TEST(CpuOpsTest, RmsNorm) {
  const std::vector<float> x = Gaussian(300, 1, 3.0f);
  const std::vector<float> w = Gaussian(300, 2);
  std::vector<float> y(300);
  RmsNorm(x.data(), w.data(), 300, 1e-6f, y.data());
  double ss = 0.0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double inv = 1.0 / std::sqrt(ss / 300 + 1e-6);
  for (int i = 0; i < 300; ++i)
    EXPECT_NEAR(y[i], x[i] * inv * w[i], 1e-5 * std::fabs(x[i] * inv * w[i]) + 1e-7);
  // In place, and per head.
  std::vector<float> heads = x;
  RmsNormHeads(heads.data(), w.data(), 3, 100, 1e-6f);
  for (int h = 0; h < 3; ++h) {
    std::vector<float> expect(100);
    RmsNorm(x.data() + 100 * h, w.data(), 100, 1e-6f, expect.data());
    for (int i = 0; i < 100; ++i) EXPECT_EQ(heads[100 * h + i], expect[i]);
  }
}

TEST(CpuOpsTest, RopeNeoxRotatesHalfPairs) {
  const int head_dim = 16, n_rot = 12, n_heads = 2;
  const float base = 10000.0f;
  const int64_t pos = 37;
  std::vector<float> cos_t(n_rot / 2), sin_t(n_rot / 2);
  RopeAngles(pos, n_rot, base, cos_t.data(), sin_t.data());
  const std::vector<float> x = Gaussian(n_heads * head_dim, 3);
  std::vector<float> y = x;
  RopeNeox(y.data(), n_heads, head_dim, n_rot, cos_t.data(), sin_t.data());
  for (int h = 0; h < n_heads; ++h) {
    const float* xh = x.data() + h * head_dim;
    const float* yh = y.data() + h * head_dim;
    for (int i = 0; i < n_rot / 2; ++i) {
      const double theta = pos * std::pow(10000.0, -2.0 * i / n_rot);
      const double x0 = xh[i], x1 = xh[i + n_rot / 2];
      EXPECT_NEAR(yh[i], x0 * std::cos(theta) - x1 * std::sin(theta), 1e-5);
      EXPECT_NEAR(yh[i + n_rot / 2], x0 * std::sin(theta) + x1 * std::cos(theta), 1e-5);
    }
    for (int i = n_rot; i < head_dim; ++i) EXPECT_EQ(yh[i], xh[i]);
  }
  // Position 0 is the identity.
  RopeAngles(0, n_rot, base, cos_t.data(), sin_t.data());
  std::vector<float> z = x;
  RopeNeox(z.data(), n_heads, head_dim, n_rot, cos_t.data(), sin_t.data());
  EXPECT_EQ(z, x);
}

TEST(CpuOpsTest, SoftmaxAndSiluMul) {
  std::vector<float> x = {1.0f, 2.0f, 3.0f, -1000.0f, 3.0f};
  SoftmaxInPlace(x.data(), 5);
  const double z = std::exp(-2.0) + std::exp(-1.0) + 1.0 + 0.0 + 1.0;
  EXPECT_NEAR(x[0], std::exp(-2.0) / z, 1e-7);
  EXPECT_NEAR(x[2], 1.0 / z, 1e-7);
  EXPECT_EQ(x[3], 0.0f);
  EXPECT_NEAR(std::accumulate(x.begin(), x.end(), 0.0), 1.0, 1e-6);

  const std::vector<float> g = Gaussian(50, 4, 4.0f), u = Gaussian(50, 5);
  std::vector<float> out(50);
  SiluMul(g.data(), u.data(), 50, out.data());
  for (int i = 0; i < 50; ++i) {
    const double s = g[i] / (1.0 + std::exp(-static_cast<double>(g[i])));
    EXPECT_NEAR(out[i], s * u[i], 1e-5 * (1.0 + std::fabs(s * u[i])));
  }
}

// Every SIMD level, every head size path (register-resident sizes and the
// generic fallback) and both cache layouts, against softmax(q.k * scale).v
// in double.
TEST(CpuOpsTest, AttentionMatchesDirectFormulaWithGqa) {
  const int n_head = 8, n_head_kv = 2;
  uint32_t seed = 20;
  for (bool head_major : {false, true}) {
    for (int head_dim : {16, 24, 32, 64, 128, 256}) {
      for (int n_kv : {1, 7, 16, 41, 300}) {
        // Padded rows or padded heads, so that a wrong stride reads wrong data.
        const int max_ctx = n_kv + 5;
        const int64_t kv_stride = head_major ? head_dim : n_head_kv * head_dim + 3;
        const int64_t head_stride = head_major ? int64_t{max_ctx} * head_dim : head_dim;
        const size_t cache_floats = head_major ? n_head_kv * head_stride : max_ctx * kv_stride;
        const std::vector<float> q = Gaussian(n_head * head_dim, seed++, 0.5f);
        const std::vector<float> k = Gaussian(cache_floats, seed++);
        const std::vector<float> v = Gaussian(cache_floats, seed++);
        auto at = [&](const std::vector<float>& cache, int g, int t, int d) {
          return static_cast<double>(cache[g * head_stride + t * kv_stride + d]);
        };
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        std::vector<double> want(n_head * head_dim);
        for (int h = 0; h < n_head; ++h) {
          const int g = h / (n_head / n_head_kv);
          std::vector<double> p(n_kv);
          double max = -1e300, z = 0.0;
          for (int t = 0; t < n_kv; ++t) {
            double s = 0.0;
            for (int d = 0; d < head_dim; ++d) s += q[h * head_dim + d] * at(k, g, t, d);
            p[t] = s * scale;
            max = std::max(max, p[t]);
          }
          for (double& pt : p) z += (pt = std::exp(pt - max));
          for (int d = 0; d < head_dim; ++d) {
            double o = 0.0;
            for (int t = 0; t < n_kv; ++t) o += p[t] / z * at(v, g, t, d);
            want[h * head_dim + d] = o;
          }
        }
        for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
          if (!SimdLevelSupported(level)) continue;
          ASSERT_TRUE(SetSimdLevel(level).ok());
          std::vector<float> out(n_head * head_dim, 7.0f), scores(4 * n_kv);
          // Heads 1..6: a partial group at each end.
          AttentionHeads(q.data(), k.data(), v.data(), head_stride, kv_stride, n_kv, n_head,
                         n_head_kv, head_dim, scale, 1, 7, scores.data(), out.data());
          for (int h = 0; h < n_head; ++h) {
            for (int d = 0; d < head_dim; ++d) {
              const float got = out[h * head_dim + d];
              if (h == 0 || h == 7) {
                ASSERT_EQ(got, 7.0f) << "head outside the range was written";
              } else {
                ASSERT_NEAR(got, want[h * head_dim + d], 2e-6 * std::sqrt(n_kv) + 1e-6)
                    << SimdLevelName(level) << " head_dim " << head_dim << " n_kv " << n_kv
                    << " head " << h << " dim " << d << (head_major ? " head-major" : "");
              }
            }
          }
        }
      }
    }
  }
  ASSERT_TRUE(SetSimdLevel(BestSupportedSimdLevel()).ok());
}

TEST(CpuOpsTest, RouterSoftmaxTopKRenormalize) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f, 0.0f};
  std::vector<float> probs(6), weights(3);
  std::vector<int32_t> ids(3);
  RouterTopK(logits.data(), 6, 3, true, probs.data(), ids.data(), weights.data());
  // Ties go to the lower id, in descending order of probability.
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 4}));
  double z = 0.0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  const double p1 = std::exp(2.0) / z, p4 = std::exp(1.5) / z;
  EXPECT_NEAR(probs[1], p1, 1e-7);
  EXPECT_NEAR(weights[0], p1 / (2 * p1 + p4), 1e-6);
  EXPECT_NEAR(weights[2], p4 / (2 * p1 + p4), 1e-6);

  RouterTopK(logits.data(), 6, 2, false, probs.data(), ids.data(), weights.data());
  EXPECT_NEAR(weights[0], p1, 1e-7);
  EXPECT_NEAR(weights[1], p1, 1e-7);
}

TEST(CpuOpsTest, RouterRenormalizeFloorsTinySums) {
  // One dominant expert: the others' probabilities sum below the floor.
  const std::vector<float> logits = {100.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> probs(4), weights(2);
  std::vector<int32_t> ids(2);
  RouterTopK(logits.data(), 4, 1, true, probs.data(), ids.data(), weights.data());
  EXPECT_EQ(ids[0], 0);
  EXPECT_NEAR(weights[0], 1.0f, 1e-6);
}

TEST(CpuOpsTest, EmbeddingRowDecodes) {
  const std::vector<float> x = Gaussian(64, 9);
  std::vector<uint8_t> q8(TensorRowBytes(TensorType::kQ8_0, 64));
  QuantizeRow(TensorType::kQ8_0, x.data(), q8.data(), 64);
  std::vector<float> expect(64), got(64);
  DequantizeRow(TensorType::kQ8_0, q8.data(), expect.data(), 64);
  EmbeddingRow(TensorType::kQ8_0, q8.data(), 64, got.data());
  EXPECT_EQ(got, expect);
}

}  // namespace
}  // namespace moetier::cpu
