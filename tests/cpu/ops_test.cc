// Row operations against straightforward double-precision formulas.
#include <algorithm>
#include <cmath>
#include <string>
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
  RopeAngles(pos, n_rot, base, RopeScaling{}, nullptr, cos_t.data(), sin_t.data());
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
  RopeAngles(0, n_rot, base, RopeScaling{}, nullptr, cos_t.data(), sin_t.data());
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

constexpr RouterParams kSoftmaxRenormalized{};
constexpr RouterParams kSoftmaxPlain{.renormalize = false};

TEST(CpuOpsTest, RouterSoftmaxTopKRenormalize) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f, 0.0f};
  std::vector<float> probs(6), weights(3);
  std::vector<int32_t> ids(3);
  RouterTopK(logits.data(), 6, 3, kSoftmaxRenormalized, nullptr, probs.data(), ids.data(),
             weights.data());
  // Ties go to the lower id, in descending order of probability.
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 4}));
  double z = 0.0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  const double p1 = std::exp(2.0) / z, p4 = std::exp(1.5) / z;
  EXPECT_NEAR(probs[1], p1, 1e-7);
  EXPECT_NEAR(weights[0], p1 / (2 * p1 + p4), 1e-6);
  EXPECT_NEAR(weights[2], p4 / (2 * p1 + p4), 1e-6);

  RouterTopK(logits.data(), 6, 2, kSoftmaxPlain, nullptr, probs.data(), ids.data(), weights.data());
  EXPECT_NEAR(weights[0], p1, 1e-7);
  EXPECT_NEAR(weights[1], p1, 1e-7);
}

