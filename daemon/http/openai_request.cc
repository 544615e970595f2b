#include "http/openai_request.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "http/json_fields.h"
#include "request/sampling_params.h"

namespace moetier {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

std::optional<HttpError> FieldError(const JsonFields& fields) {
  if (fields.ok()) return std::nullopt;
  return BadRequest(fields.error(), fields.error_field());
}

// The sampling fields the OpenAI and Anthropic APIs share, plus the common
// extensions (top_k, min_p, repetition_penalty) llama.cpp and vLLM accept.
void ReadSampling(JsonFields& f, double max_temperature, GenerationRequest* out) {
  out->sampling.set_temperature(
      static_cast<float>(f.Number("temperature", 0, max_temperature).value_or(1.0)));
  out->sampling.set_top_p(static_cast<float>(f.Number("top_p", 0, 1).value_or(1.0)));
  out->sampling.set_top_k(static_cast<int32_t>(f.Integer("top_k", 0, kMaxInt32).value_or(0)));
  out->sampling.set_min_p(static_cast<float>(f.Number("min_p", 0, 1).value_or(0)));
  if (std::optional<double> r = f.Number("repetition_penalty", 0, 100)) {
    out->sampling.set_repetition_penalty(static_cast<float>(*r));
  }
  if (std::optional<int64_t> seed = f.Integer("seed", std::numeric_limits<int64_t>::min(),
                                              std::numeric_limits<int64_t>::max())) {
    out->sampling.set_seed(static_cast<uint64_t>(*seed));
  }
}

// OpenAI's penalties and n: only their neutral values can be honoured.
void RefuseUnsupported(JsonFields& f) {
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (std::optional<double> v = f.Number(key, -2, 2); v.has_value() && *v != 0) {
      f.Fail(key, absl::StrFormat("%s is not supported (only 0); use repetition_penalty", key));
    }
  }
  if (std::optional<int64_t> n = f.Integer("n", 1, 128); n.has_value() && *n != 1) {
    f.Fail("n", "n must be 1: one choice per request");
  }
  if (f.Any("logit_bias") != nullptr) f.Fail("logit_bias", "logit_bias is not supported");
}

// The fields both OpenAI routes open with.
void ReadModelAndStream(JsonFields& f, GenerationRequest* out) {
  out->model = f.String("model").value_or("");
  out->stream = f.Bool("stream").value_or(false);
  if (const Json* options = f.Object("stream_options")) {
    JsonFields o(*options, "stream_options");
    out->include_usage = o.Bool("include_usage").value_or(false);
    f.Adopt(o);
  }
}

void ReadStop(JsonFields& f, const char* key, GenerationRequest* out) {
  if (std::optional<std::vector<std::string>> stop = f.StringOrStrings(key)) {
    out->stop = std::move(*stop);
  }
}

// OpenAI content: a string, or an array of parts of which text parts are
// the only kind a text model takes.
std::optional<std::string> ReadContent(const Json& content, const std::string& field,
                                       JsonFields& f) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    f.FailField(field,
                absl::StrFormat("%s must be a string or an array of content parts, not %s", field,
                                JsonTypeName(content)));
    return std::nullopt;
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string part_field = absl::StrCat(field, "[", i, "]");
    JsonFields p(part, part_field);
    if (!part.is_object()) {
      f.FailField(part_field, absl::StrFormat("%s must be an object, not %s", part_field,
                                              JsonTypeName(part)));
      return std::nullopt;
    }
    const std::optional<std::string> type = p.String("type");
    if (type != "text") {
      f.FailField(part_field + ".type",
                  absl::StrFormat("%s: only text parts are supported (type \"%s\")", part_field,
                                  type.value_or("")));
      return std::nullopt;
    }
    const std::optional<std::string> part_text = p.String("text");
    if (!p.ok() || !part_text.has_value()) {
      if (p.ok()) {
        f.FailField(part_field + ".text", part_field + ".text is missing");
      } else {
        f.Adopt(p);
      }
      return std::nullopt;
    }
    text += *part_text;
  }
  return text;
}

