// Renders conversations through moetier's native chat templates, for the
// Jinja oracle (tests/interop/check_chat_templates.py). Reads one JSON
// request on stdin:
//   {"gguf": "M.gguf"}                         the model's tokenizer, as the daemon reads it
//   or {"template": "...", "bos_token": "<s>", "eos_token": "</s>",
//       "add_bos": true, "add_eos": false, "pre_tokenizer": "qwen2"}
//                                              a tokenizer with just these special tokens
//   plus "cases": [{"messages": [{"role": "user", "content": "Hi"}],
//                   "add_generation_prompt": true, "enable_thinking": true,
//                   "tools": [{"type": "function", "function": {...}}]}, ...]
// Messages are OpenAI chat messages: "reasoning_content", "tool_calls":
// [{"id": ..., "type": "function", "function": {"name": ..., "arguments":
// {...} or "JSON text"}}], "tool_call_id" and "name" as the API takes them.
// and writes {"style": NAME, "results": [{"text": "..."} | {"error": "..."}]}
// or {"detect_error": "..."} on stdout. Both go through
// ChatTemplate::ForTokenizer, the daemon's path.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gguf/gguf_reader.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/pre_tokenizer.h"
#include "gguf/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace moetier {
namespace {

using Json = nlohmann::ordered_json;

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::string StringField(const Json& object, const char* key) {
  const auto v = object.find(key);
  return v != object.end() && v->is_string() ? v->get<std::string>() : std::string();
}

bool BoolField(const Json& object, const char* key, bool fallback) {
  const auto v = object.find(key);
  return v != object.end() && v->is_boolean() ? v->get<bool>() : fallback;
}

ChatToolCall ToolCallFrom(const Json& call) {
  const Json& function = call.contains("function") ? call["function"] : call;
  ChatToolCall out{.id = StringField(call, "id"), .name = StringField(function, "name")};
  if (function.contains("arguments")) out.arguments = function["arguments"];
  return out;
}

ChatMessage MessageFrom(const Json& message) {
  ChatMessage out{.role = StringField(message, "role"), .content = StringField(message, "content")};
  if (message.contains("reasoning_content") && message["reasoning_content"].is_string()) {
    out.reasoning_content = message["reasoning_content"].get<std::string>();
  }
  if (message.contains("tool_calls")) {
    for (const Json& call : message["tool_calls"]) out.tool_calls.push_back(ToolCallFrom(call));
  }
  out.tool_call_id = StringField(message, "tool_call_id");
  out.name = StringField(message, "name");
  return out;
}

// A vocabulary of filler tokens plus the given bos and eos (control tokens).
absl::StatusOr<Tokenizer> TokenizerFor(const Json& request) {
  TokenizerConfig config;
  for (int i = 0; i < 4; ++i) {
    config.tokens.push_back("t" + std::to_string(i));
    config.token_types.push_back(TokenType::kNormal);
  }
  auto add_special = [&](const std::string& text) -> int32_t {
    if (text.empty()) return kNoToken;
    for (size_t i = 0; i < config.tokens.size(); ++i) {
      if (config.tokens[i] == text) return static_cast<int32_t>(i);
    }
    config.tokens.push_back(text);
    config.token_types.push_back(TokenType::kControl);
    return static_cast<int32_t>(config.tokens.size() - 1);
  };
  config.bos_id = add_special(StringField(request, "bos_token"));
  config.eos_id = add_special(StringField(request, "eos_token"));
  config.add_bos = BoolField(request, "add_bos", false);
  config.add_eos = BoolField(request, "add_eos", false);
  config.chat_template = StringField(request, "template");
  const std::string pre = StringField(request, "pre_tokenizer");
  if (!pre.empty()) {
    absl::StatusOr<PreTokenizer> p = PreTokenizerFromName(pre);
    if (!p.ok()) return p.status();
    config.pre_tokenizer = *p;
  }
  return Tokenizer::Create(std::move(config));
}

absl::StatusOr<Tokenizer> LoadTokenizer(const Json& request) {
  const std::string gguf = StringField(request, "gguf");
  if (gguf.empty()) return TokenizerFor(request);
  absl::StatusOr<std::unique_ptr<GgufModel>> model = GgufModel::Open(gguf);
  if (!model.ok()) return model.status();
  return Tokenizer::FromGgufMetadata((*model)->metadata());
}

int Run() {
  const std::string input((std::istreambuf_iterator<char>(std::cin)),
                          std::istreambuf_iterator<char>());
  const Json request = Json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded() || !request.is_object()) {
    std::fprintf(stderr, "bad request: not a JSON object\n");
    return 2;
  }
  absl::StatusOr<Tokenizer> tokenizer = LoadTokenizer(request);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "tokenizer: %s\n", std::string(tokenizer.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::ForTokenizer(*tokenizer);
  if (!chat.ok()) {
    std::cout << "{\"detect_error\": " << JsonString(std::string(chat.status().message())) << "}\n";
    return 0;
  }
  std::string out = "{\"style\": " + JsonString(ChatTemplateStyleName(chat->style())) +
                    ", \"results\": [";
  const Json cases = request.value("cases", Json::array());
  for (size_t c = 0; c < cases.size(); ++c) {
    const Json& one = cases[c];
    std::vector<ChatMessage> messages;
    for (const Json& message : one.value("messages", Json::array())) {
      messages.push_back(MessageFrom(message));
    }
    ChatRenderOptions options{
        .add_generation_prompt = BoolField(one, "add_generation_prompt", true),
        .enable_thinking = BoolField(one, "enable_thinking", true)};
    for (const Json& tool : one.value("tools", Json::array())) options.tools.push_back(tool);
    absl::StatusOr<std::string> text = chat->Render(messages, options);
    if (c > 0) out += ", ";
    out += text.ok() ? "{\"text\": " + JsonString(*text) + "}"
                     : "{\"error\": " + JsonString(std::string(text.status().message())) + "}";
  }
  out += "]}\n";
  std::cout << out;
  return 0;
}

}  // namespace
}  // namespace moetier

int main() { return moetier::Run(); }
