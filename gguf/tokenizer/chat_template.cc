#include "gguf/tokenizer/chat_template.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gguf/tokenizer/unicode.h"

namespace moetier {
namespace {

absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool Contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

// A name for a template we do not render, so the error says what was found.
std::string DescribeTemplate(std::string_view text) {
  struct Family {
    std::string_view marker;
    std::string_view name;
  };
  static constexpr Family kFamilies[] = {
      {"<|start_header_id|>", "Llama 3 (<|start_header_id|>)"},
      {"<|channel|>", "gpt-oss harmony (<|channel|>)"},
      {"<\xEF\xBD\x9C"
       "User\xEF\xBD\x9C>",
       "DeepSeek (<\xEF\xBD\x9C"
       "User\xEF\xBD\x9C>)"},
      {"[INST]", "Mistral/Llama 2 ([INST])"},
      {"<start_of_turn>", "Gemma (<start_of_turn>)"},
      {"<|user|>", "Zephyr/Phi-3 style (<|user|>)"},
      {"<|im_start|>", "ChatML start marker <|im_start|> without <|im_end|>"},
  };
  for (const Family& family : kFamilies) {
    if (Contains(text, family.marker)) return std::string(family.name);
  }
  constexpr size_t kShown = 60;
  std::string shown = SanitizeUtf8(text.substr(0, kShown));
  for (char& c : shown) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return absl::StrCat("a template starting \"", shown, text.size() > kShown ? "...\"" : "\"");
}

void AppendTurn(std::string_view role, std::string_view content, std::string* out) {
  absl::StrAppend(out, "<|im_start|>", Sv(role), "\n", Sv(content), "<|im_end|>\n");
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Detect(std::string_view template_text) {
  if (template_text.empty()) {
    return absl::UnimplementedError(
        "unsupported chat template: the model has no tokenizer.chat_template");
  }
  if (!Contains(template_text, "<|im_start|>") || !Contains(template_text, "<|im_end|>")) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported chat template: expected ChatML (<|im_start|> ... <|im_end|>), "
                     "found ",
                     DescribeTemplate(template_text)));
  }
  if (Contains(template_text, kQwen2DefaultSystem)) return ChatTemplate(ChatTemplateStyle::kQwen2);
  if (Contains(template_text, "enable_thinking")) return ChatTemplate(ChatTemplateStyle::kQwen3);
  return ChatTemplate(ChatTemplateStyle::kChatMl);
}

absl::StatusOr<ChatTemplate> ChatTemplate::ForTokenizer(const Tokenizer& tokenizer) {
  absl::StatusOr<ChatTemplate> detected = Detect(tokenizer.chat_template());
  if (detected.ok() && detected->style() == ChatTemplateStyle::kQwen3 &&
      tokenizer.pre_tokenizer() == PreTokenizer::kQwen35) {
    return ChatTemplate(ChatTemplateStyle::kQwen35);
  }
  return detected;
}

absl::StatusOr<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                                 const ChatRenderOptions& options) const {
  if (messages.empty()) return absl::InvalidArgumentError("the chat has no messages");
  size_t bytes = 64;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return absl::InvalidArgumentError(
          absl::StrCat("message ", i, " has role \"", SanitizeUtf8(role),
                       "\"; supported roles are system, user and assistant"));
    }
    bytes += role.size() + messages[i].content.size() + 32;
  }

  std::string out;
  out.reserve(bytes + kQwen2DefaultSystem.size());
  if (style_ == ChatTemplateStyle::kQwen2 && messages.front().role != "system") {
    AppendTurn("system", kQwen2DefaultSystem, &out);
  }
  for (const ChatMessage& message : messages) AppendTurn(message.role, message.content, &out);
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    switch (style_) {
      case ChatTemplateStyle::kQwen3:
        if (!options.enable_thinking) out += "<think>\n\n</think>\n\n";
        break;
      case ChatTemplateStyle::kQwen35:
        out += options.enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n";
        break;
      case ChatTemplateStyle::kChatMl:
      case ChatTemplateStyle::kQwen2:
        break;
    }
  }
  return out;
}

}  // namespace moetier
