// The CUDA rope against the CPU's (backend/cpu/cpu_ops.h): NEOX and NORM
// pairs, rope scaling (none, linear, YaRN), llama's per-pair frequency
// factors, pairs held at position 0 (multi-section rope), and the fused
// q/k norm + rope. Every case skips where no GPU is usable.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_kernels.h"
#include "device_buffer.h"
#include "gtest/gtest.h"
#include "model/rope_scaling.h"
#include "random_values.h"

namespace moetier::cuda {
namespace {

using cuda_test::DeviceBuffer;
using cuda_test::Gaussian;

// Unscaled, linear and YaRN rope (the ramp inside the rotated pairs).
std::vector<RopeScaling> RopeScalings(int n_rot, float base) {
  std::vector<RopeScaling> all(1);
  for (const char* type : {"linear", "yarn"}) {
    RopeScalingKeys keys;
    keys.type = type;
    keys.factor = 4.0;
    keys.original_context = 4096;
    absl::StatusOr<RopeScaling> s = MakeRopeScaling(keys, n_rot, base, "test.");
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) all.push_back(*s);
  }
  return all;
}

class CudaRopeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device or driver on this machine; run tests/cuda/run-on-gpu.sh "
                      "where a GPU exists";
    }
  }
};

TEST_F(CudaRopeTest, RopeNeoxMatchesCpu) {
  struct Case {
    int head_dim, n_rot;
  };
  const float base = 1000000.0f;
  for (Case c : {Case{128, 128}, Case{16, 12}, Case{64, 32}}) {
    for (const RopeScaling& scaling : RopeScalings(c.n_rot, base)) {
      const int n_heads = 4, n_tokens = 3;
      const std::vector<int32_t> positions = {0, 37, 40000};
      const std::vector<float> x =
          Gaussian(static_cast<size_t>(n_tokens * n_heads * c.head_dim), 9);
      DeviceBuffer x_dev(x), pos_dev(positions);
      ASSERT_TRUE(RopeNeox(x_dev.as<float>(), pos_dev.as<int32_t>(), n_tokens, n_heads, c.head_dim,
                           c.n_rot, base, scaling, nullptr, nullptr, nullptr)
                      .ok());
      const std::vector<float> got = x_dev.Download<float>(x.size());
      std::vector<float> want = x;
      std::vector<float> cos_t(static_cast<size_t>(c.n_rot / 2)), sin_t(cos_t.size());
      for (int t = 0; t < n_tokens; ++t) {
        cpu::RopeAngles(positions[static_cast<size_t>(t)], c.n_rot, base, scaling, nullptr,
                        cos_t.data(), sin_t.data());
        cpu::RopeNeox(want.data() + t * n_heads * c.head_dim, n_heads, c.head_dim, c.n_rot,
                      cos_t.data(), sin_t.data());
      }
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-6 * (1.0 + std::fabs(want[i])))
            << "head_dim " << c.head_dim << " n_rot " << c.n_rot << " freq_scale "
            << scaling.freq_scale << " ext_factor " << scaling.ext_factor << " element " << i;
      }
    }
  }
}