// Arguments as OpenAI clients send them: a JSON text in a string.
Json ParseArguments(const Json& arguments) {
  if (!arguments.is_string()) return arguments;
  Json parsed = Json::parse(arguments.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? arguments : parsed;
}

bool ReadTools(JsonFields& f, const char* key, bool anthropic, GenerationRequest* out) {
  const Json* tools = f.Array(key);
  if (tools == nullptr) return f.ok();
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& tool = (*tools)[i];
    const std::string field = absl::StrCat(key, "[", i, "]");
    if (!tool.is_object()) {
      f.FailField(field, absl::StrFormat("%s must be an object, not %s", field,
                                         JsonTypeName(tool)));
      return false;
    }
    JsonFields t(tool, field);
    Json function;
    if (anthropic) {
      // {name, description, input_schema} -> OpenAI's function shape, which
      // is what the chat templates render.
      const std::optional<std::string> name = t.String("name");
      const std::optional<std::string> description = t.String("description");
      const Json* schema = t.Object("input_schema");
      if (t.ok() && !name.has_value()) t.Fail("name", field + ".name is missing");
      if (!t.ok()) {
        f.Adopt(t);
        return false;
      }
      function["name"] = *name;
      if (description.has_value()) function["description"] = *description;
      function["parameters"] = schema != nullptr ? *schema : Json::object();
      out->tools.push_back(Json{{"type", "function"}, {"function", std::move(function)}});
      continue;
    }
    const std::optional<std::string> type = t.String("type");
    const Json* fn = t.Object("function");
    if (t.ok() && type != "function") t.Fail("type", field + ".type must be \"function\"");
    if (t.ok() && fn == nullptr) t.Fail("function", field + ".function is missing");
    if (t.ok()) {
      JsonFields ff(*fn, field + ".function");
      const std::optional<std::string> name = ff.String("name");
      ff.String("description");
      ff.Object("parameters");
      if (ff.ok() && (!name.has_value() || name->empty())) {
        ff.Fail("name", field + ".function.name is missing");
      }
      t.Adopt(ff);
    }
    if (!t.ok()) {
      f.Adopt(t);
      return false;
    }
    out->tools.push_back(tool);
  }
  return true;
}

std::optional<HttpError> ReadOpenAiMessages(const Json& messages, GenerationRequest* out) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string field = absl::StrCat("messages[", i, "]");
    const Json& m = messages[i];
    if (!m.is_object()) {
      return BadRequest(absl::StrFormat("%s must be an object, not %s", field, JsonTypeName(m)),
                        field);
    }
    JsonFields f(m, field);
    ApiMessage message;
    message.role = f.String("role").value_or("");
    if (f.ok() && message.role == "developer") message.role = "system";
    if (f.ok() && message.role != "system" && message.role != "user" &&
        message.role != "assistant" && message.role != "tool") {
      f.Fail("role", absl::StrFormat("%s.role must be system, developer, user, assistant or "
                                     "tool, not \"%s\"", field, message.role));
    }
    if (const Json* content = f.Any("content")) {
      if (std::optional<std::string> text = ReadContent(*content, field + ".content", f)) {
        message.content = std::move(*text);
      }
    } else if (f.ok() && message.role != "assistant") {
      f.Fail("content", field + ".content is missing");
    }
    message.reasoning_content = f.String("reasoning_content").value_or("");
    message.tool_call_id = f.String("tool_call_id").value_or("");
    message.name = f.String("name").value_or("");
    if (const Json* calls = f.Array("tool_calls")) {
      for (size_t c = 0; c < calls->size() && f.ok(); ++c) {
        const std::string call_field = absl::StrCat(field, ".tool_calls[", c, "]");
        JsonFields cf((*calls)[c], call_field);
        ApiToolCall call;
        call.id = cf.String("id").value_or("");
        const Json* fn = cf.Object("function");
        if (cf.ok() && fn == nullptr) cf.Fail("function", call_field + ".function is missing");
        if (cf.ok()) {
          JsonFields ff(*fn, call_field + ".function");
          call.name = ff.String("name").value_or("");
          if (ff.ok() && call.name.empty()) ff.Fail("name", call_field + ".function.name is missing");
          if (const Json* args = ff.Any("arguments")) call.arguments = ParseArguments(*args);
          cf.Adopt(ff);
        }
        f.Adopt(cf);
        message.tool_calls.push_back(std::move(call));
      }
    }
    if (!f.ok()) return FieldError(f);
    out->messages.push_back(std::move(message));
  }
  return std::nullopt;
}

}  // namespace

std::optional<HttpError> ParseJsonBody(const std::string& body, Json* out) {
  try {
    *out = Json::parse(body);
  } catch (const Json::exception& e) {
    // parse_error, and out_of_range for a number no double holds (1e400).
    return BadRequest(absl::StrCat("the body is not valid JSON: ", e.what()));
  }
  if (!out->is_object()) {
    return BadRequest(absl::StrCat("the body must be a JSON object, not ", JsonTypeName(*out)));
  }
  return std::nullopt;
}

