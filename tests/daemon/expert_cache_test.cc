// The store as a cache (budget below the model): random acquires from two
// threads always see the file's bytes, pinned slots are never evicted,
// counters add up, prefetch hints are honoured, read errors stay per expert
// and corrupt nothing, and the pins of a departed worker are dropped.
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/pread_backend.h"
#include "io/uring_backend.h"
#include "store/segment_plan.h"
#include "store/shared_futex.h"
#include "store/spsc_ring.h"
#include "store_test_util.h"

namespace moetier {
namespace {

using daemon_test::AttachInProcess;
using daemon_test::ManifestOf;
using daemon_test::MappedSegment;
using daemon_test::PinHolds;
using daemon_test::ScratchDir;
using daemon_test::TestModel;
using daemon_test::TestModelOptions;
using daemon_test::WaitFor;
using store::ExpertState;
using ::testing::HasSubstr;

constexpr uint32_t kLayers = 2;
constexpr uint32_t kExperts = 8;
constexpr int64_t kTimeoutMs = 5000;

class ExpertCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestModelOptions o;
    o.n_layer = kLayers;
    o.n_expert = kExperts;
    o.n_expert_used = 2;
    absl::StatusOr<TestModel> model = daemon_test::WriteTestModel(dir_.path(), "m", o);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    absl::StatusOr<ModelManifest> manifest = ManifestOf(model_);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    manifest_ = std::move(*manifest);
  }

  // A cache of exactly `slots` slots.
  void StartStore(uint32_t slots, std::unique_ptr<IoBackend> io = nullptr) {
    if (io == nullptr) {
      absl::StatusOr<std::unique_ptr<UringBackend>> uring = UringBackend::Create(8, true);
      io = uring.ok() ? std::unique_ptr<IoBackend>(std::move(*uring))
                      : std::make_unique<PreadBackend>(8);
    }
    ExpertStoreOptions options;
    options.segment.allow_unlocked_memory = true;
    absl::StatusOr<SegmentPlan> full = PlanSegment(manifest_, 0);
    ASSERT_TRUE(full.ok());
    options.ram_budget_bytes = FixedSegmentBytes(manifest_) + slots * full->max_span_bytes;
    options.warm_ranks = warm_ranks_;
    options.warm_order = warm_order_;
    absl::StatusOr<std::unique_ptr<ExpertStore>> s =
        ExpertStore::Create(manifest_, std::move(io), options);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
    ASSERT_EQ(store_->mode(), store::StoreMode::kCache);
    ASSERT_EQ(store_->n_slot(), slots);
    store_->Start();
    ASSERT_TRUE(store_->WaitUntilReady(1000));
    segment_ = std::make_unique<MappedSegment>(*store_);
  }

  void TearDown() override {
    clients_.clear();
    if (store_ != nullptr) store_->Stop();
  }

  store::StoreClient& Client(uint32_t worker) {
    if (clients_.size() <= worker) clients_.resize(worker + 1);
    if (clients_[worker] == nullptr) clients_[worker] = AttachInProcess(*store_, worker);
    return *clients_[worker];
  }

  const daemon_test::TestExpert& Want(uint32_t layer, uint32_t expert) const {
    return model_.experts[layer][expert];
  }

  std::vector<uint32_t> warm_ranks_;  // ExpertStoreOptions' warm start
  std::vector<uint32_t> warm_order_;
  ScratchDir dir_;
  TestModel model_;
  ModelManifest manifest_;
  std::unique_ptr<ExpertStore> store_;
  std::unique_ptr<MappedSegment> segment_;
  std::vector<std::unique_ptr<store::StoreClient>> clients_;
};

