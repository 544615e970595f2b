// The moetier.v1.Moetier gRPC service: validates and bounds every request,
// tokenizes, hands the work to the scheduler and streams the worker's
// replies back as text. Cancelling a call (or the client disconnecting)
// cancels its job, which frees the worker's sequence.
//
// This is where an API request's values are checked, once: token ids
// against the model's n_vocab (prompt_token_ids, Score's and Detokenize's
// ids; the tokenizer's own ids by its vocabulary size, at construction),
// max_new_tokens and the byte limits, and the sampling settings, whose
// defaults are filled in here. Whether the tokens fit a worker's context is
// the scheduler's check, which knows every worker's. Past this point the
// values travel as they are.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "config/daemon_config.h"
#include "frontdoor/generation_call.h"
#include "frontdoor/status_report.h"
#include "moetier/v1/moetier.grpc.pb.h"
#include "request/sampling_params.h"
#include "scheduler/request_scheduler.h"
#include "stats/request_metrics.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/tokenizer.h"

namespace moetier {

FrontDoorLimits FrontDoorLimitsFromConfig(const DaemonConfig& config);

// Why the model cannot handle text (no tokenizer, or one with ids beyond
// the model's n_vocab); OK when it can.
absl::Status WhyTextUnavailable(const absl::StatusOr<Tokenizer>& tokenizer, int32_t n_vocab);

class MoetierService final : public v1::Moetier::Service {
 public:
  // `tokenizer` and `chat_template` are the model's, or the error that says
  // why it has none: requests that need them then fail FAILED_PRECONDITION
  // with that message, while token-id requests still work (the same when
  // the tokenizer has more tokens than n_vocab). Pointers must outlive the
  // service; `reporter` may be null when GetStatus and WatchStatus are not
  // called.
  MoetierService(const absl::StatusOr<Tokenizer>* tokenizer,
                 absl::StatusOr<ChatTemplate> chat_template, int32_t n_vocab,
                 RequestScheduler* scheduler, StatusReporter* reporter,
                 std::vector<std::string> devices, FrontDoorLimits limits);

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Chat(grpc::ServerContext* context, const v1::ChatRequest* request,
                    grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                     v1::ScoreResponse* response) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context, const v1::DetokenizeRequest* request,
                          v1::DetokenizeResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* context, const v1::GetStatusRequest* request,
                         v1::Status* response) override;
  grpc::Status WatchStatus(grpc::ServerContext* context, const v1::WatchStatusRequest* request,
                           grpc::ServerWriter<v1::Status>* writer) override;
  grpc::Status SetBudget(grpc::ServerContext* context, const v1::SetBudgetRequest* request,
                         v1::SetBudgetResponse* response) override;

  // Where generations are counted (transport "grpc"); null: nowhere.
  void set_metrics(RequestMetrics* metrics) { metrics_ = metrics; }

  // SetBudget for any transport: NOT_FOUND for a device no worker runs on,
  // INVALID_ARGUMENT above the limit, CANCELLED when `cancelled` turns true.
  absl::StatusOr<v1::SetBudgetResponse> ApplyBudget(const v1::SetBudgetRequest& request,
                                                    const std::function<bool()>& cancelled);

 private:
  grpc::Status RunGeneration(grpc::ServerContext* context, std::vector<int32_t> prompt_ids,
                             int32_t max_new_tokens, const v1::SamplingParams& sampling,
                             bool ignore_end_of_generation,
                             grpc::ServerWriter<v1::GenerateResponse>* writer,
                             int32_t checkpoint_position = 0);
  grpc::Status CheckTokenIds(const google::protobuf::RepeatedField<int32_t>& ids,
                             const char* what) const;

  void RecordGrpcRequest(const absl::Status& status, std::chrono::steady_clock::time_point start);

  // OK when the model has a usable tokenizer; else FAILED_PRECONDITION
  // saying why.
  grpc::Status NeedTokenizer() const;

  const absl::StatusOr<Tokenizer>* tokenizer_;
  int32_t n_vocab_;
  // Why text cannot be handled: no tokenizer, or one whose ids do not all
  // fit n_vocab_. OK when it can.
  absl::Status text_unavailable_;
  absl::StatusOr<ChatTemplate> chat_template_;
  RequestScheduler* scheduler_;
  StatusReporter* reporter_;
  std::vector<std::string> devices_;
  FrontDoorLimits limits_;
  RequestMetrics* metrics_ = nullptr;
};

// absl and gRPC share the canonical status codes.
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace moetier
