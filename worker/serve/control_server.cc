#include "serve/control_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <span>
#include <utility>

#include "absl/strings/str_format.h"
#include "control/control_channel.h"
#include "generation/generate_loop.h"
#include "request/control_codec.h"
#include "sampling/sampler.h"

namespace moetier {
namespace {

static_assert(std::endian::native == std::endian::little,
              "LogitsChunk carries the host's float32 bytes, which must be little-endian");

using control_v1::DoneReply;
using control_v1::WorkerReply;
using control_v1::WorkerRequest;

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool PeerGone(int error) { return error == EPIPE || error == ECONNRESET || error == ENOTCONN; }

DoneReply Done(StopReason reason) {
  DoneReply done;
  done.set_stop_reason(StopReasonToControl(reason));
  return done;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControlServer>> ControlServer::Create(
    int control_fd, ForwardEngine& engine, const ControlServerOptions& options) {
  if (control_fd < 0) return absl::InvalidArgumentError("no control channel");
  if (options.score_batch_tokens < 1 || options.score_batch_tokens > 8192) {
    return absl::InvalidArgumentError(
        absl::StrFormat("score batch of %d tokens is outside 1..8192", options.score_batch_tokens));
  }
  if (engine.n_vocab() < 1 || engine.max_ctx() < 1) {
    return absl::InvalidArgumentError("the engine has no vocabulary or no context");
  }
  return std::unique_ptr<ControlServer>(new ControlServer(control_fd, engine, options));
}

ControlServer::ControlServer(int control_fd, ForwardEngine& engine,
                             const ControlServerOptions& options)
    : fd_(control_fd),
      engine_(engine),
      options_(options),
      n_vocab_(engine.n_vocab()),
      prefix_pool_(options.prefix_cache_bytes, options.state_size.recurrent_bytes > 0),
      batch_(engine, options.ubatch_size > 0      ? options.ubatch_size
                     : engine.max_sequences() > 1 ? kBatchedPrefillChunk
                                                  : engine.max_ctx()),
      score_buffer_(static_cast<size_t>(options.score_batch_tokens) * n_vocab_ +
                    control::kLogitsChunkFloats),
      send_buffer_(control::kMaxControlMessageBytes) {
  token_reply_.mutable_token();
  logits_reply_.mutable_logits()->mutable_floats_f32le()->reserve(control::kLogitsChunkFloats *
                                                                  sizeof(float));
  control::ConfigureControlSocket(fd_);
}

// ------------------------------------------------------------------ sending

absl::Status ControlServer::Send(const WorkerReply& reply) {
  if (closed_) return absl::OkStatus();
  const size_t size = reply.ByteSizeLong();
  if (size == 0 || size > send_buffer_.size() ||
      !reply.SerializeToArray(send_buffer_.data(), static_cast<int>(size))) {
    return absl::InternalError(
        absl::StrFormat("a control reply of %d bytes does not fit one datagram", size));
  }
  ssize_t sent;
  do {
    sent = send(fd_, send_buffer_.data(), size, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    if (PeerGone(errno)) {
      closed_ = true;
      return absl::OkStatus();
    }
    return absl::UnavailableError(
        absl::StrFormat("sending on the control channel: %s", std::strerror(errno)));
  }
  if (static_cast<size_t>(sent) != size) {
    return absl::UnavailableError(
        absl::StrFormat("control channel: sent %d of %d bytes", sent, size));
  }
  return absl::OkStatus();
}

absl::Status ControlServer::SendDone(uint64_t id, const DoneReply& done) {
  WorkerReply reply;
  reply.set_id(id);
  *reply.mutable_done() = done;
  // Counted first, so that whoever reads the Done also sees the count.
  requests_finished_.fetch_add(1);
  return Send(reply);
}

absl::Status ControlServer::SendError(uint64_t id, const absl::Status& error) {
  DoneReply done = Done(StopReason::kError);
  done.set_error_code(static_cast<int32_t>(error.code()));
  done.set_error_message(std::string(error.message()));
  return SendDone(id, done);
}

absl::Status ControlServer::SendToken(uint64_t id, int32_t token, bool is_stop, double latency_ms,
                                      const TokenLogprobs* logprobs) {
  token_reply_.set_id(id);
  control_v1::TokenReply* t = token_reply_.mutable_token();
  t->set_token_id(token);
  t->set_is_stop_token(is_stop);
  t->set_latency_ms(latency_ms);
  t->clear_logprob();
  t->clear_top_logprobs();
  if (logprobs != nullptr) {
    t->set_logprob(logprobs->chosen);
    for (const TokenLogprob& alt : logprobs->top) {
      control_v1::TokenLogprob* out = t->add_top_logprobs();
      out->set_token_id(alt.token_id);
      out->set_logprob(alt.logprob);
    }
  }
  return Send(token_reply_);
}

absl::Status ControlServer::SendLogits(uint64_t id, uint64_t first_float, const float* values,
                                       size_t count) {
  logits_reply_.set_id(id);
  control_v1::LogitsChunk* chunk = logits_reply_.mutable_logits();
  chunk->set_n_vocab(n_vocab_);
  chunk->set_first_float(first_float);
  chunk->mutable_floats_f32le()->assign(reinterpret_cast<const char*>(values),
                                        count * sizeof(float));
  return Send(logits_reply_);
}

// ------------------------------------------------------------------ receiving

absl::Status ControlServer::Intake(WorkerRequest request) {
  if (request.kind_case() != WorkerRequest::kCancel) {
    queue_.push_back(std::move(request));
    return absl::OkStatus();
  }
  const uint64_t target = request.cancel().target_id();
  if (running_ && target == running_id_) {
    cancel_running_ = true;
    return absl::OkStatus();
  }
  if (batch_.Cancel(target)) return absl::OkStatus();
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->id() == target && it->kind_case() != WorkerRequest::kCancel) {
      queue_.erase(it);
      return SendDone(target, Done(StopReason::kCancelled));
    }
  }
  return absl::OkStatus();  // unknown or finished: nothing to do
}

absl::Status ControlServer::PollChannel() {
  while (!closed_) {
    pollfd pfd{fd_, POLLIN, 0};
    int ready;
    do {
      ready = poll(&pfd, 1, 0);
    } while (ready < 0 && errno == EINTR);
    if (ready < 0) {
      return absl::UnavailableError(
          absl::StrFormat("polling the control channel: %s", std::strerror(errno)));
    }
    if (ready == 0) return absl::OkStatus();
    absl::Status received = control::ReceiveControlMessage(fd_, &incoming_, 0);
    if (absl::IsUnavailable(received)) {
      closed_ = true;
      return absl::OkStatus();
    }
    if (absl::IsDataLoss(received)) {
      // No id to answer; the sender is told nothing, this side carries on.
      if (options_.log != nullptr) {
        std::fprintf(options_.log, "moetier-worker: ignoring a control message: %s\n",
                     std::string(received.message()).c_str());
      }
      continue;
    }
    if (!received.ok()) return received;
    if (absl::Status s = Intake(std::move(incoming_)); !s.ok()) return s;
    incoming_.Clear();
  }
  return absl::OkStatus();
}

// Tokens go out as they come; a finished Generate gets its Done, and its
// sequence is kept for a follow-up unless the engine failed.
class ControlServer::BatchReplies final : public GenerationEvents {
 public:
  explicit BatchReplies(ControlServer& server) : server_(server) {}
  absl::Status OnToken(uint64_t id, int32_t token, bool is_stop, double latency_ms,
                       const TokenLogprobs* logprobs) override {
    return server_.SendToken(id, token, is_stop, latency_ms, logprobs);
  }
  void OnPrefixComputed(uint64_t id, const Sequence& seq,
                        std::span<const int32_t> prefix) override {
    (void)id;
    server_.StorePrefix(seq, prefix);
  }
  absl::Status OnFinished(uint64_t id, const GenerationResult& result,
                          std::unique_ptr<Sequence> seq, std::vector<int32_t> tokens) override {
    const bool failed = !result.engine_error.ok();
    const int n_prompt = static_cast<int>(tokens.size()) - result.generated;
    // After an engine error the state is not trusted for a follow-up.
    if (!failed) server_.retained_.Keep(std::move(seq), std::move(tokens));
    if (server_.closed_) return absl::OkStatus();
    DoneReply done = Done(failed ? StopReason::kError : result.stop);
    done.set_prompt_tokens(n_prompt);
    done.set_cached_prompt_tokens(result.prompt_reused);
    done.set_generated_tokens(result.generated);
    done.set_prefill_seconds(result.prefill_s);
    done.set_decode_seconds(result.decode_s);
    if (failed) {
      done.set_error_code(static_cast<int32_t>(result.engine_error.code()));
      done.set_error_message(std::string(result.engine_error.message()));
    }
    return server_.SendDone(id, done);
  }