TEST_F(ExpertCacheTest, RandomAcquiresFromTwoThreadsSeeTheFileBytes) {
  StartStore(4);
  store::StoreClient& a = Client(0);
  store::StoreClient& b = Client(1);
  std::atomic<int> failures{0};
  std::atomic<uint64_t> acquires{0};
  auto run = [&](store::StoreClient& client, uint32_t seed) {
    std::mt19937 rng(seed);
    for (int i = 0; i < 300; ++i) {
      const uint32_t layer = rng() % kLayers;
      const uint32_t expert = rng() % kExperts;
      absl::StatusOr<store::ExpertPin> pin = client.Acquire(layer, expert, kTimeoutMs);
      if (!pin.ok()) {
        ADD_FAILURE() << pin.status();
        ++failures;
        continue;
      }
      acquires.fetch_add(1);
      if (!PinHolds(*pin, Want(layer, expert))) ++failures;
      if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
      if (!PinHolds(*pin, Want(layer, expert))) ++failures;  // still intact while pinned
    }
  };
  std::thread ta(run, std::ref(a), 1);
  std::thread tb(run, std::ref(b), 2);
  ta.join();
  tb.join();
  EXPECT_EQ(failures.load(), 0);

  // Counters add up.
  const store::StoreCounters c = store_->counters();
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t loads = 0;
  uint64_t evictions = 0;
  uint64_t resident = 0;
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (uint32_t e = 0; e < kExperts; ++e) {
      const store::ExpertEntry& x = segment_->entry(l, e);
      hits += x.hits;
      misses += x.misses;
      loads += x.loads;
      evictions += x.evictions;
      if (segment_->state(l, e) == static_cast<uint32_t>(ExpertState::kResident)) ++resident;
      for (uint32_t w = 0; w < store::kMaxWorkers; ++w) EXPECT_EQ(x.pins[w], 0) << "pin leaked";
    }
  }
  EXPECT_EQ(acquires.load(), 600u);
  EXPECT_EQ(hits + misses, 600u);
  EXPECT_EQ(a.status_page().ram_hits + b.status_page().ram_hits, hits);
  EXPECT_EQ(a.status_page().ram_misses + b.status_page().ram_misses, misses);
  EXPECT_EQ(c.loads, loads);
  EXPECT_EQ(c.evictions, evictions);
  EXPECT_EQ(c.loads - c.evictions, resident);
  EXPECT_EQ(c.resident_experts, resident);
  EXPECT_LE(resident, 4u);
  EXPECT_GT(c.evictions, 0u) << "16 experts through 4 slots must evict";
  EXPECT_GE(c.loads, 16u);
  EXPECT_EQ(c.load_errors, 0u);
  EXPECT_GE(c.demand_requests, misses > 0 ? 1u : 0u);
}

TEST_F(ExpertCacheTest, PinnedSlotsAreNeverEvicted) {
  StartStore(3);
  store::StoreClient& client = Client(0);
  // Two of three slots stay pinned; every other expert cycles through the third.
  absl::StatusOr<store::ExpertPin> held_a = client.Acquire(0, 0, kTimeoutMs);
  absl::StatusOr<store::ExpertPin> held_b = client.Acquire(1, 5, kTimeoutMs);
  ASSERT_TRUE(held_a.ok() && held_b.ok());
  for (int round = 0; round < 3; ++round) {
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (uint32_t e = 0; e < kExperts; ++e) {
        if ((l == 0 && e == 0) || (l == 1 && e == 5)) continue;
        absl::StatusOr<store::ExpertPin> pin = client.Acquire(l, e, kTimeoutMs);
        ASSERT_TRUE(pin.ok()) << pin.status();
        ASSERT_TRUE(PinHolds(*pin, Want(l, e)));
      }
    }
  }
  EXPECT_GE(store_->counters().evictions, 3u * 14 - 3);
  EXPECT_EQ(segment_->entry(0, 0).evictions, 0u);
  EXPECT_EQ(segment_->entry(1, 5).evictions, 0u);
  EXPECT_EQ(segment_->state(0, 0), static_cast<uint32_t>(ExpertState::kResident));
  EXPECT_TRUE(PinHolds(*held_a, Want(0, 0))) << "a pinned slot was overwritten";
  EXPECT_TRUE(PinHolds(*held_b, Want(1, 5))) << "a pinned slot was overwritten";
  EXPECT_EQ(segment_->entry(0, 0).loads, 1u);
}

