// Hands client requests to workers: a bounded queue in front of the workers'
// control channels. Each worker computes up to the max_sequences its
// ReadyReply announced at once (its --parallel: that many KV caches, decoded
// together); requests wait in arrival order for a ready worker with room,
// the least loaded first. A
// request for one worker in particular (SubmitTo: a resize of its expert
// cache) waits in the same queue for that worker; it holds back no request
// that another idle worker can take.
//
// The scheduler is where a request's length meets the workers' contexts:
// each worker announces its max_ctx in its ReadyReply, and a request that
// fits none of them (a Score's ids, a Generate's prompt plus the one token
// it must at least generate) is refused before it is queued, with the
// numbers in the message; it is only ever sent to a worker whose context
// holds it. Nothing past the scheduler checks the length again but the
// engine's own guard.
//
// The scheduler owns the control channel of every admitted worker (the
// supervisor hands over a duplicate) and reads its replies on a thread per
// worker. A worker whose channel closes fails its running request with
// UNAVAILABLE; the supervisor restarts the process and the new one joins
// again, announcing itself with a ReadyReply before it gets work.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/request_job.h"
#include "supervisor/worker_supervisor.h"

namespace moetier {

// The payload RequestScheduler puts on the RESOURCE_EXHAUSTED of a request
// that no worker's context holds (a full queue has none), so that a
// transport can tell "never fits" from "retry later".
inline constexpr char kContextTooLongPayload[] = "moetier.dev/context_length_exceeded";


struct SchedulerLimits {
  uint32_t max_queued_requests = 64;
  uint32_t max_active_sequences = 16;
};

struct SchedulerWorkerInfo {
  uint32_t index = 0;
  std::string device;
  pid_t pid = 0;
  bool ready = false;  // sent its ReadyReply
  uint32_t running = 0;        // requests sent and not yet Done
  uint32_t max_sequences = 1;  // from the ReadyReply: requests it takes at once
  uint64_t prefix_cache_budget_bytes = 0;  // from the ReadyReply
  int32_t n_vocab = 0;
  int32_t max_ctx = 0;
  uint64_t kv_bytes_per_token = 0;     // from the ReadyReply
  uint64_t recurrent_state_bytes = 0;  // from the ReadyReply
  std::string kv_type_k, kv_type_v;    // from the ReadyReply
  std::string backend;
  uint64_t requests_served = 0;
  double last_decode_tokens_per_s = 0;
};

struct SchedulerSnapshot {
  uint32_t queued = 0;
  uint32_t active = 0;
  uint64_t completed = 0;
  uint64_t rejected = 0;
  uint64_t cancelled = 0;
  uint64_t failed = 0;  // ended by a lost worker or shutdown
  std::vector<SchedulerWorkerInfo> workers;  // connected workers only
};

class RequestScheduler {
 public:
  explicit RequestScheduler(SchedulerLimits limits);
  ~RequestScheduler();  // Shutdown()
  RequestScheduler(const RequestScheduler&) = delete;
  RequestScheduler& operator=(const RequestScheduler&) = delete;

  // Takes over a freshly admitted worker's control channel (the supervisor's
  // on_admitted callback). Safe from any thread.
  void AddWorker(AdmittedWorker worker);

  // Queues `request` (its kind set, its id assigned here). INVALID_ARGUMENT
  // when its tokens fit the context of no worker that has announced one,
  // naming the request's length and the largest context; a request queued
  // before any worker announced its context fails the same way when one
  // does, if it does not fit. RESOURCE_EXHAUSTED when max_queued_requests
  // are already waiting; UNAVAILABLE after Shutdown().
  absl::StatusOr<std::shared_ptr<RequestJob>> Submit(control_v1::WorkerRequest request);
  // Like Submit, for the worker on `device` only: it runs there after the
  // requests that worker is serving or that were queued before it and could
  // go there. While that worker is absent (restarting) the job waits.
  absl::StatusOr<std::shared_ptr<RequestJob>> SubmitTo(const std::string& device,
                                                       control_v1::WorkerRequest request);

  // Stops a job: a queued one ends at once with a Done(STOP_CANCELLED); a
  // running one is told to stop at its next token, and its own Done follows.
  void Cancel(const std::shared_ptr<RequestJob>& job);

  // Waits until some worker is ready (true) or timeout_ms passes (false).
  bool WaitForReadyWorker(int64_t timeout_ms);

  // The smallest max_ctx and the n_vocab of the ready workers; nullopt
  // while none is ready.
  struct ModelLimits {
    int32_t n_vocab = 0;
    int32_t max_ctx = 0;
  };
  std::optional<ModelLimits> ReadyLimits() const;

  SchedulerSnapshot Snapshot() const;
  const SchedulerLimits& limits() const { return limits_; }

  // Fails every queued and running job with UNAVAILABLE, closes every
  // channel and joins the reader threads. Idempotent.
  void Shutdown();

 private:
  struct Connection {
    SchedulerWorkerInfo info;
    int fd = -1;
    bool closed = false;  // the channel ended; the reader thread is done
    std::vector<std::shared_ptr<RequestJob>> running;  // sent, not yet Done
    std::thread reader;
  };
  struct Queued {
    std::shared_ptr<RequestJob> job;
    uint64_t submitted_ns = 0;
    std::string device;  // the only worker that may take it; empty: any
    int64_t positions = 0;  // sequence positions it needs (ContextPositions)
  };

  void ReadLoop(Connection* connection);
  void OnReply(Connection& connection, control_v1::WorkerReply reply);  // mutex_ held
  void OnClosed(Connection& connection, const absl::Status& why);       // mutex_ held
  void Dispatch();                                                       // mutex_ held
  // The ready worker with the fewest running requests that has room for
  // one more, may take `q` and whose context holds it; null if none.
  // mutex_ held.
  Connection* WorkerWithRoomFor(const Queued& q);
  // OK when `positions` fit the largest context announced by a worker on
  // `device` (empty: any), or when none has announced one yet; else the
  // refusal, with the numbers. mutex_ held.
  absl::Status CheckContext(const control_v1::WorkerRequest& request, const std::string& device,
                            int64_t positions) const;
  // Fails the queued requests that fit no announced context. mutex_ held.
  void RefuseWhatCannotFit();
  absl::StatusOr<std::shared_ptr<RequestJob>> Enqueue(std::string device,
                                                      control_v1::WorkerRequest request);

  const SchedulerLimits limits_;
  mutable std::mutex mutex_;
  std::condition_variable worker_ready_;
  std::deque<Queued> queue_;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<std::thread> finished_readers_;  // joined outside the lock
  // What each device's worker announced in its latest ReadyReply; kept
  // while that worker restarts.
  struct AnnouncedContext {
    int32_t max_ctx = 0;
    uint64_t kv_bytes_per_token = 0;
    uint64_t recurrent_state_bytes = 0;
  };
  std::map<std::string, AnnouncedContext> announced_;
  uint64_t next_id_ = 1;
  uint32_t active_ = 0;
  uint64_t completed_ = 0;
  uint64_t rejected_ = 0;
  uint64_t cancelled_ = 0;
  uint64_t failed_ = 0;
  bool shut_down_ = false;
  std::atomic<bool> stopping_{false};
};

}  // namespace moetier
