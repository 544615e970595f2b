#include "frontdoor/generation_call.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_format.h"
#include "gguf/tokenizer/unicode.h"
#include "request/control_codec.h"

namespace moetier {
namespace {

// How often a call waiting on its job checks whether the client is gone.
constexpr int64_t kCancelPollMs = 50;
// After a cancel, how long the call waits for the worker's Done before
// leaving (the scheduler keeps tracking the job either way).
constexpr int64_t kCancelGraceMs = 5000;
// What the API's zero (unset) repeat_last_n stands for.
constexpr int32_t kApiDefaultRepeatLastN = 64;

// What the API's fields are called in errors.
constexpr SamplingFieldNames kApiSamplingNames{
    .temperature = "sampling.temperature",
    .top_k = "sampling.top_k",
    .top_p = "sampling.top_p",
    .min_p = "sampling.min_p",
    .repeat_penalty = "sampling.repetition_penalty",
    .repeat_last_n = "sampling.repeat_last_n",
};

absl::Status Cancelled() { return absl::CancelledError("the call was cancelled"); }

void FillStats(const control_v1::DoneReply& done, StopReason stop, uint32_t seed,
               const RequestJob& job, v1::GenerationStats* stats) {
  stats->set_prompt_tokens(done.prompt_tokens());
  stats->set_cached_prompt_tokens(done.cached_prompt_tokens());
  stats->set_generated_tokens(done.generated_tokens());
  if (done.prefill_seconds() > 0) {
    stats->set_prefill_tokens_per_s((done.prompt_tokens() - done.cached_prompt_tokens()) /
                                    done.prefill_seconds());
  }
  if (done.generated_tokens() > 1 && done.decode_seconds() > 0) {
    stats->set_decode_tokens_per_s((done.generated_tokens() - 1) / done.decode_seconds());
  }
  stats->set_stop_reason(StopReasonToApi(stop));
  stats->set_seed(seed);
  stats->set_worker_device(job.worker_device());
  stats->set_queue_wait_ms(job.queue_wait_ms());
}

}  // namespace

absl::StatusOr<SamplingParams> SamplingFromApi(const v1::SamplingParams& api) {
  // Unset (zero) API fields mean "off", or the default where 0 would mean
  // something else; from here on every value is exact.
  SamplingParams p;
  p.temperature = api.temperature();
  p.top_k = api.top_k();
  p.top_p = api.top_p() == 0.0f ? 1.0f : api.top_p();
  p.min_p = api.min_p();
  p.repeat_penalty = api.repetition_penalty() == 0.0f ? 1.0f : api.repetition_penalty();
  p.repeat_last_n = api.repeat_last_n() == 0 ? kApiDefaultRepeatLastN : api.repeat_last_n();
  p.seed = api.has_seed() ? api.seed() : std::random_device{}();
  if (absl::Status s = ValidateSamplingParams(p, kApiSamplingNames); !s.ok()) return s;
  return p;
}

absl::StatusOr<StopReason> StopOfDone(const control_v1::DoneReply& done) {
  absl::StatusOr<StopReason> stop = StopReasonFromControl(done.stop_reason());
  if (!stop.ok()) {
    return absl::InternalError(absl::StrFormat("the worker ended the request oddly: %s",
                                               stop.status().message()));
  }
  return stop;
}

v1::StopReason StopReasonToApi(StopReason reason) {
  switch (reason) {
    case StopReason::kEndOfGeneration:
      return v1::STOP_REASON_END_OF_GENERATION;
    case StopReason::kMaxTokens:
      return v1::STOP_REASON_MAX_TOKENS;
    case StopReason::kContextFull:
      return v1::STOP_REASON_CONTEXT_FULL;
    case StopReason::kCancelled:
      return v1::STOP_REASON_CANCELLED;
    case StopReason::kError:
      return v1::STOP_REASON_ERROR;
    case StopReason::kComplete:
      break;  // ends no generation
  }
  return v1::STOP_REASON_UNSPECIFIED;
}

absl::StatusOr<ChatPrompt> RenderChatPrompt(const ChatTemplate& chat_template,
                                            const Tokenizer& tokenizer,
                                            const std::vector<ChatMessage>& messages,
                                            ChatRenderOptions options,
                                            const FrontDoorLimits& limits) {
  if (messages.empty()) return absl::InvalidArgumentError("messages is empty");
  // JSON is measured as text, as it is rendered (invalid UTF-8 replaced:
  // dump() would throw on it).
  auto json_bytes = [](const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).size();
  };
  uint64_t bytes = 0;
  for (const ChatMessage& m : messages) {
    bytes += m.content.size() + m.reasoning_content.value_or("").size();
    for (const ChatToolCall& call : m.tool_calls) {
      bytes += call.name.size() + json_bytes(call.arguments);
    }
  }
  for (const nlohmann::ordered_json& tool : options.tools) bytes += json_bytes(tool);
  if (bytes > limits.max_prompt_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the messages hold %d bytes; the limit is max_prompt_bytes=%d", bytes,
        limits.max_prompt_bytes));
  }
  options.add_generation_prompt = true;
  absl::StatusOr<std::string> prompt = chat_template.Render(messages, options);
  if (!prompt.ok()) return prompt.status();
  // The template's markers are special tokens, so the rendered prompt is
  // tokenized with specials parsed (as llama.cpp's server does); marker text
  // inside a message's content is parsed as markers too.
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(*prompt, true, true);
  if (!ids.ok()) return ids.status();
  ChatPrompt chat{std::move(*ids), 0};
  // The next turn renders this turn's generation prompt differently (Qwen
  // templates drop the think block of earlier replies), so the worker's
  // checkpoint goes where the generation prompt starts: the next turn then
  // recomputes only the reply and its own message.
  options.add_generation_prompt = false;
  absl::StatusOr<std::string> history = chat_template.Render(messages, options);
  if (history.ok()) {
    absl::StatusOr<std::vector<int32_t>> history_ids = tokenizer.Encode(*history, true, true);
    if (history_ids.ok() && !history_ids->empty() && history_ids->size() < chat.ids.size() &&
        std::equal(history_ids->begin(), history_ids->end(), chat.ids.begin())) {
      chat.checkpoint_position = static_cast<int32_t>(history_ids->size());
    }
  }
  return chat;
}

