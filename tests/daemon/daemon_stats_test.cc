// The front door's snapshot: per-tier residency, hits and misses summed
// from the workers, bytes read and the rate over the last interval,
// preload progress, the workers' states and device expert caches; and the
// Status message the front door builds from it.
#include "stats/daemon_stats.h"

#include <unistd.h>

#include "config/daemon_config.h"
#include "frontdoor/status_report.h"
#include "gtest/gtest.h"
#include "io/pread_backend.h"
#include "scheduler/request_scheduler.h"
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

// What a worker with a device expert cache writes on its status page.
struct CachePage {
  uint64_t expert_cache_bytes;
  uint64_t vram_hits;
  uint64_t vram_misses;
  uint64_t misses_computed_on_host;
  uint64_t prefetch_hints;
  uint64_t prefetch_issued;
  uint64_t prefetch_used;
  uint64_t prefetch_wasted;
  uint64_t vram_bytes_copied;
  uint64_t copy_busy_ns;
};

void WriteCachePage(const CachePage& from, store::WorkerStatusPage& page) {
  page.expert_cache_bytes = from.expert_cache_bytes;
  page.vram_hits = from.vram_hits;
  page.vram_misses = from.vram_misses;
  page.misses_computed_on_host = from.misses_computed_on_host;
  page.prefetch_hints = from.prefetch_hints;
  page.prefetch_issued = from.prefetch_issued;
  page.prefetch_used = from.prefetch_used;
  page.prefetch_wasted = from.prefetch_wasted;
  page.vram_bytes_copied = from.vram_bytes_copied;
  page.copy_busy_ns = from.copy_busy_ns;
}

// Every value distinct, so a field read from the wrong page word shows.
constexpr CachePage kGpuPage = {
    .expert_cache_bytes = uint64_t{6} << 30,
    .vram_hits = 300,
    .vram_misses = 100,
    .misses_computed_on_host = 40,
    .prefetch_hints = 7,
    .prefetch_issued = 80,
    .prefetch_used = 60,
    .prefetch_wasted = 10,
    .vram_bytes_copied = uint64_t{3} << 30,
    .copy_busy_ns = 250'000'000,  // 3 GiB in 0.25 s
};
constexpr CachePage kSmallPage = {
    .expert_cache_bytes = uint64_t{1} << 30,
    .vram_hits = 21,
    .vram_misses = 9,
    .misses_computed_on_host = 3,
    .prefetch_hints = 2,
    .prefetch_issued = 11,
    .prefetch_used = 5,
    .prefetch_wasted = 4,
    .vram_bytes_copied = 1'000'000,
    .copy_busy_ns = 0,  // copies too short to time: no rate rather than infinity
};
constexpr double kGpuCopyBytesPerS = 3.0 * (uint64_t{1} << 30) / 0.25;

TEST(DaemonStatsTest, CopyRateIsBytesOverBusyTime) {
  EXPECT_DOUBLE_EQ(CopyBytesPerS(uint64_t{3} << 30, 250'000'000), kGpuCopyBytesPerS);
  EXPECT_DOUBLE_EQ(CopyBytesPerS(500, 1000), 5e8);
  EXPECT_EQ(CopyBytesPerS(1'000'000, 0), 0.0);
  EXPECT_EQ(CopyBytesPerS(0, 0), 0.0);
}

