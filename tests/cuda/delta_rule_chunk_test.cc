// The chunked gated delta rule's formulas (backend/cuda/delta_rule.h)
// evaluated on the host in the order the CUDA kernels evaluate them, against
// the token-by-token recurrence as the CPU block runs it (fp32) and in
// float64. Runs on every machine: it checks the algorithm, while
// cuda_deltanet_kernels_test checks the kernels that map it onto threads.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/delta_rule.h"
#include "delta_rule_host.h"
#include "gtest/gtest.h"

namespace moetier::cuda::delta_chunk {
namespace {

using host::Chunked;
using host::InputOf;
using host::MakeProblem;
using host::Problem;
using host::RelativeError;
using host::Shape;
using host::TokenByToken;

struct Case {
  Shape shape;
  float decay_scale;
  bool random_state;
};

std::string Describe(const Case& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "n %d, H_k %d, H_v %d, d_k %d, d_v %d, %s, decay x%g%s",
                c.shape.n_tokens, c.shape.n_k_heads, c.shape.n_v_heads, c.shape.d_k, c.shape.d_v,
                c.shape.tiled ? "tiled" : "grouped", c.decay_scale,
                c.random_state ? ", from a state" : "");
  return buf;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  // Lengths around the chunk size, with and without a starting state.
  for (int n : {1, 2, 5, 63, 64, 65, 129, 200}) {
    for (bool random_state : {false, true}) {
      cases.push_back({{n, 2, 4, 16, 24, true}, 1.0f, random_state});
    }
  }
  // The qwen35moe head sizes, grouped heads, and the decay's extremes.
  cases.push_back({{130, 2, 4, 128, 128, true}, 1.0f, true});
  cases.push_back({{70, 2, 6, 64, 64, false}, 1.0f, true});
  cases.push_back({{100, 1, 2, 32, 16, true}, 0.0f, true});
  cases.push_back({{100, 1, 2, 32, 40, true}, 30.0f, true});
  return cases;
}

TEST(DeltaRuleChunkTest, ChunkedEqualsTokenByTokenWithinRounding) {
  uint32_t seed = 1;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(Describe(c));
    const Problem p = MakeProblem(c.shape, seed++, c.decay_scale, c.random_state);
    std::vector<float> state_f32 = p.state0, state_f64 = p.state0, state_chunked = p.state0;
    std::vector<float> out_f32, out_f64, out_chunked;
    TokenByToken<float>(p, state_f32, out_f32);
    TokenByToken<double>(p, state_f64, out_f64);
    Chunked(p, state_chunked, out_chunked);
    const double out_err = RelativeError(out_chunked, out_f64);
    const double state_err = RelativeError(state_chunked, state_f64);
    const double f32_out_err = RelativeError(out_f32, out_f64);
    const double f32_state_err = RelativeError(state_f32, state_f64);
    std::printf("%-60s chunked %.2e / %.2e, token fp32 %.2e / %.2e (out / state)\n",
                Describe(c).c_str(), out_err, state_err, f32_out_err, f32_state_err);
    // fp32 rounding of a few hundred dependent steps: the chunked form
    // must stay as close to the exact values as the fp32 recurrence, up to
    // a small factor, and both well below 1e-4.
    EXPECT_LT(out_err, 2e-5);
    EXPECT_LT(state_err, 2e-5);
    EXPECT_LT(RelativeError(out_chunked, out_f32), 2e-5);
    EXPECT_LT(RelativeError(state_chunked, state_f32), 2e-5);
  }
}

// The chunk's pieces on their own: T is the inverse of I + A, and one token
// is the plain update.
TEST(DeltaRuleChunkTest, InverseIsTheInverseOfIPlusA) {
  const Problem p = MakeProblem({64, 1, 1, 32, 8, true}, 7, 1.0f, false);
  const ChunkIn in = InputOf(p, 0, 0);
  std::vector<float> G(kChunk), A(kChunk * kChunk, 0.0f), T(kChunk * kChunk, 0.0f);
  CumulativeLogDecay(in, G.data());
  for (int t = 0; t < in.len; ++t) {
    for (int s = 0; s < t; ++s) A[t * kChunk + s] = KktEntry(in, G.data(), t, s);
  }
  for (int t = 1; t < in.len; ++t) {
    for (int s = 0; s < t; ++s) T[t * kChunk + s] = InverseEntry(A.data(), T.data(), t, s);
  }
  double worst = 0.0;
  for (int t = 0; t < in.len; ++t) {
    for (int s = 0; s < in.len; ++s) {
      // ((I + A) T)[t][s]
      double sum = InverseAt(T.data(), t, s);
      for (int m = 0; m < t; ++m) sum += double(A[t * kChunk + m]) * InverseAt(T.data(), m, s);
      worst = std::max(worst, std::fabs(sum - (t == s ? 1.0 : 0.0)));
    }
  }
  EXPECT_LT(worst, 1e-5);
}

TEST(DeltaRuleChunkTest, OneTokenIsThePlainUpdate) {
  const Problem p = MakeProblem({1, 1, 1, 8, 4, true}, 11, 1.0f, true);
  std::vector<float> state = p.state0, out;
  Chunked(p, state, out);
  // S' = e^g S + k (beta (v - e^g S^T k))^T, o = S'^T q, in float64.
  const double decay = std::exp(double(p.g[0]));
  for (int c = 0; c < 4; ++c) {
    const float* col = p.state0.data() + c * 8;
    double kv = 0.0;
    for (int r = 0; r < 8; ++r) kv += decay * col[r] * p.k(0, 0)[r];
    const double delta = p.beta[0] * (p.v(0, 0)[c] - kv);
    double o = 0.0;
    for (int r = 0; r < 8; ++r) {
      const double s = decay * col[r] + p.k(0, 0)[r] * delta;
      EXPECT_NEAR(state[c * 8 + r], s, 1e-6) << "c " << c << " r " << r;
      o += s * p.q(0, 0)[r];
    }
    EXPECT_NEAR(out[c], o, 1e-6) << "c " << c;
  }
}

TEST(DeltaRuleChunkTest, ScratchHoldsEveryChunk) {
  EXPECT_EQ(ScratchFloats(1, 1, 16, 8), kChunk * (1 + 16 + 8) + kChunk * kChunk);
  EXPECT_EQ(ScratchFloats(65, 3, 16, 8), 2 * 3 * (kChunk * (1 + 16 + 8) + kChunk * kChunk));
  std::vector<float> scratch(static_cast<size_t>(ScratchFloats(65, 3, 16, 8)));
  const ChunkScratch last = ScratchOf(scratch.data(), 1, 2, 3, 16, 8);
  EXPECT_EQ(last.P + kChunk * kChunk, scratch.data() + scratch.size());
  EXPECT_EQ(KeyHeadOf(5, 2, 6, true), 1);
  EXPECT_EQ(KeyHeadOf(5, 2, 6, false), 1);
  EXPECT_EQ(KeyHeadOf(2, 2, 6, true), 0);
  EXPECT_EQ(KeyHeadOf(2, 2, 6, false), 0);
  EXPECT_EQ(KeyHeadOf(3, 2, 6, true), 1);
  EXPECT_EQ(KeyHeadOf(3, 2, 6, false), 1);
  EXPECT_EQ(KeyHeadOf(4, 2, 6, true), 0);
  EXPECT_EQ(KeyHeadOf(4, 2, 6, false), 1);
}

}  // namespace
}  // namespace moetier::cuda::delta_chunk
