#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "sampling/sampler.h"

namespace moetier {
namespace {

Sampler Make(int n_vocab, const SamplingParams& p) {
  absl::StatusOr<Sampler> s = Sampler::Create(n_vocab, p);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

SamplingParams Plain(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = 42;
  return p;
}

// Logits whose softmax is `probs` (up to a constant).
std::vector<float> FromProbs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Which ids `sampler` produces over many draws.
std::set<int32_t> Support(Sampler& sampler, const std::vector<float>& logits, int draws = 2000) {
  std::set<int32_t> seen;
  for (int i = 0; i < draws; ++i) seen.insert(sampler.Sample(logits));
  return seen;
}

TEST(SamplerTest, GreedyIsArgmax) {
  Sampler s = Make(6, Plain(0.0f));
  EXPECT_EQ(s.Sample(std::vector<float>{0.1f, -2.0f, 3.5f, 3.4f, -7.0f, 0.0f}), 2);
  EXPECT_EQ(s.Sample(std::vector<float>{-5.0f, -1.0f, -3.0f, -4.0f, -2.0f, -9.0f}), 1);
  // Ties go to the lower id.
  EXPECT_EQ(s.Sample(std::vector<float>{1.0f, 4.0f, 2.0f, 4.0f, 0.0f, 0.0f}), 1);
}

TEST(SamplerTest, SameSeedSameTokens) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = static_cast<float>(std::sin(i * 0.7) * 3.0);
  SamplingParams p = Plain(1.0f);
  p.seed = 1234;
  Sampler a = Make(100, p);
  Sampler b = Make(100, p);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(a.Sample(logits));
    tb.push_back(b.Sample(logits));
  }
  EXPECT_EQ(ta, tb);
  // It is actually random: a flat-ish distribution gives several tokens.
  EXPECT_GT(std::set<int32_t>(ta.begin(), ta.end()).size(), 5u);
  // Reset replays the sequence.
  a.Reset();
  std::vector<int32_t> again;
  for (int i = 0; i < 50; ++i) again.push_back(a.Sample(logits));
  EXPECT_EQ(again, ta);
  // Another seed gives another sequence.
  p.seed = 99;
  Sampler c = Make(100, p);
  std::vector<int32_t> tc;
  for (int i = 0; i < 50; ++i) tc.push_back(c.Sample(logits));
  EXPECT_NE(tc, ta);
}

TEST(SamplerTest, TopKOneIsGreedy) {
  SamplingParams p = Plain(1.5f);
  p.top_k = 1;
  Sampler s = Make(8, p);
  const std::vector<float> logits = {0.5f, 0.4f, 0.45f, 0.3f, 0.49f, 0.1f, 0.2f, 0.0f};
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.Sample(logits), 0);
}

TEST(SamplerTest, TopKKeepsTheKLargest) {
  SamplingParams p = Plain(100.0f);  // nearly uniform over what survives
  p.top_k = 3;
  Sampler s = Make(8, p);
  const std::vector<float> logits = {0.1f, 0.9f, 0.2f, 0.8f, 0.3f, 0.7f, 0.0f, 0.4f};
  EXPECT_EQ(Support(s, logits), (std::set<int32_t>{1, 3, 5}));
}

TEST(SamplerTest, TopPKeepsTheSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05.
  const std::vector<float> logits = FromProbs({0.15, 0.5, 0.05, 0.3});
  SamplingParams p = Plain(1.0f);
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8: tokens 1 and 3
  Sampler s = Make(4, p);
  EXPECT_EQ(Support(s, logits), (std::set<int32_t>{1, 3}));
  p.top_p = 0.9f;  // 0.8 < 0.9 <= 0.95: tokens 1, 3, 0
  Sampler s2 = Make(4, p);
  EXPECT_EQ(Support(s2, logits), (std::set<int32_t>{0, 1, 3}));
  p.top_p = 0.4f;
  Sampler s3 = Make(4, p);
  EXPECT_EQ(Support(s3, logits), (std::set<int32_t>{1}));
}

