#include "sampling/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace moetier {
namespace {

// log_softmax by the definition, in long double, and the ids by descending
// logit (ties to the lower id) with a full sort.
std::vector<long double> LogSoftmax(const std::vector<float>& logits) {
  long double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<long double>(l));
  std::vector<long double> out;
  for (float l : logits) out.push_back(l - std::log(sum));
  return out;
}

std::vector<int32_t> ByLikelihood(const std::vector<float>& logits) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return ids;
}

TEST(TokenLogprobsTest, AgreeWithTheDefinitionOnRandomRows) {
  std::mt19937 rng(7);
  std::normal_distribution<float> logit(0.0f, 4.0f);
  for (int n_vocab : {1, 5, 300, 4096}) {
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    for (float& l : logits) l = logit(rng);
    // A few exact ties, so their order is tested.
    if (n_vocab > 10) logits[9] = logits[3] = logits[ByLikelihood(logits)[0]];
    const std::vector<long double> expected = LogSoftmax(logits);
    const std::vector<int32_t> order = ByLikelihood(logits);
    for (int top_n : {0, 1, 3, kMaxTopLogprobs}) {
      const int32_t chosen = static_cast<int32_t>(rng() % n_vocab);
      TokenLogprobs got;
      ComputeTokenLogprobs(logits, chosen, top_n, &got);
      EXPECT_NEAR(got.chosen, expected[chosen], 1e-5) << n_vocab << " " << top_n;
      ASSERT_EQ(got.top.size(), std::min<size_t>(top_n, n_vocab));
      for (size_t i = 0; i < got.top.size(); ++i) {
        EXPECT_EQ(got.top[i].token_id, order[i]) << "rank " << i << " of " << n_vocab;
        EXPECT_NEAR(got.top[i].logprob, expected[order[i]], 1e-5);
      }
    }
  }
}

TEST(TokenLogprobsTest, LargeLogitsDoNotOverflow) {
  const std::vector<float> logits = {1000.0f, 999.0f, -1000.0f};
  TokenLogprobs got;
  ComputeTokenLogprobs(logits, 1, 2, &got);
  const double log_norm = 1000.0 + std::log(1.0 + std::exp(-1.0));
  EXPECT_NEAR(got.chosen, 999.0 - log_norm, 1e-4);
  ASSERT_EQ(got.top.size(), 2u);
  EXPECT_EQ(got.top[0].token_id, 0);
  EXPECT_NEAR(got.top[0].logprob, 1000.0 - log_norm, 1e-4);
  EXPECT_TRUE(std::isfinite(got.top[1].logprob));
}

TEST(TokenLogprobsTest, ProbabilitiesOfTheWholeRowSumToOne) {
  std::vector<float> logits(64);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i)) * 9.0f;
  double sum = 0.0;
  for (int32_t id = 0; id < 64; ++id) {
    TokenLogprobs got;
    ComputeTokenLogprobs(logits, id, 0, &got);
    EXPECT_TRUE(got.top.empty());
    sum += std::exp(static_cast<double>(got.chosen));
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

}  // namespace
}  // namespace moetier
