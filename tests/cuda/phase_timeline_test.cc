// The CUDA engine's phase bookkeeping (worker/blocks/cuda/phase_timeline.h)
// over a fake event clock: which interval counts for which phase, the ring
// of events when a pass has more marks than the clock holds, and passes cut
// short by errors.
#include "blocks/cuda/phase_timeline.h"

#include <gtest/gtest.h>

#include <vector>

namespace moetier {
namespace {

// Events stamped with a device time the test moves on between marks.
class FakeClock final : public PhaseEventClock {
 public:
  explicit FakeClock(int capacity) : stamps_(static_cast<size_t>(capacity), -1.0) {}
  int capacity() const override { return static_cast<int>(stamps_.size()); }
  absl::Status Record(int i) override {
    if (fail_records_ > 0 && --fail_records_ == 0) return absl::InternalError("record failed");
    stamps_.at(static_cast<size_t>(i)) = now;
    return absl::OkStatus();
  }
  absl::Status Wait(int i) override {
    waits.push_back(i);
    return absl::OkStatus();
  }
  absl::StatusOr<double> Seconds(int from, int to) override {
    const double a = stamps_.at(static_cast<size_t>(from));
    const double b = stamps_.at(static_cast<size_t>(to));
    if (a < 0 || b < 0) return absl::FailedPreconditionError("event never recorded");
    return b - a;
  }
  // The n-th Record from now on fails (1: the next).
  void FailRecord(int n) { fail_records_ = n; }

  double now = 0.0;
  std::vector<int> waits;

