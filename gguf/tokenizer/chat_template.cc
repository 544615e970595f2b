#include "gguf/tokenizer/chat_template.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gguf/tokenizer/chat_template_qwen.h"
#include "gguf/tokenizer/chat_template_text.h"
#include "gguf/tokenizer/unicode.h"

namespace moetier {
namespace {

absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool Contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

// --- the templates recognised by their text -----------------------------------

// mistralai/Mixtral-8x7B-Instruct-v0.1 as published (tokenizer_config.json,
// December 2023); Mistral-7B-Instruct-v0.2 shipped the same text.
constexpr std::string_view kMistralInstructText =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
    "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
    "message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}";

// mistralai/Mistral-7B-Instruct-v0.1 as published.
constexpr std::string_view kMistralInstructSpacedText =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
    "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
    "message['content'] + eos_token + ' ' }}{% else %}{{ raise_exception('Only user and "
    "assistant roles are supported!') }}{% endif %}{% endfor %}";

// mistral-common's "v1" template with its optional system message, as
// Mistral-7B-Instruct-v0.2 carries it now (llama.cpp's tests keep a copy).
constexpr std::string_view kMistralV1Text =
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "\n"
    "{{- bos_token }}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must "
    "alternate user/assistant/user/assistant/...') }}\n"
    "    {%- endif %}\n"
    "    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n"
    "            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
    "        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n"
    "        {{- ' ' + message['content'] + eos_token}}\n"
    "    {%- else %}\n"
    "        {{- raise_exception('Only user and assistant roles are supported, with the exception "
    "of an initial optional system message!') }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n";

// The Tulu 3 template (allenai/Llama-3.1-Tulu-3-8B, OLMoE-1B-7B-0924-Instruct).
constexpr std::string_view kTuluText =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\\n' + "
    "message['content'] + '\\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + "
    "message['content'] + '\\n' }}{% elif message['role'] == 'assistant' %}{% if not loop.last "
    "%}{{ '<|assistant|>\\n'  + message['content'] + eos_token + '\\n' }}{% else %}{{ "
    "'<|assistant|>\\n'  + message['content'] + eos_token }}{% endif %}{% endif %}{% if "
    "loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}";

struct KnownTemplate {
  ChatTemplateStyle style;
  std::string canonical;
};

const std::vector<KnownTemplate>& KnownTemplates() {
  static const std::vector<KnownTemplate>* known = [] {
    auto* table = new std::vector<KnownTemplate>;
    table->push_back({ChatTemplateStyle::kMistralInstruct,
                      CanonicalTemplateText(kMistralInstructText)});
    table->push_back({ChatTemplateStyle::kMistralInstructSpaced,
                      CanonicalTemplateText(kMistralInstructSpacedText)});
    table->push_back({ChatTemplateStyle::kMistralV1, CanonicalTemplateText(kMistralV1Text)});
    table->push_back({ChatTemplateStyle::kTulu, CanonicalTemplateText(kTuluText)});
    table->push_back({ChatTemplateStyle::kTuluBos,
                      CanonicalTemplateText(absl::StrCat("{{ bos_token }}", Sv(kTuluText)))});
    return table;
  }();
  return *known;
}

std::optional<ChatTemplateStyle> MatchKnownTemplate(std::string_view text) {
  const std::string canonical = CanonicalTemplateText(text);
  for (const KnownTemplate& known : KnownTemplates()) {
    if (known.canonical == canonical) return known.style;
  }
  return std::nullopt;
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
      {"[SYSTEM_PROMPT]", "Mistral v7 ([SYSTEM_PROMPT])"},
      {"[AVAILABLE_TOOLS]", "Mistral v3 with tools ([AVAILABLE_TOOLS])"},
      {"<<SYS>>", "Llama 2 chat (<<SYS>>)"},
      {"[INST]", "a Mistral/Llama 2 [INST] template other than those"},
      {"<start_of_turn>", "Gemma (<start_of_turn>)"},
      {"<|end|>", "Phi-3 (<|user|> ... <|end|>)"},
      {"<|user|>", "a Zephyr/Tulu style <|user|> template other than Tulu's"},
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

ChatSpecialTokens DefaultSpecialTokens(ChatTemplateStyle style) {
  switch (style) {
    case ChatTemplateStyle::kMistralInstruct:
    case ChatTemplateStyle::kMistralInstructSpaced:
    case ChatTemplateStyle::kMistralV1:
      return {.bos_token = "<s>", .eos_token = "</s>", .add_bos = true, .add_eos = false};
    case ChatTemplateStyle::kTulu:
    case ChatTemplateStyle::kTuluBos:
      return {.bos_token = "", .eos_token = "<|endoftext|>", .add_bos = false, .add_eos = false};
    case ChatTemplateStyle::kChatMl:
    case ChatTemplateStyle::kQwen3:
    case ChatTemplateStyle::kQwen35:
    case ChatTemplateStyle::kQwen2:
      break;
  }
  return {};
}

// The text of a system turn the template writes inside one string literal,
// "<|im_start|>system\n<text><|im_end|>": the default system message of
// Qwen1.5, Qwen2 and Qwen2.5, which their templates render when the chat has
// none. The literal's quote is the last one before it; Jinja's escapes in it
// are decoded (\n, \\, \', \"), and that quote before <|im_end|> ends it,
// so a turn built from the messages ('...system\n' + content +
// '<|im_end|>') is not one.
std::optional<std::string> HardCodedSystemTurn(std::string_view text) {
  constexpr std::string_view kOpen = "<|im_start|>system";
  constexpr std::string_view kClose = "<|im_end|>";
  for (size_t at = text.find(kOpen); at != std::string_view::npos; at = text.find(kOpen, at + 1)) {
    const size_t quote_at = text.substr(0, at).find_last_of("'\"");
    if (quote_at == std::string_view::npos) continue;
    const char quote = text[quote_at];
    std::string_view rest = text.substr(at + kOpen.size());
    if (rest.starts_with("\\n")) {
      rest.remove_prefix(2);
    } else if (rest.starts_with("\n")) {
      rest.remove_prefix(1);
    } else {
      continue;
    }
    std::string body;
    bool literal = true;
    while (literal && !rest.empty() && !rest.starts_with(kClose)) {
      const char c = rest.front();
      rest.remove_prefix(1);
      if (c == quote) {
        literal = false;
      } else if (c != '\\') {
        body += c;
      } else if (!rest.empty() && (rest.front() == 'n' || rest.front() == '\\' ||
                                   rest.front() == '\'' || rest.front() == '"')) {
        body += rest.front() == 'n' ? '\n' : rest.front();
        rest.remove_prefix(1);
      } else {
        literal = false;  // an escape this decoder does not know
      }
    }
    if (literal && !body.empty() && rest.starts_with(kClose)) return body;
  }
  return std::nullopt;
}

// --- rendering ---------------------------------------------------------------

void AppendChatMlTurn(std::string_view role, std::string_view content, std::string* out) {
  absl::StrAppend(out, "<|im_start|>", Sv(role), "\n", Sv(content), "<|im_end|>\n");
}

void RenderChatMl(ChatTemplateStyle style, std::string_view default_system,
                  std::span<const ChatMessage> messages, const ChatRenderOptions& options,
                  std::string* out) {
  if (style == ChatTemplateStyle::kQwen2 && messages.front().role != "system") {
    AppendChatMlTurn("system", default_system, out);
  }
  for (const ChatMessage& message : messages) AppendChatMlTurn(message.role, message.content, out);
  if (options.add_generation_prompt) *out += "<|im_start|>assistant\n";
}

bool TakesTools(ChatTemplateStyle style) {
  return style == ChatTemplateStyle::kQwen3 || style == ChatTemplateStyle::kQwen35;
}

// Roles, tools and tool calls the style can render; the bytes the prompt
// will take about.
absl::StatusOr<size_t> CheckMessages(ChatTemplateStyle style, std::span<const ChatMessage> messages,
                                     const ChatRenderOptions& options) {
  const bool tools_ok = TakesTools(style);
  const auto no_tools = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(what), ": the ", Sv(ChatTemplateStyleName(style)),
                     " chat template does not support tools (the qwen3 and qwen3.5 templates do)"));
  };
  if (!tools_ok && !options.tools.empty()) return no_tools("tools are given");
  size_t bytes = 64;
  for (size_t t = 0; t < options.tools.size(); ++t) {
    if (!options.tools[t].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tool ", t, " is not a JSON object (an OpenAI tool: {\"type\": "
                       "\"function\", \"function\": {...}})"));
    }
    bytes += 256;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    const std::string& role = message.role;
    if (role == "tool" && !tools_ok) return no_tools(absl::StrCat("message ", i, " has role tool"));
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return absl::InvalidArgumentError(absl::StrCat(
          "message ", i, " has role \"", SanitizeUtf8(role), "\"; supported roles are system, user, ",
          "assistant", tools_ok ? " and tool" : " (and tool with the qwen3 and qwen3.5 templates)"));
    }
    if (!message.tool_calls.empty()) {
      if (!tools_ok) return no_tools(absl::StrCat("message ", i, " has tool calls"));
      if (role != "assistant") {
        return absl::InvalidArgumentError(
            absl::StrCat("message ", i, " has tool calls but role ", SanitizeUtf8(role),
                         "; only assistant messages make tool calls"));
      }
    }
    for (size_t j = 0; j < message.tool_calls.size(); ++j) {
      const ChatToolCall& call = message.tool_calls[j];
      if (call.name.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("message ", i, ", tool call ", j, " has no function name"));
      }
      if (!call.arguments.is_object() && !call.arguments.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "message ", i, ", tool call ", j, " (", SanitizeUtf8(call.name),
            "): the arguments must be a JSON object or a string of JSON text, not ",
            call.arguments.type_name()));
      }
      bytes += 64 + call.name.size() + 256;
    }
    bytes += role.size() + message.content.size() + 32 +
             message.reasoning_content.value_or("").size();
  }
  return bytes;
}

