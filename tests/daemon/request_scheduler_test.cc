// The scheduler against fake workers: the test holds the worker end of each
// control channel (a SOCK_SEQPACKET socketpair) and answers by hand.
#include "scheduler/request_scheduler.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "control/control_channel.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

constexpr int64_t kWaitMs = 5000;

class FakeWorker {
 public:
  FakeWorker(RequestScheduler& scheduler, uint32_t index, int max_ctx = 128,
             const std::string& device = "cpu", uint64_t kv_bytes_per_token = 0,
             uint64_t recurrent_state_bytes = 0, int max_sequences = 0) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    fd_ = fds[1];
    scheduler.AddWorker(AdmittedWorker{index, device, 1000 + static_cast<pid_t>(index), 1, fds[0]});
    control_v1::WorkerReply ready;
    ready.mutable_ready()->set_n_vocab(32);
    ready.mutable_ready()->set_max_ctx(max_ctx);
    ready.mutable_ready()->set_backend("cpu");
    ready.mutable_ready()->set_kv_bytes_per_token(kv_bytes_per_token);
    ready.mutable_ready()->set_recurrent_state_bytes(recurrent_state_bytes);
    ready.mutable_ready()->set_max_sequences(max_sequences);
    Send(ready);
  }
  ~FakeWorker() { Close(); }

  void Send(const control_v1::WorkerReply& reply) {
    ASSERT_TRUE(control::SendControlMessage(fd_, reply).ok());
  }
  control_v1::WorkerRequest Receive() {
    control_v1::WorkerRequest request;
    const absl::Status got = control::ReceiveControlMessage(fd_, &request, kWaitMs);
    EXPECT_TRUE(got.ok()) << got;
    return request;
  }
  bool NothingPending() {
    control_v1::WorkerRequest request;
    return control::ReceiveControlMessage(fd_, &request, 100).code() ==
           absl::StatusCode::kDeadlineExceeded;
  }
  void SendToken(uint64_t id, int32_t token) {
    control_v1::WorkerReply reply;
    reply.set_id(id);
    reply.mutable_token()->set_token_id(token);
    Send(reply);
  }
  void SendDone(uint64_t id, control_v1::StopReason reason) {
    control_v1::WorkerReply reply;
    reply.set_id(id);
    reply.mutable_done()->set_stop_reason(reason);
    Send(reply);
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

control_v1::WorkerRequest ResizeRequest(uint64_t pool_bytes) {
  control_v1::WorkerRequest r;
  r.mutable_resize_expert_cache()->set_pool_bytes(pool_bytes);
  return r;
}

control_v1::WorkerRequest GenerateRequest(std::vector<int32_t> prompt) {
  control_v1::WorkerRequest r;
  r.mutable_generate()->mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
  r.mutable_generate()->set_max_new_tokens(4);
  return r;
}

control_v1::WorkerRequest ScoreRequest(int n) {
  control_v1::WorkerRequest r;
  for (int i = 0; i < n; ++i) r.mutable_score()->add_token_ids(i % 32);
  return r;
}

// A prompt of n tokens.
control_v1::WorkerRequest PromptOf(int n) { return GenerateRequest(std::vector<int32_t>(n, 1)); }

// Takes replies until one is a Done (or the job fails); returns them all.
std::vector<control_v1::WorkerReply> Drain(RequestJob& job, absl::Status* failure = nullptr) {
  std::vector<control_v1::WorkerReply> replies;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<std::optional<control_v1::WorkerReply>> next = job.Next(kWaitMs);
    if (!next.ok()) {
      if (failure != nullptr) *failure = next.status();
      return replies;
    }
    if (!next->has_value()) break;
    replies.push_back(**next);
    if (replies.back().has_done()) break;
  }
  return replies;
}

