// Both forms of the gated delta rule against the recurrence written out in
// double precision, and against each other, over lengths that fill, split
// and undershoot a chunk, from a state that is not zero.
#include "backend/cpu/gated_delta_rule.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "gtest/gtest.h"

namespace moetier::cpu {
namespace {

struct Inputs {
  int n, d_k, d_v;
  std::vector<float> q, k, v, log_decay, beta, state;
};

void L2Rows(std::vector<float>& x, int n, int d, float scale) {
  for (int t = 0; t < n; ++t) {
    double ss = 0.0;
    for (int i = 0; i < d; ++i) ss += static_cast<double>(x[t * d + i]) * x[t * d + i];
    const float f = static_cast<float>(scale / std::sqrt(ss));
    for (int i = 0; i < d; ++i) x[t * d + i] *= f;
  }
}

// Unit-norm keys and queries, gates in (0, 1) and decays from a strong
// forget (g = -6) to none, as the model produces them.
Inputs Random(int n, int d_k, int d_v, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Inputs in{n, d_k, d_v, {}, {}, {}, {}, {}, {}};
  auto fill = [&](std::vector<float>& x, size_t count) {
    x.resize(count);
    for (float& e : x) e = gauss(rng);
  };
  fill(in.q, static_cast<size_t>(n) * d_k);
  fill(in.k, static_cast<size_t>(n) * d_k);
  fill(in.v, static_cast<size_t>(n) * d_v);
  fill(in.state, static_cast<size_t>(d_k) * d_v);
  L2Rows(in.q, n, d_k, 1.0f / std::sqrt(static_cast<float>(d_k)));
  L2Rows(in.k, n, d_k, 1.0f);
  for (int t = 0; t < n; ++t) {
    in.log_decay.push_back(t % 17 == 5 ? -6.0f : -0.5f * unit(rng));
    in.beta.push_back(unit(rng));
  }
  return in;
}

GatedDeltaHead HeadOf(const Inputs& in, std::vector<float>& out, std::vector<float>& state) {
  return {in.q.data(), in.k.data(), in.d_k, in.v.data(), in.d_v, in.log_decay.data(),
          in.beta.data(), 1, out.data(), in.d_v, state.data(), in.d_k, in.d_v};
}

// The recurrence exactly as SPEC §3.4 writes it, in double.
void Exact(const Inputs& in, std::vector<double>& out, std::vector<double>& S) {
  S.assign(in.state.begin(), in.state.end());
  out.assign(static_cast<size_t>(in.n) * in.d_v, 0.0);
  for (int t = 0; t < in.n; ++t) {
    const double decay = std::exp(static_cast<double>(in.log_decay[t]));
    for (double& s : S) s *= decay;
    for (int c = 0; c < in.d_v; ++c) {
      double sk = 0.0;
      for (int r = 0; r < in.d_k; ++r) sk += S[r * in.d_v + c] * in.k[t * in.d_k + r];
      const double delta = in.beta[t] * (in.v[t * in.d_v + c] - sk);
      for (int r = 0; r < in.d_k; ++r) S[r * in.d_v + c] += in.k[t * in.d_k + r] * delta;
    }
    for (int c = 0; c < in.d_v; ++c) {
      double o = 0.0;
      for (int r = 0; r < in.d_k; ++r) o += S[r * in.d_v + c] * in.q[t * in.d_k + r];
      out[t * in.d_v + c] = o;
    }
  }
}

double MaxError(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  return worst;
}

struct Shape {
  int n, d_k, d_v, chunk;
};

class GatedDeltaRuleTest : public ::testing::TestWithParam<Shape> {};

TEST_P(GatedDeltaRuleTest, ChunkedAndTokenByTokenGiveTheExactRecurrence) {
  const Shape sh = GetParam();
  const Inputs in = Random(sh.n, sh.d_k, sh.d_v, 1234u + sh.n);
  std::vector<double> want_out, want_state;
  Exact(in, want_out, want_state);

  std::vector<float> tok_out(want_out.size()), tok_state = in.state;
  GatedDeltaTokens(HeadOf(in, tok_out, tok_state), sh.n);

  std::vector<float> chunk_out(want_out.size()), chunk_state = in.state;
  std::vector<float> scratch(GatedDeltaChunkScratchFloats(sh.chunk, sh.d_k, sh.d_v));
  GatedDeltaChunked(HeadOf(in, chunk_out, chunk_state), sh.n, sh.chunk, scratch.data());

  // Outputs and states are O(1); fp32 rounding over a few hundred tokens.
  constexpr double kTolerance = 2e-4;
  EXPECT_LT(MaxError(tok_out, want_out), kTolerance);
  EXPECT_LT(MaxError(tok_state, want_state), kTolerance);
  EXPECT_LT(MaxError(chunk_out, want_out), kTolerance);
  EXPECT_LT(MaxError(chunk_state, want_state), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Lengths, GatedDeltaRuleTest,
                         ::testing::Values(Shape{1, 16, 8, 64}, Shape{7, 16, 8, 64},
                                           Shape{64, 32, 16, 64}, Shape{65, 32, 16, 64},
                                           Shape{200, 128, 128, 64}, Shape{50, 24, 40, 7},
                                           Shape{33, 16, 16, 1}),
                         [](const ::testing::TestParamInfo<Shape>& param_info) {
                           const Shape& s = param_info.param;
                           return "n" + std::to_string(s.n) + "_dk" + std::to_string(s.d_k) +
                                  "_dv" + std::to_string(s.d_v) + "_chunk" +
                                  std::to_string(s.chunk);
                         });

TEST(GatedDeltaRuleChunking, SplittingABatchContinuesTheState) {
  const Inputs in = Random(150, 32, 32, 99);
  std::vector<float> whole_out(150 * 32), whole_state = in.state;
  std::vector<float> scratch(GatedDeltaChunkScratchFloats(64, 32, 32));
  GatedDeltaChunked(HeadOf(in, whole_out, whole_state), 150, 64, scratch.data());

  // 100 tokens chunked, then 50 one at a time, from where the first left off.
  std::vector<float> split_out(150 * 32), split_state = in.state;
  GatedDeltaHead head = HeadOf(in, split_out, split_state);
  GatedDeltaChunked(head, 100, 64, scratch.data());
  head.q += 100 * 32;
  head.k += 100 * 32;
  head.v += 100 * 32;
  head.log_decay += 100;
  head.beta += 100;
  head.out += 100 * 32;
  GatedDeltaTokens(head, 50);
  for (size_t i = 0; i < whole_out.size(); ++i) {
    ASSERT_NEAR(split_out[i], whole_out[i], 1e-4) << "output value " << i;
  }
  for (size_t i = 0; i < whole_state.size(); ++i) {
    ASSERT_NEAR(split_state[i], whole_state[i], 1e-4) << "state value " << i;
  }
}

}  // namespace
}  // namespace moetier::cpu
