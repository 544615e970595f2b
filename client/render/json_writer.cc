#include "render/json_writer.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_format.h"
#include "base/check.h"

namespace moetier::client {

std::string JsonQuote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

void JsonWriter::Indent() {
  out_.push_back('\n');
  out_.append(2 * scopes_.size(), ' ');
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (scopes_.empty()) {
    MOETIER_CHECK(out_.empty());
    return;
  }
  MOETIER_CHECK(scopes_.back() == Scope::kArray);
  if (scope_has_items_.back()) out_.push_back(',');
  scope_has_items_.back() = true;
  Indent();
}

void JsonWriter::BeginObject() {
  BeforeValue();
  out_.push_back('{');
  scopes_.push_back(Scope::kObject);
  scope_has_items_.push_back(false);
}

void JsonWriter::EndObject() {
  MOETIER_CHECK(!scopes_.empty() && scopes_.back() == Scope::kObject && !after_key_);
  const bool had_items = scope_has_items_.back();
  scopes_.pop_back();
  scope_has_items_.pop_back();
  if (had_items) Indent();
  out_.push_back('}');
}

void JsonWriter::BeginArray() {
  BeforeValue();
  out_.push_back('[');
  scopes_.push_back(Scope::kArray);
  scope_has_items_.push_back(false);
}

void JsonWriter::EndArray() {
  MOETIER_CHECK(!scopes_.empty() && scopes_.back() == Scope::kArray);
  const bool had_items = scope_has_items_.back();
  scopes_.pop_back();
  scope_has_items_.pop_back();
  if (had_items) Indent();
  out_.push_back(']');
}

void JsonWriter::Key(std::string_view key) {
  MOETIER_CHECK(!scopes_.empty() && scopes_.back() == Scope::kObject && !after_key_);
  if (scope_has_items_.back()) out_.push_back(',');
  scope_has_items_.back() = true;
  Indent();
  out_ += JsonQuote(key);
  out_ += ": ";
  after_key_ = true;
}

void JsonWriter::String(std::string_view value) {
  BeforeValue();
  out_ += JsonQuote(value);
}

void JsonWriter::Int(int64_t value) {
  BeforeValue();
  out_ += absl::StrFormat("%d", value);
}

void JsonWriter::Uint(uint64_t value) {
  BeforeValue();
  out_ += absl::StrFormat("%d", value);
}

void JsonWriter::Double(double value) {
  if (!std::isfinite(value)) {
    Null();
    return;
  }
  BeforeValue();
  // Shortest text that reads back as the same double.
  char buffer[64];
  const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), value);
  MOETIER_CHECK(r.ec == std::errc());
  out_.append(buffer, r.ptr);
}

void JsonWriter::Double(std::optional<double> value) {
  if (value.has_value()) {
    Double(*value);
  } else {
    Null();
  }
}

void JsonWriter::Bool(bool value) {
  BeforeValue();
  out_ += value ? "true" : "false";
}

void JsonWriter::Null() {
  BeforeValue();
  out_ += "null";
}

std::string JsonWriter::Finish() {
  MOETIER_CHECK(scopes_.empty() && !after_key_);
  std::string result = std::move(out_);
  result.push_back('\n');
  out_.clear();
  return result;
}

}  // namespace moetier::client