TEST(RequestSchedulerTest, RunsARequestOnAReadyWorkerAndStreamsItsReplies) {
  RequestScheduler scheduler({4, 4});
  FakeWorker worker(scheduler, 0);
  ASSERT_TRUE(scheduler.WaitForReadyWorker(kWaitMs));
  ASSERT_TRUE(scheduler.ReadyLimits().has_value());
  EXPECT_EQ(scheduler.ReadyLimits()->max_ctx, 128);

  absl::StatusOr<std::shared_ptr<RequestJob>> job = scheduler.Submit(GenerateRequest({1, 2, 3}));
  ASSERT_TRUE(job.ok()) << job.status();
  const control_v1::WorkerRequest got = worker.Receive();
  ASSERT_TRUE(got.has_generate());
  EXPECT_EQ(got.id(), (*job)->id());
  EXPECT_EQ(got.generate().prompt_token_ids_size(), 3);
  worker.SendToken(got.id(), 7);
  worker.SendToken(got.id(), 9);
  worker.SendDone(got.id(), control_v1::STOP_MAX_TOKENS);
  const std::vector<control_v1::WorkerReply> replies = Drain(**job);
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[0].token().token_id(), 7);
  EXPECT_EQ(replies[1].token().token_id(), 9);
  EXPECT_EQ(replies[2].done().stop_reason(), control_v1::STOP_MAX_TOKENS);
  EXPECT_EQ((*job)->worker_device(), "cpu");
  EXPECT_EQ((*job)->Next(0).status().code(), absl::StatusCode::kFailedPrecondition);
  const SchedulerSnapshot s = scheduler.Snapshot();
  EXPECT_EQ(s.completed, 1u);
  EXPECT_EQ(s.active, 0u);
  ASSERT_EQ(s.workers.size(), 1u);
  EXPECT_EQ(s.workers[0].requests_served, 1u);
}

TEST(RequestSchedulerTest, OneRequestPerWorkerTheRestWaitInOrder) {
  RequestScheduler scheduler({8, 8});
  FakeWorker worker(scheduler, 0);
  ASSERT_TRUE(scheduler.WaitForReadyWorker(kWaitMs));
  auto first = scheduler.Submit(GenerateRequest({1}));
  auto second = scheduler.Submit(GenerateRequest({2}));
  ASSERT_TRUE(first.ok() && second.ok());
  const control_v1::WorkerRequest a = worker.Receive();
  EXPECT_EQ(a.id(), (*first)->id());
  EXPECT_TRUE(worker.NothingPending()) << "a busy worker was sent a second request";
  EXPECT_EQ(scheduler.Snapshot().queued, 1u);
  worker.SendDone(a.id(), control_v1::STOP_MAX_TOKENS);
  const control_v1::WorkerRequest b = worker.Receive();
  EXPECT_EQ(b.id(), (*second)->id());
  EXPECT_EQ(b.generate().prompt_token_ids(0), 2);
}

// A worker that announces --parallel 3 gets three requests at once, the
// replies reach their own jobs, and a lost worker fails all three.
TEST(RequestSchedulerTest, AWorkerGetsAsManyRequestsAsItComputesTogether) {
  RequestScheduler scheduler({8, 8});
  auto worker = std::make_unique<FakeWorker>(scheduler, 0, 128, "cpu", 0, 0, 3);
  ASSERT_TRUE(scheduler.WaitForReadyWorker(kWaitMs));
  std::vector<std::shared_ptr<RequestJob>> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(*scheduler.Submit(GenerateRequest({i})));
  std::vector<control_v1::WorkerRequest> got;
  for (int i = 0; i < 3; ++i) got.push_back(worker->Receive());
  EXPECT_TRUE(worker->NothingPending()) << "more than the worker's 3 sequences were sent";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i].id(), jobs[i]->id());
  const SchedulerSnapshot s = scheduler.Snapshot();
  EXPECT_EQ(s.active, 3u);
  ASSERT_EQ(s.workers.size(), 1u);
  EXPECT_EQ(s.workers[0].running, 3u);
  EXPECT_EQ(s.workers[0].max_sequences, 3u);
  // Interleaved replies, each to its own job; a Done makes room for the fourth.
  worker->SendToken(got[1].id(), 11);
  worker->SendToken(got[0].id(), 10);
  worker->SendDone(got[1].id(), control_v1::STOP_MAX_TOKENS);
  const std::vector<control_v1::WorkerReply> second = Drain(*jobs[1]);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].token().token_id(), 11);
  const control_v1::WorkerRequest fourth = worker->Receive();
  EXPECT_EQ(fourth.id(), jobs[3]->id());
  absl::StatusOr<std::optional<control_v1::WorkerReply>> first = jobs[0]->Next(kWaitMs);
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->token().token_id(), 10);
  // The worker goes: every request it was computing fails.
  worker.reset();
  for (const size_t i : {size_t{0}, size_t{2}, size_t{3}}) {
    absl::Status failure;
    Drain(*jobs[i], &failure);
    EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable) << i;
  }
  EXPECT_EQ(scheduler.Snapshot().failed, 3u);
  EXPECT_EQ(scheduler.Snapshot().active, 0u);
}

