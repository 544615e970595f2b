// ValidateSamplingParams names the bad field as the edge calls it, with its
// value and range; the control protocol carries every setting exactly, both
// ways, and refuses a message that lacks one; the one stop-reason enum
// survives the control protocol both ways.
#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "request/control_codec.h"
#include "request/sampling_params.h"
#include "request/stop_reason.h"

namespace moetier {
namespace {

using ::testing::AllOf;
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

TEST(ControlCodecTest, SamplingTravelsExactly) {
  const SamplingParams sent{.temperature = 0.7f,
                            .top_k = 20,
                            .top_p = 0.5f,
                            .min_p = 0.1f,
                            .repeat_penalty = 1.3f,
                            .repeat_last_n = 32,
                            .seed = 0xfedcba9876543210ull};
  const control_v1::Sampling wire = SamplingToControl(sent);
  // Over the wire and back, as the daemon and the worker see it.
  control_v1::Sampling parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire.SerializeAsString()));
  absl::StatusOr<SamplingParams> got = SamplingFromControl(parsed);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->temperature, 0.7f);
  EXPECT_EQ(got->top_k, 20);
  EXPECT_EQ(got->top_p, 0.5f);
  EXPECT_EQ(got->min_p, 0.1f);
  EXPECT_EQ(got->repeat_penalty, 1.3f);
  EXPECT_EQ(got->repeat_last_n, 32);
  EXPECT_EQ(got->seed, 0xfedcba9876543210ull);
}

TEST(ControlCodecTest, ZeroStaysZero) {
  // No "0 means off" on this side of the edge: top_p 0 keeps one token,
  // repeat_last_n 0 switches the penalty off, and all of it arrives as sent.
  const SamplingParams sent{.top_p = 0.0f, .repeat_last_n = 0};
  control_v1::Sampling parsed;
  ASSERT_TRUE(parsed.ParseFromString(SamplingToControl(sent).SerializeAsString()));
  EXPECT_TRUE(parsed.has_top_p());
  EXPECT_TRUE(parsed.has_temperature());
  absl::StatusOr<SamplingParams> got = SamplingFromControl(parsed);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->top_p, 0.0f);
  EXPECT_EQ(got->repeat_last_n, 0);
  EXPECT_EQ(got->temperature, 0.0f);
  EXPECT_EQ(got->repeat_penalty, 1.0f);
}

TEST(ControlCodecTest, AMessageLackingAFieldIsRefusedNamingIt) {
  control_v1::Sampling s = SamplingToControl(SamplingParams{});
  s.clear_repeat_penalty();
  absl::StatusOr<SamplingParams> got = SamplingFromControl(s);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("lack repeat_penalty"));
  EXPECT_THAT(SamplingFromControl(control_v1::Sampling()).status().message(),
              HasSubstr("lack temperature"));
}

TEST(ControlCodecTest, EveryStopReasonTravelsBothWays) {
  for (StopReason r : {StopReason::kEndOfGeneration, StopReason::kMaxTokens,
                       StopReason::kContextFull, StopReason::kCancelled, StopReason::kError,
                       StopReason::kComplete}) {
    const control_v1::StopReason wire = StopReasonToControl(r);
    EXPECT_NE(wire, control_v1::STOP_UNSPECIFIED);
    absl::StatusOr<StopReason> back = StopReasonFromControl(wire);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, r);
  }
  EXPECT_EQ(StopReasonFromControl(control_v1::STOP_UNSPECIFIED).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StopReasonFromControl(static_cast<control_v1::StopReason>(77)).status().message(),
              AllOf(HasSubstr("77"), HasSubstr("not one this build knows")));
}

}  // namespace
}  // namespace moetier
