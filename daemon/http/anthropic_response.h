// Anthropic's Messages API response: one message object, or its event
// stream (message_start, content_block_start / _delta / _stop per block of
// thinking, text or tool_use, message_delta with the stop reason and usage,
// message_stop).
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

struct AnthropicResponseInfo {
  std::string id;  // "msg_..."
  std::string model;
};

std::string NewMessageId();

class AnthropicCollector : public ResponseEvents {
 public:
  explicit AnthropicCollector(AnthropicResponseInfo info) : info_(std::move(info)) {}
  bool OnPiece(const OutputPiece& piece, const std::vector<TokenLogprobEntry>& logprobs) override;
  void OnEnd(const GenerationSummary& summary) override;
  void OnError(const HttpError& error) override { error_ = error; }

  bool failed() const { return error_.has_value(); }
  const HttpError& error() const { return *error_; }
  const nlohmann::ordered_json& json() const { return body_; }

 private:
  AnthropicResponseInfo info_;
  std::string thinking_, text_;
  CollectedToolCalls calls_;
  std::optional<HttpError> error_;
  nlohmann::ordered_json body_;
};

class AnthropicStreamer : public ResponseEvents {
 public:
  AnthropicStreamer(AnthropicResponseInfo info, std::function<bool(std::string_view)> write)
      : info_(std::move(info)), write_(std::move(write)) {}
  void OnStart(int32_t prompt_tokens) override;
  bool OnPiece(const OutputPiece& piece, const std::vector<TokenLogprobEntry>& logprobs) override;
  void OnEnd(const GenerationSummary& summary) override;
  void OnError(const HttpError& error) override;

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };
  bool Event(std::string_view type, const nlohmann::ordered_json& data);
  // Closes the open block when it is not `kind` (or always, for tool_use,
  // whose every call is a block of its own); opens one of `kind`.
  bool Enter(Block kind, const ToolCallPiece* call);
  bool CloseBlock();

  AnthropicResponseInfo info_;
  std::function<bool(std::string_view)> write_;
  int32_t prompt_tokens_ = 0;
  Block open_ = Block::kNone;
  int index_ = -1;
  bool ok_ = true;
};

}  // namespace moetier
