// Worker supervision with a fake worker program: workers receive the store
// over the control socket and see the file's bytes; crashed, hung and silent
// workers are restarted with exponential backoff while the store stays warm
// (nothing is read again); strangers are refused by their credentials.
#include "supervisor/worker_supervisor.h"

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/pread_backend.h"
#include "store/segment_plan.h"
#include "store/worker_channel.h"
#include "store_test_util.h"

namespace moetier {
namespace {

using daemon_test::ManifestOf;
using daemon_test::MappedSegment;
using daemon_test::ScratchDir;
using daemon_test::TestModel;
using daemon_test::TestModelOptions;
using daemon_test::WaitFor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kWaitMs = 10000;

class WorkerSupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestModelOptions o;
    o.n_layer = 2;
    o.n_expert = 4;
    o.fused_gate_up = true;
    absl::StatusOr<TestModel> model = daemon_test::WriteTestModel(dir_.path(), "m", o);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    absl::StatusOr<ModelManifest> manifest = ManifestOf(model_);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    ExpertStoreOptions options;
    options.segment.allow_unlocked_memory = true;
    absl::StatusOr<std::unique_ptr<ExpertStore>> s =
        ExpertStore::Create(*manifest, std::make_unique<PreadBackend>(8), options);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
    store_->Start();
    ASSERT_TRUE(store_->WaitUntilReady(kWaitMs));
    reports_ = dir_.File("reports");
    std::filesystem::create_directory(reports_);
  }

  void TearDown() override {
    if (supervisor_ != nullptr) supervisor_->Stop();
    if (store_ != nullptr) store_->Stop();
  }

  SupervisorOptions Options(std::vector<std::string> devices) {
    SupervisorOptions o;
    o.worker_executable_path = MOETIER_FAKE_WORKER;
    o.control_socket_path = dir_.File("worker.sock");
    o.model_path = model_.path;
    o.devices = std::move(devices);
    o.worker_extra_args = {"--fake-report-dir=" + reports_, "--fake-heartbeat-ms=10",
                           "--fake-hold-pin"};
    o.handshake_timeout_ms = 3000;
    o.heartbeat_timeout_ms = 400;
    o.restart_backoff_initial_ms = 50;
    o.restart_backoff_max_ms = 400;
    o.stop_grace_ms = 2000;
    o.poll_interval_ms = 5;
    return o;
  }

  void StartSupervisor(SupervisorOptions options) {
    absl::StatusOr<std::unique_ptr<WorkerSupervisor>> s =
        WorkerSupervisor::Create(std::move(options));
    ASSERT_TRUE(s.ok()) << s.status();
    supervisor_ = std::move(*s);
    supervisor_->Start(store_.get());
  }

  // Report files named worker-<index>-<pid>.<suffix>.
  std::vector<std::string> Reports(uint32_t index, const std::string& suffix) const {
    std::vector<std::string> out;
    // Matched by hand: std::regex trips a false -Wmaybe-uninitialized in
    // g++ 12's libstdc++ under the sanitizer flags.
    const std::string prefix = "worker-" + std::to_string(index) + "-";
    auto matches = [&](const std::string& file) {
      if (file.rfind(prefix, 0) != 0) return false;
      size_t i = prefix.size();
      const size_t digits = i;
      while (i < file.size() && file[i] >= '0' && file[i] <= '9') ++i;
      return i > digits && file.substr(i) == "." + suffix;
    };
    for (const auto& e : std::filesystem::directory_iterator(reports_)) {
      if (matches(e.path().filename().string())) {
        std::ifstream in(e.path());
        std::string text;
        std::getline(in, text);
        out.push_back(text);
      }
    }
    return out;
  }

  void Touch(const std::string& name) { std::ofstream(reports_ + "/" + name) << "x"; }
  void Remove(const std::string& name) { std::filesystem::remove(reports_ + "/" + name); }

  WorkerSnapshot Worker(uint32_t index) const { return supervisor_->Snapshot().at(index); }

  ScratchDir dir_;
  std::string reports_;
  TestModel model_;
  std::unique_ptr<ExpertStore> store_;
  std::unique_ptr<WorkerSupervisor> supervisor_;
};