std::optional<HttpError> ReadChatCompletionRequest(const Json& body, GenerationRequest* out) {
  JsonFields f(body);
  ReadModelAndStream(f, out);
  // max_completion_tokens is the current name; max_tokens the older one.
  std::optional<int64_t> max_tokens = f.Integer("max_completion_tokens", 1, kMaxInt32);
  if (max_tokens.has_value()) {
    out->max_tokens_field = "max_completion_tokens";
  } else {
    max_tokens = f.Integer("max_tokens", 1, kMaxInt32);
  }
  out->max_tokens = static_cast<int32_t>(max_tokens.value_or(0));
  ReadSampling(f, 2.0, out);
  RefuseUnsupported(f);
  ReadStop(f, "stop", out);
  if (f.Bool("logprobs").value_or(false)) {
    out->top_logprobs =
        static_cast<int32_t>(f.Integer("top_logprobs", 0, kMaxTopLogprobs).value_or(0));
  } else if (f.ok() && f.Any("top_logprobs") != nullptr) {
    f.Fail("top_logprobs", "top_logprobs needs logprobs: true");
  }
  // Thinking: chat_template_kwargs.enable_thinking as vLLM and llama.cpp
  // take it, or a top-level enable_thinking.
  if (const Json* kwargs = f.Object("chat_template_kwargs")) {
    JsonFields k(*kwargs, "chat_template_kwargs");
    if (std::optional<bool> thinking = k.Bool("enable_thinking")) out->enable_thinking = *thinking;
    f.Adopt(k);
  }
  if (std::optional<bool> thinking = f.Bool("enable_thinking")) out->enable_thinking = *thinking;
  ReadTools(f, "tools", /*anthropic=*/false, out);
  if (const Json* choice = f.Any("tool_choice")) {
    if (choice->is_string() && *choice == "none") {
      out->tool_choice = ToolChoice::kNone;
    } else if (choice->is_string() && *choice == "required") {
      out->tool_choice = ToolChoice::kRequired;
    } else if (!(choice->is_string() && *choice == "auto") && !choice->is_object()) {
      f.Fail("tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or an object");
    }
  }
  const Json* messages = f.Array("messages");
  if (f.ok() && (messages == nullptr || messages->empty())) {
    f.Fail("messages", "messages is missing or empty");
  }
  if (!f.ok()) return FieldError(f);
  return ReadOpenAiMessages(*messages, out);
}

std::optional<HttpError> ReadCompletionRequest(const Json& body, GenerationRequest* out) {
  JsonFields f(body);
  ReadModelAndStream(f, out);
  out->max_tokens = static_cast<int32_t>(f.Integer("max_tokens", 1, kMaxInt32).value_or(0));
  ReadSampling(f, 2.0, out);
  RefuseUnsupported(f);
  ReadStop(f, "stop", out);
  // The legacy API's logprobs is the number of alternatives (up to 5 there).
  if (std::optional<int64_t> n = f.Integer("logprobs", 0, kMaxTopLogprobs)) {
    out->top_logprobs = static_cast<int32_t>(*n);
  }
  if (f.Bool("echo").value_or(false)) f.Fail("echo", "echo is not supported");
  if (f.String("suffix").has_value()) f.Fail("suffix", "suffix is not supported");
  const Json* prompt = f.Any("prompt");
  if (f.ok() && prompt == nullptr) f.Fail("prompt", "prompt is missing");
  if (f.ok()) {
    // A string, one string in an array, or token ids (an array of integers).
    if (prompt->is_string()) {
      out->prompt = prompt->get<std::string>();
    } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
      out->prompt = (*prompt)[0].get<std::string>();
    } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()) {
      for (const Json& id : *prompt) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxInt32) {
          f.Fail("prompt", "prompt token ids must be non-negative integers");
          break;
        }
        out->prompt_token_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
    } else {
      f.Fail("prompt", "prompt must be a string, one string in an array, or token ids "
                       "(several prompts per request are not supported)");
    }
  }
  if (f.ok() && out->prompt.empty() && out->prompt_token_ids.empty()) {
    f.Fail("prompt", "prompt is empty");
  }
  return FieldError(f);
}

}  // namespace moetier
