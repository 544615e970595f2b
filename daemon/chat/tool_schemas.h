// The parameter schemas of the tools a chat request offers, and the typing
// of a raw XML parameter value (Qwen3.5 / Qwen3-Coder tool calls write every
// value as bare text) into the JSON value the schema asks for.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace moetier {

class ToolSchemas {
 public:
  // OpenAI tool objects: {"type": "function", "function": {"name": ...,
  // "parameters": {"type": "object", "properties": {...}}}}; a bare function
  // object is taken too. Entries without a string name are ignored.
  explicit ToolSchemas(const std::vector<nlohmann::ordered_json>& tools);

  bool empty() const { return properties_by_function_.empty(); }
  bool HasFunction(std::string_view function) const;
  // True when the function's parameters list their properties, so that a
  // parameter missing from them is unknown rather than merely untyped.
  bool DeclaresParameters(std::string_view function) const;
  // The parameter's schema, or nullptr when the function or the parameter
  // is not described.
  const nlohmann::ordered_json* ParameterSchema(std::string_view function,
                                                std::string_view parameter) const;

 private:
  // Function name -> its "properties" object (null when it has none).
  std::map<std::string, nlohmann::ordered_json, std::less<>> properties_by_function_;
};

// A raw parameter value as JSON. With a schema: type "string" keeps the text
// as is; "integer", "number", "boolean", "object", "array" and "null" parse
// it as JSON and fall back to the text when it does not parse ("boolean"
// also takes True/False in any case, which is how the template's Jinja
// `|string` writes a Python bool). A type list that includes "string" takes
// the parsed value only when it is one of the other listed types. Without a
// schema (or a schema that names no type), JSON objects, arrays, numbers,
// true, false and null are parsed and anything else stays a string.
nlohmann::ordered_json TypedParameterValue(std::string_view raw,
                                           const nlohmann::ordered_json* schema);

}  // namespace moetier
