// Anthropic's Messages API request, read into the same GenerationRequest
// the OpenAI routes make: content blocks become chat messages (tool_use
// blocks an assistant's tool calls, tool_result blocks tool messages,
// thinking blocks its reasoning), tools take OpenAI's function shape.
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "http/json_fields.h"
#include "http/openai_request.h"

namespace moetier {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// A string, or text blocks.
bool ReadText(const Json& value, const std::string& field, JsonFields& f, std::string* out) {
  if (value.is_string()) {
    *out = value.get<std::string>();
    return true;
  }
  if (!value.is_array()) {
    f.Fail(field, absl::StrFormat("%s must be a string or an array of text blocks, not %s",
                                  field, JsonTypeName(value)));
    return false;
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string block_field = absl::StrCat(field, "[", i, "]");
    JsonFields b(value[i], block_field);
    if (!value[i].is_object() || b.String("type") != "text" || !b.ok()) {
      f.Fail(field, absl::StrFormat("%s must be a text block", block_field));
      return false;
    }
    *out += b.String("text").value_or("");
  }
  return true;
}

// One Anthropic message may become several chat messages: tool results go
// first, as the tool turns they answer, then the rest of a user's text.
bool ReadMessage(const Json& m, const std::string& field, JsonFields& top,
                 std::vector<ApiMessage>* out) {
  if (!m.is_object()) {
    top.Fail("messages", absl::StrFormat("%s must be an object, not %s", field, JsonTypeName(m)));
    return false;
  }
  JsonFields f(m, field);
  const std::string role = f.String("role").value_or("");
  if (f.ok() && role != "user" && role != "assistant") {
    f.Fail("role", absl::StrFormat("%s.role must be user or assistant, not \"%s\"", field, role));
  }
  const Json* content = f.Any("content");
  if (f.ok() && content == nullptr) f.Fail("content", field + ".content is missing");
  if (!f.ok()) {
    top.Fail("messages", f.error());
    return false;
  }
  ApiMessage message;
  message.role = role;
  if (content->is_string()) {
    message.content = content->get<std::string>();
    out->push_back(std::move(message));
    return true;
  }
  if (!content->is_array()) {
    top.Fail("messages", absl::StrFormat("%s.content must be a string or an array of blocks",
                                         field));
    return false;
  }
  for (size_t i = 0; i < content->size(); ++i) {
    const Json& block = (*content)[i];
    const std::string bf = absl::StrCat(field, ".content[", i, "]");
    JsonFields b(block, bf);
    const std::string type = block.is_object() ? b.String("type").value_or("") : "";
    if (type == "text") {
      message.content += b.String("text").value_or("");
    } else if (type == "thinking" && role == "assistant") {
      message.reasoning_content += b.String("thinking").value_or("");
    } else if (type == "redacted_thinking" && role == "assistant") {
      // Opaque to any other model: nothing to render.
    } else if (type == "tool_use" && role == "assistant") {
      ApiToolCall call;
      call.id = b.String("id").value_or("");
      call.name = b.String("name").value_or("");
      const Json* input = b.Object("input");
      call.arguments = input != nullptr ? *input : Json::object();
      if (b.ok() && call.name.empty()) b.Fail("name", bf + ".name is missing");
      message.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result" && role == "user") {
      ApiMessage result;
      result.role = "tool";
      result.tool_call_id = b.String("tool_use_id").value_or("");
      if (const Json* c = b.Any("content")) ReadText(*c, bf + ".content", b, &result.content);
      if (b.ok()) out->push_back(std::move(result));
    } else {
      b.Fail("type", absl::StrFormat("%s: a %s message cannot hold a \"%s\" block (text%s)", bf,
                                     role, type,
                                     role == "user" ? ", tool_result" : ", thinking, tool_use"));
    }
    if (!b.ok()) {
      top.Fail("messages", b.error());
      return false;
    }
  }
  if (!message.content.empty() || !message.tool_calls.empty() ||
      !message.reasoning_content.empty() || role == "assistant") {
    out->push_back(std::move(message));
  }
  return true;
}

}  // namespace

