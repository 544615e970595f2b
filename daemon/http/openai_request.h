// The OpenAI-style request bodies moetierd accepts, read and checked once:
// /v1/chat/completions, /v1/completions and (in chat form) Anthropic's
// /v1/messages all become a GenerationRequest. Defaults are OpenAI's
// (temperature 1, top_p 1); fields the runtime cannot honour are refused
// by name rather than ignored, except where a client sends a neutral value
// (presence_penalty 0, n 1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/api_error.h"
#include "moetier/v1/moetier.pb.h"

namespace moetier {

struct ApiToolCall {
  std::string id;
  std::string name;
  // Normally an object; OpenAI clients send it as a JSON string, which is
  // parsed back here (a string that is not JSON stays a string).
  nlohmann::ordered_json arguments;
};

struct ApiMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
  std::string reasoning_content;  // an assistant turn's thinking, when the client kept it
  std::vector<ApiToolCall> tool_calls;
  std::string tool_call_id;  // role tool
  std::string name;
};

enum class ToolChoice { kAuto, kNone, kRequired };

// What every generation route asks for, after parsing.
struct GenerationRequest {
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // 0: the daemon's default.
  int32_t max_tokens = 0;
  // The name the client gave max_tokens under, for errors about its value.
  std::string max_tokens_field = "max_tokens";
  v1::SamplingParams sampling;
  std::vector<std::string> stop;
  // Unset: no logprobs; else the alternatives per token (0..20).
  std::optional<int32_t> top_logprobs;
  bool enable_thinking = true;

  // Chat routes.
  std::vector<ApiMessage> messages;
  std::vector<nlohmann::ordered_json> tools;  // OpenAI tool objects
  ToolChoice tool_choice = ToolChoice::kAuto;

  // /v1/completions.
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;  // used instead of prompt when set
};

// Parses a body into a JSON object; a 400 with the parser's position when
// it is not JSON, or not an object.
std::optional<HttpError> ParseJsonBody(const std::string& body, nlohmann::ordered_json* out);

// Each returns the request, or the 400 that names the first field at fault.
std::optional<HttpError> ReadChatCompletionRequest(const nlohmann::ordered_json& body,
                                                   GenerationRequest* out);
std::optional<HttpError> ReadCompletionRequest(const nlohmann::ordered_json& body,
                                               GenerationRequest* out);
// Anthropic's Messages API: system, messages with text / tool_use /
// tool_result / thinking blocks, tools with input_schema, stop_sequences.
std::optional<HttpError> ReadAnthropicMessagesRequest(const nlohmann::ordered_json& body,
                                                      GenerationRequest* out);

}  // namespace moetier
