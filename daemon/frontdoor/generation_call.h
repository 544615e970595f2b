// One generation, whatever the transport: the bounds checks, Submit, and a
// loop that hands each token to a sink and cancels the job when the client
// is gone. gRPC's MoetierService and the HTTP API both answer through it, so
// a request means the same on either.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "moetier/v1/moetier.pb.h"
#include "request/sampling_params.h"
#include "request/stop_reason.h"
#include "scheduler/request_scheduler.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/tokenizer.h"

namespace moetier {

struct FrontDoorLimits {
  uint32_t max_prompt_bytes = 1 << 20;
  uint32_t max_new_tokens_limit = 8192;
  uint32_t default_max_new_tokens = 256;
  uint32_t max_score_tokens = 4096;
  uint32_t min_watch_interval_ms = 100;
};

// The sampling settings of an API request: its unset (zero) fields replaced
// by what they stand for (top_p and repetition_penalty 1, repeat_last_n 64),
// the seed drawn at random when absent, then every value checked.
// INVALID_ARGUMENT names the API field, its value and its valid range.
absl::StatusOr<SamplingParams> SamplingFromApi(const v1::SamplingParams& sampling);

struct GenerationInput {
  std::vector<int32_t> prompt_ids;
  // 0 means the limits' default.
  int32_t max_new_tokens = 0;
  v1::SamplingParams sampling;
  bool ignore_end_of_generation = false;
  int32_t checkpoint_position = 0;
  // 0..kMaxTopLogprobs alternatives per token; unset: no logprobs at all.
  std::optional<int32_t> top_logprobs;
};

struct TokenAlternative {
  int32_t id = 0;
  float logprob = 0;
};

struct GeneratedToken {
  int32_t id = 0;
  // Valid UTF-8; empty while a character's bytes are incomplete, or when the
  // model has no usable tokenizer.
  std::string text;
  float latency_ms = 0;
  // Set when the input asked for top_logprobs: log_softmax of the model's
  // own logits for this token, and the most likely tokens, most likely first.
  std::optional<float> logprob;
  std::vector<TokenAlternative> top_logprobs;
};

struct GenerationOutcome {
  StopReason stop = StopReason::kComplete;
  // The decoder's last held-back bytes, already sanitized.
  std::string tail_text;
  v1::GenerationStats stats;
  // The sink asked to stop (a stop string matched): `stop` is then
  // kCancelled, and the stats count what the worker computed.
  bool stopped_by_sink = false;
};

enum class SinkAction {
  kContinue,
  // The caller has what it wants (a stop string matched): the job is
  // cancelled and the call ends normally.
  kStop,
  // The client can no longer be written to: the job is cancelled and the
  // call ends CANCELLED.
  kClientGone,
};
using TokenSink = std::function<SinkAction(const GeneratedToken&)>;
// Polled between replies; true cancels the job.
using ClientGone = std::function<bool()>;

// The worker reports what the control protocol allows; anything else is a
// worker out of step with this daemon.
absl::StatusOr<StopReason> StopOfDone(const control_v1::DoneReply& done);

v1::StopReason StopReasonToApi(StopReason reason);

// A rendered chat prompt and where the worker's checkpoint goes: where the
// generation prompt starts, so the next turn recomputes only this reply.
struct ChatPrompt {
  std::vector<int32_t> ids;
  int32_t checkpoint_position = 0;
};

// INVALID_ARGUMENT when the messages (with their reasoning, tool calls and
// the tools) exceed max_prompt_bytes or are empty. `options`' generation
// prompt setting is ignored: the prompt always ends with one.
absl::StatusOr<ChatPrompt> RenderChatPrompt(const ChatTemplate& chat_template,
                                            const Tokenizer& tokenizer,
                                            const std::vector<ChatMessage>& messages,
                                            ChatRenderOptions options,
                                            const FrontDoorLimits& limits);

// A generation handed to the scheduler, in two steps so that a transport can
// answer a refusal (bad input, a full queue) before it commits to a
// streamed reply: Start checks the bounds and submits; Run hands the tokens
// over until the job ends. A call dropped before Run finishes cancels its
// job, so the worker's sequence is freed.
class GenerationCall {
 public:
  // `tokenizer` is null when the model cannot handle text: tokens then
  // carry ids only and no end-of-generation ids stop the job.
  // INVALID_ARGUMENT for input outside the limits; the scheduler's
  // RESOURCE_EXHAUSTED / UNAVAILABLE when it cannot take the job.
  static absl::StatusOr<std::unique_ptr<GenerationCall>> Start(const Tokenizer* tokenizer,
                                                               RequestScheduler* scheduler,
                                                               const FrontDoorLimits& limits,
                                                               GenerationInput input);
  ~GenerationCall();
  GenerationCall(const GenerationCall&) = delete;
  GenerationCall& operator=(const GenerationCall&) = delete;

  // Once. CANCELLED when the client went away; the worker's own error code
  // when it failed.
  absl::StatusOr<GenerationOutcome> Run(const TokenSink& sink, const ClientGone& client_gone);

  int32_t prompt_tokens() const { return prompt_tokens_; }

 private:
  GenerationCall() = default;
  RequestScheduler* scheduler_ = nullptr;
  std::shared_ptr<RequestJob> job_;
  std::optional<StreamingDecoder> decoder_;
  uint32_t seed_ = 0;
  int32_t prompt_tokens_ = 0;
  bool ended_ = false;
};

// Start, then Run.
absl::StatusOr<GenerationOutcome> RunGenerationCall(const Tokenizer* tokenizer,
                                                    RequestScheduler* scheduler,
                                                    const FrontDoorLimits& limits,
                                                    GenerationInput input, const TokenSink& sink,
                                                    const ClientGone& client_gone);

}  // namespace moetier