TEST(DaemonStatsTest, DeviceCachesArePerWorkerAndSummed) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(StartStore(f, 3));
  std::unique_ptr<store::StoreClient> gpu = AttachInProcess(*f.store, 1);
  std::unique_ptr<store::StoreClient> small = AttachInProcess(*f.store, 4);
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(small, nullptr);
  WriteCachePage(kGpuPage, gpu->status_page());
  WriteCachePage(kSmallPage, small->status_page());
  // Expert (1, 3) resident in the first worker's device memory: what it
  // holds is not the size of its pool.
  gpu->status_page().vram_residency[(1 * store::kMaxExpertsPerLayer + 3) / 64] |= uint64_t{1}
                                                                                  << 3;

  DaemonStatsCollector collector;
  const DaemonStats s = collector.Collect(*f.store, nullptr);
  ASSERT_EQ(s.workers.size(), 2u);
  const WorkerStats& w = s.workers[0];
  EXPECT_EQ(w.index, 1u);
  EXPECT_EQ(w.expert_cache_bytes, kGpuPage.expert_cache_bytes);
  EXPECT_EQ(w.vram.resident_bytes, f.manifest.layers[1].desc.expert_bytes);
  EXPECT_EQ(w.vram.hits, 300u);
  EXPECT_EQ(w.vram.misses, 100u);
  EXPECT_EQ(w.vram_misses_on_host, 40u);
  EXPECT_EQ(w.prefetch_hints, 7u);
  EXPECT_EQ(w.prefetch_issued, 80u);
  EXPECT_EQ(w.prefetch_used, 60u);
  EXPECT_EQ(w.prefetch_wasted, 10u);
  EXPECT_EQ(w.vram_bytes_copied, uint64_t{3} << 30);
  EXPECT_EQ(w.copy_busy_ns, 250'000'000u);
  EXPECT_DOUBLE_EQ(w.copy_bytes_per_s, kGpuCopyBytesPerS);
  const WorkerStats& v = s.workers[1];
  EXPECT_EQ(v.index, 4u);
  EXPECT_EQ(v.expert_cache_bytes, kSmallPage.expert_cache_bytes);
  EXPECT_EQ(v.vram.resident_bytes, 0u);
  EXPECT_EQ(v.vram_misses_on_host, 3u);
  EXPECT_EQ(v.prefetch_issued, 11u);
  EXPECT_EQ(v.prefetch_used, 5u);
  EXPECT_EQ(v.prefetch_wasted, 4u);
  EXPECT_EQ(v.vram_bytes_copied, 1'000'000u);
  EXPECT_EQ(v.copy_busy_ns, 0u);
  EXPECT_EQ(v.copy_bytes_per_s, 0.0);

  EXPECT_EQ(s.expert_cache_bytes, (uint64_t{6} << 30) + (uint64_t{1} << 30));
  EXPECT_EQ(s.vram.hits, 321u);
  EXPECT_EQ(s.vram.misses, 109u);
  EXPECT_EQ(s.vram_misses_on_host, 43u);
  EXPECT_EQ(s.prefetch_issued, 91u);
  EXPECT_EQ(s.prefetch_used, 65u);
  EXPECT_EQ(s.prefetch_wasted, 14u);
  EXPECT_EQ(s.vram_bytes_copied, (uint64_t{3} << 30) + 1'000'000);
  EXPECT_EQ(s.copy_busy_ns, 250'000'000u);

  gpu.reset();
  small.reset();
  f.store->ReleaseWorker(1);
  f.store->ReleaseWorker(4);
  f.store->Stop();
}

TEST(StatusReportTest, WorkerStatusCarriesTheDeviceCache) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(StartStore(f, 3));
  std::unique_ptr<store::StoreClient> gpu = AttachInProcess(*f.store, 1);
  std::unique_ptr<store::StoreClient> small = AttachInProcess(*f.store, 4);
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(small, nullptr);
  WriteCachePage(kGpuPage, gpu->status_page());
  WriteCachePage(kSmallPage, small->status_page());
  gpu->status_page().vram_residency[(0 * store::kMaxExpertsPerLayer + 5) / 64] |= uint64_t{1}
                                                                                  << 5;

  const DaemonConfig config;
  RequestScheduler scheduler(SchedulerLimits{});
  StatusReporter reporter(config, f.store.get(), nullptr, &scheduler);
  const v1::Status status = reporter.Build();
  ASSERT_EQ(status.workers_size(), 2);
  const v1::WorkerStatus& w = status.workers(0);
  EXPECT_EQ(w.index(), 1u);
  EXPECT_EQ(w.expert_cache_bytes(), uint64_t{6} << 30);
  EXPECT_EQ(w.vram().resident_experts(), 1u);
  EXPECT_EQ(w.vram().resident_bytes(), f.manifest.layers[0].desc.expert_bytes);
  EXPECT_EQ(w.vram().hits(), 300u);
  EXPECT_EQ(w.vram().misses(), 100u);
  EXPECT_EQ(w.misses_on_host(), 40u);
  EXPECT_EQ(w.prefetch_hints(), 7u);
  EXPECT_EQ(w.prefetch_issued(), 80u);
  EXPECT_EQ(w.prefetch_used(), 60u);
  EXPECT_EQ(w.prefetch_wasted(), 10u);
  EXPECT_EQ(w.bytes_copied(), uint64_t{3} << 30);
  EXPECT_DOUBLE_EQ(w.copy_bytes_per_s(), kGpuCopyBytesPerS);
  const v1::WorkerStatus& v = status.workers(1);
  EXPECT_EQ(v.index(), 4u);
  EXPECT_EQ(v.expert_cache_bytes(), uint64_t{1} << 30);
  EXPECT_EQ(v.vram().resident_bytes(), 0u);
  EXPECT_EQ(v.misses_on_host(), 3u);
  EXPECT_EQ(v.prefetch_hints(), 2u);
  EXPECT_EQ(v.prefetch_issued(), 11u);
  EXPECT_EQ(v.prefetch_used(), 5u);
  EXPECT_EQ(v.prefetch_wasted(), 4u);
  EXPECT_EQ(v.bytes_copied(), 1'000'000u);
  EXPECT_EQ(v.copy_bytes_per_s(), 0.0);
  EXPECT_EQ(status.vram().hits(), 321u);
  EXPECT_EQ(status.vram().misses(), 109u);
  // The residency map shows the expert the worker holds.
  ASSERT_EQ(status.layers_size(), 2);
  EXPECT_EQ(status.layers(0).tier(5), v1::EXPERT_TIER_VRAM);

  scheduler.Shutdown();
  gpu.reset();
  small.reset();
  f.store->ReleaseWorker(1);
  f.store->ReleaseWorker(4);
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
