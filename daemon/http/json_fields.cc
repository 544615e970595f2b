#include "http/json_fields.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moetier {

const char* JsonTypeName(const nlohmann::ordered_json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float: return "a number";
    default: return "binary data";
  }
}

JsonFields::JsonFields(const nlohmann::ordered_json& object, std::string path)
    : object_(object), path_(std::move(path)) {}

std::string JsonFields::FieldName(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void JsonFields::Fail(std::string_view key, std::string message) {
  FailField(FieldName(key), std::move(message));
}

void JsonFields::FailField(std::string full_name, std::string message) {
  if (!error_.empty()) return;
  error_field_ = std::move(full_name);
  error_ = std::move(message);
}

void JsonFields::Adopt(const JsonFields& nested) {
  if (!nested.ok()) FailField(nested.error_field(), nested.error());
}

const nlohmann::ordered_json* JsonFields::Find(std::string_view key) const {
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> JsonFields::String(std::string_view key) {
  const nlohmann::ordered_json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) {
    Fail(key, absl::StrFormat("%s must be a string, not %s", FieldName(key), JsonTypeName(*v)));
    return std::nullopt;
  }
  return v->get<std::string>();
}

std::optional<bool> JsonFields::Bool(std::string_view key) {
  const nlohmann::ordered_json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) {
    Fail(key, absl::StrFormat("%s must be true or false, not %s", FieldName(key),
                              JsonTypeName(*v)));
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<double> JsonFields::Number(std::string_view key, double min, double max) {
  const nlohmann::ordered_json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) {
    Fail(key, absl::StrFormat("%s must be a number, not %s", FieldName(key), JsonTypeName(*v)));
    return std::nullopt;
  }
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < min || x > max) {
    Fail(key, absl::StrFormat("%s is %g; it must be in [%g, %g]", FieldName(key), x, min, max));
    return std::nullopt;
  }
  return x;
}

std::optional<int64_t> JsonFields::Integer(std::string_view key, int64_t min, int64_t max) {
  const nlohmann::ordered_json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  // 3.0 is taken as 3, as JavaScript clients cannot tell them apart.
  const bool integral = v->is_number_integer() || v->is_number_unsigned() ||
                        (v->is_number_float() && std::isfinite(v->get<double>()) &&
                         std::floor(v->get<double>()) == v->get<double>());
  if (!integral) {
    Fail(key, absl::StrFormat("%s must be an integer, not %s", FieldName(key),
                              v->is_number() ? "a fraction" : JsonTypeName(*v)));
    return std::nullopt;
  }
  const double as_double = v->get<double>();
  if (as_double < static_cast<double>(min) || as_double > static_cast<double>(max)) {
    Fail(key, absl::StrFormat("%s is %.0f; it must be in [%d, %d]", FieldName(key), as_double,
                              min, max));
    return std::nullopt;
  }
  return v->is_number_unsigned() ? static_cast<int64_t>(v->get<uint64_t>())
                                 : static_cast<int64_t>(as_double);
}

std::optional<std::vector<std::string>> JsonFields::StringOrStrings(std::string_view key) {
  const nlohmann::ordered_json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return std::vector<std::string>{v->get<std::string>()};
  if (!v->is_array()) {
    Fail(key, absl::StrFormat("%s must be a string or an array of strings, not %s",
                              FieldName(key), JsonTypeName(*v)));
    return std::nullopt;
  }
  std::vector<std::string> out;
  for (const nlohmann::ordered_json& item : *v) {
    if (!item.is_string()) {
      Fail(key, absl::StrFormat("%s must hold strings only, not %s", FieldName(key),
                                JsonTypeName(item)));
      return std::nullopt;
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

const nlohmann::ordered_json* JsonFields::Object(std::string_view key) {
  const nlohmann::ordered_json* v = Find(key);
  if (v != nullptr && !v->is_object()) {
    Fail(key, absl::StrFormat("%s must be an object, not %s", FieldName(key), JsonTypeName(*v)));
    return nullptr;
  }
  return v;
}

const nlohmann::ordered_json* JsonFields::Array(std::string_view key) {
  const nlohmann::ordered_json* v = Find(key);
  if (v != nullptr && !v->is_array()) {
    Fail(key, absl::StrFormat("%s must be an array, not %s", FieldName(key), JsonTypeName(*v)));
    return nullptr;
  }
  return v;
}

const nlohmann::ordered_json* JsonFields::Any(std::string_view key) { return Find(key); }

}  // namespace moetier
