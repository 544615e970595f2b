// One generation, whatever the transport: the bounds checks, Submit, and a
// loop that hands each token to a sink and cancels the job when the client
// is gone. gRPC's MoetierService and the HTTP API both answer through it, so
// a request means the same on either.
#pragma once

#include <cstdint>
#include <functional>
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
};

struct GeneratedToken {
  int32_t id = 0;
  // Valid UTF-8; empty while a character's bytes are incomplete, or when the
  // model has no usable tokenizer.
  std::string text;
  float latency_ms = 0;
};

struct GenerationOutcome {
  StopReason stop = StopReason::kComplete;
  // The decoder's last held-back bytes, already sanitized.
  std::string tail_text;
  v1::GenerationStats stats;
};

// Returns false when the client can no longer be written to: the job is then
// cancelled and no further tokens are handed over.
using TokenSink = std::function<bool(const GeneratedToken&)>;
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

// INVALID_ARGUMENT when the messages exceed max_prompt_bytes or are empty.
absl::StatusOr<ChatPrompt> RenderChatPrompt(const ChatTemplate& chat_template,
                                            const Tokenizer& tokenizer,
                                            const std::vector<ChatMessage>& messages,
                                            bool enable_thinking, const FrontDoorLimits& limits);

// `tokenizer` is null when the model cannot handle text: tokens then carry
// ids only and no end-of-generation ids stop the job. CANCELLED when the
// client went away; the worker's own error code when it failed.
absl::StatusOr<GenerationOutcome> RunGenerationCall(const Tokenizer* tokenizer,
                                                    RequestScheduler* scheduler,
                                                    const FrontDoorLimits& limits,
                                                    GenerationInput input, const TokenSink& sink,
                                                    const ClientGone& client_gone);

}  // namespace moetier
