#include "frontdoor/moetier_service.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
#include "gguf/tokenizer/unicode.h"
#include "request/control_codec.h"

namespace moetier {
namespace {

// How often a handler waiting on its job checks whether the call was cancelled.
constexpr int64_t kCancelPollMs = 50;
// After a cancel, how long the handler waits for the worker's Done before
// leaving (the scheduler keeps tracking the job either way).
constexpr int64_t kCancelGraceMs = 5000;
// SetBudget's ceiling: 1 PiB, far above any device, and far from overflowing
// the bytes the worker is sent.
constexpr uint64_t kMaxExpertCacheMib = uint64_t{1} << 30;

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

}  // namespace

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

FrontDoorLimits FrontDoorLimitsFromConfig(const DaemonConfig& config) {
  FrontDoorLimits limits;
  limits.max_prompt_bytes = config.max_prompt_bytes();
  limits.max_new_tokens_limit = config.max_new_tokens_limit();
  limits.default_max_new_tokens = config.default_max_new_tokens();
  limits.max_score_tokens = config.max_score_tokens();
  return limits;
}

MoetierService::MoetierService(const absl::StatusOr<Tokenizer>* tokenizer,
                               absl::StatusOr<ChatTemplate> chat_template, int32_t n_vocab,
                               RequestScheduler* scheduler, StatusReporter* reporter,
                               std::vector<std::string> devices, FrontDoorLimits limits)
    : tokenizer_(tokenizer),
      n_vocab_(n_vocab),
      chat_template_(std::move(chat_template)),
      scheduler_(scheduler),
      reporter_(reporter),
      devices_(std::move(devices)),
      limits_(limits) {
  // Every id the tokenizer produces (encoded prompts, end-of-generation
  // stop ids) is below its vocabulary size; if that fits the model's, no
  // such id needs checking again.
  text_unavailable_ = WhyTextUnavailable(*tokenizer_, n_vocab_);
}

absl::Status WhyTextUnavailable(const absl::StatusOr<Tokenizer>& tokenizer, int32_t n_vocab) {
  if (!tokenizer.ok()) return tokenizer.status();
  if (tokenizer->vocab_size() > n_vocab) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "its tokenizer has %d tokens, more than the %d the model computes logits for",
        tokenizer->vocab_size(), n_vocab));
  }
  return absl::OkStatus();
}

grpc::Status MoetierService::NeedTokenizer() const {
  if (text_unavailable_.ok()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      absl::StrFormat("this model cannot handle text (%s); send token ids",
                                      text_unavailable_.message()));
}

grpc::Status MoetierService::CheckTokenIds(const google::protobuf::RepeatedField<int32_t>& ids,
                                           const char* what) const {
  const int32_t n_vocab = n_vocab_;
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab) {
      return Invalid(absl::StrFormat("%s[%d] = %d is not a token id of this model (0..%d)", what,
                                     i, ids[i], n_vocab - 1));
    }
  }
  return grpc::Status::OK;
}

grpc::Status MoetierService::Generate(grpc::ServerContext* context,
                                      const v1::GenerateRequest* request,
                                      grpc::ServerWriter<v1::GenerateResponse>* writer) {
  std::vector<int32_t> ids;
  if (request->prompt_token_ids_size() > 0) {
    if (!request->prompt().empty()) {
      return Invalid("give either prompt or prompt_token_ids, not both");
    }
    const uint64_t bytes = uint64_t{4} * request->prompt_token_ids_size();
    if (bytes > limits_.max_prompt_bytes) {
      return Invalid(absl::StrFormat(
          "the prompt is %d token ids (%d bytes); the limit is max_prompt_bytes=%d",
          request->prompt_token_ids_size(), bytes, limits_.max_prompt_bytes));
    }
    if (grpc::Status s = CheckTokenIds(request->prompt_token_ids(), "prompt_token_ids"); !s.ok()) {
      return s;
    }
    ids.assign(request->prompt_token_ids().begin(), request->prompt_token_ids().end());
  } else {
    if (grpc::Status s = NeedTokenizer(); !s.ok()) return s;
    if (request->prompt().size() > limits_.max_prompt_bytes) {
      return Invalid(absl::StrFormat("the prompt is %d bytes; the limit is max_prompt_bytes=%d",
                                     request->prompt().size(), limits_.max_prompt_bytes));
    }
    absl::StatusOr<std::vector<int32_t>> encoded =
        (*tokenizer_)->Encode(request->prompt(), request->parse_special_tokens(), true);
    if (!encoded.ok()) return ToGrpc(encoded.status());
    ids = std::move(*encoded);
  }
  return RunGeneration(context, std::move(ids), request->max_new_tokens(), request->sampling(),
                       request->ignore_end_of_generation(), writer);
}