TEST_F(WorkerSupervisorTest, WorkersReceiveTheStoreAndSeeTheFileBytes) {
  StartSupervisor(Options({"cpu", "cuda:0"}));
  ASSERT_TRUE(WaitFor([&] { return Reports(0, "ok").size() == 1 && Reports(1, "ok").size() == 1; },
                      kWaitMs))
      << "errors: " << ::testing::PrintToString(Reports(0, "error"))
      << ::testing::PrintToString(Reports(1, "error"));
  for (uint32_t w : {0u, 1u}) {
    EXPECT_THAT(Reports(w, "ok")[0], HasSubstr("experts=8 hits=8 misses=0"))
        << "a preloaded store: every acquire is a hit";
    const WorkerSnapshot s = Worker(w);
    EXPECT_EQ(s.phase, WorkerPhase::kRunning);
    EXPECT_EQ(s.admissions, 1u);
    EXPECT_EQ(s.epoch, 1u);
  }
  EXPECT_EQ(Worker(1).device, "cuda:0");
  struct stat st {};
  ASSERT_EQ(stat(supervisor_->socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(store_->counters().loads, 8u);

  supervisor_->Stop();
  EXPECT_EQ(Reports(0, "stopped").size(), 1u) << "SIGTERM first: the worker exits on its own";
  EXPECT_EQ(Worker(0).phase, WorkerPhase::kStopped);
  EXPECT_FALSE(std::filesystem::exists(supervisor_->socket_path()));
}

TEST_F(WorkerSupervisorTest, ACrashedWorkerIsRestartedWithBackoffAndTheStoreStaysWarm) {
  StartSupervisor(Options({"cpu"}));
  ASSERT_TRUE(WaitFor([&] { return Reports(0, "ok").size() == 1; }, kWaitMs));
  const uint64_t loads = store_->counters().loads;
  Touch("crash-always-0");
  ASSERT_TRUE(WaitFor([&] { return Worker(0).backoff_history_ms.size() >= 3; }, kWaitMs));
  Remove("crash-always-0");
  ASSERT_TRUE(WaitFor(
      [&] {
        const WorkerSnapshot s = Worker(0);
        return s.phase == WorkerPhase::kRunning && s.admissions >= 4 &&
               Reports(0, "ok").size() == s.admissions;
      },
      kWaitMs));
  const WorkerSnapshot s = Worker(0);
  ASSERT_GE(s.backoff_history_ms.size(), 3u);
  EXPECT_THAT(std::vector<int64_t>(s.backoff_history_ms.begin(), s.backoff_history_ms.begin() + 3),
              ElementsAre(50, 100, 200));
  EXPECT_THAT(s.last_exit, HasSubstr("signal 6"));
  EXPECT_EQ(s.epoch, s.admissions);
  EXPECT_EQ(store_->counters().loads, loads) << "a restart must not read experts again";
  for (const std::string& report : Reports(0, "ok")) EXPECT_THAT(report, HasSubstr("misses=0"));
  // Each crashed instance held a pin on expert 0 of layer 0; only the
  // running one's remains.
  MappedSegment segment(*store_);
  EXPECT_TRUE(WaitFor([&] { return segment.entry(0, 0).pins[0] == 1; }, kWaitMs));
}

TEST_F(WorkerSupervisorTest, AHungWorkerIsKilledAndRestarted) {
  StartSupervisor(Options({"cpu"}));
  ASSERT_TRUE(WaitFor([&] { return Reports(0, "ok").size() == 1; }, kWaitMs));
  Touch("hang-0");
  ASSERT_TRUE(WaitFor([&] { return Reports(0, "ok").size() == 2; }, kWaitMs));
  const WorkerSnapshot s = Worker(0);
  EXPECT_THAT(s.last_exit, HasSubstr("stopped heartbeating"));
  EXPECT_THAT(s.last_exit, HasSubstr("signal 9"));
  EXPECT_THAT(s.backoff_history_ms, ElementsAre(50));
}

TEST_F(WorkerSupervisorTest, ACrashOnceRestartsOnce) {
  StartSupervisor(Options({"cpu"}));
  ASSERT_TRUE(WaitFor([&] { return Reports(0, "ok").size() == 1; }, kWaitMs));
  Touch("crash-0");
  ASSERT_TRUE(WaitFor([&] { return Reports(0, "ok").size() == 2; }, kWaitMs));
  EXPECT_EQ(Worker(0).starts, 2u);
  EXPECT_THAT(Worker(0).backoff_history_ms, ElementsAre(50));
}

TEST_F(WorkerSupervisorTest, AProcessThatIsNotOurChildIsRefused) {
  StartSupervisor(Options({"cpu"}));
  ASSERT_TRUE(WaitFor([&] { return Reports(0, "ok").size() == 1; }, kWaitMs));
  // This test process is no child of the supervisor: its pid is unknown.
  absl::StatusOr<store::DaemonAdmission> stranger =
      store::JoinDaemon(supervisor_->socket_path(), 0, "cpu", 2000);
  ASSERT_FALSE(stranger.ok());
  EXPECT_EQ(supervisor_->rejected_connections(), 1u);
  EXPECT_EQ(Worker(0).phase, WorkerPhase::kRunning) << "the real worker is unaffected";
  EXPECT_EQ(Worker(0).admissions, 1u);
}

TEST_F(WorkerSupervisorTest, AWorkerThatNeverConnectsIsKilledAfterTheHandshakeTimeout) {
  Touch("never-connect-0");
  SupervisorOptions options = Options({"cpu"});
  options.handshake_timeout_ms = 200;
  StartSupervisor(options);
  ASSERT_TRUE(WaitFor([&] { return !Worker(0).backoff_history_ms.empty(); }, kWaitMs));
  EXPECT_THAT(Worker(0).last_exit, HasSubstr("did not connect"));
  Remove("never-connect-0");
  ASSERT_TRUE(WaitFor([&] { return Reports(0, "ok").size() == 1; }, kWaitMs));
}

TEST_F(WorkerSupervisorTest, AMissingWorkerProgramIsRetriedWithBackoff) {
  SupervisorOptions options = Options({"cpu"});
  options.worker_executable_path = dir_.File("no-such-worker");
  StartSupervisor(options);
  ASSERT_TRUE(WaitFor([&] { return Worker(0).backoff_history_ms.size() >= 3; }, kWaitMs));
  const WorkerSnapshot s = Worker(0);
  EXPECT_THAT(s.last_exit, HasSubstr("could not be started"));
  EXPECT_THAT(std::vector<int64_t>(s.backoff_history_ms.begin(), s.backoff_history_ms.begin() + 3),
              ElementsAre(50, 100, 200));
}

TEST_F(WorkerSupervisorTest, RefusesAStaleOrForeignSocketPath) {
  SupervisorOptions options = Options({"cpu"});
  options.control_socket_path = reports_;  // a directory, not a socket
  absl::StatusOr<std::unique_ptr<WorkerSupervisor>> s = WorkerSupervisor::Create(options);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("not a socket"));
  StartSupervisor(Options({"cpu"}));
  absl::StatusOr<std::unique_ptr<WorkerSupervisor>> twice =
      WorkerSupervisor::Create(Options({"cpu"}));
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("another moetierd"));
}