TEST(SamplerTest, MinPDropsTokensBelowAFractionOfTheTop) {
  const std::vector<float> logits = FromProbs({0.4, 0.05, 0.3, 0.15, 0.1});
  SamplingParams p = Plain(1.0f);
  p.min_p = 0.3f;  // threshold 0.12: tokens 0, 2, 3
  Sampler s = Make(5, p);
  EXPECT_EQ(Support(s, logits), (std::set<int32_t>{0, 2, 3}));
  // With top-p as well, each cuts what it should: top-p keeps 0 and 2 (0.7),
  // min-p alone would keep everything above 0.08.
  p.top_p = 0.65f;
  p.min_p = 0.2f;
  Sampler s2 = Make(5, p);
  EXPECT_EQ(Support(s2, logits), (std::set<int32_t>{0, 2}));
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f};
  const auto frequency_of_top = [&](float temperature) {
    Sampler s = Make(3, Plain(temperature));
    int top = 0;
    for (int i = 0; i < 4000; ++i) top += s.Sample(logits) == 0;
    return top / 4000.0;
  };
  const double p1 = std::exp(2.0) / (std::exp(2.0) + std::exp(1.0) + 1.0);  // 0.665
  EXPECT_NEAR(frequency_of_top(1.0f), p1, 0.03);
  EXPECT_GT(frequency_of_top(0.25f), 0.95);
  EXPECT_LT(frequency_of_top(10.0f), 0.45);
}

TEST(SamplerTest, RepeatPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p = Plain(0.0f);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 3;
  Sampler s = Make(4, p);
  // Token 0 (logit 3) is penalized to 1.5, below token 1 (2).
  s.Accept(0);
  EXPECT_EQ(s.Sample(std::vector<float>{3.0f, 2.0f, -1.0f, -1.2f}), 1);
  // Negative logits are multiplied: token 2 goes from -1 to -2, below token 3.
  p.repeat_penalty = 2.0f;
  Sampler n = Make(4, p);
  n.Accept(2);
  EXPECT_EQ(n.Sample(std::vector<float>{-5.0f, -5.0f, -1.0f, -1.5f}), 3);
  // A token repeated in the window is penalized once, not once per copy:
  // 3 / 2 = 1.5 still beats 1.4 (twice would give 0.75).
  Sampler once = Make(4, p);
  once.Accept(0);
  once.Accept(0);
  EXPECT_EQ(once.Sample(std::vector<float>{3.0f, 1.4f, 0.0f, 0.0f}), 0);
}

TEST(SamplerTest, RepeatPenaltyWindowForgetsOldTokens) {
  SamplingParams p = Plain(0.0f);
  p.repeat_penalty = 4.0f;
  p.repeat_last_n = 2;
  Sampler s = Make(4, p);
  const std::vector<float> logits = {3.0f, 2.0f, 0.0f, 0.0f};
  s.Accept(0);
  EXPECT_EQ(s.Sample(logits), 1);
  s.Accept(2);
  s.Accept(3);  // token 0 has left the window of 2
  EXPECT_EQ(s.Sample(logits), 0);
  // The caller's logits are not modified.
  EXPECT_EQ(logits[0], 3.0f);
}

TEST(SamplerTest, CreateRejectsBadParameters) {
  SamplingParams p = Plain(1.0f);
  p.temperature = -1.0f;
  EXPECT_FALSE(Sampler::Create(10, p).ok());
  p = Plain(1.0f);
  p.top_p = 1.5f;
  EXPECT_FALSE(Sampler::Create(10, p).ok());
  p = Plain(1.0f);
  p.min_p = -0.1f;
  EXPECT_FALSE(Sampler::Create(10, p).ok());
  p = Plain(1.0f);
  p.repeat_penalty = 0.0f;
  EXPECT_FALSE(Sampler::Create(10, p).ok());
  p = Plain(1.0f);
  p.top_k = -3;
  EXPECT_FALSE(Sampler::Create(10, p).ok());
  p = Plain(1.0f);
  p.repeat_last_n = -1;
  EXPECT_FALSE(Sampler::Create(10, p).ok());
  EXPECT_FALSE(Sampler::Create(0, Plain(1.0f)).ok());
}

// Past the edge the settings are trusted: a sampler given values that never
// passed ValidateSamplingParams is a bug, and it stops there.
TEST(SamplerDeathTest, TheConstructorAbortsOnImpossibleSettings) {
  SamplingParams p = Plain(1.0f);
  p.top_p = 1.5f;
  EXPECT_DEATH(Sampler(10, p), "check failed");
  EXPECT_DEATH(Sampler(0, Plain(1.0f)), "check failed");
}