grpc::Status MoetierService::Chat(grpc::ServerContext* context, const v1::ChatRequest* request,
                                  grpc::ServerWriter<v1::GenerateResponse>* writer) {
  if (grpc::Status s = NeedTokenizer(); !s.ok()) return s;
  if (!chat_template_.ok()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        std::string(chat_template_.status().message()));
  }
  std::vector<ChatMessage> messages;
  for (int i = 0; i < request->messages_size(); ++i) {
    const v1::ChatMessage& m = request->messages(i);
    ChatMessage message{m.role(), m.content()};
    if (m.has_reasoning_content()) message.reasoning_content = m.reasoning_content();
    for (int c = 0; c < m.tool_calls_size(); ++c) {
      const v1::ToolCall& call = m.tool_calls(c);
      nlohmann::ordered_json arguments = nlohmann::ordered_json::parse(
          call.arguments_json(), nullptr, /*allow_exceptions=*/false);
      if (arguments.is_discarded()) {
        return Invalid(absl::StrFormat("messages[%d].tool_calls[%d].arguments_json is not JSON",
                                       i, c));
      }
      message.tool_calls.push_back({call.id(), call.name(), std::move(arguments)});
    }
    message.tool_call_id = m.tool_call_id();
    messages.push_back(std::move(message));
  }
  ChatRenderOptions options;
  for (int t = 0; t < request->tools_json_size(); ++t) {
    nlohmann::ordered_json tool = nlohmann::ordered_json::parse(request->tools_json(t), nullptr,
                                                                /*allow_exceptions=*/false);
    if (!tool.is_object()) {
      return Invalid(absl::StrFormat("tools_json[%d] is not a JSON object", t));
    }
    options.tools.push_back(std::move(tool));
  }
  options.enable_thinking = request->enable_thinking();
  absl::StatusOr<ChatPrompt> prompt =
      RenderChatPrompt(*chat_template_, **tokenizer_, messages, options, limits_);
  if (!prompt.ok()) return ToGrpc(prompt.status());
  return RunGeneration(context, std::move(prompt->ids), request->max_new_tokens(),
                       request->sampling(), /*ignore_end_of_generation=*/false, writer,
                       prompt->checkpoint_position);
}

grpc::Status MoetierService::RunGeneration(grpc::ServerContext* context,
                                           std::vector<int32_t> prompt_ids,
                                           int32_t max_new_tokens,
                                           const v1::SamplingParams& sampling,
                                           bool ignore_end_of_generation,
                                           grpc::ServerWriter<v1::GenerateResponse>* writer,
                                           int32_t checkpoint_position) {
  GenerationInput input;
  input.prompt_ids = std::move(prompt_ids);
  input.max_new_tokens = max_new_tokens;
  input.sampling = sampling;
  input.ignore_end_of_generation = ignore_end_of_generation;
  input.checkpoint_position = checkpoint_position;
  const Tokenizer* tokenizer = text_unavailable_.ok() ? &**tokenizer_ : nullptr;
  auto sink = [&](const GeneratedToken& token) {
    v1::GenerateResponse piece;
    if (tokenizer != nullptr) piece.set_text(token.text);
    piece.add_token_ids(token.id);
    piece.set_token_latency_ms(token.latency_ms);
    return writer->Write(piece) ? SinkAction::kContinue : SinkAction::kClientGone;
  };
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<GenerationOutcome> outcome = RunGenerationCall(
      tokenizer, scheduler_, limits_, std::move(input), sink,
      [context] { return context->IsCancelled(); });
  if (!outcome.ok()) {
    RecordGrpcRequest(outcome.status(), start);
    return ToGrpc(outcome.status());
  }
  v1::GenerateResponse last;
  if (tokenizer != nullptr) last.set_text(outcome->tail_text);
  *last.mutable_final_stats() = outcome->stats;
  writer->Write(last);
  RecordGrpcRequest(absl::OkStatus(), start);
  if (metrics_ != nullptr) {
    metrics_->AddTokens(static_cast<uint64_t>(outcome->stats.prompt_tokens()),
                        static_cast<uint64_t>(outcome->stats.generated_tokens()));
  }
  return grpc::Status::OK;
}

