#include "scheduler/request_scheduler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_format.h"
#include "util/byte_size.h"
#include "control/control_channel.h"
#include "log/daemon_log.h"
#include "request/control_codec.h"
#include "store/shared_futex.h"

namespace moetier {
namespace {

// How often a reader thread looks at the stop flag while its worker is quiet.
constexpr int64_t kReaderPollMs = 100;

control_v1::WorkerReply CancelledDone(uint64_t id) {
  control_v1::WorkerReply reply;
  reply.set_id(id);
  reply.mutable_done()->set_stop_reason(StopReasonToControl(StopReason::kCancelled));
  return reply;
}

// The positions of a sequence a request needs: a Score one per id, a
// Generate its prompt and room for the one token it must at least
// generate. 0: it needs no sequence.
int64_t ContextPositions(const control_v1::WorkerRequest& request) {
  switch (request.kind_case()) {
    case control_v1::WorkerRequest::kScore:
      return request.score().token_ids_size();
    case control_v1::WorkerRequest::kGenerate:
      return int64_t{request.generate().prompt_token_ids_size()} + 1;
    default:
      return 0;
  }
}

}  // namespace

RequestScheduler::RequestScheduler(SchedulerLimits limits) : limits_(limits) {}

RequestScheduler::~RequestScheduler() { Shutdown(); }

void RequestScheduler::AddWorker(AdmittedWorker worker) {
  std::vector<std::unique_ptr<Connection>> gone;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_down_) {
      close(worker.control_fd);
      return;
    }
    // A restarted worker's predecessor has closed by now; collect the dead.
    auto it = std::stable_partition(connections_.begin(), connections_.end(),
                                    [](const std::unique_ptr<Connection>& c) { return !c->closed; });
    for (auto moved = it; moved != connections_.end(); ++moved) gone.push_back(std::move(*moved));
    connections_.erase(it, connections_.end());
  }
  for (std::unique_ptr<Connection>& c : gone) {
    if (c->reader.joinable()) c->reader.join();
  }
  control::ConfigureControlSocket(worker.control_fd);
  auto connection = std::make_unique<Connection>();
  connection->info.index = worker.index;
  connection->info.device = worker.device;
  connection->info.pid = worker.pid;
  connection->fd = worker.control_fd;
  Connection* raw = connection.get();
  std::lock_guard<std::mutex> lock(mutex_);
  connections_.push_back(std::move(connection));
  raw->reader = std::thread([this, raw] { ReadLoop(raw); });
}

void RequestScheduler::ReadLoop(Connection* connection) {
  const int fd = connection->fd;
  while (!stopping_.load()) {
    control_v1::WorkerReply reply;
    const absl::Status got = control::ReceiveControlMessage(fd, &reply, kReaderPollMs);
    if (got.code() == absl::StatusCode::kDeadlineExceeded) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!got.ok()) {
      OnClosed(*connection, got);
      return;
    }
    OnReply(*connection, std::move(reply));
  }
}

void RequestScheduler::OnReply(Connection& c, control_v1::WorkerReply reply) {
  if (reply.has_ready()) {
    c.info.ready = true;
    c.info.n_vocab = reply.ready().n_vocab();
    c.info.max_ctx = reply.ready().max_ctx();
    c.info.backend = reply.ready().backend();
    c.info.kv_bytes_per_token = reply.ready().kv_bytes_per_token();
    c.info.recurrent_state_bytes = reply.ready().recurrent_state_bytes();
    c.info.kv_type_k = reply.ready().kv_type_k();
    c.info.kv_type_v = reply.ready().kv_type_v();
    c.info.max_sequences = static_cast<uint32_t>(std::max(1, reply.ready().max_sequences()));
    c.info.prefix_cache_budget_bytes = reply.ready().prefix_cache_budget_bytes();
    announced_[c.info.device] = {c.info.max_ctx, c.info.kv_bytes_per_token,
                                 c.info.recurrent_state_bytes};
    LogInfo("worker %d (%s, pid %d) is ready: %s backend, %d threads, context %d tokens",
            c.info.index, c.info.device, c.info.pid, c.info.backend, reply.ready().threads(),
            c.info.max_ctx);
    worker_ready_.notify_all();
    RefuseWhatCannotFit();
    Dispatch();
    return;
  }
  const auto job = std::find_if(c.running.begin(), c.running.end(),
                                [&](const std::shared_ptr<RequestJob>& j) {
                                  return j->id() == reply.id();
                                });
  if (job == c.running.end()) {
    // A reply to a request this scheduler no longer tracks: the worker is
    // out of step with us, and nothing it says can be trusted.
    LogWarning("worker %d (%s) replied to request %d, which is not running there; ignored",
               c.info.index, c.info.device, reply.id());
    return;
  }
  const bool done = reply.has_done();
  if (done) {
    const control_v1::DoneReply& d = reply.done();
    const absl::StatusOr<StopReason> stop = StopReasonFromControl(d.stop_reason());
    if (stop.ok() && *stop == StopReason::kCancelled) ++cancelled_;
    if (d.generated_tokens() > 1 && d.decode_seconds() > 0) {
      c.info.last_decode_tokens_per_s = (d.generated_tokens() - 1) / d.decode_seconds();
    }
  }
  (*job)->Deliver(std::move(reply));
  if (done) {
    c.running.erase(job);
    c.info.running = static_cast<uint32_t>(c.running.size());
    ++c.info.requests_served;
    ++completed_;
    --active_;
    Dispatch();
  }
}