// The [INST] templates, as their Jinja does it. They ignore
// add_generation_prompt: the text after the last user turn is the prompt.
absl::Status RenderMistral(ChatTemplateStyle style, const ChatSpecialTokens& tokens,
                           std::span<const ChatMessage> messages, std::string* out) {
  const bool v1 = style == ChatTemplateStyle::kMistralV1;
  std::span<const ChatMessage> turns = messages;
  const std::string* system = nullptr;
  if (v1 && messages.front().role == "system") {
    system = &messages.front().content;
    turns = messages.subspan(1);
  }
  const std::string_view inst = v1 ? " [INST] " : "[INST] ";
  const std::string_view answer_lead = v1 ? " " : "";
  const std::string_view after_eos = style == ChatTemplateStyle::kMistralInstructSpaced ? " " : "";
  *out += tokens.bos_token;
  for (size_t i = 0; i < turns.size(); ++i) {
    const ChatMessage& turn = turns[i];
    if ((turn.role == "user") != (i % 2 == 0)) {
      return absl::InvalidArgumentError(
          v1 ? "After the optional system message, conversation roles must alternate "
               "user/assistant/user/assistant/..."
             : "Conversation roles must alternate user/assistant/user/assistant/...");
    }
    if (turn.role == "user") {
      if (i == 0 && system != nullptr) {
        absl::StrAppend(out, Sv(inst), *system, "\n\n", turn.content, " [/INST]");
      } else {
        absl::StrAppend(out, Sv(inst), turn.content, " [/INST]");
      }
    } else if (turn.role == "assistant") {
      absl::StrAppend(out, Sv(answer_lead), turn.content, tokens.eos_token, Sv(after_eos));
    } else {
      return absl::InvalidArgumentError(
          v1 ? "Only user and assistant roles are supported, with the exception of an initial "
               "optional system message!"
             : "Only user and assistant roles are supported!");
    }
  }
  return absl::OkStatus();
}