 private:
  std::vector<double> stamps_;
  int fail_records_ = 0;
};

double At(const CudaPhaseSeconds& s, CudaPhase p) { return s[static_cast<size_t>(p)]; }

// A pass of marks: each entry's phase ends `dt` after the previous mark.
struct Step {
  CudaPhase phase;
  double dt;
};
const std::vector<Step> kPass = {
    {CudaPhase::kEmbed, 1},       {CudaPhase::kAttentionProjections, 2},
    {CudaPhase::kAttention, 4},   {CudaPhase::kAttentionProjections, 8},
    {CudaPhase::kRouter, 16},     {CudaPhase::kHostRouting, 32},
    {CudaPhase::kExpertFetch, 64}, {CudaPhase::kExperts, 128},
    {CudaPhase::kOutput, 256},
};

void RunPass(PhaseTimeline& timeline, FakeClock& clock) {
  ASSERT_TRUE(timeline.Start().ok());
  for (const Step& step : kPass) {
    clock.now += step.dt;
    ASSERT_TRUE(timeline.Mark(step.phase).ok());
  }
  ASSERT_TRUE(timeline.Collect().ok());
}

TEST(PhaseTimelineTest, EachIntervalCountsForTheMarkThatEndsIt) {
  FakeClock clock(64);
  PhaseTimeline timeline(clock);
  clock.now = 100.0;  // the pass's start, not counted
  RunPass(timeline, clock);
  const CudaPhaseSeconds& s = timeline.seconds();
  EXPECT_EQ(At(s, CudaPhase::kEmbed), 1);
  EXPECT_EQ(At(s, CudaPhase::kAttentionProjections), 2 + 8);
  EXPECT_EQ(At(s, CudaPhase::kAttention), 4);
  EXPECT_EQ(At(s, CudaPhase::kRouter), 16);
  EXPECT_EQ(At(s, CudaPhase::kHostRouting), 32);
  EXPECT_EQ(At(s, CudaPhase::kExpertFetch), 64);
  EXPECT_EQ(At(s, CudaPhase::kExperts), 128);
  EXPECT_EQ(At(s, CudaPhase::kOutput), 256);
  EXPECT_EQ(At(s, CudaPhase::kDeltaNet), 0);
  EXPECT_EQ(At(s, CudaPhase::kSharedExpert), 0);
  // Collect waits for the newest mark only.
  EXPECT_EQ(clock.waits, std::vector<int>{static_cast<int>(kPass.size())});
  EXPECT_FALSE(timeline.in_pass());

  // A second pass adds to the first; the gap between passes counts nowhere.
  clock.now += 1000.0;
  RunPass(timeline, clock);
  EXPECT_EQ(At(timeline.seconds(), CudaPhase::kOutput), 512);
  EXPECT_EQ(At(timeline.seconds(), CudaPhase::kAttentionProjections), 20);
  timeline.Reset();
  for (double v : timeline.seconds()) EXPECT_EQ(v, 0.0);
}

TEST(PhaseTimelineTest, APassLongerThanTheRingAddsTheSame) {
  FakeClock big(64);
  PhaseTimeline whole(big);
  RunPass(whole, big);
  for (int capacity : {2, 3, 4, 5}) {
    SCOPED_TRACE(capacity);
    FakeClock small(capacity);
    PhaseTimeline ring(small);
    RunPass(ring, small);
    EXPECT_EQ(ring.seconds(), whole.seconds());
    // It waited mid-pass each time the ring filled, then once at the end.
    const int n_marks = static_cast<int>(kPass.size());
    EXPECT_EQ(static_cast<int>(small.waits.size()), (n_marks - 1) / (capacity - 1) + 1);
  }
}

TEST(PhaseTimelineTest, MarksOutsideAPassAreIgnored) {
  FakeClock clock(8);
  PhaseTimeline timeline(clock);
  clock.now = 5.0;
  EXPECT_TRUE(timeline.Mark(CudaPhase::kExperts).ok());
  EXPECT_TRUE(timeline.Collect().ok());
  EXPECT_TRUE(clock.waits.empty());
  for (double v : timeline.seconds()) EXPECT_EQ(v, 0.0);
}

TEST(PhaseTimelineTest, AnUncollectedPassIsDroppedByTheNextStart) {
  FakeClock clock(8);
  PhaseTimeline timeline(clock);
  ASSERT_TRUE(timeline.Start().ok());
  clock.now += 7.0;
  ASSERT_TRUE(timeline.Mark(CudaPhase::kRouter).ok());
  // The pass failed before Collect; the next one starts afresh.
  clock.now += 50.0;
  ASSERT_TRUE(timeline.Start().ok());
  clock.now += 3.0;
  ASSERT_TRUE(timeline.Mark(CudaPhase::kExperts).ok());
  ASSERT_TRUE(timeline.Collect().ok());
  EXPECT_EQ(At(timeline.seconds(), CudaPhase::kRouter), 0);
  EXPECT_EQ(At(timeline.seconds(), CudaPhase::kExperts), 3);
}

TEST(PhaseTimelineTest, AFailedRecordEndsThePassWithItsError) {
  FakeClock clock(8);
  PhaseTimeline timeline(clock);
  ASSERT_TRUE(timeline.Start().ok());
  clock.now += 1.0;
  ASSERT_TRUE(timeline.Mark(CudaPhase::kEmbed).ok());
  clock.FailRecord(1);
  clock.now += 1.0;
  const absl::Status s = timeline.Mark(CudaPhase::kRouter);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(timeline.in_pass());
  // Nothing of the broken pass is added, and later marks are ignored.
  EXPECT_TRUE(timeline.Mark(CudaPhase::kExperts).ok());
  EXPECT_TRUE(timeline.Collect().ok());
  for (double v : timeline.seconds()) EXPECT_EQ(v, 0.0);

  clock.FailRecord(1);
  EXPECT_FALSE(timeline.Start().ok());
  EXPECT_FALSE(timeline.in_pass());
}

TEST(PhaseTimelineTest, AClockTooSmallForAnIntervalTimesNothing) {
  FakeClock clock(1);
  PhaseTimeline timeline(clock);
  EXPECT_EQ(timeline.Start().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(timeline.in_pass());
  EXPECT_TRUE(timeline.Mark(CudaPhase::kExperts).ok());
  EXPECT_TRUE(timeline.Collect().ok());
  for (double v : timeline.seconds()) EXPECT_EQ(v, 0.0);
}

TEST(PhaseTimelineTest, EveryPhaseHasItsOwnName) {
  std::vector<std::string_view> names;
  for (size_t i = 0; i < kCudaPhaseCount; ++i) {
    const std::string_view name = CudaPhaseName(static_cast<CudaPhase>(i));
    EXPECT_FALSE(name.empty());
    EXPECT_NE(name, "unknown");
    for (std::string_view other : names) EXPECT_NE(name, other);
    names.push_back(name);
  }
  EXPECT_EQ(CudaPhaseName(CudaPhase::kCount), "unknown");
}

}  // namespace
}  // namespace moetier
