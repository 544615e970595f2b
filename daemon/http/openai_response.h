// The OpenAI response shapes for chat completions and (legacy) completions:
// one JSON object for a whole answer, or a server-sent-event stream of
// chunks ending in "data: [DONE]".
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/api_error.h"
#include "http/generation_stream.h"

namespace moetier {

enum class OpenAiRoute { kChat, kCompletion };

struct OpenAiResponseInfo {
  OpenAiRoute route = OpenAiRoute::kChat;
  std::string id;  // "chatcmpl-..." / "cmpl-..."
  std::string model;
  int64_t created_unix_s = 0;
  bool logprobs = false;  // the request asked for them
  bool include_usage = false;  // streams: a last chunk with usage
};

// A fresh id with the route's prefix.
std::string NewResponseId(OpenAiRoute route);

// Collects a whole answer; json() is the response body once OnEnd ran.
class OpenAiCollector : public ResponseEvents {
 public:
  explicit OpenAiCollector(OpenAiResponseInfo info) : info_(std::move(info)) {}
  bool OnPiece(const OutputPiece& piece, const std::vector<TokenLogprobEntry>& logprobs) override;
  void OnEnd(const GenerationSummary& summary) override;
  void OnError(const HttpError& error) override { error_ = error; }

  bool failed() const { return error_.has_value(); }
  const HttpError& error() const { return *error_; }
  const nlohmann::ordered_json& json() const { return body_; }

 private:
  OpenAiResponseInfo info_;
  std::string reasoning_, content_;
  CollectedToolCalls calls_;
  std::vector<TokenLogprobEntry> logprobs_;
  std::optional<HttpError> error_;
  nlohmann::ordered_json body_;
};

// Writes chunks as they come; `write` returns false when the client is gone.
class OpenAiStreamer : public ResponseEvents {
 public:
  OpenAiStreamer(OpenAiResponseInfo info, std::function<bool(std::string_view)> write)
      : info_(std::move(info)), write_(std::move(write)) {}
  bool OnPiece(const OutputPiece& piece, const std::vector<TokenLogprobEntry>& logprobs) override;
  void OnEnd(const GenerationSummary& summary) override;
  void OnError(const HttpError& error) override;

 private:
  nlohmann::ordered_json Chunk() const;
  bool Send(const nlohmann::ordered_json& chunk);

  OpenAiResponseInfo info_;
  std::function<bool(std::string_view)> write_;
  bool role_sent_ = false;
};

// "data: <json>\n\n"
std::string SseData(const nlohmann::ordered_json& json);
std::string_view FinishReasonName(FinishReason finish);
nlohmann::ordered_json UsageJson(const GenerationSummary& summary);

}  // namespace moetier