// A file's per-pair frequency factors (llama's rope_freqs) divide the
// angles, on the device as on the host, with and without YaRN.
TEST_F(CudaRopeTest, RopeDividesTheAnglesByTheFrequencyFactors) {
  const int n_heads = 2, n_tokens = 3, head_dim = 32, n_rot = 32;
  const std::vector<int32_t> positions = {1, 300, 20000};
  const float base = 500000.0f;
  std::vector<float> factors(n_rot / 2);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.5f * static_cast<float>(i);
  DeviceBuffer factors_dev(factors), pos_dev(positions);
  for (const RopeScaling& scaling : RopeScalings(n_rot, base)) {
    const std::vector<float> x = Gaussian(static_cast<size_t>(n_tokens * n_heads * head_dim), 31);
    DeviceBuffer x_dev(x);
    ASSERT_TRUE(RopeAdjacentPairs(x_dev.as<float>(), pos_dev.as<int32_t>(), n_tokens, n_heads,
                                  head_dim, n_rot, base, scaling, factors_dev.as<float>(), nullptr,
                                  nullptr)
                    .ok());
    const std::vector<float> got = x_dev.Download<float>(x.size());
    std::vector<float> want = x;
    std::vector<float> plain = x;
    std::vector<float> cos_t(n_rot / 2), sin_t(n_rot / 2);
    for (int t = 0; t < n_tokens; ++t) {
      const int64_t pos = positions[static_cast<size_t>(t)];
      cpu::RopeAngles(pos, n_rot, base, scaling, factors.data(), cos_t.data(), sin_t.data());
      cpu::RopeAdjacentPairs(want.data() + t * n_heads * head_dim, n_heads, head_dim, n_rot,
                             cos_t.data(), sin_t.data());
      cpu::RopeAngles(pos, n_rot, base, scaling, nullptr, cos_t.data(), sin_t.data());
      cpu::RopeAdjacentPairs(plain.data() + t * n_heads * head_dim, n_heads, head_dim, n_rot,
                             cos_t.data(), sin_t.data());
    }
    double moved = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-6 * (1.0 + std::fabs(want[i]))) << i;
      moved = std::max(moved, static_cast<double>(std::fabs(want[i] - plain[i])));
    }
    EXPECT_GT(moved, 0.1);  // the factors change the rotation
  }
}

// QkNormRope (one launch) gives the bits of RmsNorm per head followed by
// the rope on q and on k (four launches), with and without the norm, for
// both pair layouts and with held pairs.
TEST_F(CudaRopeTest, QkNormRopeGivesTheBitsOfNormThenRope) {
  const int n_tokens = 3, n_head = 4, n_head_kv = 2, head_dim = 64, n_rot = 48;
  const std::vector<int32_t> positions = {0, 77, 31000};
  const std::vector<uint8_t> uses = {1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0,
                                     1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1};
  const float base = 1e6f, eps = 1e-6f;
  const RopeScaling scaling = RopeScalings(n_rot, base).back();  // YaRN
  const std::vector<float> q = Gaussian(static_cast<size_t>(n_tokens * n_head * head_dim), 21);
  const std::vector<float> k = Gaussian(static_cast<size_t>(n_tokens * n_head_kv * head_dim), 22);
  const std::vector<float> q_w = Gaussian(static_cast<size_t>(head_dim), 23);
  const std::vector<float> k_w = Gaussian(static_cast<size_t>(head_dim), 24);
  DeviceBuffer pos_dev(positions), uses_dev(uses), q_w_dev(q_w), k_w_dev(k_w);
  for (bool norm : {true, false}) {
    for (bool adjacent : {false, true}) {
      for (bool held : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "norm " << norm << ", adjacent " << adjacent << ", held pairs " << held);
        const uint8_t* pairs = held ? uses_dev.as<uint8_t>() : nullptr;
        DeviceBuffer q_sep(q), k_sep(k), q_fused(q), k_fused(k);
        if (norm) {
          ASSERT_TRUE(RmsNorm(q_sep.as<float>(), q_w_dev.as<float>(), n_tokens * n_head, head_dim,
                              eps, q_sep.as<float>(), nullptr)
                          .ok());
          ASSERT_TRUE(RmsNorm(k_sep.as<float>(), k_w_dev.as<float>(), n_tokens * n_head_kv,
                              head_dim, eps, k_sep.as<float>(), nullptr)
                          .ok());
        }
        auto rope = adjacent ? &RopeAdjacentPairs : &RopeNeox;
        ASSERT_TRUE(rope(q_sep.as<float>(), pos_dev.as<int32_t>(), n_tokens, n_head, head_dim,
                         n_rot, base, scaling, nullptr, pairs, nullptr)
                        .ok());
        ASSERT_TRUE(rope(k_sep.as<float>(), pos_dev.as<int32_t>(), n_tokens, n_head_kv, head_dim,
                         n_rot, base, scaling, nullptr, pairs, nullptr)
                        .ok());
        ASSERT_TRUE(QkNormRope(q_fused.as<float>(), k_fused.as<float>(),
                               norm ? q_w_dev.as<float>() : nullptr,
                               norm ? k_w_dev.as<float>() : nullptr, pos_dev.as<int32_t>(),
                               n_tokens, n_head, n_head_kv, head_dim, n_rot, base, scaling, nullptr,
                               adjacent, pairs, eps, nullptr)
                        .ok());
        EXPECT_EQ(q_fused.Download<float>(q.size()), q_sep.Download<float>(q.size()));
        EXPECT_EQ(k_fused.Download<float>(k.size()), k_sep.Download<float>(k.size()));
      }
    }
  }
}