TEST(CpuOpsTest, RouterRenormalizeFloorsTinySums) {
  // One dominant expert: the others' probabilities sum below the floor.
  const std::vector<float> logits = {100.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> probs(4), weights(2);
  std::vector<int32_t> ids(2);
  RouterTopK(logits.data(), 4, 1, kSoftmaxRenormalized, nullptr, probs.data(), ids.data(),
             weights.data());
  EXPECT_EQ(ids[0], 0);
  EXPECT_NEAR(weights[0], 1.0f, 1e-6);
}

// glm4moe's router: each expert's sigmoid, the choice on sigmoid + bias, the
// weights from the sigmoid alone, renormalized, then scaled.
TEST(CpuOpsTest, RouterSigmoidChoosesWithTheBiasAndWeighsWithout) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.5f, 0.0f};
  std::vector<float> probs(4), weights(2);
  std::vector<int32_t> ids(2);
  const RouterParams router{
      .gating = RouterGating::kSigmoid, .renormalize = true, .weights_scale = 2.5f};
  RouterTopK(logits.data(), 4, 2, router, bias.data(), probs.data(), ids.data(), weights.data());
  const auto sigmoid = [](double z) { return 1.0 / (1.0 + std::exp(-z)); };
  for (int e = 0; e < 4; ++e) EXPECT_NEAR(probs[e], sigmoid(logits[e]), 1e-7) << e;
  // sigmoid(0) + 0.5 = 1.0 beats sigmoid(2) = 0.88 and sigmoid(1) = 0.73.
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 0}));
  const double sum = sigmoid(0.0) + sigmoid(2.0);
  EXPECT_NEAR(weights[0], 2.5 * sigmoid(0.0) / sum, 1e-6);
  EXPECT_NEAR(weights[1], 2.5 * sigmoid(2.0) / sum, 1e-6);

  // Without the bias the two largest sigmoids win; unnormalized, only scaled.
  RouterTopK(logits.data(), 4, 2, {.gating = RouterGating::kSigmoid, .renormalize = false}, nullptr,
             probs.data(), ids.data(), weights.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(weights[0], sigmoid(2.0), 1e-7);
  EXPECT_NEAR(weights[1], sigmoid(1.0), 1e-7);
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

// Attention over one head-major cache per type: what the stored rows hold
// (decoded), for the double-precision formula, and the rows themselves.
struct TypedCache {
  std::vector<uint8_t> bytes;
  std::vector<float> decoded;  // [n_head_kv][capacity][head_dim]
  KvRows rows;
};

TypedCache StoreCache(TensorType type, const std::vector<float>& values, int n_head_kv,
                      int capacity, int head_dim) {
  TypedCache c;
  const int64_t row = TensorRowBytes(type, head_dim);
  c.bytes.resize(static_cast<size_t>(n_head_kv) * capacity * row);
  c.decoded.resize(values.size());
  for (int64_t r = 0; r < int64_t{n_head_kv} * capacity; ++r) {
    QuantizeRow(type, values.data() + r * head_dim, c.bytes.data() + r * row, head_dim);
    DequantizeRow(type, c.bytes.data() + r * row, c.decoded.data() + r * head_dim, head_dim);
  }
  c.rows = {type, c.bytes.data(), int64_t{capacity} * row, row};
  return c;
}

// softmax(scale q_h . k_t) . v_t in double, query head h reading KV head
// h / group of head-major caches of `capacity` rows. With `sinks` (one per
// head) head h's softmax also takes sinks[h], which adds no value.
std::vector<double> AttentionInDouble(const std::vector<float>& q, const std::vector<float>& k,
                                      const std::vector<float>& v, int n_head, int n_head_kv,
                                      int head_dim, int capacity, int n_kv, float scale,
                                      const std::vector<float>& sinks = {}) {
  std::vector<double> want(static_cast<size_t>(n_head) * head_dim);
  for (int h = 0; h < n_head; ++h) {
    const int64_t base = int64_t{h / (n_head / n_head_kv)} * capacity * head_dim;
    std::vector<double> p(n_kv);
    double max = sinks.empty() ? -1e300 : sinks[h], z = 0.0;
    for (int t = 0; t < n_kv; ++t) {
      double s = 0.0;
      for (int d = 0; d < head_dim; ++d) s += double{q[h * head_dim + d]} * k[base + t * head_dim + d];
      max = std::max(max, p[t] = s * scale);
    }
    if (!sinks.empty()) z = std::exp(sinks[h] - max);
    for (double& pt : p) z += (pt = std::exp(pt - max));
    for (int d = 0; d < head_dim; ++d) {
      double o = 0.0;
      for (int t = 0; t < n_kv; ++t) o += p[t] / z * v[base + t * head_dim + d];
      want[h * head_dim + d] = o;
    }
  }
  return want;
}

TEST(CpuOpsTest, AttentionReadsStoredKvTypesDirectly) {
  const int n_head = 8, n_head_kv = 2, group = 4;
  const TensorType types[] = {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0,
                              TensorType::kQ4_0};
  uint32_t seed = 300;
  for (TensorType k_type : types) {
    for (TensorType v_type : types) {
      for (int head_dim : {20, 32, 96, 128}) {
        // F32 and F16 rows take any head; the block types multiples of 32.
        if (head_dim % 32 != 0 && (GetTensorTypeInfo(k_type).block_elems > 1 ||
                                   GetTensorTypeInfo(v_type).block_elems > 1)) {
          continue;
        }
        for (int n_kv : {1, 7, 65, 300}) {
          SCOPED_TRACE(std::string(TensorTypeName(k_type)) + " keys, " +
                       std::string(TensorTypeName(v_type)) + " values, head_dim " +
                       std::to_string(head_dim) + ", " + std::to_string(n_kv) + " positions");
          const int capacity = n_kv + 3;  // rows past n_kv must not be read
          const size_t cache_floats = size_t{n_head_kv} * capacity * head_dim;
          const std::vector<float> q = Gaussian(n_head * head_dim, seed++, 0.5f);
          const std::vector<float> k = Gaussian(cache_floats, seed++);
          const std::vector<float> v = Gaussian(cache_floats, seed++);
          const TypedCache kc = StoreCache(k_type, k, n_head_kv, capacity, head_dim);
          const TypedCache vc = StoreCache(v_type, v, n_head_kv, capacity, head_dim);
          const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
          // Against what the rows hold: only the query's preparation for
          // the key type's dot product (8-bit blocks for Q8_0 and Q4_0
          // keys) and float rounding differ.
          const std::vector<double> on_stored = AttentionInDouble(
              q, kc.decoded, vc.decoded, n_head, n_head_kv, head_dim, capacity, n_kv, scale);
          // Against the values before storing: the type's rounding too.
          const std::vector<double> on_exact =
              AttentionInDouble(q, k, v, n_head, n_head_kv, head_dim, capacity, n_kv, scale);
          const bool query_8bit = k_type == TensorType::kQ8_0 || k_type == TensorType::kQ4_0;
          const double stored_tol = query_8bit ? 1.5e-2 : 1e-6;
          const double exact_tol = std::max({stored_tol, k_type == TensorType::kQ4_0 ? 0.15 : 0.0,
                                             v_type == TensorType::kQ4_0 ? 0.4 : 0.0,
                                             k_type == TensorType::kQ8_0 ? 3e-2 : 0.0,
                                             v_type == TensorType::kQ8_0 ? 3e-2 : 0.0,
                                             k_type == TensorType::kF16 ? 2e-3 : 0.0,
                                             v_type == TensorType::kF16 ? 2e-3 : 0.0});
          alignas(64) static uint8_t queries[group * 1024];
          std::vector<float> scores(group * n_kv);
          const KvAttendScratch scratch{scores.data(), queries};
          for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
            if (!SimdLevelSupported(level)) continue;
            ASSERT_TRUE(SetSimdLevel(level).ok());
            SCOPED_TRACE(std::string(SimdLevelName(level)));
            std::vector<float> out(n_head * head_dim, 7.0f);
            // Heads 1..6: a partial group at each end.
            AttentionHeadsStored(q.data(), kc.rows, vc.rows, n_kv, n_head, n_head_kv, head_dim, scale,
                                 1, 7, scratch, out.data());
            double worst_stored = 0.0, worst_exact = 0.0;
            for (int h = 0; h < n_head; ++h) {
              for (int d = 0; d < head_dim; ++d) {
                const size_t i = h * head_dim + d;
                if (h == 0 || h == 7) {
                  ASSERT_EQ(out[i], 7.0f) << "head outside the range was written";
                  continue;
                }
                worst_stored = std::max(worst_stored, std::abs(out[i] - on_stored[i]));
                worst_exact = std::max(worst_exact, std::abs(out[i] - on_exact[i]));
              }
            }
            EXPECT_LT(worst_stored, stored_tol);
            EXPECT_LT(worst_exact, exact_tol);
          }
        }
      }
    }
  }
  ASSERT_TRUE(SetSimdLevel(BestSupportedSimdLevel()).ok());
}