void RequestScheduler::OnClosed(Connection& c, const absl::Status& why) {
  c.closed = true;
  c.info.ready = false;
  close(c.fd);
  c.fd = -1;
  for (const std::shared_ptr<RequestJob>& job : c.running) {
    job->Fail(absl::UnavailableError(absl::StrFormat(
        "the worker on %s (pid %d) ended while serving this request (%s); it is being "
        "restarted, retry the request",
        c.info.device, c.info.pid, why.message())));
    ++failed_;
    --active_;
  }
  c.running.clear();
  c.info.running = 0;
  if (!stopping_.load()) {
    LogWarning("worker %d (%s, pid %d): control channel closed: %s", c.info.index, c.info.device,
               c.info.pid, why.message());
  }
  Dispatch();
}

RequestScheduler::Connection* RequestScheduler::WorkerWithRoomFor(const Queued& q) {
  Connection* best = nullptr;
  for (std::unique_ptr<Connection>& c : connections_) {
    if (c->info.ready && c->running.size() < c->info.max_sequences && !c->closed &&
        (q.device.empty() || q.device == c->info.device) && q.positions <= c->info.max_ctx &&
        (best == nullptr || c->running.size() < best->running.size())) {
      best = c.get();
    }
  }
  return best;
}

absl::Status RequestScheduler::CheckContext(const control_v1::WorkerRequest& request,
                                            const std::string& device, int64_t positions) const {
  if (positions == 0) return absl::OkStatus();
  const std::string* largest_device = nullptr;
  const AnnouncedContext* largest = nullptr;
  for (const auto& [d, announced] : announced_) {
    if (!device.empty() && d != device) continue;
    if (largest == nullptr || announced.max_ctx > largest->max_ctx) {
      largest_device = &d;
      largest = &announced;
    }
  }
  if (largest == nullptr || positions <= largest->max_ctx) return absl::OkStatus();
  std::string what =
      request.has_score()
          ? absl::StrFormat("%d token ids to score; the context of the worker on %s holds %d tokens",
                            request.score().token_ids_size(), *largest_device, largest->max_ctx)
          : absl::StrFormat(
                "the prompt is %d tokens; the context of the worker on %s holds %d tokens, prompt "
                "and generated together, so a prompt may have at most %d",
                request.generate().prompt_token_ids_size(), *largest_device, largest->max_ctx,
                largest->max_ctx - 1);
  if (largest->kv_bytes_per_token > 0) {
    const auto state_at = [&](int64_t n) {
      return static_cast<uint64_t>(n) * largest->kv_bytes_per_token + largest->recurrent_state_bytes;
    };
    absl::StrAppendFormat(&what,
                          "; its %d positions need %s of sequence state (%s of KV cache per "
                          "token%s), and a sequence there holds %s: raise the worker's --ctx (up "
                          "to the model's training context; --cache-type-k and --cache-type-v "
                          "store the KV cache in fewer bytes, so a longer context fits in memory)",
                          positions, FormatBytes(state_at(positions)),
                          FormatBytes(largest->kv_bytes_per_token),
                          largest->recurrent_state_bytes > 0
                              ? " and " + FormatBytes(largest->recurrent_state_bytes) +
                                    " of recurrent state"
                              : std::string(),
                          FormatBytes(state_at(largest->max_ctx)));
  }
  absl::Status refused = absl::ResourceExhaustedError(what);
  refused.SetPayload(kContextTooLongPayload, absl::Cord(what));
  return refused;
}

void RequestScheduler::RefuseWhatCannotFit() {
  for (auto it = queue_.begin(); it != queue_.end();) {
    const absl::Status fits = CheckContext(it->job->request(), it->device, it->positions);
    if (fits.ok()) {
      ++it;
      continue;
    }
    it->job->Fail(fits);
    it = queue_.erase(it);
  }
}

