// Unicode character classes and UTF-8 coding for the tokenizer.
//
// Invalid UTF-8 never fails: each byte that does not start a well-formed
// sequence (overlong forms, surrogates, values above U+10FFFF, stray
// continuation bytes, truncated sequences) decodes to a unit of its own whose
// codepoint is kInvalidUtf8Base + byte. Such a unit belongs to no class (not
// a letter, number, mark or whitespace), so the pre-tokenizer treats it like
// punctuation, and the byte-level BPE encodes the original byte through the
// byte map. Text therefore round-trips byte-exactly. (llama.cpp instead
// replaces such bytes with U+FFFD, which also belongs to none of the classes,
// so the split points agree and only the bytes differ.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moetier {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;
// Decoded value of an invalid byte b: kInvalidUtf8Base + b.
inline constexpr uint32_t kInvalidUtf8Base = 0x110000;

// The Unicode version of the class tables, e.g. "14.0.0".
const char* UnicodeTablesVersion();

bool IsLetter(uint32_t cp);      // general category L*
bool IsNumber(uint32_t cp);      // general category N*
bool IsMark(uint32_t cp);        // general category M*
bool IsWhitespace(uint32_t cp);  // White_Space property, i.e. the regex class \s

struct Utf8Unit {
  uint32_t codepoint = 0;  // kInvalidUtf8Base + byte when !valid
  uint32_t length = 0;     // bytes consumed: 1..4, always 1 when !valid
  bool valid = false;
};

// Decodes the unit starting at text[pos]. Precondition: pos < text.size().
Utf8Unit DecodeUtf8(std::string_view text, size_t pos);

// Appends the UTF-8 form of `cp`. A unit value kInvalidUtf8Base + b appends
// the raw byte b, so decoding then re-encoding is the identity. Aborts on
// surrogates and on values that are neither.
void AppendUtf8(uint32_t cp, std::string* out);
std::string EncodeUtf8(uint32_t cp);

bool IsValidUtf8(std::string_view text);

// Length of a trailing, incomplete but so far well-formed UTF-8 sequence
// (0..3): the bytes a streaming decoder must hold back until more arrive.
size_t IncompleteUtf8SuffixLength(std::string_view text);

// `text` with every invalid byte replaced by U+FFFD, for sinks that require
// valid UTF-8 (protobuf string fields, JSON).
std::string SanitizeUtf8(std::string_view text);

}  // namespace moetier