TEST_F(ExpertCacheTest, EverySlotPinnedMakesAMissWaitUntilOneIsReleased) {
  StartStore(2);
  store::StoreClient& client = Client(0);
  absl::StatusOr<store::ExpertPin> a = client.Acquire(0, 1, kTimeoutMs);
  absl::StatusOr<store::ExpertPin> b = client.Acquire(0, 2, kTimeoutMs);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<store::ExpertPin> blocked = client.Acquire(1, 3, 150);
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(blocked.status().message()), HasSubstr("ram_budget_bytes"));
  EXPECT_GE(store_->counters().stalls_all_pinned, 1u);
  a->Release();
  absl::StatusOr<store::ExpertPin> now = client.Acquire(1, 3, kTimeoutMs);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_TRUE(PinHolds(*now, Want(1, 3)));
  EXPECT_EQ(segment_->state(0, 1), static_cast<uint32_t>(ExpertState::kOnDisk))
      << "the released expert was the only evictable one";
}

TEST_F(ExpertCacheTest, PrefetchHintsAreHonouredAndCounted) {
  StartStore(4);
  store::StoreClient& client = Client(0);
  ASSERT_TRUE(client.Prefetch(1, 3).ok());
  ASSERT_TRUE(WaitFor([&] { return client.state(1, 3) == ExpertState::kResident; }, kTimeoutMs));
  const store::StoreCounters c = store_->counters();
  EXPECT_EQ(c.prefetch_requests, 1u);
  EXPECT_EQ(c.prefetch_loads, 1u);
  EXPECT_EQ(segment_->entry(1, 3).prefetch_hints, 1u);
  EXPECT_EQ(client.status_page().prefetch_hints, 1u);
  std::optional<store::ExpertPin> pin = client.TryAcquire(1, 3);
  ASSERT_TRUE(pin.has_value()) << "a prefetched expert is a hit";
  EXPECT_TRUE(PinHolds(*pin, Want(1, 3)));
  store::ExpertCompletion completions[4];
  ASSERT_TRUE(WaitFor([&] { return client.PollCompletions(completions) == 1; }, kTimeoutMs));
  EXPECT_EQ(completions[0].layer, 1);
  EXPECT_EQ(completions[0].expert, 3);
  EXPECT_EQ(completions[0].error, 0);
  EXPECT_EQ(completions[0].slot, pin->slot());
  // A hint for a resident expert costs no request.
  ASSERT_TRUE(client.Prefetch(1, 3).ok());
  EXPECT_EQ(store_->counters().prefetch_requests, 1u);
}

TEST_F(ExpertCacheTest, AWarmStartReadsTheHottestExpertsIntoFreeSlotsWithoutARequest) {
  // Linear ids (layer * 8 + expert), hottest first; 4 slots take the first 4.
  warm_order_ = {9, 3, 14, 0, 7, 1};
  warm_ranks_.assign(kLayers * kExperts, 0);
  warm_ranks_[9] = 1;
  warm_ranks_[14] = 2;
  warm_ranks_[3] = 1;
  StartStore(4);
  store::StoreClient& client = Client(0);
  ASSERT_TRUE(WaitFor([&] { return store_->counters().warm_loads == 4 && !store_->warming(); },
                      kTimeoutMs));
  ASSERT_TRUE(WaitFor([&] { return store_->counters().resident_experts == 4; }, kTimeoutMs));
  for (const uint32_t x : {9u, 3u, 14u, 0u}) {
    EXPECT_EQ(client.state(x / kExperts, x % kExperts), ExpertState::kResident) << x;
    std::optional<store::ExpertPin> pin = client.TryAcquire(x / kExperts, x % kExperts);
    ASSERT_TRUE(pin.has_value());
    EXPECT_TRUE(PinHolds(*pin, Want(x / kExperts, x % kExperts)));
  }
  EXPECT_EQ(client.state(0, 7), ExpertState::kOnDisk) << "no slot was free for it";
  EXPECT_EQ(client.state(0, 1), ExpertState::kOnDisk);
  const store::StoreCounters c = store_->counters();
  EXPECT_EQ(c.demand_requests + c.prefetch_requests, 0u);
  EXPECT_EQ(c.evictions, 0u);
  // The ranks reach the workers through the table.
  EXPECT_EQ(client.warm_rank(1, 1), 1u);
  EXPECT_EQ(client.warm_rank(1, 6), 2u);
  EXPECT_EQ(client.warm_rank(0, 3), 1u);
  EXPECT_EQ(client.warm_rank(0, 0), 0u);
}

