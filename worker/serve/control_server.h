// The worker's side of the control protocol (proto/moetier/worker/v1/
// control.proto) on an already connected control channel: announces the
// engine with a ReadyReply, then serves the daemon's requests one at a time
// in arrival order.
//
//   Score    -> LogitsChunk replies (the row-major logits of every position,
//               kLogitsChunkFloats floats per chunk), then Done(STOP_COMPLETE)
//   Generate -> prefill (continuing the last Generate's sequence where the
//               prompt starts with its tokens: generation/retained_sequence.h,
//               or from a kept state of a shared start: generation/prefix_pool.h),
//               then one TokenReply per sampled token until a stop token
//               (sent, flagged), max_new_tokens, a full context or a Cancel,
//               then Done with counts (cached_prompt_tokens: not computed)
//               and times
//   Cancel   -> the running request stops at its next token boundary; a
//               queued one is dropped at once with Done(STOP_CANCELLED)
//   ResizeExpertCache
//            -> the expert cache resized between engine calls (the engine
//               holds no expert then), Done(STOP_COMPLETE) with the pool in
//               effect, or Done(STOP_ERROR) saying why not
//
// Generate requests run together, up to the engine's max_sequences() at
// once (continuous batching, generation/generation_batch.h): one engine
// pass per step for all of them, a queued Generate joining at the next step
// and a finished one leaving in its last. A Score or ResizeExpertCache
// waits at the head of the queue until the running Generates are done (so
// does every request behind it: the queue stays in arrival order), then
// runs alone.
//
// Between steps (and between Score batches) the channel is polled without
// blocking: a Cancel takes effect there, other requests are queued.
//
// The daemon checked every request's values where it entered the system
// (token ids against n_vocab, the length against max_ctx, the sampling
// settings), so the server checks only the message's shape: a kind it
// knows, ids to run, max_new_tokens >= 1, every sampling field present. A
// malformed request gets Done(STOP_ERROR) with INVALID_ARGUMENT and a
// message naming the problem; serving goes on. What the engine cannot
// compute (an id outside the vocabulary, a sequence past its capacity) it
// refuses itself, and that error ends the request the same way; sampling
// values outside their ranges are a daemon bug and abort (Sampler).
//
// Token loop: the logits row, the reply messages and the send buffer are
// allocated once; a token costs the engine's work, one sample, one
// serialization into the fixed buffer, one send and one poll.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/expert_cache_control.h"
#include "engine/forward_engine.h"
#include "generation/generation_batch.h"
#include "generation/prefix_pool.h"
#include "generation/retained_sequence.h"
#include "moetier/worker/v1/control.pb.h"
#include "request/stop_reason.h"
#include "sampling/token_logprobs.h"

namespace moetier {

namespace control_v1 = ::moetier::worker::v1;

struct ControlServerOptions {
  std::string backend = "cpu";  // ReadyReply.backend
  int threads = 1;              // ReadyReply.threads
  uint64_t model_fingerprint = 0;
  SequenceStateSize state_size;  // ReadyReply: what one sequence's state takes
  KvCacheTypes kv_types;         // ReadyReply: how its KV rows are stored
  // Positions of a Score computed per engine call (bounds its buffer to
  // score_batch_tokens x n_vocab floats; results do not depend on it).
  int score_batch_tokens = 32;
  // Generate: at most this many prompt positions per engine call; 0: the
  // whole prompt at once when the engine holds one sequence, and
  // kBatchedPrefillChunk positions per step when it holds more (so that a
  // long prompt does not stall the others' decoding). Results agree within
  // rounding either way.
  int ubatch_size = 0;
  // The most bytes the states of shared prompt starts take
  // (generation/prefix_pool.h); 0 keeps none.
  uint64_t prefix_cache_bytes = 0;
  // Called after each Generate starts and each state the prefix cache
  // keeps: the states and bytes it holds, and the prompt tokens not
  // computed so far (from the cache or a kept sequence); daemon mode puts
  // them on the status page.
  std::function<void(const PrefixCacheReport&)> prefix_cache_changed;
  // Where notes about malformed datagrams go, and resizes; null: nowhere.
  std::FILE* log = nullptr;
  // What ResizeExpertCache resizes (not owned; outlives the server); null
  // when the worker has no expert cache, which the request is then told.
  ExpertCacheControl* expert_cache = nullptr;
  // Called after each resize that took effect, before its Done is sent
  // (daemon mode: shows the new cache on the status page at once).
  std::function<void()> expert_cache_resized;
};

class ControlServer {
 public:
  // `control_fd` (not owned) is a connected SOCK_SEQPACKET socket; `engine`
  // must outlive the server and is used by Run() only.
  static absl::StatusOr<std::unique_ptr<ControlServer>> Create(int control_fd,
                                                               ForwardEngine& engine,
                                                               const ControlServerOptions& options);
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Sends the ReadyReply and serves until the daemon closes the channel
  // (then returns OK, abandoning any queued request: nobody is left to
  // answer). Errors only when the channel fails in another way.
  absl::Status Run();