void RenderTulu(ChatTemplateStyle style, const ChatSpecialTokens& tokens,
                std::span<const ChatMessage> messages, const ChatRenderOptions& options,
                std::string* out) {
  if (style == ChatTemplateStyle::kTuluBos) *out += tokens.bos_token;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    const bool last = i + 1 == messages.size();
    if (message.role == "assistant") {
      absl::StrAppend(out, "<|assistant|>\n", message.content, tokens.eos_token, last ? "" : "\n");
    } else {
      absl::StrAppend(out, "<|", message.role, "|>\n", message.content, "\n");
    }
  }
  if (options.add_generation_prompt) *out += "<|assistant|>\n";
}

}  // namespace

std::string_view ChatTemplateStyleName(ChatTemplateStyle style) {
  switch (style) {
    case ChatTemplateStyle::kChatMl:
      return "chatml";
    case ChatTemplateStyle::kQwen3:
      return "qwen3";
    case ChatTemplateStyle::kQwen35:
      return "qwen3.5";
    case ChatTemplateStyle::kQwen2:
      return "qwen2";
    case ChatTemplateStyle::kMistralInstruct:
      return "mistral-instruct";
    case ChatTemplateStyle::kMistralInstructSpaced:
      return "mistral-instruct-v0.1";
    case ChatTemplateStyle::kMistralV1:
      return "mistral-v1";
    case ChatTemplateStyle::kTulu:
      return "tulu";
    case ChatTemplateStyle::kTuluBos:
      return "tulu-bos";
  }
  return "unknown";
}

ChatTemplate::ChatTemplate(ChatTemplateStyle style)
    : ChatTemplate(style, DefaultSpecialTokens(style)) {}

ChatTemplate::ChatTemplate(ChatTemplateStyle style, ChatSpecialTokens tokens)
    : style_(style),
      tokens_(std::move(tokens)),
      default_system_(style == ChatTemplateStyle::kQwen2 ? kQwen2DefaultSystem : "") {}