// Multi-section rope: the pairs held at position 0 stay as they are, times
// the scaling's magnitude (1 unscaled, above 1 with YaRN), as the CPU
// attention block's cos = magnitude, sin 0 leaves them.
TEST_F(CudaRopeTest, RopeWithSectionsHoldsTheUnusedPairs) {
  const int n_heads = 3, n_tokens = 2, head_dim = 32, n_rot = 16;
  const std::vector<int32_t> positions = {5, 1234};
  const std::vector<uint8_t> uses = {1, 1, 0, 1, 0, 0, 1, 1};
  const float base = 1e7f;
  const RopeScaling yarn = RopeScalings(n_rot, base).back();
  ASSERT_GT(yarn.magnitude, 1.0f);
  for (const RopeScaling& scaling : {RopeScaling{}, yarn}) {
    for (bool adjacent : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << (adjacent ? "NORM" : "NEOX") << ", magnitude " << scaling.magnitude);
      const std::vector<float> x = Gaussian(static_cast<size_t>(n_tokens * n_heads * head_dim), 12);
      DeviceBuffer x_dev(x), pos_dev(positions), uses_dev(uses);
      auto rope = adjacent ? &RopeAdjacentPairs : &RopeNeox;
      ASSERT_TRUE(rope(x_dev.as<float>(), pos_dev.as<int32_t>(), n_tokens, n_heads, head_dim, n_rot,
                       base, scaling, nullptr, uses_dev.as<uint8_t>(), nullptr)
                      .ok());
      const std::vector<float> got = x_dev.Download<float>(x.size());
      std::vector<float> want = x;
      std::vector<float> cos_t(n_rot / 2), sin_t(n_rot / 2);
      for (int t = 0; t < n_tokens; ++t) {
        cpu::RopeAngles(positions[static_cast<size_t>(t)], n_rot, base, scaling, nullptr,
                        cos_t.data(), sin_t.data());
        for (size_t i = 0; i < uses.size(); ++i) {
          if (uses[i] == 0) {
            cos_t[i] = scaling.magnitude;
            sin_t[i] = 0.0f;
          }
        }
        float* xt = want.data() + t * n_heads * head_dim;
        if (adjacent) {
          cpu::RopeAdjacentPairs(xt, n_heads, head_dim, n_rot, cos_t.data(), sin_t.data());
        } else {
          cpu::RopeNeox(xt, n_heads, head_dim, n_rot, cos_t.data(), sin_t.data());
        }
      }
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-6 * (1.0 + std::fabs(want[i]))) << i;
      }
      // Held pairs are only multiplied by the magnitude, bit for bit.
      for (int t = 0; t < n_tokens; ++t) {
        for (int h = 0; h < n_heads; ++h) {
          const size_t head = static_cast<size_t>((t * n_heads + h) * head_dim);
          for (int i = 0; i < n_rot / 2; ++i) {
            if (uses[static_cast<size_t>(i)] != 0) continue;
            const size_t a = head + (adjacent ? 2 * i : i);
            const size_t b = head + (adjacent ? 2 * i + 1 : i + n_rot / 2);
            ASSERT_EQ(got[a], x[a] * scaling.magnitude);
            ASSERT_EQ(got[b], x[b] * scaling.magnitude);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace moetier::cuda
