// Test fixture: the control server over a SOCK_SEQPACKET socketpair, driven
// by the test as a fake daemon, with an engine wrapper that can hold decode
// steps and a stand-in expert cache; and the direct engine + sampler loop
// that a Generate must equal.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/expert_cache_control.h"
#include "control/control_channel.h"
#include "engine/cpu_engine.h"
#include "engine_run.h"
#include "gtest/gtest.h"
#include "request/control_codec.h"
#include "sampling/sampler.h"
#include "serve/control_server.h"
#include "serve_test_util.h"

namespace moetier::control_server_test {

using control_v1::DoneReply;
using control_v1::WorkerReply;
using control_v1::WorkerRequest;
using serve_test::LoadedModel;

constexpr int kMaxCtx = 64;
constexpr int64_t kReplyTimeoutMs = 60000;

// Passes calls through to an engine; while gated, each single-token
// Forward (a decode step) waits for a permit, so a test can act between two
// tokens of a generation.
class GatedEngine final : public ForwardEngine {
 public:
  explicit GatedEngine(ForwardEngine& inner) : inner_(inner) {}

  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence() override {
    return inner_.NewSequence();
  }
  absl::Status Forward(Sequence& seq, std::span<const int32_t> tokens, LogitRows rows,
                       float* logits) override {
    ++in_forward_;
    if (tokens.size() == 1) {
      std::unique_lock<std::mutex> lock(mutex_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return !gated_ || permits_ > 0; });
      if (gated_) --permits_;
      --waiting_;
    }
    absl::Status status = inner_.Forward(seq, tokens, rows, logits);
    --in_forward_;
    return status;
  }
  // The inner engine's own batched pass (gated like a decode step when
  // every step is one token), counting the steps of the widest call.
  absl::Status ForwardMany(std::span<const SequenceStep> steps) override {
    ++in_forward_;
    widest_ = std::max<int>(widest_.load(), static_cast<int>(steps.size()));
    if (std::all_of(steps.begin(), steps.end(),
                    [](const SequenceStep& s) { return s.tokens.size() == 1; })) {
      std::unique_lock<std::mutex> lock(mutex_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return !gated_ || permits_ > 0; });
      if (gated_) --permits_;
      --waiting_;
    }
    absl::Status status = inner_.ForwardMany(steps);
    --in_forward_;
    return status;
  }
  // The most sequences one ForwardMany carried so far.
  int widest() const { return widest_.load(); }
  // Whether a Forward is under way (on the server's thread).
  bool in_forward() const { return in_forward_.load() > 0; }
  absl::Status SaveCheckpoint(Sequence& seq) override { return inner_.SaveCheckpoint(seq); }
  absl::Status RestoreCheckpoint(Sequence& seq) override { return inner_.RestoreCheckpoint(seq); }
  absl::StatusOr<std::unique_ptr<SequenceState>> CopyState(const Sequence& seq) override {
    return inner_.CopyState(seq);
  }
  absl::Status LoadState(Sequence& seq, const SequenceState& state, int length) override {
    return inner_.LoadState(seq, state, length);
  }
  absl::StatusOr<int32_t> Sample(Sampler& sampler) override { return inner_.Sample(sampler); }
  absl::StatusOr<std::span<const float>> LastLogitsRow() override {
    return inner_.LastLogitsRow();
  }
  int n_vocab() const override { return inner_.n_vocab(); }
  int max_ctx() const override { return inner_.max_ctx(); }
  int max_sequences() const override { return inner_.max_sequences(); }

  void Gate(bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    gated_ = on;
    permits_ = 0;
    cv_.notify_all();
  }
  void Permit(int n) {
    std::lock_guard<std::mutex> lock(mutex_);
    permits_ += n;
    cv_.notify_all();
  }
  // Blocks until a decode step waits at the gate.
  bool WaitUntilBlocked() {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, std::chrono::seconds(60),
                        [this] { return waiting_ > 0 && permits_ == 0; });
  }

 private:
  ForwardEngine& inner_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool gated_ = false;
  int permits_ = 0;
  int waiting_ = 0;
  std::atomic<int> in_forward_{0};
  std::atomic<int> widest_{0};
};

// Stands in for the worker's expert cache: whole slots of kSlotBytes, at
// least kMinPoolBytes; notes each call and whether the engine was computing.
class FakeCacheControl final : public ExpertCacheControl {
 public:
  static constexpr uint64_t kSlotBytes = 1000;
  static constexpr uint64_t kMinPoolBytes = 8 * kSlotBytes;

  explicit FakeCacheControl(const GatedEngine* engine) : engine_(engine) {}
  absl::StatusOr<uint64_t> ResizeExpertCache(uint64_t pool_bytes) override {
    ++calls_;
    if (engine_->in_forward()) called_during_forward_ = true;
    if (pool_bytes < kMinPoolBytes) {
      return absl::InvalidArgumentError(
          "expert cache: the cache needs at least top_k = 2 slots per layer: give at least 1 MiB");
    }
    bytes_ = pool_bytes / kSlotBytes * kSlotBytes;
    return bytes_.load();
  }
  int calls() const { return calls_.load(); }
  bool called_during_forward() const { return called_during_forward_.load(); }
  uint64_t bytes() const { return bytes_.load(); }