TEST(SamplerTest, TopPZeroKeepsOnlyTheLikeliestToken) {
  // Exact values: 0 is not "off" here.
  SamplingParams p = Plain(1.0f);
  p.top_p = 0.0f;
  Sampler s(4, p);
  const std::vector<float> logits{0.5f, 0.4f, 0.6f, 0.3f};
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.Sample(logits), 2);
}

// The row's `m` best (higher logit first, equal logits lower id first): what
// an engine hands SampleFromBest.
void BestOf(const std::vector<float>& row, int m, std::vector<int32_t>& ids,
            std::vector<float>& logits) {
  std::vector<int32_t> order(row.size());
  for (size_t i = 0; i < row.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::partial_sort(order.begin(), order.begin() + m, order.end(), [&](int32_t a, int32_t b) {
    if (std::isnan(row[a]) || std::isnan(row[b])) {
      return std::isnan(row[a]) != std::isnan(row[b]) ? std::isnan(row[b]) : a < b;
    }
    return row[a] != row[b] ? row[a] > row[b] : a < b;
  });
  ids.assign(order.begin(), order.begin() + m);
  logits.clear();
  for (int32_t id : ids) logits.push_back(row[id]);
}

TEST(SamplerTest, CandidatesNeededIsTopKPlusThePenalizedOrTheWholeRow) {
  SamplingParams p = Plain(0.8f);
  EXPECT_EQ(Make(100, p).CandidatesNeeded(), 0);  // no top-k: the whole row
  p.top_k = 10;
  Sampler s = Make(100, p);
  EXPECT_EQ(s.CandidatesNeeded(), 10);
  s.Accept(3);
  EXPECT_EQ(s.CandidatesNeeded(), 10);  // no penalty: the window does not count
  p.repeat_penalty = 1.3f;
  p.repeat_last_n = 4;
  Sampler pen = Make(100, p);
  for (int32_t t : {7, 7, 9}) pen.Accept(t);
  EXPECT_EQ(pen.CandidatesNeeded(), 12);  // distinct tokens 7 and 9
  EXPECT_EQ(std::vector<int32_t>(pen.PenalizedTokens().begin(), pen.PenalizedTokens().end()),
            (std::vector<int32_t>{7, 9}));
  for (int32_t t : {1, 2, 5}) pen.Accept(t);  // 7 and 9 leave the window of 4
  EXPECT_EQ(pen.CandidatesNeeded(), 14);
  // Greedy looks at one token (and the penalized ones).
  SamplingParams greedy = Plain(0.0f);
  EXPECT_EQ(Make(100, greedy).CandidatesNeeded(), 1);
  // Where top-k does not cut the row, or the count reaches it: the whole row.
  p.top_k = 100;
  EXPECT_EQ(Make(100, p).CandidatesNeeded(), 0);
  p.top_k = 10;
  Sampler small = Make(12, p);
  for (int32_t t : {0, 1}) small.Accept(t);
  EXPECT_EQ(small.CandidatesNeeded(), 0);
}

// SampleFromBest draws Sample's tokens, bit for bit, from the row's best
// CandidatesNeeded() logits and the penalized tokens' logits alone, over
// whole generations (each token accepted into the penalty window) with
// ties, negative logits and every filter.
TEST(SamplerTest, SampleFromBestDrawsSamplesTokens) {
  struct Case {
    float temperature;
    int top_k;
    float top_p, min_p, penalty;
  };
  const Case cases[] = {
      {0.0f, 0, 1.0f, 0.0f, 1.0f},   {0.0f, 0, 1.0f, 0.0f, 1.5f},  {0.8f, 40, 0.95f, 0.05f, 1.0f},
      {1.0f, 1, 1.0f, 0.0f, 1.1f},   {1.3f, 5, 1.0f, 0.0f, 1.0f},  {0.7f, 20, 0.8f, 0.0f, 1.3f},
      {2.0f, 64, 1.0f, 0.2f, 2.0f},  {0.5f, 3, 0.5f, 0.1f, 0.7f},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "temperature " << c.temperature << ", top_k " << c.top_k
                                      << ", top_p " << c.top_p << ", min_p " << c.min_p
                                      << ", penalty " << c.penalty);
    SamplingParams p = Plain(c.temperature);
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.repeat_penalty = c.penalty;
    p.repeat_last_n = 16;
    const int n_vocab = 500;
    Sampler full = Make(n_vocab, p);
    Sampler part = Make(n_vocab, p);
    int from_best = 0;
    for (int step = 0; step < 300; ++step) {
      // Logits on a coarse grid, so that ties are common; a few tokens of
      // the recent window near the top, so that the penalty reorders them.
      std::vector<float> row(static_cast<size_t>(n_vocab));
      std::uniform_int_distribution<int> level(-40, 40);
      for (float& v : row) v = 0.25f * static_cast<float>(level(rng));
      for (int32_t t : part.PenalizedTokens()) {
        if (rng() % 3 == 0) row[static_cast<size_t>(t)] = 10.0f + 0.25f * (rng() % 4);
      }
      const int32_t want = full.Sample(row);
      const int m = part.CandidatesNeeded();
      int32_t got = -1;
      if (m > 0) {
        std::vector<int32_t> ids;
        std::vector<float> best;
        BestOf(row, m, ids, best);
        std::shuffle(ids.begin(), ids.end(), rng);  // any order
        best.clear();
        for (int32_t id : ids) best.push_back(row[static_cast<size_t>(id)]);
        std::vector<float> penalized;
        for (int32_t t : part.PenalizedTokens()) penalized.push_back(row[static_cast<size_t>(t)]);
        got = part.SampleFromBest(ids, best, penalized);
        ++from_best;
      } else {
        got = part.Sample(row);
      }
      ASSERT_EQ(got, want) << "step " << step;
      full.Accept(want);
      part.Accept(got);
    }
    // Only the whole-row settings (no top-k, temperature > 0) never used it.
    EXPECT_EQ(from_best > 0, c.temperature <= 0.0f || c.top_k > 0);
  }
}

