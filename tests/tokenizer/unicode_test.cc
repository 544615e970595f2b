#include "gguf/tokenizer/unicode.h"

#include <string>

#include "gtest/gtest.h"
#include "gguf/tokenizer/byte_level.h"

namespace moetier {
namespace {

TEST(UnicodeClasses, Letters) {
  EXPECT_TRUE(IsLetter('a'));
  EXPECT_TRUE(IsLetter('Z'));
  EXPECT_TRUE(IsLetter(0x00E9));  // é
  EXPECT_TRUE(IsLetter(0x4F60));  // 你
  EXPECT_TRUE(IsLetter(0x0416));  // Ж
  EXPECT_TRUE(IsLetter(0x02B0));  // modifier letter small h (Lm)
  EXPECT_FALSE(IsLetter('1'));
  EXPECT_FALSE(IsLetter(' '));
  EXPECT_FALSE(IsLetter('\''));
  EXPECT_FALSE(IsLetter(0x0301));   // combining acute accent (Mn)
  EXPECT_FALSE(IsLetter(0xFF0C));   // fullwidth comma
  EXPECT_FALSE(IsLetter(0x1F642));  // emoji
  EXPECT_FALSE(IsLetter(kInvalidUtf8Base + 0xC3));
}

TEST(UnicodeClasses, NumbersMarksWhitespace) {
  EXPECT_TRUE(IsNumber('0'));
  EXPECT_TRUE(IsNumber(0x00B2));  // superscript two (No)
  EXPECT_TRUE(IsNumber(0x0663));  // Arabic-Indic digit three (Nd)
  EXPECT_TRUE(IsNumber(0x2167));  // Roman numeral eight (Nl)
  EXPECT_FALSE(IsNumber('a'));
  EXPECT_TRUE(IsMark(0x0301));
  EXPECT_TRUE(IsMark(0x0903));  // Devanagari visarga (Mc)
  EXPECT_FALSE(IsMark('e'));
  for (uint32_t cp : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u,
                      0x200Au, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_TRUE(IsWhitespace(cp)) << std::hex << cp;
  }
  // Not White_Space although some libraries call them spaces.
  for (uint32_t cp : {0x1Cu, 0x1Fu, 0x200Bu, 0xFEFFu, 0x180Eu}) {
    EXPECT_FALSE(IsWhitespace(cp)) << std::hex << cp;
  }
  EXPECT_FALSE(IsWhitespace(kInvalidUtf8Base + ' '));
  EXPECT_EQ(std::string(UnicodeTablesVersion()).empty(), false);
}

TEST(Utf8, DecodesWellFormedSequences) {
  const std::string text = "a\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x99\x82";  // a é 你 🙂
  Utf8Unit u = DecodeUtf8(text, 0);
  EXPECT_EQ(u.codepoint, 'a');
  EXPECT_EQ(u.length, 1u);
  u = DecodeUtf8(text, 1);
  EXPECT_EQ(u.codepoint, 0xE9u);
  EXPECT_EQ(u.length, 2u);
  u = DecodeUtf8(text, 3);
  EXPECT_EQ(u.codepoint, 0x4F60u);
  EXPECT_EQ(u.length, 3u);
  u = DecodeUtf8(text, 6);
  EXPECT_EQ(u.codepoint, 0x1F642u);
  EXPECT_EQ(u.length, 4u);
  EXPECT_TRUE(u.valid);
  EXPECT_TRUE(IsValidUtf8(text));
}

TEST(Utf8, InvalidBytesBecomeSingleByteUnits) {
  struct Case {
    std::string bytes;
    const char* why;
  };
  const Case cases[] = {
      {"\x80", "stray continuation"},
      {"\xC0\xAF", "overlong two-byte"},
      {"\xE0\x80\xAF", "overlong three-byte"},
      {"\xED\xA0\x80", "UTF-16 surrogate"},
      {"\xF4\x90\x80\x80", "above U+10FFFF"},
      {"\xF5\x80\x80\x80", "invalid lead byte"},
      {"\xE4\xBD", "truncated"},
      {"\xE4\x41\x41", "continuation missing"},
      {"\xFF", "never valid"},
  };
  for (const Case& c : cases) {
    const Utf8Unit u = DecodeUtf8(c.bytes, 0);
    EXPECT_FALSE(u.valid) << c.why;
    EXPECT_EQ(u.length, 1u) << c.why;
    EXPECT_EQ(u.codepoint, kInvalidUtf8Base + static_cast<uint8_t>(c.bytes[0])) << c.why;
    EXPECT_FALSE(IsValidUtf8(c.bytes)) << c.why;
    // Re-encoding unit by unit gives back the bytes.
    std::string again;
    for (size_t pos = 0; pos < c.bytes.size();) {
      const Utf8Unit unit = DecodeUtf8(c.bytes, pos);
      AppendUtf8(unit.codepoint, &again);
      pos += unit.length;
    }
    EXPECT_EQ(again, c.bytes) << c.why;
  }
}

TEST(Utf8, EncodeRoundTripsEveryScalarValue) {
  for (uint32_t cp = 0; cp <= kMaxCodepoint; cp += (cp < 0x3000 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string utf8 = EncodeUtf8(cp);
    const Utf8Unit u = DecodeUtf8(utf8, 0);
    ASSERT_TRUE(u.valid) << cp;
    ASSERT_EQ(u.codepoint, cp);
    ASSERT_EQ(u.length, utf8.size());
  }
}

TEST(Utf8, IncompleteSuffix) {
  EXPECT_EQ(IncompleteUtf8SuffixLength(""), 0u);
  EXPECT_EQ(IncompleteUtf8SuffixLength("abc"), 0u);
  EXPECT_EQ(IncompleteUtf8SuffixLength("a\xE4"), 1u);
  EXPECT_EQ(IncompleteUtf8SuffixLength("a\xE4\xBD"), 2u);
  EXPECT_EQ(IncompleteUtf8SuffixLength("a\xE4\xBD\xA0"), 0u);
  EXPECT_EQ(IncompleteUtf8SuffixLength("\xF0\x9F\x99"), 3u);
  EXPECT_EQ(IncompleteUtf8SuffixLength("\xC3"), 1u);
  // Cannot become valid: emit at once rather than hold back.
  EXPECT_EQ(IncompleteUtf8SuffixLength("\x80"), 0u);
  EXPECT_EQ(IncompleteUtf8SuffixLength("\xE0\x80"), 0u);  // overlong prefix
  EXPECT_EQ(IncompleteUtf8SuffixLength("\xFF"), 0u);
  EXPECT_EQ(IncompleteUtf8SuffixLength("\x80\x80\x80"), 0u);
}

TEST(Utf8, Sanitize) {
  EXPECT_EQ(SanitizeUtf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(SanitizeUtf8("a\xFF"
                         "b\xE4\xBD"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(ByteLevel, MapMatchesGpt2) {
  EXPECT_EQ(ByteToCodepoint(' '), 0x120u);
  EXPECT_EQ(ByteToCodepoint('\n'), 0x10Au);
  EXPECT_EQ(ByteToCodepoint(0x00), 0x100u);
  EXPECT_EQ(ByteToCodepoint(0x7F), 0x121u);
  EXPECT_EQ(ByteToCodepoint(0xA0), 0x142u);
  EXPECT_EQ(ByteToCodepoint(0xAD), 0x143u);
  EXPECT_EQ(ByteToCodepoint('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(ByteToCodepoint(0xE9), 0xE9u);
  EXPECT_EQ(ByteToMappedUtf8(' '), "\xC4\xA0");  // Ġ
  EXPECT_EQ(ByteLevelEncode("a b\n"),
            "a\xC4\xA0"
            "b\xC4\x8A");
  // Bijective: every byte maps to a distinct codepoint that maps back.
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(CodepointToByte(ByteToCodepoint(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(CodepointToByte(' '), -1);
  EXPECT_EQ(CodepointToByte(0x4F60), -1);
}

TEST(ByteLevel, DecodeReversesEncode) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string decoded;
  EXPECT_TRUE(ByteLevelDecode(ByteLevelEncode(all), &decoded));
  EXPECT_EQ(decoded, all);
  decoded.clear();
  EXPECT_FALSE(ByteLevelDecode("<|im_end|> x", &decoded));  // raw space is not mapped
  EXPECT_EQ(decoded, "<|im_end|> x");
}

}  // namespace
}  // namespace moetier
