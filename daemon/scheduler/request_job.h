// One client request on its way through a worker: the front door submits
// it, the scheduler hands it to a worker, the worker's replies pile up here
// and the front door's handler thread takes them off one at a time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "moetier/worker/v1/control.pb.h"

namespace moetier {

namespace control_v1 = ::moetier::worker::v1;

class RequestJob {
 public:
  explicit RequestJob(control_v1::WorkerRequest request) : request_(std::move(request)) {}

  // The next reply, in order; nullopt when none arrived within timeout_ms.
  // The last reply of a job is its Done; calls after that return
  // FailedPrecondition. A job that ended without a Done (its worker died,
  // the daemon is stopping) returns that error once every reply that did
  // arrive has been taken.
  absl::StatusOr<std::optional<control_v1::WorkerReply>> Next(int64_t timeout_ms);

  const control_v1::WorkerRequest& request() const { return request_; }
  uint64_t id() const { return request_.id(); }
  void set_id(uint64_t id) { request_.set_id(id); }

  // Scheduler side; each takes the job's own lock.
  void Deliver(control_v1::WorkerReply reply);
  void Fail(absl::Status status);
  bool finished() const;

  // Which worker served it and how long it waited for one (set on dispatch).
  std::string worker_device() const;
  double queue_wait_ms() const;
  void MarkDispatched(std::string device, double queue_wait_ms);

 private:
  control_v1::WorkerRequest request_;  // id set by the scheduler before dispatch
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<control_v1::WorkerReply> replies_;
  bool done_received_ = false;  // a Done reply arrived (it may not be taken yet)
  bool done_taken_ = false;
  absl::Status failure_;
  std::string worker_device_;
  double queue_wait_ms_ = 0;
};

}  // namespace moetier
