#include "chat/tool_schemas.h"

#include <algorithm>
#include <cctype>

namespace moetier {
namespace {

using Json = nlohmann::ordered_json;

const Json* FindMember(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

void AddTypeNames(const Json& type, std::vector<std::string>& names) {
  if (type.is_string()) {
    names.push_back(type.get<std::string>());
  } else if (type.is_array()) {
    for (const Json& entry : type) {
      if (entry.is_string()) names.push_back(entry.get<std::string>());
    }
  }
}

// "type" as a name or a list of names, or the types of anyOf / oneOf
// alternatives (how clients spell an optional parameter).
std::vector<std::string> DeclaredTypes(const Json& schema) {
  std::vector<std::string> names;
  if (const Json* type = FindMember(schema, "type")) AddTypeNames(*type, names);
  for (const char* key : {"anyOf", "oneOf"}) {
    const Json* alternatives = FindMember(schema, key);
    if (alternatives == nullptr || !alternatives->is_array()) continue;
    for (const Json& alternative : *alternatives) {
      if (const Json* type = FindMember(alternative, "type")) AddTypeNames(*type, names);
    }
  }
  return names;
}

bool Declares(const std::vector<std::string>& types, std::string_view name) {
  return std::find(types.begin(), types.end(), name) != types.end();
}

bool MatchesType(const Json& value, std::string_view type) {
  if (type == "integer") return value.is_number_integer();
  if (type == "number") return value.is_number();
  if (type == "boolean") return value.is_boolean();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "null") return value.is_null();
  return false;
}

std::string Lowercase(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

std::string_view TrimmedWhitespace(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(" \t\r\n") - begin + 1);
}

}  // namespace

ToolSchemas::ToolSchemas(const std::vector<Json>& tools) {
  for (const Json& tool : tools) {
    const Json* function = FindMember(tool, "function");
    if (function == nullptr || !function->is_object()) function = &tool;
    const Json* name = FindMember(*function, "name");
    if (name == nullptr || !name->is_string()) continue;
    Json properties;  // null
    if (const Json* parameters = FindMember(*function, "parameters")) {
      const Json* listed = FindMember(*parameters, "properties");
      if (listed != nullptr && listed->is_object()) properties = *listed;
    }
    properties_by_function_[name->get<std::string>()] = std::move(properties);
  }
}

bool ToolSchemas::HasFunction(std::string_view function) const {
  return properties_by_function_.find(function) != properties_by_function_.end();
}

bool ToolSchemas::DeclaresParameters(std::string_view function) const {
  auto it = properties_by_function_.find(function);
  return it != properties_by_function_.end() && it->second.is_object();
}

const Json* ToolSchemas::ParameterSchema(std::string_view function,
                                         std::string_view parameter) const {
  auto it = properties_by_function_.find(function);
  if (it == properties_by_function_.end() || !it->second.is_object()) return nullptr;
  auto property = it->second.find(std::string(parameter));
  return property == it->second.end() ? nullptr : &*property;
}

Json TypedParameterValue(std::string_view raw, const Json* schema) {
  const std::vector<std::string> types =
      schema == nullptr ? std::vector<std::string>{} : DeclaredTypes(*schema);
  const Json parsed = Json::parse(raw.begin(), raw.end(), nullptr, /*allow_exceptions=*/false);
  const bool parses = !parsed.is_discarded();
  if (types.empty()) {
    if (parses && !parsed.is_string()) return parsed;
    return Json(std::string(raw));
  }
  if (Declares(types, "boolean")) {
    const std::string word = Lowercase(TrimmedWhitespace(raw));
    if (word == "true") return Json(true);
    if (word == "false") return Json(false);
  }
  if (Declares(types, "string")) {
    if (parses && !parsed.is_string()) {
      for (const std::string& type : types) {
        if (MatchesType(parsed, type)) return parsed;
      }
    }
    return Json(std::string(raw));
  }
  if (parses) return parsed;
  return Json(std::string(raw));
}

}  // namespace moetier
