// Locking the store as it fills: the preload locks chunk by chunk as its
// reads reach them, a cache is locked before it serves, no lock call is
// larger than a chunk, progress reports climb to their totals, and a chunk
// that cannot be locked stops the start with how much was locked (or, with
// allow_unlocked_memory, lets it go on unlocked). The lock calls go through
// the injected lock function, so this runs wherever mlock is limited.
#include <cerrno>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/pread_backend.h"
#include "log/daemon_log.h"
#include "store/expert_store.h"
#include "store/segment_plan.h"
#include "store_test_util.h"
#include "util/byte_size.h"

namespace moetier {
namespace {

using daemon_test::ManifestOf;
using daemon_test::ScratchDir;
using daemon_test::TestModel;
using ::testing::HasSubstr;

constexpr uint64_t kChunk = 16 << 10;

struct LockCall {
  uintptr_t address;
  uint64_t bytes;
};

// What the store did, recorded from its threads.
struct Recorder {
  std::mutex mutex;
  std::vector<LockCall> calls;
  std::map<std::string, std::vector<StartupProgress>> reports;  // by phase
  std::vector<std::string> phases;                              // in order of first report
  int fail_at_call = -1;                                        // -1: never

  void Install(ExpertStoreOptions& options) {
    options.segment.lock_chunk_bytes = kChunk;
    options.segment.lock_function = [this](void* address, uint64_t bytes) {
      std::lock_guard<std::mutex> lock(mutex);
      if (static_cast<int>(calls.size()) == fail_at_call) return ENOMEM;
      calls.push_back({reinterpret_cast<uintptr_t>(address), bytes});
      return 0;
    };
    options.on_startup_progress = [this](const StartupProgress& p) {
      std::lock_guard<std::mutex> lock(mutex);
      const std::string phase(p.phase);
      if (!reports.count(phase)) phases.push_back(phase);
      reports[phase].push_back(p);
    };
  }
  uint64_t LockedTotal() {
    std::lock_guard<std::mutex> lock(mutex);
    uint64_t total = 0;
    for (const LockCall& c : calls) total += c.bytes;
    return total;
  }
};

// Every call within a chunk, each starting where the last ended.
void ExpectChunkedFromTheStart(const std::vector<LockCall>& calls) {
  ASSERT_FALSE(calls.empty());
  uintptr_t next = calls[0].address;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_LE(calls[i].bytes, kChunk) << "lock call " << i;
    EXPECT_GT(calls[i].bytes, 0u) << "lock call " << i;
    EXPECT_EQ(calls[i].address, next) << "lock call " << i << " leaves a gap or overlaps";
    next = calls[i].address + calls[i].bytes;
  }
}

void ExpectClimbsToTheTotal(const std::vector<StartupProgress>& reports, const char* phase) {
  ASSERT_FALSE(reports.empty()) << phase;
  for (size_t i = 1; i < reports.size(); ++i) {
    EXPECT_GE(reports[i].done_bytes, reports[i - 1].done_bytes) << phase << " report " << i;
    EXPECT_EQ(reports[i].total_bytes, reports[0].total_bytes) << phase;
  }
  EXPECT_EQ(reports.front().done_bytes, 0u) << phase << " starts with a report";
  EXPECT_EQ(reports.back().done_bytes, reports.back().total_bytes) << phase << " ends at 100%";
  EXPECT_GT(reports.back().total_bytes, 0u) << phase;
}

class StoreLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_test::TestModelOptions o;
    o.n_layer = 3;
    o.n_expert = 8;
    absl::StatusOr<TestModel> model = daemon_test::WriteTestModel(dir_.path(), "m", o);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    absl::StatusOr<ModelManifest> manifest = ManifestOf(model_);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    manifest_ = std::move(*manifest);
  }
  absl::StatusOr<std::unique_ptr<ExpertStore>> Create(Recorder& recorder,
                                                      uint64_t ram_budget_bytes = 0,
                                                      bool allow_unlocked = false) {
    ExpertStoreOptions options;
    options.ram_budget_bytes = ram_budget_bytes;
    options.segment.allow_unlocked_memory = allow_unlocked;
    recorder.Install(options);
    return ExpertStore::Create(manifest_, std::make_unique<PreadBackend>(8), options);
  }

  ScratchDir dir_;
  TestModel model_;
  ModelManifest manifest_;
};

TEST_F(StoreLockTest, PreloadLocksEachChunkAsItsReadsReachIt) {
  absl::StatusOr<SegmentPlan> plan = PlanSegment(manifest_, 0);
  ASSERT_TRUE(plan.ok());
  ASSERT_GT(plan->slot_area_bytes, 4 * kChunk) << "the test needs a store of several chunks";
  Recorder recorder;
  absl::StatusOr<std::unique_ptr<ExpertStore>> s = Create(recorder);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpertStore& store = **s;
  ASSERT_EQ(store.mode(), store::StoreMode::kFullyResident);
  // Before the preload: the tables and dense weights, not the slots.
  EXPECT_GE(store.locked_bytes(), plan->slot_area_offset / kChunk * kChunk);
  EXPECT_LE(store.locked_bytes(), plan->slot_area_offset + kChunk);
  EXPECT_FALSE(store.memory_locked());
  store.Start();
  ASSERT_TRUE(store.WaitUntilReady(10000));
  EXPECT_TRUE(store.memory_locked());
  EXPECT_EQ(store.locked_bytes(), store.segment_bytes());
  EXPECT_EQ(store.startup_failure(), std::nullopt);

  std::lock_guard<std::mutex> lock(recorder.mutex);
  ExpectChunkedFromTheStart(recorder.calls);
  uint64_t total = 0;
  for (const LockCall& c : recorder.calls) total += c.bytes;
  EXPECT_EQ(total, store.segment_bytes()) << "every byte locked exactly once";
  EXPECT_GE(recorder.calls.size(), store.segment_bytes() / kChunk);
  EXPECT_THAT(recorder.phases,
              ::testing::ElementsAre("copying dense weights", "preloading experts"));
  ExpectClimbsToTheTotal(recorder.reports["copying dense weights"], "dense");
  ExpectClimbsToTheTotal(recorder.reports["preloading experts"], "preload");
  EXPECT_EQ(recorder.reports["copying dense weights"].back().total_bytes, manifest_.dense_bytes);
  EXPECT_EQ(recorder.reports["preloading experts"].back().total_bytes,
            manifest_.total_expert_bytes);
}

