// The daemon side of the expert store: builds the segment (store_layout.h)
// for a model, copies the dense weights into it, and runs the service
// thread that owns every expert state transition:
//
//   kOnDisk -> kLoading -> kResident -> kEvicting -> kOnDisk
//
// The service thread drains the workers' request rings, reads experts with
// the IoBackend (demand first, then prefetch hints, then the preload of a
// fully resident store), publishes them, wakes waiters and answers on the
// completion rings. Reads go straight into the slot (expert_placement.h)
// while the expert is kLoading, invisible to workers; only when every read
// of the expert succeeded is it published kResident. A failed read leaves
// the expert on disk with its errno and the slot free for reuse.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "io/io_backend.h"
#include "log/progress_pacer.h"
#include "manifest/model_manifest.h"
#include "store/byte_rate_limiter.h"
#include "store/expert_placement.h"
#include "store/fixed_queue.h"
#include "store/replacement_policy.h"
#include "store/segment_plan.h"
#include "store/store_layout.h"
#include "store/store_segment.h"

namespace moetier {

// Where start-up is: one phase ("locking the expert cache", "copying dense
// weights", "preloading experts") and its bytes done of total.
struct StartupProgress {
  std::string_view phase;
  uint64_t done_bytes = 0;
  uint64_t total_bytes = 0;
};

struct ExpertStoreOptions {
  uint64_t ram_budget_bytes = 0;  // the whole segment; 0: hold every expert
  SegmentOptions segment;
  // Progress lines: every 5% and at least this often.
  int64_t progress_log_interval_ms = 2000;
  // Pace of the preload's reads and of the dense weights' copy; 0: as fast
  // as the disk goes. Demand reads from workers are never held back.
  uint64_t preload_bytes_per_s = 0;
  // Called with each progress line (on the creating thread during Create,
  // then on the service thread), e.g. for systemd's STATUS=.
  std::function<void(const StartupProgress&)> on_startup_progress;
  // The heat profile's view of the experts ([layer * n_expert + expert]),
  // both empty without one. warm_ranks (1: the hottest of its layer, 0:
  // unused) goes into the expert table for the workers' own warm starts;
  // a cache reads warm_order (hottest first) into its free slots at start,
  // behind every demand read and prefetch hint.
  std::vector<uint32_t> warm_ranks;
  std::vector<uint32_t> warm_order;
  // The cache's replacement policy; CLOCK when unset.
  std::function<std::unique_ptr<ReplacementPolicy>(uint32_t n_slot)> make_policy;
};

class ExpertStore {
 public:
  // Plans and creates the segment, registers the model files with `io`,
  // copies the dense tensors. Nothing is read into slots before Start().
  static absl::StatusOr<std::unique_ptr<ExpertStore>> Create(const ModelManifest& manifest,
                                                             std::unique_ptr<IoBackend> io,
                                                             const ExpertStoreOptions& options);
  ~ExpertStore();
  ExpertStore(const ExpertStore&) = delete;
  ExpertStore& operator=(const ExpertStore&) = delete;

  // Starts the service thread: a fully resident store begins its preload
  // (locking its memory as the reads reach it), a cache is ready at once.
  void Start();
  // Marks the store stopping (waiting workers get Unavailable), finishes the
  // reads in flight and joins the service thread. Idempotent.
  void Stop();
  // True once the phase is kReady; false after timeout_ms or when stopping.
  bool WaitUntilReady(int64_t timeout_ms);

  int segment_fd() const { return segment_->fd(); }
  uint64_t segment_bytes() const { return segment_->size(); }
  bool memory_locked() const { return segment_->locked(); }
  uint64_t locked_bytes() const { return segment_->locked_bytes(); }
  // Why the store gave up during the preload (its memory could not be
  // locked and allow_unlocked_memory is off); the phase is then kStopping
  // and the daemon should exit. Safe from any thread.
  std::optional<std::string> startup_failure() const;
  // CLOCK_MONOTONIC of the service thread's last round: it stays fresh
  // while the thread is alive (a round waits at most 50 ms when idle).
  uint64_t service_heartbeat_ns() const;
  store::StoreMode mode() const { return plan_.mode; }
  uint32_t n_slot() const { return plan_.n_slot; }
  store::DaemonPhase phase() const;
  std::string_view io_backend_name() const { return io_->name(); }
  const ModelManifest& manifest() const { return manifest_; }
  // A snapshot of the shared counters.
  store::StoreCounters counters() const;
  // Bytes of the experts now resident in RAM (their matrices, not the
  // aligned spans around them). Walks the expert table; safe from any thread.
  uint64_t ResidentExpertBytes() const;
  // Per expert (linear index layer * n_expert + expert): whether it is
  // resident in RAM and how many token rows the router sent to it (which a
  // worker's own cache does not hide), for the front door's residency map.
  // Walks the table; safe from any thread.
  struct ExpertUse {
    bool resident = false;
    uint64_t routed = 0;
  };
  std::vector<ExpertUse> ExpertUses() const;
  // Per expert, the token rows workers routed to it (ExpertEntry.routed)
  // since the store was created: what the heat profile takes in.
  std::vector<uint64_t> RoutedTotals() const;
  // True while a cache is still reading its warm start.
  bool warming() const { return warming_.load(std::memory_order_relaxed); }
  // A copy of worker `index`'s status page, each field read atomically.
  // Precondition: index < store::kMaxWorkers.
  store::WorkerStatusPage WorkerStatus(uint32_t index) const;