// With two workers of several sequences, a request goes to the less loaded.
TEST(RequestSchedulerTest, RequestsSpreadOverWorkersWithRoom) {
  RequestScheduler scheduler({8, 8});
  FakeWorker a(scheduler, 0, 128, "cpu", 0, 0, 4);
  FakeWorker b(scheduler, 1, 128, "cuda:0", 0, 0, 4);
  auto both_ready = [&] {
    int ready = 0;
    for (const SchedulerWorkerInfo& w : scheduler.Snapshot().workers) ready += w.ready;
    return ready == 2;
  };
  for (int i = 0; i < 500 && !both_ready(); ++i) usleep(10000);
  ASSERT_TRUE(both_ready());
  std::vector<std::shared_ptr<RequestJob>> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(*scheduler.Submit(GenerateRequest({i})));
  const control_v1::WorkerRequest a0 = a.Receive();
  const control_v1::WorkerRequest b0 = b.Receive();
  const control_v1::WorkerRequest a1 = a.Receive();
  const control_v1::WorkerRequest b1 = b.Receive();
  EXPECT_EQ(a0.id(), jobs[0]->id());
  EXPECT_EQ(b0.id(), jobs[1]->id());
  EXPECT_EQ(a1.id(), jobs[2]->id());
  EXPECT_EQ(b1.id(), jobs[3]->id());
}

TEST(RequestSchedulerTest, AFullQueueRefusesWithResourceExhausted) {
  RequestScheduler scheduler({2, 1});
  // No worker: everything waits.
  ASSERT_TRUE(scheduler.Submit(GenerateRequest({1})).ok());
  ASSERT_TRUE(scheduler.Submit(GenerateRequest({1})).ok());
  absl::StatusOr<std::shared_ptr<RequestJob>> third = scheduler.Submit(GenerateRequest({1}));
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("max_queued_requests=2"), absl::string_view::npos);
  EXPECT_EQ(scheduler.Snapshot().rejected, 1u);
}

TEST(RequestSchedulerTest, CancellingAQueuedRequestEndsItAtOnce) {
  RequestScheduler scheduler({4, 4});
  auto job = scheduler.Submit(GenerateRequest({1}));
  ASSERT_TRUE(job.ok());
  scheduler.Cancel(*job);
  const std::vector<control_v1::WorkerReply> replies = Drain(**job);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].done().stop_reason(), control_v1::STOP_CANCELLED);
  // The worker that joins later never sees it.
  FakeWorker worker(scheduler, 0);
  ASSERT_TRUE(scheduler.WaitForReadyWorker(kWaitMs));
  EXPECT_TRUE(worker.NothingPending());
  EXPECT_EQ(scheduler.Snapshot().queued, 0u);
}

TEST(RequestSchedulerTest, CancellingARunningRequestTellsItsWorker) {
  RequestScheduler scheduler({4, 4});
  FakeWorker worker(scheduler, 0);
  ASSERT_TRUE(scheduler.WaitForReadyWorker(kWaitMs));
  auto job = scheduler.Submit(GenerateRequest({1}));
  ASSERT_TRUE(job.ok());
  const control_v1::WorkerRequest running = worker.Receive();
  scheduler.Cancel(*job);
  const control_v1::WorkerRequest cancel = worker.Receive();
  ASSERT_TRUE(cancel.has_cancel());
  EXPECT_EQ(cancel.cancel().target_id(), running.id());
  worker.SendDone(running.id(), control_v1::STOP_CANCELLED);
  const std::vector<control_v1::WorkerReply> replies = Drain(**job);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].done().stop_reason(), control_v1::STOP_CANCELLED);
  EXPECT_EQ(scheduler.Snapshot().cancelled, 1u);
}