void RequestScheduler::Dispatch() {
  // Each pass hands out the first queued job a worker with room may take (or
  // marks a worker whose channel failed); a pass that changes nothing ends.
  bool changed = true;
  while (changed && !queue_.empty() && active_ < limits_.max_active_sequences) {
    changed = false;
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      Connection* chosen = WorkerWithRoomFor(*it);
      if (chosen == nullptr) continue;
      const absl::Status sent = control::SendControlMessage(chosen->fd, it->job->request());
      if (!sent.ok()) {
        // The channel is going away; its reader will notice. The job keeps
        // its place in the queue for the next worker.
        chosen->info.ready = false;
        changed = true;
        break;
      }
      Queued next = std::move(*it);
      queue_.erase(it);
      const double waited_ms = (store::MonotonicNowNs() - next.submitted_ns) / 1e6;
      next.job->MarkDispatched(chosen->info.device, waited_ms);
      chosen->running.push_back(std::move(next.job));
      chosen->info.running = static_cast<uint32_t>(chosen->running.size());
      ++active_;
      changed = true;
      break;
    }
  }
}

absl::StatusOr<std::shared_ptr<RequestJob>> RequestScheduler::Submit(
    control_v1::WorkerRequest request) {
  return Enqueue(std::string(), std::move(request));
}

absl::StatusOr<std::shared_ptr<RequestJob>> RequestScheduler::SubmitTo(
    const std::string& device, control_v1::WorkerRequest request) {
  return Enqueue(device, std::move(request));
}

absl::StatusOr<std::shared_ptr<RequestJob>> RequestScheduler::Enqueue(
    std::string device, control_v1::WorkerRequest request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shut_down_) return absl::UnavailableError("moetierd is shutting down");
  const int64_t positions = ContextPositions(request);
  if (absl::Status fits = CheckContext(request, device, positions); !fits.ok()) return fits;
  if (queue_.size() >= limits_.max_queued_requests) {
    ++rejected_;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the request queue is full (max_queued_requests=%d, %d running); retry later",
        limits_.max_queued_requests, active_));
  }
  request.set_id(next_id_++);
  auto job = std::make_shared<RequestJob>(std::move(request));
  queue_.push_back({job, store::MonotonicNowNs(), std::move(device), positions});
  Dispatch();
  return job;
}

void RequestScheduler::Cancel(const std::shared_ptr<RequestJob>& job) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->job == job) {
      queue_.erase(it);
      ++cancelled_;
      job->Deliver(CancelledDone(job->id()));
      return;
    }
  }
  for (std::unique_ptr<Connection>& c : connections_) {
    if (!c->closed && std::find(c->running.begin(), c->running.end(), job) != c->running.end()) {
      control_v1::WorkerRequest cancel;
      cancel.set_id(next_id_++);
      cancel.mutable_cancel()->set_target_id(job->id());
      // If this fails the channel is closing and the job fails with it.
      control::SendControlMessage(c->fd, cancel).IgnoreError();
      return;
    }
  }
}

bool RequestScheduler::WaitForReadyWorker(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  return worker_ready_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    if (shut_down_) return true;
    for (const std::unique_ptr<Connection>& c : connections_) {
      if (c->info.ready && !c->closed) return true;
    }
    return false;
  }) && !shut_down_;
}

std::optional<RequestScheduler::ModelLimits> RequestScheduler::ReadyLimits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<ModelLimits> limits;
  for (const std::unique_ptr<Connection>& c : connections_) {
    if (!c->info.ready || c->closed) continue;
    if (!limits.has_value()) {
      limits = ModelLimits{c->info.n_vocab, c->info.max_ctx};
    } else {
      limits->max_ctx = std::min(limits->max_ctx, c->info.max_ctx);
    }
  }
  return limits;
}

SchedulerSnapshot RequestScheduler::Snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  SchedulerSnapshot s;
  s.queued = static_cast<uint32_t>(queue_.size());
  s.active = active_;
  s.completed = completed_;
  s.rejected = rejected_;
  s.cancelled = cancelled_;
  s.failed = failed_;
  for (const std::unique_ptr<Connection>& c : connections_) {
    if (!c->closed) s.workers.push_back(c->info);
  }
  return s;
}

void RequestScheduler::Shutdown() {
  std::vector<std::unique_ptr<Connection>> connections;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_down_) return;
    shut_down_ = true;
    stopping_.store(true);
    const absl::Status stopping = absl::UnavailableError("moetierd is shutting down");
    for (Queued& q : queue_) q.job->Fail(stopping);
    failed_ += queue_.size();
    queue_.clear();
    connections = std::move(connections_);
    connections_.clear();
  }
  worker_ready_.notify_all();
  for (std::unique_ptr<Connection>& c : connections) {
    if (c->reader.joinable()) c->reader.join();
    std::lock_guard<std::mutex> lock(mutex_);
    if (!c->closed) OnClosed(*c, absl::UnavailableError("moetierd is shutting down"));
  }
}

}  // namespace moetier