absl::StatusOr<std::unique_ptr<GenerationCall>> GenerationCall::Start(
    const Tokenizer* tokenizer, RequestScheduler* scheduler, const FrontDoorLimits& limits,
    GenerationInput input) {
  if (input.prompt_ids.empty()) return absl::InvalidArgumentError("the prompt is empty");
  int32_t max_new_tokens = input.max_new_tokens;
  if (max_new_tokens < 0) return absl::InvalidArgumentError("max_new_tokens must be >= 0");
  if (max_new_tokens == 0) max_new_tokens = static_cast<int32_t>(limits.default_max_new_tokens);
  if (static_cast<uint32_t>(max_new_tokens) > limits.max_new_tokens_limit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_new_tokens %d is above the limit max_new_tokens_limit=%d",
                        max_new_tokens, limits.max_new_tokens_limit));
  }
  if (input.top_logprobs.has_value() &&
      (*input.top_logprobs < 0 || *input.top_logprobs > kMaxTopLogprobs)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "top_logprobs %d is outside 0..%d", *input.top_logprobs, kMaxTopLogprobs));
  }
  absl::StatusOr<SamplingParams> settings = SamplingFromApi(input.sampling);
  if (!settings.ok()) return settings.status();

  // Whether the prompt fits a worker's context is the scheduler's to say:
  // it knows each worker's.
  control_v1::WorkerRequest request;
  control_v1::GenerateRequest* generate = request.mutable_generate();
  generate->mutable_prompt_token_ids()->Add(input.prompt_ids.begin(), input.prompt_ids.end());
  generate->set_max_new_tokens(max_new_tokens);
  generate->set_checkpoint_position(input.checkpoint_position);
  if (input.top_logprobs.has_value()) generate->set_top_logprobs(*input.top_logprobs);
  *generate->mutable_sampling() = SamplingToControl(*settings);
  std::unique_ptr<GenerationCall> call(new GenerationCall());
  call->scheduler_ = scheduler;
  call->seed_ = settings->seed;
  call->prompt_tokens_ = static_cast<int32_t>(input.prompt_ids.size());
  if (tokenizer != nullptr) {
    if (!input.ignore_end_of_generation) {
      for (int32_t id : tokenizer->end_of_generation_ids()) generate->add_stop_token_ids(id);
    }
    call->decoder_.emplace(*tokenizer, /*render_special=*/false);
  }
  absl::StatusOr<std::shared_ptr<RequestJob>> job = scheduler->Submit(std::move(request));
  if (!job.ok()) return job.status();
  call->job_ = std::move(*job);
  return call;
}