 private:
  ControlServer& server_;
};

absl::Status ControlServer::Run() {
  WorkerReply ready;
  ready.set_id(0);
  control_v1::ReadyReply* r = ready.mutable_ready();
  r->set_n_vocab(n_vocab_);
  r->set_max_ctx(engine_.max_ctx());
  r->set_backend(options_.backend);
  r->set_threads(options_.threads);
  r->set_model_fingerprint(options_.model_fingerprint);
  r->set_kv_bytes_per_token(options_.state_size.kv_bytes_per_token);
  r->set_recurrent_state_bytes(options_.state_size.recurrent_bytes);
  r->set_kv_type_k(KvCacheTypeName(options_.kv_types.k));
  r->set_kv_type_v(KvCacheTypeName(options_.kv_types.v));
  r->set_max_sequences(engine_.max_sequences());
  r->set_prefix_cache_budget_bytes(prefix_pool_.budget_bytes());
  if (absl::Status s = Send(ready); !s.ok()) return s;

  while (!closed_) {
    if (queue_.empty() && batch_.empty()) {
      absl::Status received = control::ReceiveControlMessage(fd_, &incoming_, -1);
      if (absl::IsUnavailable(received)) return absl::OkStatus();
      if (absl::IsDataLoss(received)) {
        if (options_.log != nullptr) {
          std::fprintf(options_.log, "moetier-worker: ignoring a control message: %s\n",
                       std::string(received.message()).c_str());
        }
        continue;
      }
      if (!received.ok()) return received;
      if (absl::Status s = Intake(std::move(incoming_)); !s.ok()) return s;
      incoming_.Clear();
      continue;
    }
    if (absl::Status s = Admit(); !s.ok()) return s;
    if (closed_ || batch_.empty()) continue;
    BatchReplies replies(*this);
    if (absl::Status s = batch_.Step(replies); !s.ok()) return s;
    if (absl::Status s = PollChannel(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ControlServer::Admit() {
  while (!queue_.empty() && !closed_) {
    const bool generate = queue_.front().kind_case() == WorkerRequest::kGenerate;
    if (generate && batch_.size() >= static_cast<size_t>(engine_.max_sequences())) break;
    if (!generate && !batch_.empty()) break;
    WorkerRequest request = std::move(queue_.front());
    queue_.pop_front();
    absl::Status s = generate ? StartGenerate(request.id(), request.generate()) : Serve(request);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ requests

absl::Status ControlServer::Serve(const WorkerRequest& request) {
  running_id_ = request.id();
  running_ = true;
  cancel_running_ = false;
  absl::Status status;
  switch (request.kind_case()) {
    case WorkerRequest::kScore:
      status = Score(request.id(), request.score());
      break;
    case WorkerRequest::kResizeExpertCache:
      status = ResizeExpertCache(request.id(), request.resize_expert_cache());
      break;
    default:
      status = SendError(request.id(),
                         absl::InvalidArgumentError(absl::StrFormat(
                             "request %d has no kind this worker knows (score, generate or "
                             "resize_expert_cache)",
                             request.id())));
      break;
  }
  running_ = false;
  return status;
}

absl::Status ControlServer::Score(uint64_t id, const control_v1::ScoreRequest& request) {
  const int n = request.token_ids_size();
  if (n == 0) return SendError(id, absl::InvalidArgumentError("score: no token ids"));
  const auto start = Clock::now();
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine_.NewSequence();
  if (absl::IsResourceExhausted(seq.status()) && retained_.holds_sequence()) {
    // Scoring needs every position's logits, so the kept sequence is no use
    // to it; its slot is.
    retained_.Drop();
    seq = engine_.NewSequence();
  }
  if (!seq.ok()) return SendError(id, seq.status());
  const size_t chunk_floats = control::kLogitsChunkFloats;
  const size_t row = static_cast<size_t>(n_vocab_);
  float* buffer = score_buffer_.data();
  size_t pending = 0;  // computed floats at the start of the buffer, not yet sent
  uint64_t sent = 0;   // floats sent so far
  for (int pos = 0; pos < n;) {
    const int batch = std::min(options_.score_batch_tokens, n - pos);
    const std::span<const int32_t> tokens(request.token_ids().data() + pos,
                                          static_cast<size_t>(batch));
    if (absl::Status s = engine_.Forward(**seq, tokens, LogitRows::kAll, buffer + pending);
        !s.ok()) {
      return SendError(id, s);
    }
    pos += batch;
    pending += static_cast<size_t>(batch) * row;
    // Whole chunks only, except at the end: chunk boundaries do not depend
    // on the batch size.
    size_t offset = 0;
    while (pending - offset >= chunk_floats || (pos == n && offset < pending)) {
      const size_t count = std::min(chunk_floats, pending - offset);
      if (absl::Status s = SendLogits(id, sent, buffer + offset, count); !s.ok()) return s;
      sent += count;
      offset += count;
    }
    std::memmove(buffer, buffer + offset, (pending - offset) * sizeof(float));
    pending -= offset;
    if (absl::Status s = PollChannel(); !s.ok()) return s;
    if (closed_) return absl::OkStatus();
    if (cancel_running_ && pos < n) {
      DoneReply done = Done(StopReason::kCancelled);
      done.set_prompt_tokens(n);
      done.set_prefill_seconds(SecondsSince(start));
      return SendDone(id, done);
    }
  }
  DoneReply done = Done(StopReason::kComplete);
  done.set_prompt_tokens(n);
  done.set_prefill_seconds(SecondsSince(start));
  return SendDone(id, done);
}

absl::Status ControlServer::StartGenerate(uint64_t id, const control_v1::GenerateRequest& request) {
  const int n_prompt = request.prompt_token_ids_size();
  if (n_prompt == 0) {
    return SendError(id, absl::InvalidArgumentError("generate: the prompt is empty"));
  }
  if (request.max_new_tokens() < 1) {
    return SendError(id, absl::InvalidArgumentError(absl::StrFormat(
                             "generate: max_new_tokens is %d; it must be at least 1",
                             request.max_new_tokens())));
  }
  if (!request.has_sampling()) {
    return SendError(id, absl::InvalidArgumentError("generate: no sampling settings"));
  }
  absl::StatusOr<SamplingParams> params = SamplingFromControl(request.sampling());
  if (!params.ok()) {
    return SendError(id, absl::InvalidArgumentError(
                             absl::StrFormat("generate: %s", params.status().message())));
  }
  if (request.has_top_logprobs() &&
      (request.top_logprobs() < 0 || request.top_logprobs() > kMaxTopLogprobs)) {
    return SendError(id, absl::InvalidArgumentError(absl::StrFormat(
                             "generate: top_logprobs %d is outside [0, %d]",
                             request.top_logprobs(), kMaxTopLogprobs)));
  }
  const std::span<const int32_t> prompt(request.prompt_token_ids().data(),
                                        static_cast<size_t>(n_prompt));
  int reused = 0;
  absl::StatusOr<std::unique_ptr<Sequence>> seq = retained_.TakeFor(engine_, prompt, &reused);
  if (!seq.ok()) return SendError(id, seq.status());
  if (prefix_pool_.UsableLength(prompt) > reused) {
    absl::StatusOr<int> loaded = prefix_pool_.LoadInto(engine_, **seq, prompt);
    if (loaded.ok()) {
      reused = *loaded;
    } else {
      LogPrefixPoolError("loading a kept prompt start", loaded.status());
    }
  }
  const int checkpoint_position = CheckpointPosition(request);
  prompt_tokens_reused_ += static_cast<uint64_t>(reused);

  // The values are the daemon's, checked at its front door: used as sent.
  BatchedGeneration generation{
      .id = id,
      .prompt = std::vector<int32_t>(prompt.begin(), prompt.end()),
      .max_new_tokens = request.max_new_tokens(),
      .stop_ids = std::vector<int32_t>(request.stop_token_ids().begin(),
                                       request.stop_token_ids().end()),
      .checkpoint_position = checkpoint_position,
      .store_positions = prefix_pool_.PlanStores(prompt, reused, checkpoint_position),
      .top_logprobs = request.has_top_logprobs() ? request.top_logprobs() : -1,
      .sampling = *params};
  std::sort(generation.stop_ids.begin(), generation.stop_ids.end());
  batch_.Add(std::move(generation), *std::move(seq));
  ReportPrefixCache();
  return absl::OkStatus();
}

void ControlServer::ReportPrefixCache() const {
  if (!options_.prefix_cache_changed) return;
  options_.prefix_cache_changed(PrefixCacheReport{.states = prefix_pool_.states(),
                                                  .bytes = prefix_pool_.bytes(),
                                                  .prompt_tokens_reused = prompt_tokens_reused_});
}

void ControlServer::StorePrefix(const Sequence& seq, std::span<const int32_t> prefix) {
  absl::Status s = prefix_pool_.Store(engine_, seq, prefix);
  ReportPrefixCache();
  if (s.ok()) return;
  LogPrefixPoolError("keeping a prompt start", s);
  // An engine that cannot copy state never will.
  if (absl::IsUnimplemented(s)) prefix_pool_.Disable();
}

void ControlServer::LogPrefixPoolError(const char* doing, const absl::Status& status) {
  if (options_.log == nullptr) return;
  std::fprintf(options_.log, "moetier-worker: %s for shared prompts failed (%s)%s\n", doing,
               std::string(status.message()).c_str(),
               absl::IsUnimplemented(status) ? "; the prefix cache is off" : "");
  std::fflush(options_.log);
}

int ControlServer::CheckpointPosition(const control_v1::GenerateRequest& request) const {
  const int n_prompt = request.prompt_token_ids_size();
  const int asked = request.checkpoint_position();
  if (asked > 0 && asked <= n_prompt) return asked;
  // A regeneration (the very same prompt) can then restore and compute one
  // token; a model without recurrent layers checkpoints for free anywhere,
  // so it keeps its prefill in one piece.
  return options_.state_size.recurrent_bytes > 0 ? n_prompt - 1 : n_prompt;
}

absl::Status ControlServer::ResizeExpertCache(uint64_t id,
                                              const control_v1::ResizeExpertCacheRequest& request) {
  if (options_.expert_cache == nullptr) {
    return SendError(id, absl::FailedPreconditionError(
                             "this worker was started without an expert cache; give it "
                             "--expert-cache-mib through worker_extra_args"));
  }
  // This runs only while no Generate does, and every engine call releases
  // its experts before it returns, so the engine holds none here.
  absl::StatusOr<uint64_t> bytes = options_.expert_cache->ResizeExpertCache(request.pool_bytes());
  if (!bytes.ok()) return SendError(id, bytes.status());
  if (options_.expert_cache_resized) options_.expert_cache_resized();
  if (options_.log != nullptr) {
    std::fprintf(options_.log,
                 "moetier-worker: expert cache resized to %.1f MiB (%.1f MiB asked); it refills "
                 "on demand\n",
                 *bytes / 1048576.0, request.pool_bytes() / 1048576.0);
    std::fflush(options_.log);
  }
  DoneReply done = Done(StopReason::kComplete);
  done.set_expert_cache_bytes(*bytes);
  return SendDone(id, done);
}

}  // namespace moetier