  // Worker slots (the supervisor's side). Admit clears what a previous
  // holder of the index left (pins, rings, status), then stamps the new
  // process in; Release drops the pins of a worker that has exited, so its
  // slots can be evicted again. Both run on the service thread.
  // Precondition: index < store::kMaxWorkers.
  uint32_t AdmitWorker(uint32_t index, int32_t pid, std::string_view device);  // returns the epoch
  void ReleaseWorker(uint32_t index);
  uint64_t WorkerHeartbeatNs(uint32_t index) const;

 private:
  struct Load {
    uint32_t expert = 0;  // linear index
    uint32_t slot = 0;
    uint32_t reads_pending = 0;
    int error = 0;
    bool prefetch = false;
    ExpertPlacement placement;
  };
  struct ExpertBook {
    int32_t load = -1;            // index into loads_ while kLoading
    uint32_t waiting_workers = 0; // bit w: worker w is owed a completion
    uint8_t queued = 0;           // kQueuedDemand | kQueuedPrefetch
  };
  struct WorkerBook {
    bool admitted = false;
    uint32_t epoch = 0;
  };
  class Probe;

  ExpertStore() = default;
  absl::Status FillDenseTensors();
  absl::Status LockCache();
  bool LockPreloadSlot(uint32_t slot);
  void FailStartup(const absl::Status& status);
  void ReportProgress(std::string_view phase, uint64_t done, uint64_t total, uint64_t start_ns,
                      std::string_view extra);
  void WriteHeaderAndTables();
  void ServiceLoop();
  void RunCommands();
  void RunOnServiceThread(std::function<void()> command);
  void DrainRequests();
  void HandleRequest(uint32_t worker, const store::ExpertRequest& request);
  bool StartLoads();  // returns true when a load waits because every slot is pinned
  bool NextExpert(uint32_t* expert, int* source);
  std::optional<uint32_t> AcquireSlot(uint32_t expert);
  void BeginLoad(uint32_t expert, uint32_t slot, int source);
  void FinishWarmStart();
  void ReapReads(int64_t timeout_ns);
  void FinishLoad(uint32_t load_index);
  bool TryEvictSlot(uint32_t slot);
  void PushCompletion(uint32_t worker, uint32_t expert, int error, uint32_t slot);
  void AnswerWaiters(uint32_t expert, int error, uint32_t slot);
  void ReleaseWorkerNow(uint32_t index);
  void LogPreloadProgress(bool final);
  void SetPhase(store::DaemonPhase phase);
  void Bump(uint64_t& counter, uint64_t by = 1);
  store::ExpertEntry& entry(uint32_t expert) { return entries_[expert]; }

  ModelManifest manifest_;
  ExpertStoreOptions options_;
  SegmentPlan plan_;
  std::unique_ptr<StoreSegment> segment_;
  std::unique_ptr<IoBackend> io_;
  std::unique_ptr<ReplacementPolicy> policy_;
  std::vector<uint32_t> file_index_;  // per shard, from io_->RegisterFile
  store::SegmentHeader* header_ = nullptr;
  store::ExpertEntry* entries_ = nullptr;
  uint32_t n_entries_ = 0;
  uint32_t reads_per_load_max_ = 0;

  // Service-thread state.
  std::vector<ExpertBook> books_;
  std::vector<uint32_t> pending_sequence_;  // [worker * n_entries + expert]
  std::vector<uint32_t> slot_owner_;        // linear expert index or kNoSlot
  std::vector<uint64_t> slot_last_access_;  // for Referenced()
  std::vector<uint32_t> free_slots_;
  std::vector<Load> loads_;
  std::vector<uint32_t> free_loads_;
  FixedQueue demand_queue_;
  FixedQueue prefetch_queue_;
  uint32_t preload_cursor_ = 0;
  bool preloading_ = false;
  size_t warm_cursor_ = 0;  // into options_.warm_order
  uint64_t warm_start_ns_ = 0;
  std::atomic<bool> warming_{false};
  bool stalled_ = false;
  WorkerBook workers_[store::kMaxWorkers];
  uint64_t preload_start_ns_ = 0;
  std::optional<ProgressPacer> preload_pacer_;
  std::optional<ByteRateLimiter> preload_limiter_;
  uint64_t preload_delay_ns_ = 0;  // set while the limiter holds the preload back

  std::thread service_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
  std::mutex command_mutex_;
  std::condition_variable command_cv_;
  std::vector<std::function<void()>> commands_;
  uint64_t commands_posted_ = 0;  // guarded by command_mutex_
  uint64_t commands_done_ = 0;    // guarded by command_mutex_
  std::mutex ready_mutex_;
  std::condition_variable ready_cv_;
  mutable std::mutex failure_mutex_;
  std::optional<std::string> startup_failure_;  // guarded by failure_mutex_
};

}  // namespace moetier
