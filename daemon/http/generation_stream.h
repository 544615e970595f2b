// One HTTP generation from checked request to the last event, whatever the
// API shape: renders the prompt (chat routes), starts the generation call
// (so refusals are answered before a stream opens), then runs it, passing
// the text through the stop strings and the chat output parser and handing
// each piece to the shape's ResponseEvents. OpenAI chat and completions and
// Anthropic messages differ only in their ResponseEvents.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "frontdoor/generation_call.h"
#include "frontdoor/stop_strings.h"
#include "http/api_error.h"
#include "http/http_model.h"
#include "http/generation_stream_types.h"
#include "http/openai_request.h"

namespace moetier {

class ResponseEvents {
 public:
  virtual ~ResponseEvents() = default;
  // Before anything else, with the prompt's length in tokens.
  virtual void OnStart(int32_t /*prompt_tokens*/) {}
  // False when the client can no longer be written to.
  virtual bool OnPiece(const OutputPiece& piece, const std::vector<TokenLogprobEntry>& logprobs) = 0;
  virtual void OnEnd(const GenerationSummary& summary) = 0;
  // The generation failed after it started (a worker lost mid-way).
  virtual void OnError(const HttpError& error) = 0;
};

class OutputSplitter;
class PreparedGeneration;

// Renders and starts; a 4xx/5xx HttpError when the request cannot be taken.
// `chat`: the request's messages go through the chat template; else its
// prompt (or prompt ids) is used as it is.
std::variant<std::unique_ptr<PreparedGeneration>, HttpError> PrepareGeneration(
    const HttpModel& model, const GenerationRequest& request, bool chat);

class PreparedGeneration {
 public:
  ~PreparedGeneration();
  // Runs to the end, calling `events`; CANCELLED when the client left or
  // the server is stopping (polled via `client_gone`). Returns the outcome
  // for the metrics.
  RequestOutcome Run(ResponseEvents& events, const std::function<bool()>& client_gone);

  std::string model_id() const { return model_->model_id; }

 private:
  friend std::variant<std::unique_ptr<PreparedGeneration>, HttpError> PrepareGeneration(
      const HttpModel&, const GenerationRequest&, bool);
  PreparedGeneration() = default;

  const HttpModel* model_ = nullptr;
  std::unique_ptr<GenerationCall> call_;
  std::optional<StopStringMatcher> stop_;
  std::unique_ptr<OutputSplitter> splitter_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace moetier