  // Requests that got their Done reply so far; safe from any thread.
  uint64_t requests_finished() const { return requests_finished_.load(); }

 private:
  ControlServer(int control_fd, ForwardEngine& engine, const ControlServerOptions& options);

  // Takes a request that just arrived: queues it, or applies a Cancel.
  absl::Status Intake(control_v1::WorkerRequest request);
  // Reads whatever has arrived, without waiting.
  absl::Status PollChannel();
  absl::Status Serve(const control_v1::WorkerRequest& request);
  absl::Status Score(uint64_t id, const control_v1::ScoreRequest& request);
  // Checks a Generate and adds it to the batch (or answers it at once: a
  // malformed request, no sequence to be had).
  absl::Status StartGenerate(uint64_t id, const control_v1::GenerateRequest& request);
  // Takes queued requests in order while they can start: Generates while
  // the batch has room, anything else only when no Generate is running.
  absl::Status Admit();
  // Copies a member's state at one of its store positions into the pool.
  void StorePrefix(const Sequence& seq, std::span<const int32_t> prefix);
  void LogPrefixPoolError(const char* doing, const absl::Status& status);
  void ReportPrefixCache() const;
  // Where the running Generate saves its sequence's checkpoint.
  int CheckpointPosition(const control_v1::GenerateRequest& request) const;
  absl::Status ResizeExpertCache(uint64_t id, const control_v1::ResizeExpertCacheRequest& request);

  // Sends one reply through the fixed buffer. A peer that has gone sets
  // closed_ and is not an error.
  absl::Status Send(const control_v1::WorkerReply& reply);
  absl::Status SendDone(uint64_t id, const control_v1::DoneReply& done);
  absl::Status SendError(uint64_t id, const absl::Status& status);
  absl::Status SendToken(uint64_t id, int32_t token, bool is_stop, double latency_ms,
                         const TokenLogprobs* logprobs);
  absl::Status SendLogits(uint64_t id, uint64_t first_float, const float* values, size_t count);

  const int fd_;
  ForwardEngine& engine_;
  const ControlServerOptions options_;
  const int n_vocab_;
  bool closed_ = false;
  std::deque<control_v1::WorkerRequest> queue_;
  uint64_t running_id_ = 0;
  bool running_ = false;
  bool cancel_running_ = false;
  std::atomic<uint64_t> requests_finished_{0};
  RetainedSequence retained_;  // the last Generate's sequence, for a follow-up
  PrefixPool prefix_pool_;     // states of prompt starts, for any later prompt
  uint64_t prompt_tokens_reused_ = 0;
  GenerationBatch batch_;      // the Generates being computed
  class BatchReplies;          // GenerationEvents: replies on this channel

  std::vector<float> score_buffer_;       // [score_batch_tokens * n_vocab + kLogitsChunkFloats]
  std::vector<uint8_t> send_buffer_;      // [kMaxControlMessageBytes]
  control_v1::WorkerReply token_reply_;   // reused for every TokenReply
  control_v1::WorkerReply logits_reply_;  // reused for every LogitsChunk
  control_v1::WorkerRequest incoming_;
};

}  // namespace moetier
