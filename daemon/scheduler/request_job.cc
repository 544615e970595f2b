#include "scheduler/request_job.h"

#include <chrono>
#include <utility>

namespace moetier {

absl::StatusOr<std::optional<control_v1::WorkerReply>> RequestJob::Next(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                    [&] { return !replies_.empty() || !failure_.ok() || done_taken_; });
  if (!replies_.empty()) {
    control_v1::WorkerReply reply = std::move(replies_.front());
    replies_.pop_front();
    if (reply.has_done()) done_taken_ = true;
    return std::optional<control_v1::WorkerReply>(std::move(reply));
  }
  if (done_taken_) return absl::FailedPreconditionError("the request is already complete");
  if (!failure_.ok()) return failure_;
  return std::optional<control_v1::WorkerReply>();
}

void RequestJob::Deliver(control_v1::WorkerReply reply) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_received_ || !failure_.ok()) return;
    if (reply.has_done()) done_received_ = true;
    replies_.push_back(std::move(reply));
  }
  changed_.notify_all();
}

void RequestJob::Fail(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_received_ || !failure_.ok()) return;
    failure_ = std::move(status);
  }
  changed_.notify_all();
}

bool RequestJob::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_received_ || !failure_.ok();
}

std::string RequestJob::worker_device() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return worker_device_;
}

double RequestJob::queue_wait_ms() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_wait_ms_;
}

void RequestJob::MarkDispatched(std::string device, double queue_wait_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  worker_device_ = std::move(device);
  queue_wait_ms_ = queue_wait_ms;
}

}  // namespace moetier
