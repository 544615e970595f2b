// A small JSON writer for the client's own reports (bench). Proto messages
// go through protobuf's JSON printer instead. Output is indented by two
// spaces, keys in the order written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moetier::client {

class JsonWriter {
 public:
  JsonWriter() = default;

  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();

  // Inside an object: the next value's name.
  void Key(std::string_view key);

  void String(std::string_view value);
  void Int(int64_t value);
  void Uint(uint64_t value);
  // Non-finite numbers, which JSON cannot hold, are written as null.
  void Double(double value);
  void Double(std::optional<double> value);
  void Bool(bool value);
  void Null();

  // The document; every object and array must be closed.
  std::string Finish();

 private:
  enum class Scope { kObject, kArray };

  // Comma, newline and indentation before an array element or a key.
  void BeforeValue();
  void Indent();

  std::string out_;
  std::vector<Scope> scopes_;
  std::vector<bool> scope_has_items_;
  bool after_key_ = false;
};

// `text` as a JSON string literal, quotes included.
std::string JsonQuote(std::string_view text);

}  // namespace moetier::client
