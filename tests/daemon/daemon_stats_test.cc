// The front door's snapshot: per-tier residency, hits and misses summed
// from the workers, bytes read and the rate over the last interval,
// preload progress and the workers' states.
#include "stats/daemon_stats.h"

#include <unistd.h>

#include "gtest/gtest.h"
#include "io/pread_backend.h"
#include "store/segment_plan.h"
#include "store_test_util.h"

namespace moetier {
namespace {

using daemon_test::AttachInProcess;
using daemon_test::ManifestOf;
using daemon_test::ScratchDir;
using daemon_test::TestModel;
using daemon_test::TestModelOptions;

struct Fixture {
  ScratchDir dir;
  TestModel model;
  ModelManifest manifest;
  std::unique_ptr<ExpertStore> store;
};

// uint64_t{0} budget: every expert resident; otherwise a cache of `slots`.
void StartStore(Fixture& f, uint32_t slots) {
  TestModelOptions o;
  o.n_layer = 2;
  o.n_expert = 8;
  absl::StatusOr<TestModel> model = daemon_test::WriteTestModel(f.dir.path(), "m", o);
  ASSERT_TRUE(model.ok()) << model.status();
  f.model = std::move(*model);
  absl::StatusOr<ModelManifest> manifest = ManifestOf(f.model);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  f.manifest = std::move(*manifest);
  ExpertStoreOptions options;
  options.segment.allow_unlocked_memory = true;
  if (slots > 0) {
    absl::StatusOr<SegmentPlan> full = PlanSegment(f.manifest, 0);
    ASSERT_TRUE(full.ok());
    options.ram_budget_bytes = FixedSegmentBytes(f.manifest) + slots * full->max_span_bytes;
  }
  absl::StatusOr<std::unique_ptr<ExpertStore>> s =
      ExpertStore::Create(f.manifest, std::make_unique<PreadBackend>(8), options);
  ASSERT_TRUE(s.ok()) << s.status();
  f.store = std::move(*s);
  f.store->Start();
  ASSERT_TRUE(f.store->WaitUntilReady(5000));
}

TEST(DaemonStatsTest, ACacheReportsTiersHitsMissesReadsAndWorkers) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(StartStore(f, 3));
  DaemonStatsCollector collector;
  DaemonStats empty = collector.Collect(*f.store, nullptr);
  EXPECT_EQ(empty.mode, store::StoreMode::kCache);
  EXPECT_EQ(empty.n_slot, 3u);
  EXPECT_EQ(empty.ram.resident_experts, 0u);
  EXPECT_EQ(empty.bytes_read, 0u);
  EXPECT_EQ(empty.preload_experts_total, 0u);
  EXPECT_EQ(empty.preload_fraction, 1.0);
  EXPECT_TRUE(empty.workers.empty());

  std::unique_ptr<store::StoreClient> client = AttachInProcess(*f.store, 2);
  ASSERT_NE(client, nullptr);
  client->Heartbeat();
  {
    absl::StatusOr<store::ExpertPin> miss = client->Acquire(1, 2, 5000);
    ASSERT_TRUE(miss.ok()) << miss.status();
  }
  ASSERT_TRUE(client->TryAcquire(1, 2).has_value());
  ASSERT_TRUE(client->TryAcquire(1, 2).has_value());
  // The worker says experts (0, 1) and (1, 3) sit in its device memory.
  store::WorkerStatusPage& page = client->status_page();
  page.vram_residency[(0 * store::kMaxExpertsPerLayer + 1) / 64] |= uint64_t{1} << 1;
  page.vram_residency[(1 * store::kMaxExpertsPerLayer + 3) / 64] |= uint64_t{1} << 3;
  page.vram_hits = 5;
  page.vram_misses = 2;

  const DaemonStats s = collector.Collect(*f.store, nullptr);
  const uint64_t layer0 = f.manifest.layers[0].desc.expert_bytes;
  const uint64_t layer1 = f.manifest.layers[1].desc.expert_bytes;
  ASSERT_NE(layer0, layer1) << "the model should have layers of different sizes";
  EXPECT_EQ(s.phase, store::DaemonPhase::kReady);
  EXPECT_EQ(s.ram.resident_experts, 1u);
  EXPECT_EQ(s.ram.resident_bytes, layer1);
  EXPECT_EQ(s.ram.hits, 2u);
  EXPECT_EQ(s.ram.misses, 1u);
  EXPECT_EQ(s.vram.resident_experts, 2u);
  EXPECT_EQ(s.vram.resident_bytes, layer0 + layer1);
  EXPECT_EQ(s.vram.hits, 5u);
  EXPECT_EQ(s.vram.misses, 2u);
  EXPECT_EQ(s.loads, 1u);
  EXPECT_EQ(s.bytes_read, f.store->counters().bytes_read);
  EXPECT_GE(s.bytes_read, layer1);
  EXPECT_GT(s.read_bytes_per_s, 0.0);
  ASSERT_EQ(s.workers.size(), 1u);
  const WorkerStats& w = s.workers[0];
  EXPECT_EQ(w.index, 2u);
  EXPECT_TRUE(w.attached);
  EXPECT_EQ(w.device, "test");
  EXPECT_EQ(w.pid, getpid());
  EXPECT_EQ(w.phase, WorkerPhase::kRunning);
  EXPECT_EQ(w.epoch, 1u);
  EXPECT_GE(w.heartbeat_age_ms, 0);
  EXPECT_LT(w.heartbeat_age_ms, 5000);
  EXPECT_EQ(w.ram.hits, 2u);
  EXPECT_EQ(w.vram.resident_experts, 2u);

  // Nothing read since: the rate is over the last interval, not since start.
  const DaemonStats again = collector.Collect(*f.store, nullptr);
  EXPECT_EQ(again.bytes_read, s.bytes_read);
  EXPECT_EQ(again.read_bytes_per_s, 0.0);

  client.reset();
  f.store->ReleaseWorker(2);
  f.store->Stop();
}

TEST(DaemonStatsTest, AFullyResidentStoreReportsItsPreload) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(StartStore(f, 0));
  DaemonStatsCollector collector;
  const DaemonStats s = collector.Collect(*f.store, nullptr);
  EXPECT_EQ(s.mode, store::StoreMode::kFullyResident);
  EXPECT_EQ(s.preload_experts_total, 16u);
  EXPECT_EQ(s.preload_experts_done, 16u);
  EXPECT_EQ(s.preload_fraction, 1.0);
  EXPECT_EQ(s.ram.resident_experts, 16u);
  EXPECT_EQ(s.ram.resident_bytes, f.manifest.total_expert_bytes);
  EXPECT_EQ(s.bytes_read, f.store->counters().bytes_read);
  EXPECT_GT(s.read_bytes_per_s, 0.0);
  f.store->Stop();
}

}  // namespace
}  // namespace moetier