TEST_F(ExpertCacheTest, RoutedRowsAreCountedPerExpertForTheHeatProfile) {
  StartStore(4);
  store::StoreClient& a = Client(0);
  store::StoreClient& b = Client(1);
  a.CountRouted(1, 2);
  a.CountRouted(1, 2);
  b.CountRouted(1, 2);
  b.CountRouted(0, 7);
  const std::vector<uint64_t> totals = store_->RoutedTotals();
  ASSERT_EQ(totals.size(), kLayers * kExperts);
  for (uint32_t i = 0; i < totals.size(); ++i) {
    EXPECT_EQ(totals[i], i == 10 ? 3u : i == 7 ? 1u : 0u) << i;
  }
}

TEST_F(ExpertCacheTest, ReadErrorsFailOnlyTheirExpertAndCorruptNothing) {
  // Fail the read of expert 2 of layer 1's down matrix (the store reads the
  // covering 4096-aligned range) while `broken` is set; shorten every other
  // read to exercise resubmission.
  const FileRange down = manifest_.PlanExpertReads(1, 2).reads[2];
  const uint64_t down_start = down.offset / 4096 * 4096;
  std::atomic<bool> broken{true};
  auto injector = [&, down_start](const ReadRequest& request, uint64_t,
                                  uint64_t length) -> std::optional<InjectedFault> {
    if (request.offset == down_start && broken.load()) {
      return InjectedFault{InjectedFault::Kind::kError, EIO, 0};
    }
    if (length > 3000) return InjectedFault{InjectedFault::Kind::kShortRead, 0, length / 2};
    return std::nullopt;
  };
  StartStore(3, std::make_unique<PreadBackend>(8, injector));
  store::StoreClient& client = Client(0);
  absl::StatusOr<store::ExpertPin> failed = client.Acquire(1, 2, kTimeoutMs);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("could not read expert 2 of layer 1"));
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr(std::strerror(EIO)));
  EXPECT_EQ(segment_->state(1, 2), static_cast<uint32_t>(ExpertState::kOnDisk));
  EXPECT_EQ(store_->counters().load_errors, 1u);
  EXPECT_EQ(segment_->entry(1, 2).last_error, EIO);

  // Every slot is still usable, and everything else reads right.
  std::vector<store::ExpertPin> pins;
  for (uint32_t e : {0u, 1u, 3u}) {
    absl::StatusOr<store::ExpertPin> pin = client.Acquire(1, e, kTimeoutMs);
    ASSERT_TRUE(pin.ok()) << pin.status();
    EXPECT_TRUE(PinHolds(*pin, Want(1, e)));
    pins.push_back(std::move(*pin));
  }
  pins.clear();
  EXPECT_GT(store_->counters().short_reads, 0u);

  broken.store(false);
  absl::StatusOr<store::ExpertPin> healed = client.Acquire(1, 2, kTimeoutMs);
  ASSERT_TRUE(healed.ok()) << healed.status();
  EXPECT_TRUE(PinHolds(*healed, Want(1, 2)));
  EXPECT_EQ(segment_->entry(1, 2).last_error, 0);
}

TEST_F(ExpertCacheTest, ThePinsOfADepartedWorkerAreDropped) {
  StartStore(2);
  store::StoreClient& client = Client(0);
  ASSERT_TRUE(client.Acquire(0, 0, kTimeoutMs).ok());  // resident, released
  // Worker 3 pins it and "dies" without releasing (the raw write is what a
  // worker's acquire does).
  store_->AdmitWorker(3, 999999, "cuda:0");
  store::Shared(segment_->entry(0, 0).pins[3]).fetch_add(1);
  for (uint32_t e = 1; e < 6; ++e) ASSERT_TRUE(client.Acquire(0, e, kTimeoutMs).ok());
  EXPECT_EQ(segment_->entry(0, 0).evictions, 0u) << "pinned by worker 3";
  store_->ReleaseWorker(3);
  EXPECT_EQ(segment_->entry(0, 0).pins[3], 0);
  EXPECT_EQ(segment_->worker(3).status.attach_state,
            static_cast<uint32_t>(store::WorkerAttachState::kVacant));
  for (uint32_t e = 1; e < 6; ++e) ASSERT_TRUE(client.Acquire(0, e, kTimeoutMs).ok());
  EXPECT_EQ(segment_->entry(0, 0).evictions, 1u) << "evictable once its pins were dropped";
}

