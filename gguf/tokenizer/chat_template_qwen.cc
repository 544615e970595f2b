#include "gguf/tokenizer/chat_template_qwen.h"

#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "gguf/tokenizer/python_json.h"
#include "gguf/tokenizer/unicode.h"

namespace moetier {
namespace {

absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// --- the Python string methods the templates call -----------------------------

std::string_view LStripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}

std::string_view RStripNewlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

std::string_view StripNewlines(std::string_view s) { return LStripNewlines(RStripNewlines(s)); }

// Python's str.isspace(): Unicode White_Space plus the separators
// U+001C..U+001F.
bool IsPythonSpace(uint32_t cp) { return IsWhitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

// The start of the UTF-8 unit that ends at s[end - 1].
size_t LastUnitStart(std::string_view s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
    --start;
  }
  const Utf8Unit unit = DecodeUtf8(s, start);
  return unit.valid && start + unit.length == end ? start : end - 1;
}

// Python's str.strip() (Jinja's trim filter).
std::string_view PythonStrip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const Utf8Unit unit = DecodeUtf8(s, begin);
    if (!unit.valid || !IsPythonSpace(unit.codepoint)) break;
    begin += unit.length;
  }
  size_t end = s.size();
  while (end > begin) {
    const size_t start = LastUnitStart(s, end);
    const Utf8Unit unit = DecodeUtf8(s, start);
    if (!unit.valid || !IsPythonSpace(unit.codepoint)) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

// s.split(separator)[-1] and s.split(separator)[0].
std::string_view AfterLast(std::string_view s, std::string_view separator) {
  const size_t at = s.rfind(separator);
  return at == std::string_view::npos ? s : s.substr(at + separator.size());
}

std::string_view BeforeFirst(std::string_view s, std::string_view separator) {
  return s.substr(0, s.find(separator));
}

bool IsToolResponseText(std::string_view s) {
  return s.starts_with("<tool_response>") && s.ends_with("</tool_response>");
}

// The templates' last_query_index: the last user turn that is not a tool
// response pasted as user text; nullopt when there is none.
template <typename ContentOf>
std::optional<size_t> LastQueryIndex(std::span<const ChatMessage> messages, ContentOf content_of) {
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role == "user" && !IsToolResponseText(content_of(messages[i]))) return i;
  }
  return std::nullopt;
}

// An assistant turn's thinking and answer: reasoning_content when given,
// else the "<think>...</think>" part of the content (the templates' split).
struct AssistantParts {
  std::string_view reasoning;
  std::string_view content;
};

AssistantParts SplitThinking(const ChatMessage& message, std::string_view content) {
  if (message.reasoning_content.has_value()) return {*message.reasoning_content, content};
  if (content.find("</think>") == std::string_view::npos) return {"", content};
  return {LStripNewlines(AfterLast(RStripNewlines(BeforeFirst(content, "</think>")), "<think>")),
          LStripNewlines(AfterLast(content, "</think>"))};
}

void AppendTurn(std::string_view role, std::string_view content, std::string* out) {
  absl::StrAppend(out, "<|im_start|>", Sv(role), "\n", Sv(content), "<|im_end|>\n");
}

void AppendToolList(const ChatRenderOptions& options, std::string* out) {
  for (const nlohmann::ordered_json& tool : options.tools) {
    absl::StrAppend(out, "\n", PythonJsonDumps(tool));
  }
}

void AppendGenerationPrompt(const ChatRenderOptions& options, std::string_view thinking_open,
                            std::string* out) {
  if (!options.add_generation_prompt) return;
  *out += "<|im_start|>assistant\n";
  *out += options.enable_thinking ? thinking_open : "<think>\n\n</think>\n\n";
}

// --- Qwen3 --------------------------------------------------------------------

constexpr std::string_view kQwen3ToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kQwen3ToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

void AppendQwen3Assistant(const ChatMessage& message, bool after_last_query, bool last,
                          std::string* out) {
  const AssistantParts parts = SplitThinking(message, message.content);
  if (after_last_query && (last || !parts.reasoning.empty())) {
    absl::StrAppend(out, "<|im_start|>assistant\n<think>\n", Sv(StripNewlines(parts.reasoning)),
                    "\n</think>\n\n", Sv(LStripNewlines(parts.content)));
  } else {
    absl::StrAppend(out, "<|im_start|>assistant\n", Sv(parts.content));
  }
  for (size_t j = 0; j < message.tool_calls.size(); ++j) {
    const ChatToolCall& call = message.tool_calls[j];
    if (j > 0 || !parts.content.empty()) *out += "\n";
    absl::StrAppend(out, "<tool_call>\n{\"name\": \"", call.name, "\", \"arguments\": ",
                    call.arguments.is_string() ? call.arguments.get<std::string>()
                                               : PythonJsonDumps(call.arguments),
                    "}\n</tool_call>");
  }
  *out += "<|im_end|>\n";
}

// --- Qwen3.5 ------------------------------------------------------------------

constexpr std::string_view kQwen35ToolsIntro =
    "# Tools\n\nYou have access to the following functions:\n\n<tools>";
