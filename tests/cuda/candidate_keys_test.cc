// The device's candidate keys (worker/backend/cuda/candidate_keys.h) sort
// exactly as the host sampler ranks tokens: higher logit first, equal
// logits (-0 and +0 among them) lower id first, infinities at the ends, NaN
// last; and a key gives back its id and logit.
#include "backend/cuda/candidate_keys.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace moetier::cuda {
namespace {

// The sampler's order (Sampler::Before): NaN last, NaNs by id.
bool SamplerBefore(float a, int32_t a_id, float b, int32_t b_id) {
  if (std::isnan(a) || std::isnan(b)) {
    return std::isnan(a) != std::isnan(b) ? std::isnan(b) : a_id < b_id;
  }
  return a != b ? a > b : a_id < b_id;
}

TEST(CandidateKeysTest, AscendingKeysAreTheSamplersOrder) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> values = {0.0f,   -0.0f,   1.0f,   -1.0f,  inf,        -inf,  nan,
                               1e-45f, -1e-45f, 3.4e38f, -3.4e38f, 0.5f, 0.5f, -2.25f, nan};
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> level(-64, 64);
  std::normal_distribution<float> wide(0.0f, 30.0f);
  for (int i = 0; i < 400; ++i) values.push_back(0.125f * static_cast<float>(level(rng)));
  for (int i = 0; i < 400; ++i) values.push_back(wide(rng));
  for (size_t a = 0; a < values.size(); ++a) {
    for (size_t b = 0; b < values.size(); ++b) {
      const int32_t a_id = static_cast<int32_t>(a), b_id = static_cast<int32_t>(b);
      ASSERT_EQ(CandidateKey(values[a], a_id) < CandidateKey(values[b], b_id),
                SamplerBefore(values[a], a_id, values[b], b_id))
          << values[a] << " (id " << a << ") vs " << values[b] << " (id " << b << ")";
    }
  }
}

TEST(CandidateKeysTest, NanRanksLastAndKeysGiveBackIdAndLogit) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_GT(CandidateKey(nan, 0), CandidateKey(-inf, 1));
  for (float v : {0.0f, 1.5f, -7.25f, inf, -inf, 1e-45f, -3.4e38f}) {
    for (int32_t id : {0, 1, 151935, 2147483647}) {
      const uint64_t key = CandidateKey(v, id);
      EXPECT_EQ(CandidateId(key), id);
      EXPECT_EQ(CandidateLogit(key), v);
    }
  }
  EXPECT_FALSE(std::signbit(CandidateLogit(CandidateKey(-0.0f, 3))));  // -0 is held as +0
  EXPECT_TRUE(std::isnan(CandidateLogit(CandidateKey(nan, 3))));
}

}  // namespace
}  // namespace moetier::cuda