TEST(RequestSchedulerTest, ALostWorkerFailsItsRequestAndARestartedOneTakesTheNext) {
  RequestScheduler scheduler({4, 4});
  auto worker = std::make_unique<FakeWorker>(scheduler, 0);
  ASSERT_TRUE(scheduler.WaitForReadyWorker(kWaitMs));
  auto job = scheduler.Submit(GenerateRequest({1}));
  ASSERT_TRUE(job.ok());
  const control_v1::WorkerRequest running = worker->Receive();
  worker->SendToken(running.id(), 5);
  worker.reset();  // the process died
  absl::Status failure;
  const std::vector<control_v1::WorkerReply> replies = Drain(**job, &failure);
  ASSERT_EQ(replies.size(), 1u);  // the token that made it
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(failure.message().find("pid 1000"), absl::string_view::npos) << failure;

  auto next = scheduler.Submit(GenerateRequest({2}));
  ASSERT_TRUE(next.ok());
  FakeWorker restarted(scheduler, 0);
  const control_v1::WorkerRequest again = restarted.Receive();
  EXPECT_EQ(again.id(), (*next)->id());
  restarted.SendDone(again.id(), control_v1::STOP_END_OF_GENERATION);
  EXPECT_EQ(Drain(**next).back().done().stop_reason(), control_v1::STOP_END_OF_GENERATION);
  EXPECT_EQ(scheduler.Snapshot().failed, 1u);
}

TEST(RequestSchedulerTest, WorkersRunRequestsAtOnceWithinTheActiveLimit) {
  RequestScheduler scheduler({8, 2});
  FakeWorker a(scheduler, 0);
  FakeWorker b(scheduler, 1);
  FakeWorker c(scheduler, 2);
  auto all_ready = [&] {
    int ready = 0;
    for (const SchedulerWorkerInfo& w : scheduler.Snapshot().workers) ready += w.ready;
    return ready == 3;
  };
  for (int i = 0; i < 500 && !all_ready(); ++i) usleep(10000);
  ASSERT_TRUE(all_ready());
  std::vector<std::shared_ptr<RequestJob>> jobs;
  for (int i = 0; i < 3; ++i) jobs.push_back(*scheduler.Submit(GenerateRequest({i})));
  // Idle workers are taken in the order they joined.
  const control_v1::WorkerRequest ra = a.Receive();
  const control_v1::WorkerRequest rb = b.Receive();
  EXPECT_EQ(ra.id(), jobs[0]->id());
  EXPECT_EQ(rb.id(), jobs[1]->id());
  EXPECT_TRUE(c.NothingPending()) << "max_active_sequences=2 was exceeded";
  EXPECT_EQ(scheduler.Snapshot().active, 2u);
  EXPECT_EQ(scheduler.Snapshot().queued, 1u);
  b.SendDone(rb.id(), control_v1::STOP_MAX_TOKENS);
  // Room again: the third request goes to the first idle worker.
  const control_v1::WorkerRequest rc = b.Receive();
  EXPECT_EQ(rc.id(), jobs[2]->id());
}

TEST(RequestSchedulerTest, ARequestForOneWorkerWaitsForItAndHoldsNothingBack) {
  RequestScheduler scheduler({8, 8});
  FakeWorker cpu(scheduler, 0, 128, "cpu");
  FakeWorker gpu(scheduler, 1, 128, "cuda:0");
  auto all_ready = [&] {
    int ready = 0;
    for (const SchedulerWorkerInfo& w : scheduler.Snapshot().workers) ready += w.ready;
    return ready == 2;
  };
  for (int i = 0; i < 500 && !all_ready(); ++i) usleep(10000);
  ASSERT_TRUE(all_ready());
  auto first = scheduler.Submit(GenerateRequest({1}));
  ASSERT_TRUE(first.ok());
  const control_v1::WorkerRequest on_cpu = cpu.Receive();
  EXPECT_EQ(on_cpu.id(), (*first)->id());
  // The cpu worker is busy: the resize for it waits, and the request after
  // it goes to the idle GPU worker meanwhile.
  auto resize = scheduler.SubmitTo("cpu", ResizeRequest(uint64_t{5} << 20));
  ASSERT_TRUE(resize.ok()) << resize.status();
  auto second = scheduler.Submit(GenerateRequest({2}));
  ASSERT_TRUE(second.ok());
  const control_v1::WorkerRequest on_gpu = gpu.Receive();
  EXPECT_EQ(on_gpu.id(), (*second)->id());
  EXPECT_TRUE(cpu.NothingPending()) << "a busy worker was sent the resize";
  EXPECT_EQ(scheduler.Snapshot().queued, 1u);
  // The GPU worker, idle again, never takes the cpu worker's resize.
  gpu.SendDone(on_gpu.id(), control_v1::STOP_MAX_TOKENS);
  EXPECT_TRUE(gpu.NothingPending());
  cpu.SendDone(on_cpu.id(), control_v1::STOP_MAX_TOKENS);
  const control_v1::WorkerRequest resizing = cpu.Receive();
  ASSERT_TRUE(resizing.has_resize_expert_cache());
  EXPECT_EQ(resizing.id(), (*resize)->id());
  EXPECT_EQ(resizing.resize_expert_cache().pool_bytes(), uint64_t{5} << 20);
  control_v1::WorkerReply done;
  done.set_id(resizing.id());
  done.mutable_done()->set_stop_reason(control_v1::STOP_COMPLETE);
  done.mutable_done()->set_expert_cache_bytes(uint64_t{4} << 20);
  cpu.Send(done);
  const std::vector<control_v1::WorkerReply> replies = Drain(**resize);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].done().expert_cache_bytes(), uint64_t{4} << 20);
  EXPECT_EQ((*resize)->worker_device(), "cpu");
}

