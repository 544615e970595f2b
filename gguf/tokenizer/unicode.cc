#include "gguf/tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "gguf/tokenizer/unicode_tables.h"

namespace moetier {
namespace {

using unicode_tables::CodepointRange;

bool InRanges(std::span<const CodepointRange> ranges, uint32_t cp) {
  // First range whose end is >= cp; cp is inside iff that range starts <= cp.
  auto it = std::lower_bound(ranges.begin(), ranges.end(), cp,
                             [](const CodepointRange& r, uint32_t v) { return r.last < v; });
  return it != ranges.end() && it->first <= cp;
}

enum AsciiClass : uint8_t { kLetterBit = 1, kNumberBit = 2, kWhitespaceBit = 4 };

constexpr std::array<uint8_t, 128> MakeAsciiClasses() {
  std::array<uint8_t, 128> classes{};
  for (int c = 'a'; c <= 'z'; ++c) classes[c] = kLetterBit;
  for (int c = 'A'; c <= 'Z'; ++c) classes[c] = kLetterBit;
  for (int c = '0'; c <= '9'; ++c) classes[c] = kNumberBit;
  for (int c = 0x09; c <= 0x0D; ++c) classes[c] = kWhitespaceBit;
  classes[' '] = kWhitespaceBit;
  return classes;
}

constexpr std::array<uint8_t, 128> kAsciiClasses = MakeAsciiClasses();

[[noreturn]] void Die(const char* what, uint32_t value, int line) {
  std::fprintf(stderr, "%s:%d: %s (0x%X)\n", __FILE__, line, what, value);
  std::abort();
}

bool IsContinuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Bounds for the second byte of a sequence with lead byte `lead`; they exclude
// overlong forms, surrogates and values above U+10FFFF.
struct SecondByteRange {
  unsigned char low;
  unsigned char high;
};

SecondByteRange SecondByteBounds(unsigned char lead) {
  switch (lead) {
    case 0xE0:
      return {0xA0, 0xBF};
    case 0xED:
      return {0x80, 0x9F};
    case 0xF0:
      return {0x90, 0xBF};
    case 0xF4:
      return {0x80, 0x8F};
    default:
      return {0x80, 0xBF};
  }
}

// Sequence length announced by a lead byte, or 0 if it cannot start one.
uint32_t SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

}  // namespace

const char* UnicodeTablesVersion() { return unicode_tables::kUnicodeVersion; }

bool IsLetter(uint32_t cp) {
  if (cp < 128) return (kAsciiClasses[cp] & kLetterBit) != 0;
  return InRanges(unicode_tables::kLetterRanges, cp);
}

bool IsNumber(uint32_t cp) {
  if (cp < 128) return (kAsciiClasses[cp] & kNumberBit) != 0;
  return InRanges(unicode_tables::kNumberRanges, cp);
}

bool IsMark(uint32_t cp) {
  if (cp < 128) return false;
  return InRanges(unicode_tables::kMarkRanges, cp);
}

bool IsWhitespace(uint32_t cp) {
  if (cp < 128) return (kAsciiClasses[cp] & kWhitespaceBit) != 0;
  return InRanges(unicode_tables::kWhitespaceRanges, cp);
}

Utf8Unit DecodeUtf8(std::string_view text, size_t pos) {
  if (pos >= text.size()) Die("DecodeUtf8 past the end", static_cast<uint32_t>(pos), __LINE__);
  const auto lead = static_cast<unsigned char>(text[pos]);
  const Utf8Unit invalid{kInvalidUtf8Base + lead, 1, false};
  const uint32_t length = SequenceLength(lead);
  if (length == 0) return invalid;
  if (length == 1) return {lead, 1, true};
  if (text.size() - pos < length) return invalid;
  const auto second = static_cast<unsigned char>(text[pos + 1]);
  const SecondByteRange bounds = SecondByteBounds(lead);
  if (second < bounds.low || second > bounds.high) return invalid;
  uint32_t cp = lead & (0xFFu >> (length + 1));
  for (uint32_t i = 1; i < length; ++i) {
    const auto b = static_cast<unsigned char>(text[pos + i]);
    if (!IsContinuation(b)) return invalid;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  return {cp, length, true};
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp >= kInvalidUtf8Base && cp < kInvalidUtf8Base + 256) {
    out->push_back(static_cast<char>(cp - kInvalidUtf8Base));
  } else if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    if (cp >= 0xD800 && cp <= 0xDFFF) Die("AppendUtf8 of a surrogate", cp, __LINE__);
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= kMaxCodepoint) {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    Die("AppendUtf8 of a value that is not a codepoint", cp, __LINE__);
  }
}

std::string EncodeUtf8(uint32_t cp) {
  std::string out;
  AppendUtf8(cp, &out);
  return out;
}

bool IsValidUtf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Unit unit = DecodeUtf8(text, pos);
    if (!unit.valid) return false;
    pos += unit.length;
  }
  return true;
}

size_t IncompleteUtf8SuffixLength(std::string_view text) {
  // A sequence is at most 4 bytes, so an incomplete one starts within the
  // last 3 bytes.
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(text[n - back]);
    if (IsContinuation(b)) continue;
    const uint32_t length = SequenceLength(b);
    if (length <= back) return 0;  // ASCII, invalid lead, or already complete
    if (back >= 2) {
      const auto second = static_cast<unsigned char>(text[n - back + 1]);
      const SecondByteRange bounds = SecondByteBounds(b);
      if (second < bounds.low || second > bounds.high) return 0;
    }
    return back;
  }
  return 0;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Unit unit = DecodeUtf8(text, pos);
    if (unit.valid) {
      out.append(text.substr(pos, unit.length));
    } else {
      AppendUtf8(0xFFFD, &out);
    }
    pos += unit.length;
  }
  return out;
}

}  // namespace moetier
