// The row operations gpt-oss adds, against double-precision formulas:
// attention sinks (a logit per head in the softmax's denominator, with no
// value), at every SIMD level and over F32 and stored KV rows; the router
// that chooses on the raw logits and weighs by the softmax of the chosen;
// and the clamped SwiGLU.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_ops.h"
#include "base/expert_activation.h"
#include "gguf/tensor/quant_codec.h"
#include "gtest/gtest.h"

namespace moetier::cpu {
namespace {

std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = gauss(rng);
  return v;
}

// softmax over (scale q_h . k_t for t < n_kv, sinks[h]) . (v_t, nothing), in
// double, for head-major caches of `capacity` rows.
std::vector<double> SinkAttentionInDouble(const std::vector<float>& q, const std::vector<float>& k,
                                          const std::vector<float>& v,
                                          const std::vector<float>& sinks, int n_head,
                                          int n_head_kv, int head_dim, int capacity, int n_kv,
                                          float scale) {
  std::vector<double> want(static_cast<size_t>(n_head) * head_dim);
  for (int h = 0; h < n_head; ++h) {
    const int64_t base = int64_t{h / (n_head / n_head_kv)} * capacity * head_dim;
    std::vector<double> p(n_kv);
    double max = sinks[h];
    for (int t = 0; t < n_kv; ++t) {
      double s = 0.0;
      for (int d = 0; d < head_dim; ++d)
        s += double{q[h * head_dim + d]} * k[base + t * head_dim + d];
      max = std::max(max, p[t] = s * scale);
    }
    double z = std::exp(sinks[h] - max);
    for (double& pt : p) z += (pt = std::exp(pt - max));
    for (int d = 0; d < head_dim; ++d) {
      double o = 0.0;
      for (int t = 0; t < n_kv; ++t) o += p[t] / z * v[base + t * head_dim + d];
      want[h * head_dim + d] = o;
    }
  }
  return want;
}

TEST(GptOssOpsTest, AttentionSinksTakeTheirShareWithoutAValue) {
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
          SinkAttentionInDouble(q, k, v, sinks, n_head, n_head_kv, head_dim, capacity, n_kv, scale);
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
      const std::vector<double> want_q8 = SinkAttentionInDouble(
          q, k_rounded, v, sinks, n_head, n_head_kv, head_dim, capacity, n_kv, scale);
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
TEST(GptOssOpsTest, RouterChoosesOnLogitsAndWeighsBySoftmaxOfTheChosen) {
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

TEST(GptOssOpsTest, ClampedSwigluMatchesTheFormula) {
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
