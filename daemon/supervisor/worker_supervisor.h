// Keeps one moetier-worker running per configured device. It spawns each
// worker, admits it when it connects to the control socket (SO_PEERCRED:
// the pid must be a child it is waiting for, the uid its own), hands it the
// store segment (worker_channel.h), watches its heartbeat in the status
// page, and restarts a worker that exits, closes its channel, hangs or never
// connects — with exponential backoff, while the store stays warm.
//
// Worker lifecycle (owned by the supervisor thread):
//   kWaiting --spawn--> kStarting --admitted--> kRunning --exit/kill--> kWaiting
//   any --Stop()--> kStopped
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "store/expert_store.h"

namespace moetier {

// A worker that was just admitted: its control channel now carries the
// request protocol (proto/moetier/worker/v1/control.proto).
struct AdmittedWorker {
  uint32_t index = 0;
  std::string device;
  pid_t pid = 0;
  uint32_t epoch = 0;
  // A duplicate of the control channel that the callee owns and must close.
  // It reads end-of-file when the worker's process ends.
  int control_fd = -1;
};

struct SupervisorOptions {
  std::string worker_executable_path;
  std::string control_socket_path;  // created (mode 0600) and removed by the supervisor
  std::string model_path;           // passed to workers as --model
  std::vector<std::string> devices;  // one worker each: "cpu", "cuda:0", ...
  std::vector<std::string> worker_extra_args;
  int64_t handshake_timeout_ms = 30000;   // spawn -> admitted
  int64_t heartbeat_timeout_ms = 10000;   // silence after which a worker counts as hung
  int64_t restart_backoff_initial_ms = 500;
  int64_t restart_backoff_max_ms = 60000;
  int64_t stable_after_ms = 60000;        // up this long: the next failure starts over
  int64_t stop_grace_ms = 5000;           // SIGTERM -> SIGKILL at shutdown
  int64_t poll_interval_ms = 20;
  // Called on the supervisor thread after each admission. When set, the
  // supervisor no longer reads the control channel itself (the callee owns
  // the conversation); it only watches it for hang-up. When unset, anything
  // a worker sends is drained and discarded.
  std::function<void(AdmittedWorker)> on_admitted;
};

enum class WorkerPhase { kWaiting, kStarting, kRunning, kStopped };

struct WorkerSnapshot {
  uint32_t index = 0;
  std::string device;
  WorkerPhase phase = WorkerPhase::kWaiting;
  pid_t pid = 0;               // 0 when none
  uint32_t epoch = 0;          // the store's admission count for this index
  uint32_t starts = 0;         // processes spawned
  uint32_t admissions = 0;
  std::vector<int64_t> backoff_history_ms;  // delay chosen before each restart
  std::string last_exit;       // how the last process ended
};

class WorkerSupervisor {
 public:
  // Binds the control socket (before the store exists, so a socket that
  // cannot be had fails start-up before gigabytes are locked and read).
  static absl::StatusOr<std::unique_ptr<WorkerSupervisor>> Create(SupervisorOptions options);
  ~WorkerSupervisor();
  WorkerSupervisor(const WorkerSupervisor&) = delete;
  WorkerSupervisor& operator=(const WorkerSupervisor&) = delete;

  // Starts spawning workers for `store`. Precondition: `store` outlives
  // the supervisor (or at least its Stop()).
  void Start(ExpertStore* store);
  // Stops every worker (SIGTERM, then SIGKILL after stop_grace_ms), reaps
  // them, removes the socket. Idempotent.
  void Stop();

  std::vector<WorkerSnapshot> Snapshot() const;
  uint64_t rejected_connections() const { return rejected_connections_.load(); }
  const std::string& socket_path() const { return options_.control_socket_path; }

 private:
  struct Worker {
    WorkerSnapshot info;
    int control_fd = -1;
    uint64_t spawned_ns = 0;
    uint64_t admitted_ns = 0;
    uint64_t next_start_ns = 0;
    uint32_t consecutive_failures = 0;
    bool kill_sent = false;
  };

  WorkerSupervisor() = default;
  void Loop();
  void Tick(uint64_t now_ns);
  void Spawn(Worker& worker, uint64_t now_ns);
  void CheckWorker(Worker& worker, uint64_t now_ns);
  void OnExit(Worker& worker, int wait_status, uint64_t now_ns);
  void Kill(Worker& worker, std::string_view why);
  void AcceptConnection();
  void StopWorkers();

  ExpertStore* store_ = nullptr;
  SupervisorOptions options_;
  int listen_fd_ = -1;
  std::vector<Worker> workers_;  // guarded by mutex_ for Snapshot(); mutated by the loop
  mutable std::mutex mutex_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> rejected_connections_{0};
  bool stopped_ = false;
};

std::string_view WorkerPhaseName(WorkerPhase phase);

}  // namespace moetier
