#include "chat/tool_call_body.h"


namespace moetier {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kWhitespace = " \t\r\n";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";

// absl::StrCat of this Abseil build does not take std::string_view.
template <typename... Parts>
std::string Concat(const Parts&... parts) {
  std::string text;
  (text.append(std::string_view(parts)), ...);
  return text;
}

std::string_view Trimmed(std::string_view text) {
  const size_t begin = text.find_first_not_of(kWhitespace);
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(kWhitespace) - begin + 1);
}

size_t SkipWhitespace(std::string_view text, size_t pos) {
  const size_t next = text.find_first_not_of(kWhitespace, pos);
  return next == std::string_view::npos ? text.size() : next;
}

std::string Compact(const Json& value) {
  // replace: a stray invalid byte must not turn into an exception.
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Shortened for messages: a call body can be long.
std::string Excerpt(std::string_view text) {
  constexpr size_t kMaxExcerpt = 40;
  if (text.size() <= kMaxExcerpt) return std::string(text);
  return Concat(text.substr(0, kMaxExcerpt), "...");
}

void NoteUnknownFunction(std::string_view name, const ToolSchemas& schemas,
                         std::vector<std::string>& notes) {
  if (!schemas.empty() && !schemas.HasFunction(name)) {
    notes.push_back(Concat("tool call names function '", name,
                                 "', which the request does not offer"));
  }
}

absl::StatusOr<ParsedToolCall> ParseJsonCall(std::string_view body, const ToolSchemas& schemas,
                                             std::vector<std::string>& notes) {
  const Json call = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (call.is_discarded()) {
    return absl::InvalidArgumentError(
        Concat("tool call is not valid JSON: ", Excerpt(body)));
  }
  if (!call.is_object()) return absl::InvalidArgumentError("tool call JSON is not an object");
  auto name = call.find("name");
  if (name == call.end() || !name->is_string() || name->get<std::string>().empty()) {
    return absl::InvalidArgumentError("tool call JSON has no \"name\" string");
  }
  ParsedToolCall parsed;
  parsed.name = name->get<std::string>();
  auto arguments = call.find("arguments");
  if (arguments == call.end()) {
    parsed.arguments = "{}";  // a function without parameters
  } else if (arguments->is_object()) {
    parsed.arguments = Compact(*arguments);
  } else if (arguments->is_string()) {
    // Arguments given as an encoded object, as OpenAI messages carry them.
    const std::string& text = arguments->get_ref<const std::string&>();
    const Json decoded = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (decoded.is_discarded() || !decoded.is_object()) {
      return absl::InvalidArgumentError(
          Concat("tool call '", parsed.name, "': \"arguments\" is not an object"));
    }
    parsed.arguments = Compact(decoded);
  } else {
    return absl::InvalidArgumentError(
        Concat("tool call '", parsed.name, "': \"arguments\" is not an object"));
  }
  NoteUnknownFunction(parsed.name, schemas, notes);
  return parsed;
}

// The name in "<tag=NAME>" starting at pos; pos moves past the '>'.
absl::StatusOr<std::string> TagName(std::string_view body, std::string_view tag, size_t& pos) {
  const size_t begin = pos + tag.size();
  const size_t end = body.find('>', begin);
  if (end == std::string_view::npos) {
    return absl::InvalidArgumentError(Concat("'", tag, "' without a closing '>'"));
  }
  const std::string_view name = Trimmed(body.substr(begin, end - begin));
  if (name.empty() || name.find_first_of("<\n") != std::string_view::npos) {
    return absl::InvalidArgumentError(
        Concat("'", tag, "' with a malformed name: ", Excerpt(body.substr(begin))));
  }
  pos = end + 1;
  return std::string(name);
}

std::string_view WithoutFramingNewlines(std::string_view value) {
  if (value.starts_with("\n")) value.remove_prefix(1);
  if (value.ends_with("\n")) value.remove_suffix(1);
  return value;
}

absl::StatusOr<ParsedToolCall> ParseXmlCall(std::string_view body, const ToolSchemas& schemas,
                                            std::vector<std::string>& notes) {
  size_t pos = 0;
  absl::StatusOr<std::string> name = TagName(body, kFunctionOpen, pos);
  if (!name.ok()) return name.status();
  std::vector<std::string> call_notes;
  Json arguments = Json::object();
  bool closed = false;
  while (!closed) {
    pos = SkipWhitespace(body, pos);
    const std::string_view rest = body.substr(pos);
    if (rest.starts_with(kFunctionClose)) {
      pos += kFunctionClose.size();
      closed = true;
    } else if (rest.starts_with(kParameterOpen)) {
      absl::StatusOr<std::string> key = TagName(body, kParameterOpen, pos);
      if (!key.ok()) return key.status();
      const size_t value_end = body.find(kParameterClose, pos);
      if (value_end == std::string_view::npos) {
        return absl::InvalidArgumentError(
            Concat("tool call '", *name, "': parameter '", *key, "' has no </parameter>"));
      }
      const std::string_view raw = WithoutFramingNewlines(body.substr(pos, value_end - pos));
      pos = value_end + kParameterClose.size();
      const Json* schema = schemas.ParameterSchema(*name, *key);
      if (schema == nullptr && schemas.DeclaresParameters(*name)) {
        call_notes.push_back(Concat("tool call '", *name, "': parameter '", *key,
                                          "' is not in the function's schema"));
      }
      if (arguments.contains(*key)) {
        call_notes.push_back(Concat("tool call '", *name, "': parameter '", *key,
                                          "' given twice; the last value kept"));
      }
      arguments[*key] = TypedParameterValue(raw, schema);
    } else if (rest.empty()) {
      return absl::InvalidArgumentError(Concat("tool call '", *name, "' has no </function>"));
    } else {
      return absl::InvalidArgumentError(Concat(
          "tool call '", *name, "': unexpected text in the function block: ", Excerpt(rest)));
    }
  }
  if (SkipWhitespace(body, pos) != body.size()) {
    return absl::InvalidArgumentError(Concat(
        "tool call '", *name, "': text after </function>: ", Excerpt(Trimmed(body.substr(pos)))));
  }
  NoteUnknownFunction(*name, schemas, notes);
  notes.insert(notes.end(), call_notes.begin(), call_notes.end());
  return ParsedToolCall{*std::move(name), Compact(arguments)};
}

}  // namespace

absl::StatusOr<ParsedToolCall> ParseToolCallBody(std::string_view body,
                                                 const ToolSchemas& schemas,
                                                 std::vector<std::string>& notes) {
  const std::string_view trimmed = Trimmed(body);
  if (trimmed.starts_with("{")) return ParseJsonCall(trimmed, schemas, notes);
  if (trimmed.starts_with(kFunctionOpen)) return ParseXmlCall(trimmed, schemas, notes);
  return absl::InvalidArgumentError(Concat(
      "tool call is neither a JSON object nor a <function=...> block: ", Excerpt(trimmed)));
}

}  // namespace moetier
