// Chat prompt rendering for ChatML-family templates (SPEC.md §4.7). No Jinja
// interpreter: the model's tokenizer.chat_template is inspected only to
// recognise which ChatML variant it is, and the variant is rendered natively.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "gguf/tokenizer/tokenizer.h"

namespace moetier {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatTemplateStyle {
  // <|im_start|>{role}\n{content}<|im_end|>\n per message, then
  // <|im_start|>assistant\n (llama.cpp's built-in "chatml").
  kChatMl,
  // Qwen3: ChatML; enable_thinking = false adds an empty think block after
  // the generation prompt.
  kQwen3,
  // Qwen3.5/3.6: the generation prompt opens a think block by default.
  kQwen35,
  // Qwen2/2.5: ChatML with a default system turn when none is given.
  kQwen2,
};

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  bool enable_thinking = true;  // kQwen3 and kQwen35 only
};

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatTemplateStyle style) : style_(style) {}

  // Recognises a ChatML-like template (it must contain both "<|im_start|>"
  // and "<|im_end|>"): Qwen2's default system text selects kQwen2, an
  // "enable_thinking" switch kQwen3, anything else kChatMl. (Qwen3.5 is not
  // told apart from Qwen3 by its text; choose kQwen35 explicitly for it.)
  // Other templates fail with "unsupported chat template" naming the family
  // found where it is recognisable.
  static absl::StatusOr<ChatTemplate> Detect(std::string_view template_text);
  // Detect on the model's tokenizer.chat_template, taking a thinking
  // template of a qwen35-pre-tokenizer model as kQwen35.
  static absl::StatusOr<ChatTemplate> ForTokenizer(const Tokenizer& tokenizer);

  ChatTemplateStyle style() const { return style_; }

  // Renders the prompt. Roles must be system, user or assistant; there must
  // be at least one message.
  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     const ChatRenderOptions& options) const;

 private:
  ChatTemplateStyle style_;
};

// Qwen2's default system message.
inline constexpr std::string_view kQwen2DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

}  // namespace moetier