void MoetierService::RecordGrpcRequest(const absl::Status& status,
                                       std::chrono::steady_clock::time_point start) {
  if (metrics_ == nullptr) return;
  RequestOutcome outcome = RequestOutcome::kError;
  // A request no context holds is the caller's to fix, not an overload.
  const bool never_fits = status.GetPayload(kContextTooLongPayload).has_value();
  switch (never_fits ? absl::StatusCode::kInvalidArgument : status.code()) {
    case absl::StatusCode::kOk: outcome = RequestOutcome::kOk; break;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: outcome = RequestOutcome::kInvalid; break;
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable: outcome = RequestOutcome::kRejected; break;
    case absl::StatusCode::kCancelled: outcome = RequestOutcome::kCancelled; break;
    default: break;
  }
  metrics_->RecordRequest(
      "grpc", outcome,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

grpc::Status MoetierService::Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                                   v1::ScoreResponse* response) {
  if (request->token_ids_size() == 0) return Invalid("token_ids is empty");
  if (static_cast<uint32_t>(request->token_ids_size()) > limits_.max_score_tokens) {
    return Invalid(absl::StrFormat("%d token ids; the limit is max_score_tokens=%d",
                                   request->token_ids_size(), limits_.max_score_tokens));
  }
  if (grpc::Status s = CheckTokenIds(request->token_ids(), "token_ids"); !s.ok()) return s;
  control_v1::WorkerRequest work;
  *work.mutable_score()->mutable_token_ids() = request->token_ids();
  absl::StatusOr<std::shared_ptr<RequestJob>> job = scheduler_->Submit(std::move(work));
  if (!job.ok()) return ToGrpc(job.status());
  std::string* bytes = response->mutable_logits_f32le();
  while (true) {
    if (context->IsCancelled()) {
      scheduler_->Cancel(*job);
      return grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled");
    }
    absl::StatusOr<std::optional<control_v1::WorkerReply>> next = (*job)->Next(kCancelPollMs);
    if (!next.ok()) return ToGrpc(next.status());
    if (!next->has_value()) continue;
    const control_v1::WorkerReply& reply = **next;
    if (reply.has_logits()) {
      const control_v1::LogitsChunk& chunk = reply.logits();
      if (chunk.first_float() * sizeof(float) != bytes->size()) {
        scheduler_->Cancel(*job);
        return grpc::Status(grpc::StatusCode::INTERNAL,
                            "the worker sent logits out of order");
      }
      response->set_n_vocab(chunk.n_vocab());
      bytes->append(chunk.floats_f32le());
      continue;
    }
    if (!reply.has_done()) continue;
    const control_v1::DoneReply& done = reply.done();
    const absl::StatusOr<StopReason> stop = StopOfDone(done);
    if (!stop.ok()) return ToGrpc(stop.status());
    if (*stop == StopReason::kError) {
      return grpc::Status(static_cast<grpc::StatusCode>(done.error_code()),
                          done.error_message());
    }
    if (*stop == StopReason::kCancelled) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled");
    }
    const uint64_t want =
        uint64_t{sizeof(float)} * response->n_vocab() * request->token_ids_size();
    if (bytes->size() != want) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrFormat("the worker sent %d bytes of logits, expected %d",
                                          bytes->size(), want));
    }
    return grpc::Status::OK;
  }
}

grpc::Status MoetierService::Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* request,
                                      v1::TokenizeResponse* response) {
  if (grpc::Status s = NeedTokenizer(); !s.ok()) return s;
  if (request->text().size() > limits_.max_prompt_bytes) {
    return Invalid(absl::StrFormat("the text is %d bytes; the limit is max_prompt_bytes=%d",
                                   request->text().size(), limits_.max_prompt_bytes));
  }
  absl::StatusOr<std::vector<int32_t>> ids =
      (*tokenizer_)->Encode(request->text(), request->parse_special_tokens(), true);
  if (!ids.ok()) return ToGrpc(ids.status());
  response->mutable_token_ids()->Add(ids->begin(), ids->end());
  return grpc::Status::OK;
}

