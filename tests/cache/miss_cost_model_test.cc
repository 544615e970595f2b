#include "cache/miss_cost_model.h"

#include <vector>

#include "gtest/gtest.h"

namespace moetier {
namespace {

// 1 GB/s copies; host 1 ms per expert + 1 ms per row; device free.
MissCostModel GpuLike() {
  MissCostModel m;
  m.copy_bytes_per_s = 1e9;
  m.host = {1e-3, 1e-3};
  m.device = {0, 0};
  m.sites_overlap = true;
  return m;
}

std::vector<bool> Assign(const MissCostModel& m, const std::vector<MissCost>& misses) {
  std::unique_ptr<bool[]> on_host(new bool[misses.size() + 1]);
  std::vector<uint32_t> scratch(misses.size());
  AssignMisses(m, misses, std::span<bool>(on_host.get(), misses.size()), scratch);
  return std::vector<bool>(on_host.get(), on_host.get() + misses.size());
}

TEST(MissPolicyTest, NamesRoundTripAndBadNamesSayWhatIsExpected) {
  for (MissPolicy p : {MissPolicy::kCopy, MissPolicy::kHost, MissPolicy::kAuto}) {
    absl::StatusOr<MissPolicy> parsed = ParseMissPolicy(MissPolicyName(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(MissPolicyName(MissPolicy::kHost), "cpu");
  const absl::StatusOr<MissPolicy> bad = ParseMissPolicy("gpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("copy, cpu or auto"), absl::string_view::npos);
}

TEST(MissCostModelTest, OverlappingSitesBalanceHostAgainstCopies) {
  // Four misses of 4 MB (4 ms to copy each), one row each (2 ms on the
  // host). All copied: 16 ms. Moving two to the host: max(4, 8) = 8 ms;
  // a third: max(6, 4) = 6 ms; a fourth: max(8, 0) = 8 ms, worse.
  const std::vector<MissCost> misses(4, MissCost{4'000'000, 1});
  const std::vector<bool> on_host = Assign(GpuLike(), misses);
  int n_host = 0;
  for (bool h : on_host) n_host += h;
  EXPECT_EQ(n_host, 3);
}

TEST(MissCostModelTest, ManyRowsMakeTheHostExpensiveSoPrefillCopies) {
  // 100 rows per expert: 101 ms on the host against 4 ms to copy.
  const std::vector<MissCost> misses(6, MissCost{4'000'000, 100});
  for (bool h : Assign(GpuLike(), misses)) EXPECT_FALSE(h);
}

TEST(MissCostModelTest, CheapestRelativeToItsCopyGoesToTheHostFirst) {
  // Same bytes; the one-row miss is far cheaper on the host than the
  // 50-row ones, so it moves first and alone.
  const std::vector<MissCost> misses = {{4'000'000, 50}, {4'000'000, 1}, {4'000'000, 50}};
  const std::vector<bool> on_host = Assign(GpuLike(), misses);
  EXPECT_EQ(on_host, (std::vector<bool>{false, true, false}));
}

TEST(MissCostModelTest, SharedCoresPickTheCheaperSideForEachMiss) {
  MissCostModel m = GpuLike();
  m.sites_overlap = false;
  m.host = {1e-3, 0};
  m.device = {1e-3, 0};  // the same work on either side, as on the CPU worker
  for (bool h : Assign(m, std::vector<MissCost>(5, MissCost{1000, 1}))) EXPECT_TRUE(h);
  m.host = {1.0, 0};  // a slow host: copying wins
  for (bool h : Assign(m, std::vector<MissCost>(5, MissCost{1000, 1}))) EXPECT_FALSE(h);
}

TEST(MissCostModelTest, WithoutACopyRateNothingIsCopied) {
  MissCostModel m = GpuLike();
  m.copy_bytes_per_s = 0;
  for (bool h : Assign(m, std::vector<MissCost>(3, MissCost{1000, 1}))) EXPECT_TRUE(h);
}

TEST(MissCostModelTest, NoMissesIsFine) {
  EXPECT_TRUE(Assign(GpuLike(), {}).empty());
}

}  // namespace
}  // namespace moetier