absl::StatusOr<ChatTemplate> ChatTemplate::Detect(std::string_view template_text) {
  absl::StatusOr<ChatTemplate> detected = Detect(template_text, ChatSpecialTokens{});
  if (!detected.ok()) return detected.status();
  ChatTemplate with_usual_tokens(detected->style());
  with_usual_tokens.default_system_ = detected->default_system_;
  return with_usual_tokens;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Detect(std::string_view template_text,
                                                  ChatSpecialTokens tokens) {
  if (template_text.empty()) {
    return absl::UnimplementedError(
        "unsupported chat template: the model has no tokenizer.chat_template");
  }
  if (std::optional<ChatTemplateStyle> known = MatchKnownTemplate(template_text)) {
    return ChatTemplate(*known, std::move(tokens));
  }
  if (!Contains(template_text, "<|im_start|>") || !Contains(template_text, "<|im_end|>")) {
    return absl::UnimplementedError(absl::StrCat(
        "unsupported chat template: moetier renders ChatML (<|im_start|> ... <|im_end|>: "
        "Qwen3, Qwen3.5, Qwen2), the Mistral-Instruct [INST] templates (Mixtral-8x7B-Instruct-"
        "v0.1, Mistral-7B-Instruct-v0.1/v0.2, mistral-common v1) and the Tulu <|user|> template "
        "(OLMoE-1B-7B-0924-Instruct, OLMo 2); found ",
        DescribeTemplate(template_text)));
  }
  if (Contains(template_text, "enable_thinking")) {
    return ChatTemplate(ChatTemplateStyle::kQwen3, std::move(tokens));
  }
  if (std::optional<std::string> system = HardCodedSystemTurn(template_text)) {
    ChatTemplate qwen2(ChatTemplateStyle::kQwen2, std::move(tokens));
    qwen2.default_system_ = *std::move(system);
    return qwen2;
  }
  return ChatTemplate(ChatTemplateStyle::kChatMl, std::move(tokens));
}

absl::StatusOr<ChatTemplate> ChatTemplate::ForTokenizer(const Tokenizer& tokenizer) {
  // llama.cpp's common_chat_templates_init: the tokens' text as
  // token_to_piece renders it with specials; no token, no text.
  ChatSpecialTokens tokens;
  if (tokenizer.bos_id() != kNoToken) {
    tokens.bos_token = std::string(tokenizer.TokenPiece(tokenizer.bos_id(), true));
  }
  if (tokenizer.eos_id() != kNoToken) {
    tokens.eos_token = std::string(tokenizer.TokenPiece(tokenizer.eos_id(), true));
  }
  tokens.add_bos = tokenizer.add_bos();
  tokens.add_eos = tokenizer.add_eos();
  absl::StatusOr<ChatTemplate> detected = Detect(tokenizer.chat_template(), std::move(tokens));
  if (detected.ok() && detected->style() == ChatTemplateStyle::kQwen3 &&
      tokenizer.pre_tokenizer() == PreTokenizer::kQwen35) {
    return ChatTemplate(ChatTemplateStyle::kQwen35, detected->special_tokens());
  }
  return detected;
}

absl::StatusOr<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                                 const ChatRenderOptions& options) const {
  if (messages.empty()) return absl::InvalidArgumentError("the chat has no messages");
  absl::StatusOr<size_t> bytes = CheckMessages(style_, messages, options);
  if (!bytes.ok()) return bytes.status();

  std::string out;
  out.reserve(*bytes + tokens_.bos_token.size() + messages.size() * tokens_.eos_token.size() +
              default_system_.size());
  switch (style_) {
    case ChatTemplateStyle::kChatMl:
    case ChatTemplateStyle::kQwen2:
      RenderChatMl(style_, default_system_, messages, options, &out);
      break;
    case ChatTemplateStyle::kQwen3:
      if (absl::Status s = RenderQwen3(messages, options, &out); !s.ok()) return s;
      break;
    case ChatTemplateStyle::kQwen35:
      if (absl::Status s = RenderQwen35(messages, options, &out); !s.ok()) return s;
      break;
    case ChatTemplateStyle::kMistralInstruct:
    case ChatTemplateStyle::kMistralInstructSpaced:
    case ChatTemplateStyle::kMistralV1:
      if (absl::Status s = RenderMistral(style_, tokens_, messages, &out); !s.ok()) return s;
      break;
    case ChatTemplateStyle::kTulu:
    case ChatTemplateStyle::kTuluBos:
      RenderTulu(style_, tokens_, messages, options, &out);
      break;
  }
  // llama.cpp (common/chat.cpp) drops these so the tokenizer's own bos/eos
  // are not doubled.
  if (tokens_.add_bos && std::string_view(out).starts_with(tokens_.bos_token)) {
    out.erase(0, tokens_.bos_token.size());
  }
  if (tokens_.add_eos && std::string_view(out).ends_with(tokens_.eos_token)) {
    out.resize(out.size() - tokens_.eos_token.size());
  }
  return out;
}

}  // namespace moetier