TEST(RequestSchedulerTest, ARequestForOneWorkerKeepsItsPlaceInTheQueue) {
  RequestScheduler scheduler({8, 8});
  FakeWorker worker(scheduler, 0);
  ASSERT_TRUE(scheduler.WaitForReadyWorker(kWaitMs));
  auto first = scheduler.Submit(GenerateRequest({1}));
  auto second = scheduler.Submit(GenerateRequest({2}));
  auto resize = scheduler.SubmitTo("cpu", ResizeRequest(1 << 20));
  auto third = scheduler.Submit(GenerateRequest({3}));
  ASSERT_TRUE(first.ok() && second.ok() && resize.ok() && third.ok());
  // Served in arrival order: the resize after the requests before it, and
  // before the one after it.
  for (const std::shared_ptr<RequestJob>& job : {*first, *second, *resize, *third}) {
    const control_v1::WorkerRequest got = worker.Receive();
    EXPECT_EQ(got.id(), job->id());
    EXPECT_EQ(got.has_resize_expert_cache(), job == *resize);
    worker.SendDone(got.id(), control_v1::STOP_COMPLETE);
  }
}

TEST(RequestSchedulerTest, ARequestForAnAbsentWorkerWaitsUntilCancelled) {
  RequestScheduler scheduler({8, 8});
  FakeWorker worker(scheduler, 0);
  ASSERT_TRUE(scheduler.WaitForReadyWorker(kWaitMs));
  auto resize = scheduler.SubmitTo("cuda:3", ResizeRequest(1 << 20));
  ASSERT_TRUE(resize.ok());
  EXPECT_TRUE(worker.NothingPending());
  EXPECT_EQ(scheduler.Snapshot().queued, 1u);
  // Other requests pass it.
  auto other = scheduler.Submit(GenerateRequest({1}));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(worker.Receive().id(), (*other)->id());
  scheduler.Cancel(*resize);
  const std::vector<control_v1::WorkerReply> replies = Drain(**resize);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].done().stop_reason(), control_v1::STOP_CANCELLED);
  EXPECT_EQ(scheduler.Snapshot().queued, 0u);
}

TEST(RequestSchedulerTest, ARequestThatFitsNoContextIsRefusedBeforeItIsQueued) {
  RequestScheduler scheduler({4, 4});
  FakeWorker worker(scheduler, 0, /*max_ctx=*/16);
  ASSERT_TRUE(scheduler.WaitForReadyWorker(kWaitMs));
  // A generation needs room for its prompt and one token: 16 is too many.
  absl::StatusOr<std::shared_ptr<RequestJob>> refused = scheduler.Submit(PromptOf(16));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "the prompt is 16 tokens; the context of the worker on cpu holds 16 tokens, prompt "
            "and generated together, so a prompt may have at most 15");
  absl::StatusOr<std::shared_ptr<RequestJob>> too_many = scheduler.Submit(ScoreRequest(17));
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(too_many.status().message(),
            "17 token ids to score; the context of the worker on cpu holds 16 tokens");
  // Marked as never fitting, which a full queue is not.
  EXPECT_TRUE(refused.status().GetPayload(kContextTooLongPayload).has_value());
  EXPECT_TRUE(worker.NothingPending()) << "a request that cannot fit reached the worker";
  EXPECT_EQ(scheduler.Snapshot().queued, 0u);

  // Exactly full is fine.
  absl::StatusOr<std::shared_ptr<RequestJob>> longest = scheduler.Submit(PromptOf(15));
  ASSERT_TRUE(longest.ok()) << longest.status();
  const control_v1::WorkerRequest got = worker.Receive();
  EXPECT_EQ(got.generate().prompt_token_ids_size(), 15);
  worker.SendDone(got.id(), control_v1::STOP_CONTEXT_FULL);
  absl::StatusOr<std::shared_ptr<RequestJob>> score = scheduler.Submit(ScoreRequest(16));
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_EQ(worker.Receive().score().token_ids_size(), 16);
}