std::optional<HttpError> ReadAnthropicMessagesRequest(const Json& body, GenerationRequest* out) {
  JsonFields f(body);
  out->model = f.String("model").value_or("");
  out->stream = f.Bool("stream").value_or(false);
  out->include_usage = true;
  const std::optional<int64_t> max_tokens = f.Integer("max_tokens", 1, kMaxInt32);
  if (f.ok() && !max_tokens.has_value()) f.Fail("max_tokens", "max_tokens is missing");
  out->max_tokens = static_cast<int32_t>(max_tokens.value_or(0));
  // Anthropic's temperature runs 0..1, default 1.
  out->sampling.set_temperature(static_cast<float>(f.Number("temperature", 0, 1).value_or(1.0)));
  out->sampling.set_top_p(static_cast<float>(f.Number("top_p", 0, 1).value_or(1.0)));
  out->sampling.set_top_k(static_cast<int32_t>(f.Integer("top_k", 0, kMaxInt32).value_or(0)));
  if (std::optional<std::vector<std::string>> stops = f.StringOrStrings("stop_sequences")) {
    out->stop = std::move(*stops);
  }
  // Extended thinking is off unless asked for, as on Anthropic's models.
  out->enable_thinking = false;
  if (const Json* thinking = f.Object("thinking")) {
    JsonFields t(*thinking, "thinking");
    const std::string type = t.String("type").value_or("");
    if (t.ok() && type != "enabled" && type != "disabled") {
      t.Fail("type", "thinking.type must be \"enabled\" or \"disabled\"");
    }
    t.Integer("budget_tokens", 0, kMaxInt32);
    if (!t.ok()) f.Fail("thinking", t.error());
    out->enable_thinking = type == "enabled";
  }
  if (const Json* tools = f.Array("tools")) {
    for (size_t i = 0; i < tools->size() && f.ok(); ++i) {
      const std::string field = absl::StrCat("tools[", i, "]");
      const Json& tool = (*tools)[i];
      JsonFields t(tool, field);
      const std::optional<std::string> name = tool.is_object() ? t.String("name") : std::nullopt;
      const std::optional<std::string> description = t.String("description");
      const Json* schema = t.Object("input_schema");
      if (t.ok() && (!name.has_value() || name->empty())) t.Fail("name", field + ".name is missing");
      if (!t.ok()) {
        f.Fail("tools", t.error());
        break;
      }
      Json function = {{"name", *name}};
      if (description.has_value()) function["description"] = *description;
      function["parameters"] = schema != nullptr ? *schema : Json::object();
      out->tools.push_back(Json{{"type", "function"}, {"function", std::move(function)}});
    }
  }
  if (const Json* choice = f.Object("tool_choice")) {
    JsonFields c(*choice, "tool_choice");
    const std::string type = c.String("type").value_or("");
    if (type == "none") {
      out->tool_choice = ToolChoice::kNone;
    } else if (type == "any" || type == "tool") {
      out->tool_choice = ToolChoice::kRequired;
    } else if (type != "auto") {
      f.Fail("tool_choice", "tool_choice.type must be auto, any, tool or none");
    }
  }
  if (const Json* system = f.Any("system")) {
    ApiMessage message;
    message.role = "system";
    if (ReadText(*system, "system", f, &message.content)) out->messages.push_back(std::move(message));
  }
  const Json* messages = f.Array("messages");
  if (f.ok() && (messages == nullptr || messages->empty())) {
    f.Fail("messages", "messages is missing or empty");
  }
  for (size_t i = 0; f.ok() && i < messages->size(); ++i) {
    ReadMessage((*messages)[i], absl::StrCat("messages[", i, "]"), f, &out->messages);
  }
  if (f.ok()) return std::nullopt;
  return BadRequest(f.error(), f.error_field());
}

}  // namespace moetier