 private:
  const GatedEngine* engine_;
  std::atomic<int> calls_{0};
  std::atomic<bool> called_during_forward_{false};
  std::atomic<uint64_t> bytes_{kMinPoolBytes};
};

CpuEngineConfig EngineConfig() {
  CpuEngineConfig config;
  config.max_ctx = kMaxCtx;
  config.n_threads = 1;
  config.max_batch = 16;
  return config;
}

struct Generation {
  std::vector<int32_t> tokens;
  std::vector<bool> stop_flags;
  DoneReply done;
};

// What Generate must produce: the engine and the sampler driven directly.
std::vector<int32_t> DirectGeneration(const Model& model,
                                      const std::vector<int32_t>& prompt, int max_new,
                                      const SamplingParams& params) {
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(model, EngineConfig());
  EXPECT_TRUE(engine.ok()) << engine.status();
  absl::StatusOr<Sampler> sampler = Sampler::Create(model.hparams.n_vocab, params);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  if (!engine.ok() || !sampler.ok()) return {};
  std::vector<float> row(static_cast<size_t>(model.hparams.n_vocab));
  absl::StatusOr<std::unique_ptr<Sequence>> seq = (*engine)->NewSequence();
  EXPECT_TRUE(seq.ok()) << seq.status();
  if (!seq.ok()) return {};
  EXPECT_TRUE((*engine)->Forward(**seq, prompt, LogitRows::kLast, row.data()).ok());
  for (int32_t t : prompt) sampler->Accept(t);
  std::vector<int32_t> out;
  int pos = static_cast<int>(prompt.size());
  while (static_cast<int>(out.size()) < max_new && pos < kMaxCtx) {
    const int32_t t = sampler->Sample(row);
    sampler->Accept(t);
    out.push_back(t);
    const int32_t one[1] = {t};
    EXPECT_TRUE((*engine)->Forward(**seq, one, LogitRows::kLast, row.data()).ok());
    ++pos;
  }
  return out;
}

class ControlServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<LoadedModel>> loaded =
        serve_test::LoadModel(serve_test::VectorsModel(ModelStem()));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    loaded_ = std::move(*loaded);
    CpuEngineConfig config = EngineConfig();
    config.max_sequences = MaxSequences();
    ControlServerOptions options;
    options.threads = 1;
    options.model_fingerprint = 0x1234;
    options.state_size = SequenceStateSizeOf(model());
    // Small Score batches: chunks must straddle them.
    options.score_batch_tokens = 7;
    absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(model(), config);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    gated_ = std::make_unique<GatedEngine>(*engine_);
    Prepare(options);
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    daemon_fd_ = fds[0];
    worker_fd_ = fds[1];
    control::ConfigureControlSocket(daemon_fd_);
    absl::StatusOr<std::unique_ptr<ControlServer>> server =
        ControlServer::Create(worker_fd_, *gated_, options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    thread_ = std::thread([this] { run_status_ = server_->Run(); });
  }

  // A derived fixture's additions to the server's options.
  virtual void Prepare(ControlServerOptions&) {}
  // The test vector the server runs.
  virtual const char* ModelStem() const { return "tiny-q8_0"; }
  // Sequences the engine holds: Generates computed together.
  virtual int MaxSequences() const { return 1; }

  void TearDown() override {
    CloseChannel();
    if (thread_.joinable()) thread_.join();
    if (worker_fd_ >= 0) close(worker_fd_);
  }

  void CloseChannel() {
    if (gated_ != nullptr) gated_->Gate(false);
    if (daemon_fd_ >= 0) close(daemon_fd_);
    daemon_fd_ = -1;
  }

  const Model& model() const { return loaded_->model; }
  int n_vocab() const { return model().hparams.n_vocab; }

  void Send(const WorkerRequest& request) {
    ASSERT_TRUE(control::SendControlMessage(daemon_fd_, request).ok());
  }

  WorkerReply Receive() {
    WorkerReply reply;
    const absl::Status s = control::ReceiveControlMessage(daemon_fd_, &reply, kReplyTimeoutMs);
    EXPECT_TRUE(s.ok()) << s;
    return reply;
  }

  // The ReadyReply, which must come first.
  WorkerReply ReceiveReady() {
    WorkerReply ready = Receive();
    EXPECT_EQ(ready.kind_case(), WorkerReply::kReady);
    EXPECT_EQ(ready.id(), 0u);
    return ready;
  }

  static WorkerRequest ScoreRequest(uint64_t id, const std::vector<int32_t>& tokens) {
    WorkerRequest r;
    r.set_id(id);
    r.mutable_score()->mutable_token_ids()->Add(tokens.begin(), tokens.end());
    return r;
  }

  // Greedy unless `sampling` says otherwise; every field is sent, as the
  // daemon does.
  static WorkerRequest GenerateRequest(uint64_t id, const std::vector<int32_t>& prompt,
                                       int max_new, const SamplingParams& sampling = {}) {
    WorkerRequest r;
    r.set_id(id);
    r.mutable_generate()->mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
    r.mutable_generate()->set_max_new_tokens(max_new);
    *r.mutable_generate()->mutable_sampling() = SamplingToControl(sampling);
    return r;
  }

  static WorkerRequest ResizeRequest(uint64_t id, uint64_t pool_bytes) {
    WorkerRequest r;
    r.set_id(id);
    r.mutable_resize_expert_cache()->set_pool_bytes(pool_bytes);
    return r;
  }

  static WorkerRequest CancelRequest(uint64_t id, uint64_t target) {
    WorkerRequest r;
    r.set_id(id);
    r.mutable_cancel()->set_target_id(target);
    return r;
  }

  // Reads replies of request `id` until its Done: the logits, chunk by chunk.
  std::vector<float> ReceiveScore(uint64_t id, DoneReply* done) {
    std::vector<float> floats;
    size_t chunks = 0;
    while (true) {
      const WorkerReply reply = Receive();
      EXPECT_EQ(reply.id(), id);
      if (reply.id() != id) return floats;
      if (reply.kind_case() == WorkerReply::kDone) {
        *done = reply.done();
        return floats;
      }
      EXPECT_EQ(reply.kind_case(), WorkerReply::kLogits);
      if (reply.kind_case() != WorkerReply::kLogits) return floats;
      const control_v1::LogitsChunk& chunk = reply.logits();
      EXPECT_EQ(chunk.n_vocab(), n_vocab());
      EXPECT_EQ(chunk.first_float(), floats.size()) << "chunks arrive in order, back to back";
      EXPECT_EQ(chunk.floats_f32le().size() % sizeof(float), 0u);
      // Every chunk but the last is full.
      if (chunks > 0) {
        EXPECT_EQ(floats.size() % control::kLogitsChunkFloats, 0u);
      }
      const size_t n = chunk.floats_f32le().size() / sizeof(float);
      floats.resize(floats.size() + n);
      std::memcpy(floats.data() + floats.size() - n, chunk.floats_f32le().data(),
                  n * sizeof(float));
      ++chunks;
    }
  }

  Generation ReceiveGeneration(uint64_t id) {
    Generation g;
    while (true) {
      const WorkerReply reply = Receive();
      EXPECT_EQ(reply.id(), id);
      if (reply.id() != id) return g;
      if (reply.kind_case() == WorkerReply::kDone) {
        g.done = reply.done();
        return g;
      }
      EXPECT_EQ(reply.kind_case(), WorkerReply::kToken);
      if (reply.kind_case() != WorkerReply::kToken) return g;
      g.tokens.push_back(reply.token().token_id());
      g.stop_flags.push_back(reply.token().is_stop_token());
      EXPECT_GE(reply.token().latency_ms(), 0.0);
    }
  }

  std::vector<float> EngineLogits(const std::vector<int32_t>& tokens) {
    absl::StatusOr<std::unique_ptr<CpuEngine>> engine =
        CpuEngine::Create(model(), EngineConfig());
    EXPECT_TRUE(engine.ok());
    if (!engine.ok()) return {};
    return testing::RunNewSequence(**engine, tokens);
  }

  std::vector<int32_t> Prompt(int n) const {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back((i * 37 + 11) % 512);
    return ids;
  }

  // A first generation, then a chat's next turn on it (the last prompt, the
  // reply, a new message): everything but the reply's last token (sampled,
  // never fed back) is kept, and the tokens are those of a fresh sequence.
  void ExpectANextTurnComputesOnlyItsNewTokens() {
    const std::vector<int32_t> prompt = Prompt(10);
    Send(GenerateRequest(1, prompt, 6));
    const Generation first = ReceiveGeneration(1);
    ASSERT_EQ(first.tokens.size(), 6u);
    EXPECT_EQ(first.done.cached_prompt_tokens(), 0);
    std::vector<int32_t> next = prompt;
    next.insert(next.end(), first.tokens.begin(), first.tokens.end());
    for (int32_t t : {5, 77, 301}) next.push_back(t);
    Send(GenerateRequest(2, next, 6));
    const Generation second = ReceiveGeneration(2);
    EXPECT_EQ(second.done.cached_prompt_tokens(), 10 + 6 - 1);
    EXPECT_EQ(second.done.prompt_tokens(), static_cast<int>(next.size()));
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    EXPECT_EQ(second.tokens, DirectGeneration(model(), next, 6, greedy));
  }

  void ExpectScoreServed(uint64_t id, const std::vector<int32_t>& tokens) {
    Send(ScoreRequest(id, tokens));
    DoneReply done;
    const std::vector<float> got = ReceiveScore(id, &done);
    EXPECT_EQ(done.stop_reason(), control_v1::STOP_COMPLETE) << done.error_message();
    EXPECT_TRUE(serve_test::SameBits(got, EngineLogits(tokens)));
  }

  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<CpuEngine> engine_;
  std::unique_ptr<GatedEngine> gated_;
  std::unique_ptr<ControlServer> server_;
  std::thread thread_;
  absl::Status run_status_ = absl::UnknownError("not finished");
  int daemon_fd_ = -1;
  int worker_fd_ = -1;
};

}  // namespace moetier::control_server_test
