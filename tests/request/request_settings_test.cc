// ValidateSamplingParams names the bad field as the edge calls it, with its
// value and range.
#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "request/sampling_params.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;

TEST(SamplingParamsTest, TheDefaultsAreValid) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  EXPECT_TRUE(ValidateSamplingParams(kCommandLineSamplingDefaults).ok());
  // The plain defaults switch everything off: greedy decoding.
  const SamplingParams off;
  EXPECT_EQ(off.temperature, 0.0f);
  EXPECT_EQ(off.top_k, 0);
  EXPECT_EQ(off.top_p, 1.0f);
  EXPECT_EQ(off.min_p, 0.0f);
  EXPECT_EQ(off.repeat_penalty, 1.0f);
}

TEST(SamplingParamsTest, TheEdgesOfEachRangeAreValid) {
  for (const SamplingParams& p : {
           SamplingParams{.top_p = 0.0f},
           SamplingParams{.min_p = 1.0f},
           SamplingParams{.repeat_penalty = 1e-6f},
           SamplingParams{.repeat_last_n = 0},
           SamplingParams{.repeat_last_n = kMaxRepeatLastN},
           SamplingParams{.temperature = 1e6f, .top_k = std::numeric_limits<int32_t>::max()},
       }) {
    EXPECT_TRUE(ValidateSamplingParams(p).ok()) << ValidateSamplingParams(p);
  }
}

TEST(SamplingParamsTest, ABadValueIsNamedWithItsRange) {
  const float nan = std::nanf("");
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    SamplingParams params;
    const char* field;
    const char* value;
    const char* range;
  };
  const Case cases[] = {
      {{.temperature = -0.5f}, "temperature", "-0.5", "finite and >= 0"},
      {{.temperature = inf}, "temperature", "inf", "finite and >= 0"},
      {{.top_k = -1}, "top_k", "-1", ">= 0"},
      {{.top_p = 1.5f}, "top_p", "1.5", "in [0, 1]"},
      {{.top_p = nan}, "top_p", "nan", "in [0, 1]"},
      {{.min_p = -0.1f}, "min_p", "-0.1", "in [0, 1]"},
      {{.repeat_penalty = 0.0f}, "repeat_penalty", "0", "finite and > 0"},
      {{.repeat_penalty = nan}, "repeat_penalty", "nan", "finite and > 0"},
      {{.repeat_last_n = -1}, "repeat_last_n", "-1", "in 0..1048576"},
      {{.repeat_last_n = kMaxRepeatLastN + 1}, "repeat_last_n", "1048577", "in 0..1048576"},
  };
  for (const Case& c : cases) {
    const absl::Status s = ValidateSamplingParams(c.params);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(std::string(s.message()),
              std::string(c.field) + " is " + c.value + "; it must be " + c.range);
  }
}

TEST(SamplingParamsTest, AnEdgeNamesTheFieldsItsOwnWay) {
  const SamplingFieldNames flags{.top_p = "flag --top-p", .repeat_penalty = "flag --repeat-penalty"};
  EXPECT_EQ(ValidateSamplingParams({.top_p = 2.0f}, flags).message(),
            "flag --top-p is 2; it must be in [0, 1]");
  EXPECT_EQ(ValidateSamplingParams({.repeat_penalty = -1.0f}, flags).message(),
            "flag --repeat-penalty is -1; it must be finite and > 0");
  // Fields the edge does not rename keep their own names.
  EXPECT_THAT(ValidateSamplingParams({.top_k = -2}, flags).message(), HasSubstr("top_k is -2"));
}

}  // namespace
}  // namespace moetier