// A worker killed with SIGKILL while its miss is in flight (the read is
// slowed so it cannot finish first): the death is logged as signal 9, the
// worker is restarted, the load completes untouched for the other worker
// waiting on the same expert, and nothing of the dead worker stays pinned.
TEST_F(WorkerSupervisorTest, AWorkerKilledDuringAMissIsRestartedAndOtherWaitersAreServed) {
  store_->Stop();
  absl::StatusOr<ModelManifest> manifest = ManifestOf(model_);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::atomic<bool> slow{true};
  auto injector = [&slow](const ReadRequest&, uint64_t, uint64_t) -> std::optional<InjectedFault> {
    if (slow.load()) std::this_thread::sleep_for(std::chrono::milliseconds(800));
    return std::nullopt;
  };
  ExpertStoreOptions options;
  options.segment.allow_unlocked_memory = true;
  absl::StatusOr<SegmentPlan> full = PlanSegment(*manifest, 0);
  ASSERT_TRUE(full.ok()) << full.status();
  options.ram_budget_bytes = FixedSegmentBytes(*manifest) + 4 * full->max_span_bytes;
  absl::StatusOr<std::unique_ptr<ExpertStore>> s =
      ExpertStore::Create(*manifest, std::make_unique<PreadBackend>(8, injector), options);
  ASSERT_TRUE(s.ok()) << s.status();
  store_ = std::move(*s);
  ASSERT_EQ(store_->mode(), store::StoreMode::kCache);
  store_->Start();
  ASSERT_TRUE(store_->WaitUntilReady(kWaitMs));

  Touch("kill-in-miss-0");
  StartSupervisor(Options({"cpu"}));
  // Wait until the worker's request started the (slow) load, then wait on
  // the same expert from another worker.
  MappedSegment segment(*store_);
  ASSERT_TRUE(WaitFor(
      [&] { return segment.state(1, 1) == static_cast<uint32_t>(store::ExpertState::kLoading); },
      kWaitMs));
  std::unique_ptr<store::StoreClient> other = daemon_test::AttachInProcess(*store_, 3);
  ASSERT_NE(other, nullptr);
  absl::StatusOr<store::ExpertPin> waited = absl::UnknownError("not run");
  std::thread waiter([&] { waited = other->Acquire(1, 1, kWaitMs); });

  ASSERT_TRUE(WaitFor([&] { return Worker(0).last_exit.find("signal 9") != std::string::npos; },
                      kWaitMs))
      << "last exit: " << Worker(0).last_exit;
  waiter.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_TRUE(daemon_test::PinHolds(*waited, model_.experts[1][1]));
  EXPECT_EQ(store_->counters().load_errors, 0u);
  slow.store(false);

  ASSERT_TRUE(WaitFor([&] { return Reports(0, "ok").size() == 1; }, kWaitMs))
      << "errors: " << ::testing::PrintToString(Reports(0, "error"));
  EXPECT_GE(Worker(0).starts, 2u);
  EXPECT_EQ(Worker(0).phase, WorkerPhase::kRunning);
  EXPECT_TRUE(WaitFor([&] { return segment.entry(1, 1).pins[0] == 0; }, kWaitMs))
      << "the dead worker's pin (or its successor's) is still held";
  EXPECT_EQ(segment.entry(1, 1).pins[3], 1);
  waited->Release();
  other.reset();
  store_->ReleaseWorker(3);
}

}  // namespace
}  // namespace moetier