// gpt-oss's additions: attention sinks (a logit per head in the softmax's
// denominator, with no value) at every SIMD level and over F32 and stored
// KV rows; the router that chooses on the raw logits and weighs by the
// softmax of the chosen; and the clamped SwiGLU.
TEST(CpuOpsTest, AttentionSinksTakeTheirShareWithoutAValue) {
  const int n_head = 8, n_head_kv = 2, group = 4;
  uint32_t seed = 700;
  // Every register-resident head size of the kernels and the generic one (24).
  for (int head_dim : {16, 24, 32, 64, 128, 256}) {
    for (int n_kv : {1, 9, 130}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + ", " + std::to_string(n_kv) +
                   " positions");
      const int capacity = n_kv + 3;
      const size_t cache_floats = size_t{n_head_kv} * capacity * head_dim;
      const std::vector<float> q = Gaussian(n_head * head_dim, seed++, 0.5f);
      const std::vector<float> k = Gaussian(cache_floats, seed++);
      const std::vector<float> v = Gaussian(cache_floats, seed++);
      // Sinks from far below to far above the scores: from no effect to
      // taking nearly all the mass.
      std::vector<float> sinks = {0.0f, -30.0f, 2.0f, 8.0f, -1.0f, 0.5f, 30.0f, 1.0f};
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      const std::vector<double> want =
          AttentionInDouble(q, k, v, n_head, n_head_kv, head_dim, capacity, n_kv, scale, sinks);
      // The big sink must have shrunk its head's output: the test sees sinks.
      double sunk = 0.0;
      for (int d = 0; d < head_dim; ++d) sunk = std::max(sunk, std::abs(want[6 * head_dim + d]));
      EXPECT_LT(sunk, 1e-6);

      // Q8_0 keys take heads of whole 32-value blocks.
      const bool q8_keys_fit = head_dim % 32 == 0;
      const int64_t q8_row = q8_keys_fit ? TensorRowBytes(TensorType::kQ8_0, head_dim) : 0;
      std::vector<uint8_t> q8(size_t{n_head_kv} * capacity * q8_row);
      std::vector<float> k_rounded(cache_floats);
      for (int64_t r = 0; q8_keys_fit && r < int64_t{n_head_kv} * capacity; ++r) {
        QuantizeRow(TensorType::kQ8_0, k.data() + r * head_dim, q8.data() + r * q8_row, head_dim);
        DequantizeRow(TensorType::kQ8_0, q8.data() + r * q8_row, k_rounded.data() + r * head_dim,
                      head_dim);
      }
      const std::vector<double> want_q8 = AttentionInDouble(q, k_rounded, v, n_head, n_head_kv,
                                                            head_dim, capacity, n_kv, scale, sinks);
      const KvRows f32_values{TensorType::kF32, reinterpret_cast<const uint8_t*>(v.data()),
                              int64_t{capacity} * head_dim * 4, int64_t{head_dim} * 4};
      const KvRows q8_keys{TensorType::kQ8_0, q8.data(), int64_t{capacity} * q8_row, q8_row};

      for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
        if (!SimdLevelSupported(level)) continue;
        ASSERT_TRUE(SetSimdLevel(level).ok());
        SCOPED_TRACE(std::string(SimdLevelName(level)));
        std::vector<float> out(n_head * head_dim, 7.0f);
        std::vector<float> scores(group * (n_kv + 1));
        // Heads 1..6: a partial group at each end.
        AttentionHeads(q.data(), k.data(), v.data(), int64_t{capacity} * head_dim, head_dim, n_kv,
                       n_head, n_head_kv, head_dim, scale, 1, 7, scores.data(), out.data(),
                       sinks.data());
        alignas(64) static uint8_t queries[group * 1024];
        std::vector<float> stored_out(n_head * head_dim, 7.0f);
        if (q8_keys_fit) {
          AttentionHeadsStored(q.data(), q8_keys, f32_values, n_kv, n_head, n_head_kv, head_dim,
                               scale, 1, 7, KvAttendScratch{scores.data(), queries},
                               stored_out.data(), sinks.data());
        }
        for (int h = 0; h < n_head; ++h) {
          for (int d = 0; d < head_dim; ++d) {
            const size_t i = h * head_dim + d;
            if (h == 0 || h == 7) {
              ASSERT_EQ(out[i], 7.0f) << "head outside the range was written";
              ASSERT_EQ(stored_out[i], 7.0f) << "head outside the range was written";
              continue;
            }
            ASSERT_NEAR(out[i], want[i], 2e-6 * std::sqrt(n_kv) + 1e-6) << "head " << h;
            // The query is prepared as 8-bit blocks for Q8_0 keys.
            if (q8_keys_fit) {
              ASSERT_NEAR(stored_out[i], want_q8[i], 1.5e-2) << "head " << h;
            }
          }
        }
      }
    }
  }
  ASSERT_TRUE(SetSimdLevel(BestSupportedSimdLevel()).ok());
}

