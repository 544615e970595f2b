// Renders conversations through moetier's native chat templates, for the
// Jinja oracle (tests/interop/check_chat_templates.py). Reads one JSON
// request on stdin:
//   {"gguf": "M.gguf"}                         the model's tokenizer, as the daemon reads it
//   or {"template": "...", "bos_token": "<s>", "eos_token": "</s>",
//       "add_bos": true, "add_eos": false, "pre_tokenizer": "qwen2"}
//                                              a tokenizer with just these special tokens
//   plus "cases": [{"messages": [{"role": "user", "content": "Hi"}],
//                   "add_generation_prompt": true, "enable_thinking": true}, ...]
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
#include "tests/tokenizer/json_fixture.h"

namespace moetier {
namespace {

using testing::JsonValue;

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

const std::string& StringField(const JsonValue& object, std::string_view key) {
  static const std::string kEmpty;
  const JsonValue* v = object.Find(key);
  return v != nullptr && v->kind == JsonValue::Kind::kString ? v->string : kEmpty;
}

bool BoolField(const JsonValue& object, std::string_view key, bool fallback) {
  const JsonValue* v = object.Find(key);
  return v != nullptr && v->kind == JsonValue::Kind::kBool ? v->boolean : fallback;
}

// A vocabulary of filler tokens plus the given bos and eos (control tokens).
absl::StatusOr<Tokenizer> TokenizerFor(const JsonValue& request) {
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
  const std::string& pre = StringField(request, "pre_tokenizer");
  if (!pre.empty()) {
    absl::StatusOr<PreTokenizer> p = PreTokenizerFromName(pre);
    if (!p.ok()) return p.status();
    config.pre_tokenizer = *p;
  }
  return Tokenizer::Create(std::move(config));
}

absl::StatusOr<Tokenizer> LoadTokenizer(const JsonValue& request) {
  const std::string& gguf = StringField(request, "gguf");
  if (gguf.empty()) return TokenizerFor(request);
  absl::StatusOr<std::unique_ptr<GgufModel>> model = GgufModel::Open(gguf);
  if (!model.ok()) return model.status();
  return Tokenizer::FromGgufMetadata((*model)->metadata());
}

int Run() {
  const std::string input((std::istreambuf_iterator<char>(std::cin)),
                          std::istreambuf_iterator<char>());
  absl::StatusOr<JsonValue> request = testing::JsonParser(input).Parse();
  if (!request.ok()) {
    std::fprintf(stderr, "bad request: %s\n", std::string(request.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<Tokenizer> tokenizer = LoadTokenizer(*request);
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
  const JsonValue* cases = request->Find("cases");
  for (size_t c = 0; cases != nullptr && c < cases->array.size(); ++c) {
    const JsonValue& one = cases->array[c];
    std::vector<ChatMessage> messages;
    if (const JsonValue* m = one.Find("messages"); m != nullptr) {
      for (const JsonValue& message : m->array) {
        messages.push_back({StringField(message, "role"), StringField(message, "content")});
      }
    }
    const ChatRenderOptions options{
        .add_generation_prompt = BoolField(one, "add_generation_prompt", true),
        .enable_thinking = BoolField(one, "enable_thinking", true)};
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