TEST_F(StoreLockTest, ACacheIsLockedInChunksBeforeItServes) {
  absl::StatusOr<SegmentPlan> full = PlanSegment(manifest_, 0);
  ASSERT_TRUE(full.ok());
  Recorder recorder;
  absl::StatusOr<std::unique_ptr<ExpertStore>> s =
      Create(recorder, FixedSegmentBytes(manifest_) + 12 * full->max_span_bytes);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpertStore& store = **s;
  ASSERT_EQ(store.mode(), store::StoreMode::kCache);
  EXPECT_TRUE(store.memory_locked()) << "locked before Create returns";
  std::lock_guard<std::mutex> lock(recorder.mutex);
  ExpectChunkedFromTheStart(recorder.calls);
  EXPECT_EQ(recorder.phases.back(), "locking the expert cache");
  const std::vector<StartupProgress>& locking = recorder.reports["locking the expert cache"];
  ASSERT_FALSE(locking.empty());
  for (size_t i = 1; i < locking.size(); ++i) {
    EXPECT_GE(locking[i].done_bytes, locking[i - 1].done_bytes);
  }
  EXPECT_EQ(locking.back().done_bytes, store.segment_bytes());
  EXPECT_EQ(locking.back().total_bytes, store.segment_bytes());
}

TEST_F(StoreLockTest, AChunkThatCannotBeLockedAtStartFailsCreateSayingHowMuchWasLocked) {
  Recorder recorder;
  recorder.fail_at_call = 0;
  absl::StatusOr<std::unique_ptr<ExpertStore>> s = Create(recorder);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("with 0 B of it locked"));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("RLIMIT_MEMLOCK is"));
}

TEST_F(StoreLockTest, AChunkThatCannotBeLockedDuringThePreloadStopsTheStart) {
  absl::StatusOr<SegmentPlan> plan = PlanSegment(manifest_, 0);
  ASSERT_TRUE(plan.ok());
  Recorder recorder;
  // The third chunk of the slots: its experts' reads are under way.
  recorder.fail_at_call = static_cast<int>(plan->slot_area_offset / kChunk) + 3;
  absl::StatusOr<std::unique_ptr<ExpertStore>> s = Create(recorder);
  ASSERT_TRUE(s.ok()) << s.status();
  const uint64_t locked_before_preload = (*s)->locked_bytes();
  (*s)->Start();
  EXPECT_FALSE((*s)->WaitUntilReady(10000));
  const std::optional<std::string> failure = (*s)->startup_failure();
  ASSERT_TRUE(failure.has_value());
  const uint64_t locked = recorder.LockedTotal();
  EXPECT_GT(locked, locked_before_preload);
  EXPECT_EQ((*s)->locked_bytes(), locked);
  EXPECT_THAT(*failure, HasSubstr(absl::StrFormat("with %s of it locked", FormatBytes(locked))));
  EXPECT_THAT(*failure, HasSubstr("RLIMIT_MEMLOCK is"));
  EXPECT_THAT(*failure, HasSubstr("allow_unlocked_memory"));
  EXPECT_EQ((*s)->phase(), store::DaemonPhase::kStopping);
}

TEST_F(StoreLockTest, AllowUnlockedMemoryFinishesThePreloadUnlockedWithAWarning) {
  absl::StatusOr<SegmentPlan> plan = PlanSegment(manifest_, 0);
  ASSERT_TRUE(plan.ok());
  std::vector<std::string> warnings;
  std::mutex warnings_mutex;
  SetLogSink([&](LogLevel level, std::string_view message) {
    std::lock_guard<std::mutex> lock(warnings_mutex);
    if (level == LogLevel::kWarning) warnings.emplace_back(message);
  });
  Recorder recorder;
  recorder.fail_at_call = static_cast<int>(plan->slot_area_offset / kChunk) + 3;
  absl::StatusOr<std::unique_ptr<ExpertStore>> s = Create(recorder, 0, /*allow_unlocked=*/true);
  ASSERT_TRUE(s.ok()) << s.status();
  (*s)->Start();
  const bool ready = (*s)->WaitUntilReady(10000);
  (*s)->Stop();
  SetLogSink(nullptr);
  ASSERT_TRUE(ready);
  EXPECT_FALSE((*s)->memory_locked());
  EXPECT_EQ((*s)->startup_failure(), std::nullopt);
  EXPECT_EQ((*s)->counters().preload_experts_done, manifest_.expert_count);
  const uint64_t locked = recorder.LockedTotal();
  EXPECT_EQ((*s)->locked_bytes(), locked);
  EXPECT_EQ(recorder.calls.size(), static_cast<size_t>(recorder.fail_at_call))
      << "no lock is tried after the one that failed";
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr(absl::StrFormat("with %s of it locked", FormatBytes(locked))));
  EXPECT_THAT(warnings[0], HasSubstr("continuing unlocked"));
}

}  // namespace
}  // namespace moetier