GenerationCall::~GenerationCall() {
  if (job_ != nullptr && !ended_) scheduler_->Cancel(job_);
}

absl::StatusOr<GenerationOutcome> GenerationCall::Run(const TokenSink& sink,
                                                      const ClientGone& client_gone) {
  if (ended_) return absl::FailedPreconditionError("the generation call already ran");
  bool cancel_sent = false;
  SinkAction sink_action = SinkAction::kContinue;
  auto cancel_at = std::chrono::steady_clock::time_point::max();
  while (true) {
    if (!cancel_sent && sink_action == SinkAction::kContinue && client_gone()) {
      sink_action = SinkAction::kClientGone;
    }
    if (!cancel_sent && sink_action != SinkAction::kContinue) {
      scheduler_->Cancel(job_);
      cancel_sent = true;
      cancel_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(kCancelGraceMs);
    }
    // Past the grace period the scheduler keeps tracking the job alone.
    if (cancel_sent && std::chrono::steady_clock::now() > cancel_at) {
      ended_ = true;
      return Cancelled();
    }
    absl::StatusOr<std::optional<control_v1::WorkerReply>> next = job_->Next(kCancelPollMs);
    if (!next.ok()) {
      ended_ = true;
      return next.status();
    }
    if (!next->has_value()) continue;
    const control_v1::WorkerReply& reply = **next;
    if (reply.has_token()) {
      if (sink_action != SinkAction::kContinue) continue;
      const control_v1::TokenReply& t = reply.token();
      GeneratedToken token;
      token.id = t.token_id();
      token.latency_ms = static_cast<float>(t.latency_ms());
      if (t.has_logprob()) {
        token.logprob = t.logprob();
        token.top_logprobs.reserve(t.top_logprobs_size());
        for (const control_v1::TokenLogprob& alt : t.top_logprobs()) {
          token.top_logprobs.push_back({alt.token_id(), alt.logprob()});
        }
      }
      if (decoder_.has_value()) {
        std::string bytes;
        if (absl::Status s = decoder_->Push(token.id, &bytes); !s.ok()) {
          scheduler_->Cancel(job_);
          ended_ = true;
          return s;
        }
        token.text = SanitizeUtf8(bytes);
      }
      sink_action = sink(token);
      continue;
    }
    if (!reply.has_done()) continue;  // a score chunk cannot answer a generation
    ended_ = true;
    const control_v1::DoneReply& done = reply.done();
    const absl::StatusOr<StopReason> stop = StopOfDone(done);
    if (!stop.ok()) return stop.status();
    if (*stop == StopReason::kError) {
      return absl::Status(static_cast<absl::StatusCode>(done.error_code()), done.error_message());
    }
    if (sink_action == SinkAction::kClientGone) return Cancelled();
    GenerationOutcome outcome;
    outcome.stop = *stop;
    outcome.stopped_by_sink = sink_action == SinkAction::kStop;
    if (decoder_.has_value() && !outcome.stopped_by_sink) {
      std::string bytes;
      decoder_->Flush(&bytes);
      outcome.tail_text = SanitizeUtf8(bytes);
    }
    FillStats(done, *stop, seed_, *job_, &outcome.stats);
    return outcome;
  }
}

absl::StatusOr<GenerationOutcome> RunGenerationCall(const Tokenizer* tokenizer,
                                                    RequestScheduler* scheduler,
                                                    const FrontDoorLimits& limits,
                                                    GenerationInput input, const TokenSink& sink,
                                                    const ClientGone& client_gone) {
  absl::StatusOr<std::unique_ptr<GenerationCall>> call =
      GenerationCall::Start(tokenizer, scheduler, limits, std::move(input));
  if (!call.ok()) return call.status();
  return (*call)->Run(sink, client_gone);
}

}  // namespace moetier