TEST(RequestSchedulerTest, ARequestQueuedBeforeAnyContextWasKnownFailsWhenItCannotFit) {
  RequestScheduler scheduler({4, 4});
  // No worker has announced a context yet: both wait.
  absl::StatusOr<std::shared_ptr<RequestJob>> too_long = scheduler.Submit(PromptOf(40));
  absl::StatusOr<std::shared_ptr<RequestJob>> fits = scheduler.Submit(PromptOf(3));
  ASSERT_TRUE(too_long.ok() && fits.ok());
  FakeWorker worker(scheduler, 0, /*max_ctx=*/32);
  absl::Status failure;
  EXPECT_TRUE(Drain(**too_long, &failure).empty());
  EXPECT_EQ(failure.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(failure.message().find("the prompt is 40 tokens"), absl::string_view::npos) << failure;
  EXPECT_NE(failure.message().find("holds 32 tokens"), absl::string_view::npos) << failure;
  // The one that fits runs; the other never reached the worker.
  const control_v1::WorkerRequest got = worker.Receive();
  EXPECT_EQ(got.id(), (*fits)->id());
  worker.SendDone(got.id(), control_v1::STOP_MAX_TOKENS);
  EXPECT_TRUE(worker.NothingPending());
}

TEST(RequestSchedulerTest, TheRefusalNamesTheBytesTheRequestNeedsAndTheSequenceHolds) {
  RequestScheduler scheduler({4, 4});
  // 4 KiB of KV cache per token and 1 MiB of recurrent state.
  FakeWorker worker(scheduler, 0, /*max_ctx=*/256, "cpu", 4096, 1 << 20);
  ASSERT_TRUE(scheduler.WaitForReadyWorker(kWaitMs));
  absl::StatusOr<std::shared_ptr<RequestJob>> refused = scheduler.Submit(PromptOf(511));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  // 512 positions x 4 KiB + 1 MiB = 3 MiB; 256 x 4 KiB + 1 MiB = 2 MiB.
  EXPECT_NE(refused.status().message().find(
                "its 512 positions need 3.00 MiB of sequence state (4.00 KiB of KV cache per token "
                "and 1.00 MiB of recurrent state), and a sequence there holds 2.00 MiB"),
            absl::string_view::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("--cache-type-k"), absl::string_view::npos);
  EXPECT_TRUE(worker.NothingPending());
}

TEST(RequestSchedulerTest, ARequestGoesOnlyToAWorkerWhoseContextHoldsIt) {
  RequestScheduler scheduler({8, 8});
  FakeWorker small(scheduler, 0, 16, "cpu");
  FakeWorker large(scheduler, 1, 256, "cuda:0");
  auto all_ready = [&] {
    int ready = 0;
    for (const SchedulerWorkerInfo& w : scheduler.Snapshot().workers) ready += w.ready;
    return ready == 2;
  };
  for (int i = 0; i < 500 && !all_ready(); ++i) usleep(10000);
  ASSERT_TRUE(all_ready());
  // Both are idle; only the larger context holds it.
  auto job = scheduler.Submit(PromptOf(100));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(large.Receive().id(), (*job)->id());
  EXPECT_TRUE(small.NothingPending());
  // Beyond every context: refused, naming the largest.
  absl::StatusOr<std::shared_ptr<RequestJob>> refused = scheduler.Submit(PromptOf(300));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("the worker on cuda:0 holds 256 tokens"),
            absl::string_view::npos)
      << refused.status();
}

TEST(RequestSchedulerTest, ShutdownFailsWaitingRequestsAndRefusesNewOnes) {
  RequestScheduler scheduler({4, 4});
  auto job = scheduler.Submit(GenerateRequest({1}));
  ASSERT_TRUE(job.ok());
  scheduler.Shutdown();
  absl::Status failure;
  Drain(**job, &failure);
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(scheduler.Submit(GenerateRequest({1})).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace moetier
