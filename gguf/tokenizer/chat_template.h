// Chat prompt rendering (SPEC.md §4.7). No Jinja interpreter: the model's
// tokenizer.chat_template is inspected only to recognise which template
// family it is, and that family is rendered natively:
//  - ChatML and its Qwen variants, recognised by their markers;
//  - the Mistral-Instruct [INST] templates of Mixtral-8x7B-Instruct-v0.1 and
//    Mistral-7B-Instruct-v0.1/v0.2, and the Tulu template of AllenAI's
//    instruct models (OLMoE-1B-7B-0924-Instruct among them), recognised by
//    their exact text up to layout (CanonicalTemplateText).
// The rendered prompt is what llama.cpp's server hands its tokenizer: the
// template's output, less a leading bos_token when the tokenizer adds bos
// itself (and a trailing eos_token when it adds eos), so that tokenizing it
// with add_special gives one bos, not two. Tokenize it with special tokens
// parsed.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gguf/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace moetier {

// A function call an assistant turn made (OpenAI's tool_calls[i], with its
// "function" object flattened).
struct ChatToolCall {
  std::string id;
  std::string name;  // required
  // Normally a JSON object. A string (OpenAI sends arguments as JSON text)
  // is what the template makes of one: Qwen3 pastes it as it is, Qwen3.5
  // refuses it (its template iterates the arguments as a mapping), so
  // callers parse it into an object first.
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

// One turn. Fields past `content` are for the kQwen3 / kQwen35 styles; left
// at their defaults they change nothing. The content of a Qwen3.5 turn may
// come as OpenAI content parts: their text, concatenated, is what its
// template renders (it refuses image and video parts), so callers join the
// text parts into `content`.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool" (a tool's result)
  std::string content;
  // An assistant turn's thinking. When absent, the Qwen templates take a
  // "<think>...</think>" prefix of `content` as the thinking instead.
  std::optional<std::string> reasoning_content = {};
  std::vector<ChatToolCall> tool_calls = {};  // assistant turns
  // A tool result's call id and function name: kept for callers; the Qwen
  // templates render neither.
  std::string tool_call_id = {};
  std::string name = {};
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
  // Qwen1.5, Qwen2 and Qwen2.5: ChatML with a default system turn when none
  // is given, whose text the template hard-codes (Qwen2.5's unless
  // detected from a template).
  kQwen2,
  // Mixtral-8x7B-Instruct-v0.1 and Mistral-7B-Instruct-v0.2 as first
  // published: bos, then "[INST] {user} [/INST]" and "{assistant}</s>" for
  // turns that alternate user, assistant, ... starting with the user; no
  // system role; no generation prompt (the text ends with [/INST]).
  kMistralInstruct,
  // Mistral-7B-Instruct-v0.1 as first published: the same with a space
  // after each "</s>".
  kMistralInstructSpaced,
  // mistral-common's "v1" template, which Mistral-7B-Instruct-v0.2 (and,
  // by Mistral's table, Mixtral-8x7B-Instruct-v0.1) carry now: bos, then
  // " [INST] {user} [/INST]" and " {assistant}</s>"; an optional first
  // system message goes into the first user turn as "{system}\n\n{user}".
  kMistralV1,
  // Tulu 3's template, which OLMoE-1B-7B-0924-Instruct carries: "<|system|>\n{s}\n",
  // "<|user|>\n{u}\n", "<|assistant|>\n{a}</s>\n" (eos_token; no "\n" after
  // the last message), generation prompt "<|assistant|>\n" after the last
  // message whatever its role.
  kTulu,
  // The same after a leading bos_token (OLMo 2's variant).
  kTuluBos,
};

// "chatml", "qwen3", "mistral-instruct", ...: for logs and errors.
std::string_view ChatTemplateStyleName(ChatTemplateStyle style);

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  bool enable_thinking = true;  // kQwen3 and kQwen35 only
  // OpenAI tool objects ({"type": "function", "function": {...}}), listed in
  // the system turn as the template prints them (tojson). kQwen3 and
  // kQwen35 only.
  std::vector<nlohmann::ordered_json> tools = {};
};

// The texts a template's bos_token and eos_token stand for, and whether the
// tokenizer adds bos / eos itself (tokenizer.ggml.add_bos_token /
// add_eos_token), as llama.cpp's server takes them from the vocabulary.
struct ChatSpecialTokens {
  std::string bos_token;
  std::string eos_token;
  bool add_bos = false;
  bool add_eos = false;
};

// Qwen2.5's default system message.
inline constexpr std::string_view kQwen2DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

class ChatTemplate {
 public:
  // A style with its usual special tokens: "<s>", "</s>" and add_bos for the
  // Mistral styles (SentencePiece vocabularies), eos "<|endoftext|>" for
  // Tulu (OLMoE's), none for ChatML.
  explicit ChatTemplate(ChatTemplateStyle style);
  ChatTemplate(ChatTemplateStyle style, ChatSpecialTokens tokens);

  // Recognises the template: first the exact templates of the Mistral and
  // Tulu styles; then a ChatML-like template (it must contain both
  // "<|im_start|>" and "<|im_end|>"): an "enable_thinking" switch selects
  // kQwen3; else a hard-coded system turn (a string literal
  // "<|im_start|>system\n<text><|im_end|>", as Qwen1.5, Qwen2 and Qwen2.5
  // write their default system message) kQwen2 with that text, Jinja's
  // escapes decoded; anything else kChatMl.
  // (Qwen3.5 is not told apart from Qwen3 by its text; choose kQwen35
  // explicitly for it.) Other templates fail with "unsupported chat
  // template" naming the family found where it is recognisable. The
  // one-argument form takes the style's usual special tokens.
  static absl::StatusOr<ChatTemplate> Detect(std::string_view template_text);
  static absl::StatusOr<ChatTemplate> Detect(std::string_view template_text,
                                             ChatSpecialTokens tokens);
  // Detect on the model's tokenizer.chat_template with the tokenizer's
  // special tokens (their text as llama.cpp's token_to_piece with specials
  // renders it), taking a thinking template of a qwen35-pre-tokenizer model
  // as kQwen35.
  static absl::StatusOr<ChatTemplate> ForTokenizer(const Tokenizer& tokenizer);

  ChatTemplateStyle style() const { return style_; }
  const ChatSpecialTokens& special_tokens() const { return tokens_; }
  // kQwen2: the system message rendered when the chat has none (Qwen2.5's
  // unless detected from a template); empty for the other styles.
  const std::string& default_system() const { return default_system_; }

  // Renders the prompt. Roles must be system, user or assistant, and tool
  // for kQwen3 and kQwen35; there must be at least one message. Tools,
  // tool calls and tool results are for kQwen3 and kQwen35 only: other
  // styles refuse them (INVALID_ARGUMENT naming the style). The Qwen styles
  // render as their templates do: tool calls and results, the thinking of
  // assistant turns kept only after the last user query. Every style fails,
  // with its template's own words, where the template raises an exception:
  // the Mistral styles on roles that do not alternate user/assistant from
  // the first (non-system) message and on a system message they do not
  // take; kQwen35 on a system message after the first, a chat without a
  // user query, tool-call arguments given as a string.
  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     const ChatRenderOptions& options) const;

 private:
  ChatTemplateStyle style_;
  ChatSpecialTokens tokens_;
  std::string default_system_;
};

}  // namespace moetier
