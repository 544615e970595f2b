// Just enough JSON for the tokenizer fixtures under tests/data: objects,
// arrays, strings (with \uXXXX escapes and surrogate pairs), numbers, true,
// false and null. Header-only, for tests.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gguf/tokenizer/unicode.h"

namespace moetier::testing {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;

  // The member `key` of an object, or nullptr.
  const JsonValue* Find(std::string_view key) const {
    for (const auto& [name, value] : object) {
      if (name == key) return &value;
    }
    return nullptr;
  }
};

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : s_(text) {}

  absl::StatusOr<JsonValue> Parse() {
    JsonValue value = ParseValue();
    SkipSpace();
    if (error_.empty() && pos_ != s_.size()) Fail("trailing characters");
    if (!error_.empty()) return absl::InvalidArgumentError(error_);
    return value;
  }

 private:
  JsonValue ParseValue() {
    JsonValue v;
    SkipSpace();
    if (pos_ >= s_.size()) {
      Fail("unexpected end");
      return v;
    }
    const char c = s_[pos_];
    if (c == '{') {
      v.kind = JsonValue::Kind::kObject;
      ++pos_;
      if (Peek() == '}') {
        ++pos_;
        return v;
      }
      while (error_.empty()) {
        SkipSpace();
        std::string key = ParseString();
        Expect(':');
        v.object.emplace_back(std::move(key), ParseValue());
        if (Peek() == ',') {
          ++pos_;
          continue;
        }
        Expect('}');
        break;
      }
    } else if (c == '[') {
      v.kind = JsonValue::Kind::kArray;
      ++pos_;
      if (Peek() == ']') {
        ++pos_;
        return v;
      }
      while (error_.empty()) {
        v.array.push_back(ParseValue());
        if (Peek() == ',') {
          ++pos_;
          continue;
        }
        Expect(']');
        break;
      }
    } else if (c == '"') {
      v.kind = JsonValue::Kind::kString;
      v.string = ParseString();
    } else if (s_.substr(pos_, 4) == "true" || s_.substr(pos_, 5) == "false") {
      v.kind = JsonValue::Kind::kBool;
      v.boolean = c == 't';
      pos_ += v.boolean ? 4 : 5;
    } else if (s_.substr(pos_, 4) == "null") {
      pos_ += 4;
    } else {
      size_t end = pos_;
      while (end < s_.size() &&
             std::string_view("+-0123456789.eE").find(s_[end]) != std::string_view::npos) {
        ++end;
      }
      if (end == pos_) {
        Fail("unexpected character");
        return v;
      }
      v.kind = JsonValue::Kind::kNumber;
      v.number = std::strtod(std::string(s_.substr(pos_, end - pos_)).c_str(), nullptr);
      pos_ = end;
    }
    return v;
  }

  std::string ParseString() {
    std::string out;
    Expect('"');
    while (error_.empty() && pos_ < s_.size() && s_[pos_] != '"') {
      const char c = s_[pos_++];
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'u': {
          uint32_t cp = ParseHex4();
          if (cp >= 0xD800 && cp <= 0xDBFF && s_.substr(pos_, 2) == "\\u") {
            pos_ += 2;
            const uint32_t low = ParseHex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) {
            Fail("lone surrogate");
            break;
          }
          AppendUtf8(cp, &out);
          break;
        }
        default:
          Fail("bad escape");
      }
    }
    Expect('"');
    return out;
  }

  uint32_t ParseHex4() {
    if (pos_ + 4 > s_.size()) {
      Fail("short \\u escape");
      return 0;
    }
    const std::string hex(s_.substr(pos_, 4));
    pos_ += 4;
    return static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16));
  }

  void SkipSpace() {
    while (pos_ < s_.size() &&
           std::string_view(" \t\r\n").find(s_[pos_]) != std::string_view::npos) {
      ++pos_;
    }
  }

  char Peek() {
    SkipSpace();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }

  void Expect(char c) {
    if (Peek() != c) {
      Fail(std::string("expected '") + c + "'");
      return;
    }
    ++pos_;
  }

  void Fail(const std::string& what) {
    if (error_.empty()) error_ = absl::StrCat("JSON: ", what, " at byte ", pos_);
    pos_ = s_.size();
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::string error_;
};

inline absl::StatusOr<JsonValue> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  absl::StatusOr<JsonValue> value = JsonParser(text).Parse();
  if (!value.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", value.status().message()));
  }
  return value;
}

}  // namespace moetier::testing