grpc::Status MoetierService::Detokenize(grpc::ServerContext*,
                                        const v1::DetokenizeRequest* request,
                                        v1::DetokenizeResponse* response) {
  if (grpc::Status s = NeedTokenizer(); !s.ok()) return s;
  if (uint64_t{4} * request->token_ids_size() > limits_.max_prompt_bytes) {
    return Invalid(absl::StrFormat("%d token ids; the limit is max_prompt_bytes=%d (4 per id)",
                                   request->token_ids_size(), limits_.max_prompt_bytes));
  }
  if (grpc::Status s = CheckTokenIds(request->token_ids(), "token_ids"); !s.ok()) return s;
  const std::vector<int32_t> ids(request->token_ids().begin(), request->token_ids().end());
  absl::StatusOr<std::string> text =
      (*tokenizer_)->Detokenize(ids, request->render_special_tokens());
  if (!text.ok()) return ToGrpc(text.status());
  response->set_text(SanitizeUtf8(*text));
  return grpc::Status::OK;
}

grpc::Status MoetierService::GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                                       v1::Status* response) {
  *response = reporter_->Build();
  return grpc::Status::OK;
}

grpc::Status MoetierService::WatchStatus(grpc::ServerContext* context,
                                         const v1::WatchStatusRequest* request,
                                         grpc::ServerWriter<v1::Status>* writer) {
  const uint32_t interval_ms =
      request->interval_ms() == 0 ? 1000
                                  : std::max(request->interval_ms(), limits_.min_watch_interval_ms);
  while (!context->IsCancelled()) {
    if (!writer->Write(reporter_->Build())) break;
    // Sleep in short steps so a cancelled watch ends promptly.
    for (uint32_t slept = 0; slept < interval_ms && !context->IsCancelled(); slept += 20) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<uint32_t>(20, interval_ms)));
    }
  }
  return grpc::Status::OK;
}

grpc::Status MoetierService::SetBudget(grpc::ServerContext* context,
                                       const v1::SetBudgetRequest* request,
                                       v1::SetBudgetResponse* response) {
  absl::StatusOr<v1::SetBudgetResponse> set =
      ApplyBudget(*request, [context] { return context->IsCancelled(); });
  if (!set.ok()) return ToGrpc(set.status());
  *response = *set;
  return grpc::Status::OK;
}

absl::StatusOr<v1::SetBudgetResponse> MoetierService::ApplyBudget(
    const v1::SetBudgetRequest& request, const std::function<bool()>& cancelled) {
  bool known = false;
  for (const std::string& d : devices_) known = known || d == request.device();
  if (!known) {
    return absl::NotFoundError(absl::StrFormat("no worker runs on device '%s'", request.device()));
  }
  if (request.expert_cache_mib() > kMaxExpertCacheMib) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "expert_cache_mib %d is above %d MiB", request.expert_cache_mib(), kMaxExpertCacheMib));
  }
  // The worker resizes between two requests: the resize waits in the queue
  // like any request, behind those before it.
  control_v1::WorkerRequest work;
  work.mutable_resize_expert_cache()->set_pool_bytes(request.expert_cache_mib() << 20);
  absl::StatusOr<std::shared_ptr<RequestJob>> job =
      scheduler_->SubmitTo(request.device(), std::move(work));
  if (!job.ok()) return job.status();
  while (true) {
    if (cancelled()) {
      scheduler_->Cancel(*job);
      return absl::CancelledError("the call was cancelled");
    }
    absl::StatusOr<std::optional<control_v1::WorkerReply>> next = (*job)->Next(kCancelPollMs);
    if (!next.ok()) return next.status();
    if (!next->has_value() || !(*next)->has_done()) continue;
    const control_v1::DoneReply& done = (*next)->done();
    const absl::StatusOr<StopReason> stop = StopOfDone(done);
    if (!stop.ok()) return stop.status();
    if (*stop == StopReason::kError) {
      return absl::Status(static_cast<absl::StatusCode>(done.error_code()),
                          absl::StrFormat("device '%s': %s", request.device(),
                                          done.error_message()));
    }
    if (*stop == StopReason::kCancelled) return absl::CancelledError("the call was cancelled");
    v1::SetBudgetResponse response;
    response.set_expert_cache_bytes(done.expert_cache_bytes());
    response.set_expert_cache_mib(done.expert_cache_bytes() >> 20);
    return response;
  }
}

}  // namespace moetier
