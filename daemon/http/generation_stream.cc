#include "http/generation_stream.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "gguf/tokenizer/unicode.h"
#include "http/output_splitter.h"

namespace moetier {
namespace {

std::vector<ChatMessage> ToChatMessages(const std::vector<ApiMessage>& messages) {
  std::vector<ChatMessage> out;
  out.reserve(messages.size());
  for (const ApiMessage& m : messages) {
    ChatMessage message;
    message.role = m.role;
    message.content = m.content;
    if (!m.reasoning_content.empty()) message.reasoning_content = m.reasoning_content;
    for (const ApiToolCall& call : m.tool_calls) {
      message.tool_calls.push_back({call.id, call.name, call.arguments});
    }
    message.tool_call_id = m.tool_call_id;
    message.name = m.name;
    out.push_back(std::move(message));
  }
  return out;
}

TokenText PieceOf(const Tokenizer* tokenizer, int32_t id, float logprob) {
  TokenText t;
  t.logprob = logprob;
  if (tokenizer != nullptr && id >= 0 && id < tokenizer->vocab_size()) {
    t.bytes = std::string(tokenizer->TokenPiece(id, /*render_special=*/true));
    t.text = SanitizeUtf8(t.bytes);
  }
  return t;
}

FinishReason FinishOf(const GenerationOutcome& outcome, int tool_calls) {
  if (outcome.stopped_by_sink) return FinishReason::kStop;
  switch (outcome.stop) {
    case StopReason::kMaxTokens:
    case StopReason::kContextFull:
      return FinishReason::kLength;
    default:
      return tool_calls > 0 ? FinishReason::kToolCalls : FinishReason::kStop;
  }
}

}  // namespace

std::variant<std::unique_ptr<PreparedGeneration>, HttpError> PrepareGeneration(
    const HttpModel& model, const GenerationRequest& request, bool chat) {
  if (const std::string reason = model.not_serving_reason ? model.not_serving_reason() : "";
      !reason.empty()) {
    HttpError error;
    error.status = 503;
    error.message = reason;
    error.retry_after_s = 5;
    return error;
  }
  if (absl::Status s = ValidateStopStrings(request.stop, "stop"); !s.ok()) {
    return BadRequest(std::string(s.message()), "stop");
  }
  GenerationInput input;
  input.max_new_tokens = request.max_tokens;
  input.sampling = request.sampling;
  input.top_logprobs = request.top_logprobs;
  if (chat || request.prompt_token_ids.empty()) {
    if (model.tokenizer == nullptr) {
      return HttpErrorFromStatus(absl::FailedPreconditionError(model.text_unavailable.message()));
    }
  }
  if (chat) {
    if (model.chat_template == nullptr) {
      return HttpErrorFromStatus(absl::FailedPreconditionError(model.chat_unavailable.message()));
    }
    ChatRenderOptions options;
    options.enable_thinking = request.enable_thinking;
    if (request.tool_choice != ToolChoice::kNone) options.tools = request.tools;
    absl::StatusOr<ChatPrompt> prompt = RenderChatPrompt(
        *model.chat_template, *model.tokenizer, ToChatMessages(request.messages), options,
        model.limits);
    if (!prompt.ok()) return HttpErrorFromStatus(prompt.status());
    input.prompt_ids = std::move(prompt->ids);
    input.checkpoint_position = prompt->checkpoint_position;
  } else if (!request.prompt_token_ids.empty()) {
    if (request.prompt_token_ids.size() * 4 > model.limits.max_prompt_bytes) {
      return BadRequest(absl::StrFormat("%d prompt token ids; the limit is max_prompt_bytes=%d "
                                        "(4 bytes an id)", request.prompt_token_ids.size(),
                                        model.limits.max_prompt_bytes), "prompt");
    }
    const int32_t n_vocab = model.tokenizer != nullptr ? model.tokenizer->vocab_size() : 0;
    for (int32_t id : request.prompt_token_ids) {
      if (n_vocab > 0 && id >= n_vocab) {
        return BadRequest(absl::StrFormat("prompt token id %d is not below the vocabulary "
                                          "size %d", id, n_vocab), "prompt");
      }
    }
    input.prompt_ids = request.prompt_token_ids;
  } else {
    if (request.prompt.size() > model.limits.max_prompt_bytes) {
      return BadRequest(absl::StrFormat("the prompt is %d bytes; the limit is "
                                        "max_prompt_bytes=%d", request.prompt.size(),
                                        model.limits.max_prompt_bytes), "prompt");
    }
    absl::StatusOr<std::vector<int32_t>> ids =
        model.tokenizer->Encode(request.prompt, /*parse_special=*/false, /*add_special=*/true);
    if (!ids.ok()) return HttpErrorFromStatus(ids.status());
    input.prompt_ids = std::move(*ids);
  }
  absl::StatusOr<std::unique_ptr<GenerationCall>> call =
      GenerationCall::Start(model.tokenizer, model.scheduler, model.limits, std::move(input));
  if (!call.ok()) {
    HttpError error = HttpErrorFromStatus(call.status());
    // The generation core names its own field; say it as the client wrote it.
    constexpr absl::string_view kCoreField = "max_new_tokens";
    if (error.status == 400 && absl::StrContains(error.message, kCoreField)) {
      error.param = request.max_tokens_field;
      if (absl::StartsWith(error.message, kCoreField)) {
        error.message = absl::StrCat(request.max_tokens_field,
                                     error.message.substr(kCoreField.size()));
      }
    }
    return error;
  }
  std::unique_ptr<PreparedGeneration> prepared(new PreparedGeneration());
  prepared->model_ = &model;
  prepared->call_ = std::move(*call);
  if (!request.stop.empty()) prepared->stop_.emplace(request.stop);
  prepared->splitter_ = std::make_unique<OutputSplitter>(
      chat ? std::optional<ChatTemplateStyle>(model.chat_template->style()) : std::nullopt,
      request.enable_thinking,
      request.tool_choice == ToolChoice::kNone ? std::vector<nlohmann::ordered_json>()
                                               : request.tools);
  prepared->start_ = std::chrono::steady_clock::now();
  return prepared;
}

PreparedGeneration::~PreparedGeneration() = default;

RequestOutcome PreparedGeneration::Run(ResponseEvents& events,
                                       const std::function<bool()>& client_gone) {
  using Clock = std::chrono::steady_clock;
  const Tokenizer* tokenizer = model_->tokenizer;
  RequestMetrics* metrics = model_->metrics;
  bool first = true;
  Clock::time_point last_token = start_;
  std::vector<TokenLogprobEntry> logprobs;
  auto sink = [&](const GeneratedToken& token) {
    const Clock::time_point now = Clock::now();
    if (metrics != nullptr) {
      const double since = std::chrono::duration<double>(now - (first ? start_ : last_token)).count();
      if (first) {
        metrics->ObserveTimeToFirstToken(since);
      } else {
        metrics->ObserveInterTokenLatency(since);
      }
    }
    first = false;
    last_token = now;
    logprobs.clear();
    if (token.logprob.has_value()) {
      TokenLogprobEntry entry;
      entry.token = PieceOf(tokenizer, token.id, *token.logprob);
      for (const TokenAlternative& alt : token.top_logprobs) {
        entry.top.push_back(PieceOf(tokenizer, alt.id, alt.logprob));
      }
      logprobs.push_back(std::move(entry));
    }
    std::string text = stop_.has_value() ? stop_->Push(token.text) : token.text;
    OutputPiece piece = splitter_->Push(text);
    if ((!piece.empty() || !logprobs.empty()) && !events.OnPiece(piece, logprobs)) {
      return SinkAction::kClientGone;
    }
    return stop_.has_value() && stop_->stopped() ? SinkAction::kStop : SinkAction::kContinue;
  };
  events.OnStart(call_->prompt_tokens());
  absl::StatusOr<GenerationOutcome> outcome = call_->Run(sink, client_gone);
  if (!outcome.ok()) {
    if (outcome.status().code() == absl::StatusCode::kCancelled) return RequestOutcome::kCancelled;
    events.OnError(HttpErrorFromStatus(outcome.status()));
    return RequestOutcome::kError;
  }
  std::string tail = outcome->tail_text;
  if (stop_.has_value()) tail = stop_->Push(tail) + stop_->Flush();
  OutputPiece last = splitter_->Push(tail);
  OutputPiece rest = splitter_->Finish();
  last.reasoning += rest.reasoning;
  last.content += rest.content;
  for (ToolCallPiece& call : rest.tool_calls) last.tool_calls.push_back(std::move(call));
  if (!last.empty() && !events.OnPiece(last, {})) return RequestOutcome::kCancelled;
  GenerationSummary summary;
  summary.finish = FinishOf(*outcome, splitter_->tool_call_count());
  if (stop_.has_value()) summary.matched_stop = stop_->matched();
  summary.prompt_tokens = outcome->stats.prompt_tokens();
  summary.cached_prompt_tokens = outcome->stats.cached_prompt_tokens();
  summary.completion_tokens = outcome->stats.generated_tokens();
  summary.stats = outcome->stats;
  if (metrics != nullptr) {
    metrics->AddTokens(static_cast<uint64_t>(summary.prompt_tokens),
                       static_cast<uint64_t>(summary.completion_tokens));
  }
  events.OnEnd(summary);
  return RequestOutcome::kOk;
}

}  // namespace moetier