TEST_F(ExpertCacheTest, MalformedRequestsAreRejectedNotServed) {
  StartStore(2);
  store::StoreClient& client = Client(0);
  store::ExpertRequest bad{};
  bad.layer = 77;
  bad.kind = static_cast<uint32_t>(store::RequestKind::kDemand);
  ASSERT_TRUE(store::RingPush(segment_->worker(0).requests, bad));
  bad.layer = 0;
  bad.kind = 42;
  ASSERT_TRUE(store::RingPush(segment_->worker(0).requests, bad));
  store::Shared(segment_->header().doorbell).fetch_add(1);
  store::FutexWakeAll(&segment_->header().doorbell);
  ASSERT_TRUE(WaitFor([&] { return store_->counters().requests_rejected == 2; }, kTimeoutMs));
  EXPECT_EQ(segment_->worker(0).status.requests_rejected, 2u);
  EXPECT_EQ(store_->counters().loads, 0u);
  EXPECT_TRUE(client.Acquire(1, 1, kTimeoutMs).ok()) << "the store keeps serving";
  EXPECT_FALSE(client.Acquire(2, 0, kTimeoutMs).ok()) << "the client checks ids too";
}

TEST_F(ExpertCacheTest, StoppingTheDaemonReleasesWaiters) {
  StartStore(2);
  store::StoreClient& client = Client(0);
  absl::StatusOr<store::ExpertPin> a = client.Acquire(0, 1, kTimeoutMs);
  absl::StatusOr<store::ExpertPin> b = client.Acquire(0, 2, kTimeoutMs);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::Status waited;
  std::thread waiter([&] { waited = client.Acquire(1, 1, 20000).status(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  store_->Stop();
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable) << waited;
  EXPECT_THAT(std::string(waited.message()), HasSubstr("shutting down"));
}

// A model file shorter than its tensor infos say. Cut before start, the
// model is refused with the file named; cut while the daemon runs (the file
// replaced or truncated under it), only the experts past the end fail, with
// their name in the error, and the store keeps serving the rest.
TEST_F(ExpertCacheTest, ATruncatedModelFileFailsOnlyTheExpertsPastItsEnd) {
  const FileRange last_down = manifest_.PlanExpertReads(1, kExperts - 1).reads[2];
  const off_t cut = static_cast<off_t>(last_down.offset + last_down.size / 2);
  {
    const std::string copy = dir_.File("short.gguf");
    std::filesystem::copy_file(model_.path, copy);
    ASSERT_EQ(truncate(copy.c_str(), cut), 0) << std::strerror(errno);
    absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(copy);
    absl::Status refused = gguf.status();
    if (gguf.ok()) refused = BuildModelManifest(**gguf).status();
    ASSERT_FALSE(refused.ok()) << "a model shorter than its tensors was accepted";
    EXPECT_THAT(std::string(refused.message()), HasSubstr("short.gguf"));
  }

  StartStore(3);
  ASSERT_EQ(truncate(model_.path.c_str(), cut), 0) << std::strerror(errno);
  store::StoreClient& client = Client(0);
  absl::StatusOr<store::ExpertPin> failed = client.Acquire(1, kExperts - 1, kTimeoutMs);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr(absl::StrFormat("expert %d of layer 1", kExperts - 1)));
  EXPECT_EQ(segment_->state(1, kExperts - 1), static_cast<uint32_t>(ExpertState::kOnDisk));
  EXPECT_EQ(store_->counters().load_errors, 1u);
  EXPECT_EQ(store_->phase(), store::DaemonPhase::kReady);

  for (uint32_t e = 0; e < kExperts; ++e) {
    absl::StatusOr<store::ExpertPin> pin = client.Acquire(0, e, kTimeoutMs);
    ASSERT_TRUE(pin.ok()) << pin.status();
    EXPECT_TRUE(PinHolds(*pin, Want(0, e)));
  }
  EXPECT_EQ(store_->counters().load_errors, 1u);
}

}  // namespace
}  // namespace moetier