// The candidates must include every penalized token: one that drops out of
// the top-k lets in a token that was only (k + 1)-th before the penalty.
TEST(SamplerTest, APenalizedTokenLeavingTheTopKLetsTheNextOneIn) {
  SamplingParams p = Plain(1.0f);
  p.top_k = 2;
  p.repeat_penalty = 100.0f;
  p.repeat_last_n = 4;
  Sampler s = Make(6, p);
  s.Accept(0);
  const std::vector<float> row = {9.0f, 5.0f, 4.0f, 0.0f, 0.0f, 0.0f};
  ASSERT_EQ(s.CandidatesNeeded(), 3);
  std::vector<int32_t> ids;
  std::vector<float> best;
  BestOf(row, 3, ids, best);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2}));
  // After the penalty token 0 has 0.09: the top 2 are tokens 1 and 2.
  std::set<int32_t> drawn;
  for (int i = 0; i < 400; ++i) drawn.insert(s.SampleFromBest(ids, best, std::vector<float>{9.0f}));
  EXPECT_EQ(drawn, (std::set<int32_t>{1, 2}));
}

// NaN logits rank below every number (the order the CUDA engine's
// candidate keys have), so a NaN is never drawn while k numbers remain,
// and SampleFromBest still agrees with Sample.
TEST(SamplerTest, NanLogitsRankLast) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> row = {nan, 1.0f, nan, 3.0f, -0.0f, 0.0f, 2.0f, nan};
  EXPECT_EQ(Make(8, Plain(0.0f)).Sample(row), 3);
  SamplingParams p = Plain(1.0f);
  p.top_k = 4;
  Sampler full = Make(8, p), part = Make(8, p);
  std::vector<int32_t> ids;
  std::vector<float> best;
  ASSERT_EQ(part.CandidatesNeeded(), 4);
  BestOf(row, 4, ids, best);
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 6, 1, 4}));  // -0 and +0 tie: the lower id
  for (int i = 0; i < 200; ++i) {
    const int32_t want = full.Sample(row);
    EXPECT_TRUE(want == 1 || want == 3 || want == 4 || want == 6) << want;
    EXPECT_EQ(part.SampleFromBest(ids, best, {}), want);
  }
}

}  // namespace
}  // namespace moetier