// gpt-oss's router: the top k of the raw logits, weighted by the softmax of
// those k alone; a selection bias still only chooses.
TEST(CpuOpsTest, RouterChoosesOnLogitsAndWeighsBySoftmaxOfTheChosen) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 2.5f, 0.0f};
  std::vector<float> probs(5), weights(2);
  std::vector<int32_t> ids(2);
  const RouterParams router{.gating = RouterGating::kSoftmaxOfChosen, .renormalize = false};
  RouterTopK(logits.data(), 5, 2, router, nullptr, probs.data(), ids.data(), weights.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3}));
  for (int e = 0; e < 5; ++e) EXPECT_EQ(probs[e], logits[e]) << e;
  const double z = std::exp(3.0) + std::exp(2.5);
  EXPECT_NEAR(weights[0], std::exp(3.0) / z, 1e-7);
  EXPECT_NEAR(weights[1], std::exp(2.5) / z, 1e-7);

  const std::vector<float> bias = {0.0f, 0.0f, 10.0f, 0.0f, 0.0f};
  RouterTopK(logits.data(), 5, 2, router, bias.data(), probs.data(), ids.data(), weights.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 1}));
  const double z_biased = std::exp(-2.0) + std::exp(3.0);
  EXPECT_NEAR(weights[0], std::exp(-2.0) / z_biased, 1e-7);
  EXPECT_NEAR(weights[1], std::exp(3.0) / z_biased, 1e-7);
}

TEST(CpuOpsTest, ClampedSwigluMatchesTheFormula) {
  const std::vector<float> gate = {-20.0f, -1.0f, 0.0f, 0.5f, 6.9f, 7.0f, 12.0f, 3.0f};
  const std::vector<float> up = {1.0f, -9.0f, 2.0f, -0.5f, 8.0f, 1.0f, -7.5f, 6.5f};
  std::vector<float> out(gate.size());
  SwigluOaiMul(gate.data(), up.data(), static_cast<int64_t>(gate.size()), out.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = std::min(double{gate[i]}, 7.0);
    const double u = std::clamp(double{up[i]}, -7.0, 7.0);
    const double want = g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
    EXPECT_NEAR(out[i], want, 1e-6 * (1.0 + std::abs(want))) << i;
  }
  // The clamps bite: a gate of 12 acts as 7, an up of -7.5 as -7.
  EXPECT_NEAR(out[6], 7.0 / (1.0 + std::exp(-1.702 * 7.0)) * -6.0, 1e-5);
}

}  // namespace
}  // namespace moetier::cpu
