// Reads the fields of a JSON request body with the checks an API owes its
// callers: a wrong type or a value out of range is reported once, naming
// the field as the client wrote it ("messages[2].content"), instead of an
// exception from deep inside the JSON library.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace moetier {

class JsonFields {
 public:
  // `object` must outlive the reader; `path` prefixes field names in errors.
  JsonFields(const nlohmann::ordered_json& object, std::string path = {});

  // Each returns nullopt when the field is absent or null, and also when it
  // is invalid (the first problem is kept in error()).
  std::optional<std::string> String(std::string_view key);
  std::optional<bool> Bool(std::string_view key);
  std::optional<double> Number(std::string_view key, double min, double max);
  std::optional<int64_t> Integer(std::string_view key, int64_t min, int64_t max);
  // A string or an array of strings (OpenAI's "stop").
  std::optional<std::vector<std::string>> StringOrStrings(std::string_view key);
  const nlohmann::ordered_json* Object(std::string_view key);
  const nlohmann::ordered_json* Array(std::string_view key);
  // The field, whatever its type; null when absent.
  const nlohmann::ordered_json* Any(std::string_view key);

  void Fail(std::string_view key, std::string message);
  // The same for a field named in full ("messages[0].content[1]"), which a
  // reader of an enclosing object reports about a nested one.
  void FailField(std::string full_name, std::string message);
  // Takes over a nested reader's first problem, keeping its full field name.
  void Adopt(const JsonFields& nested);
  std::string FieldName(std::string_view key) const;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  // The field the first problem was found in.
  const std::string& error_field() const { return error_field_; }

 private:
  const nlohmann::ordered_json* Find(std::string_view key) const;

  const nlohmann::ordered_json& object_;
  std::string path_;
  std::string error_;
  std::string error_field_;
};

// The JSON type of a value in words ("a string", "an array", ...).
const char* JsonTypeName(const nlohmann::ordered_json& value);

}  // namespace moetier