constexpr std::string_view kQwen35ToolsOutro =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\n"
    "value_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second "
    "parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your "
    "function call in natural language BEFORE the function call, but NOT after\n- If there is "
    "no function call available, answer the question like normal with your current knowledge "
    "and do not tell the user about function calls\n</IMPORTANT>";

absl::Status AppendQwen35Assistant(const ChatMessage& message, size_t index,
                                   bool after_last_query, std::string* out) {
  const AssistantParts parts = SplitThinking(message, PythonStrip(message.content));
  if (after_last_query) {
    absl::StrAppend(out, "<|im_start|>assistant\n<think>\n", Sv(PythonStrip(parts.reasoning)),
                    "\n</think>\n\n", Sv(parts.content));
  } else {
    absl::StrAppend(out, "<|im_start|>assistant\n", Sv(parts.content));
  }
  for (size_t j = 0; j < message.tool_calls.size(); ++j) {
    const ChatToolCall& call = message.tool_calls[j];
    if (j == 0) {
      absl::StrAppend(out, PythonStrip(parts.content).empty() ? "" : "\n\n", "<tool_call>\n");
    } else {
      *out += "\n<tool_call>\n";
    }
    absl::StrAppend(out, "<function=", call.name, ">\n");
    if (!call.arguments.is_object()) {
      // The template's `arguments|items` raises on anything but a mapping.
      return absl::InvalidArgumentError(absl::StrCat(
          "message ", index, ", tool call ", j, " (", SanitizeUtf8(call.name),
          "): the qwen3.5 chat template takes the arguments as a JSON object, not as JSON "
          "text: Can only get item pairs from a mapping."));
    }
    for (const auto& [key, value] : call.arguments.items()) {
      absl::StrAppend(out, "<parameter=", key, ">\n",
                      value.is_structured() ? PythonJsonDumps(value) : PythonStr(value),
                      "\n</parameter>\n");
    }
    *out += "</function>\n</tool_call>";
  }
  *out += "<|im_end|>\n";
  return absl::OkStatus();
}

}  // namespace

absl::Status RenderQwen3(std::span<const ChatMessage> messages, const ChatRenderOptions& options,
                         std::string* out) {
  const bool system_first = messages.front().role == "system";
  if (!options.tools.empty()) {
    *out += "<|im_start|>system\n";
    if (system_first) absl::StrAppend(out, messages.front().content, "\n\n");
    *out += kQwen3ToolsIntro;
    AppendToolList(options, out);
    *out += kQwen3ToolsOutro;
  } else if (system_first) {
    AppendTurn("system", messages.front().content, out);
  }
  const size_t last_query =
      LastQueryIndex(messages, [](const ChatMessage& m) { return std::string_view(m.content); })
          .value_or(messages.size() - 1);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    const bool last = i + 1 == messages.size();
    if (message.role == "user" || (message.role == "system" && i > 0)) {
      AppendTurn(message.role, message.content, out);
    } else if (message.role == "assistant") {
      AppendQwen3Assistant(message, i > last_query, last, out);
    } else if (message.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") *out += "<|im_start|>user";
      absl::StrAppend(out, "\n<tool_response>\n", message.content, "\n</tool_response>");
      if (last || messages[i + 1].role != "tool") *out += "<|im_end|>\n";
    }
  }
  AppendGenerationPrompt(options, "", out);
  return absl::OkStatus();
}

absl::Status RenderQwen35(std::span<const ChatMessage> messages, const ChatRenderOptions& options,
                          std::string* out) {
  const bool system_first = messages.front().role == "system";
  if (!options.tools.empty()) {
    *out += "<|im_start|>system\n";
    *out += kQwen35ToolsIntro;
    AppendToolList(options, out);
    *out += kQwen35ToolsOutro;
    if (system_first) {
      const std::string_view system = PythonStrip(messages.front().content);
      if (!system.empty()) absl::StrAppend(out, "\n\n", Sv(system));
    }
    *out += "<|im_end|>\n";
  } else if (system_first) {
    AppendTurn("system", PythonStrip(messages.front().content), out);
  }
  const std::optional<size_t> last_query = LastQueryIndex(
      messages, [](const ChatMessage& m) { return PythonStrip(m.content); });
  if (!last_query.has_value()) {
    return absl::InvalidArgumentError(
        "the qwen3.5 chat template needs a user message: No user query found in messages.");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    const bool last = i + 1 == messages.size();
    if (message.role == "system") {
      if (i > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "message ", i, ": the qwen3.5 chat template takes a system message only first: "
            "System message must be at the beginning."));
      }
    } else if (message.role == "user") {
      AppendTurn("user", PythonStrip(message.content), out);
    } else if (message.role == "assistant") {
      if (absl::Status s = AppendQwen35Assistant(message, i, i > *last_query, out); !s.ok()) {
        return s;
      }
    } else if (message.role == "tool") {
      // As the template has it: a leading tool result opens no user turn.
      if (i > 0 && messages[i - 1].role != "tool") *out += "<|im_start|>user";
      absl::StrAppend(out, "\n<tool_response>\n", Sv(PythonStrip(message.content)),
                      "\n</tool_response>");
      if (last || messages[i + 1].role != "tool") *out += "<|im_end|>\n";
    }
  }
  AppendGenerationPrompt(options, "<think>\n", out);
  return absl::OkStatus();
}

}  // namespace moetier
