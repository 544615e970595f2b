#include "gguf/tokenizer/pre_tokenizer.h"

#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gguf/tokenizer/unicode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Split(std::string_view text, PreTokenizer kind = PreTokenizer::kQwen2) {
  std::vector<std::string> out;
  for (std::string_view piece : PreTokenize(kind, text)) out.emplace_back(piece);
  return out;
}

TEST(Qwen2PreTokenizer, Contractions) {
  EXPECT_THAT(Split("I'll"), ElementsAre("I", "'ll"));
  EXPECT_THAT(Split("DON'T"), ElementsAre("DON", "'T"));
  EXPECT_THAT(Split("don't stop"), ElementsAre("don", "'t", " stop"));
  EXPECT_THAT(Split("we're they've I'm he'd it's"),
              ElementsAre("we", "'re", " they", "'ve", " I", "'m", " he", "'d", " it", "'s"));
  EXPECT_THAT(Split("WE'RE THEY'VE WE'LL"), ElementsAre("WE", "'RE", " THEY", "'VE", " WE", "'LL"));
  // Not a contraction: the apostrophe leads the letter run instead.
  EXPECT_THAT(Split("'hello"), ElementsAre("'hello"));
  EXPECT_THAT(Split("'sup"), ElementsAre("'s", "up"));
  EXPECT_THAT(Split("'l"), ElementsAre("'l"));
  EXPECT_THAT(Split("'"), ElementsAre("'"));
}

TEST(Qwen2PreTokenizer, DigitsOneAtATime) {
  EXPECT_THAT(Split("2026"), ElementsAre("2", "0", "2", "6"));
  EXPECT_THAT(Split("abc123"), ElementsAre("abc", "1", "2", "3"));
  EXPECT_THAT(Split("The year is 2026."),
              ElementsAre("The", " year", " is", " ", "2", "0", "2", "6", "."));
  EXPECT_THAT(Split("3.5"), ElementsAre("3", ".", "5"));
  EXPECT_THAT(Split("x\xC2\xB2"), ElementsAre("x", "\xC2\xB2"));  // superscript two is \p{N}
}

TEST(Qwen2PreTokenizer, WhitespaceRuns) {
  EXPECT_THAT(Split("a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(Split("a  "), ElementsAre("a", "  "));
  EXPECT_THAT(Split("a "), ElementsAre("a", " "));
  EXPECT_THAT(Split("  two spaces"), ElementsAre(" ", " two", " spaces"));
  EXPECT_THAT(Split("tab\there"), ElementsAre("tab", "\there"));
  EXPECT_THAT(Split("a \tb"), ElementsAre("a", " ", "\tb"));
  EXPECT_THAT(Split("a\t\t"), ElementsAre("a", "\t\t"));
  EXPECT_THAT(Split(" 1"), ElementsAre(" ", "1"));
  EXPECT_THAT(Split("   "), ElementsAre("   "));
  // U+3000 ideographic space is \s and, before a letter, leads the letter run.
  EXPECT_THAT(Split("a\xE3\x80\x80"
                    "b"),
              ElementsAre("a",
                          "\xE3\x80\x80"
                          "b"));
}

TEST(Qwen2PreTokenizer, LineBreaks) {
  EXPECT_THAT(Split("x\n"), ElementsAre("x", "\n"));
  EXPECT_THAT(Split("a\n\nb"), ElementsAre("a", "\n\n", "b"));
  EXPECT_THAT(Split("a \r\n  b"), ElementsAre("a", " \r\n", " ", " b"));
  EXPECT_THAT(Split("line one\nline two\r\n"),
              ElementsAre("line", " one", "\n", "line", " two", "\r\n"));
  EXPECT_THAT(Split("Hello  \n"), ElementsAre("Hello", "  \n"));
  EXPECT_THAT(Split("\n\n  \n x"), ElementsAre("\n\n  \n", " x"));
  // A line break never leads a letter run.
  EXPECT_THAT(Split("\nabc"), ElementsAre("\n", "abc"));
}

TEST(Qwen2PreTokenizer, Punctuation) {
  EXPECT_THAT(Split("Hello, world!"), ElementsAre("Hello", ",", " world", "!"));
  EXPECT_THAT(Split("wait!!! ..."), ElementsAre("wait", "!!!", " ..."));
  EXPECT_THAT(Split("a...\n\nb"), ElementsAre("a", "...\n\n", "b"));
  EXPECT_THAT(Split(" (hello)"), ElementsAre(" (", "hello", ")"));
  EXPECT_THAT(Split("(hello"), ElementsAre("(hello"));
  EXPECT_THAT(Split("x = f(a, b) + 3.5"),
              ElementsAre("x", " =", " f", "(a", ",", " b", ")", " +", " ", "3", ".", "5"));
  EXPECT_THAT(Split("if (a->b) {"), ElementsAre("if", " (", "a", "->", "b", ")", " {"));
}

TEST(Qwen2PreTokenizer, CjkAndEmoji) {
  // 你好，世界: the fullwidth comma leads the following letter run.
  EXPECT_THAT(Split("你好，世界"), ElementsAre("你好", "，世界"));
  EXPECT_THAT(Split("emoji 🙂 ok"), ElementsAre("emoji", " 🙂", " ok"));
  EXPECT_THAT(Split("🙂🙂"), ElementsAre("🙂🙂"));
  EXPECT_THAT(Split("a🙂b"), ElementsAre("a", "🙂b"));
}

TEST(Qwen2PreTokenizer, CombiningMarksAreNotLetters) {
  // "café" with a decomposed é (e + U+0301).
  EXPECT_THAT(Split("cafe\xCC\x81 ok"), ElementsAre("cafe", "\xCC\x81", " ok"));
  EXPECT_THAT(Split("e\xCC\x81"), ElementsAre("e", "\xCC\x81"));
}

TEST(Qwen35PreTokenizer, LetterRunsAbsorbMarks) {
  EXPECT_THAT(Split("cafe\xCC\x81 ok", PreTokenizer::kQwen35), ElementsAre("cafe\xCC\x81", " ok"));
  EXPECT_THAT(Split("\xCC\x81"
                    "abc",
                    PreTokenizer::kQwen35),
              ElementsAre("\xCC\x81"
                          "abc"));
  // A mark after punctuation is letter-like, so it joins a letter run.
  EXPECT_THAT(Split("!\xCC\x81", PreTokenizer::kQwen35), ElementsAre("!\xCC\x81"));
  EXPECT_THAT(Split("I'll 2026", PreTokenizer::kQwen35),
              ElementsAre("I", "'ll", " ", "2", "0", "2", "6"));
}

TEST(Qwen2PreTokenizer, InvalidUtf8IsSplitLikeAReplacementCharacter) {
  // An invalid byte is a unit of no class, like U+FFFD in llama.cpp: it may
  // lead a letter run or join a punctuation run, and its bytes are kept.
  EXPECT_THAT(Split("ab\xFF"
                    "cd"),
              ElementsAre("ab",
                          "\xFF"
                          "cd"));
  EXPECT_THAT(Split("\xFF\xFE!"), ElementsAre("\xFF\xFE!"));
  EXPECT_THAT(Split("a \xE4\xBD"), ElementsAre("a", " \xE4\xBD"));
  EXPECT_THAT(Split("\x80\n"), ElementsAre("\x80\n"));
  // The valid part of a broken sequence is still decoded: 0xE4 0x41 is an
  // invalid byte followed by 'A'.
  EXPECT_THAT(Split("\xE4"
                    "A1"),
              ElementsAre("\xE4"
                          "A",
                          "1"));
}

std::vector<std::string> Gpt2(std::string_view text) { return Split(text, PreTokenizer::kGpt2); }

TEST(Gpt2PreTokenizer, ContractionsAreCaseSensitive) {
  EXPECT_THAT(Gpt2("don't stop"), ElementsAre("don", "'t", " stop"));
  EXPECT_THAT(Gpt2("we're they've I'm he'd it's we'll"),
              ElementsAre("we", "'re", " they", "'ve", " I", "'m", " he", "'d", " it", "'s", " we",
                          "'ll"));
  // Upper case is no contraction: the apostrophe is punctuation.
  EXPECT_THAT(Gpt2("DON'T"), ElementsAre("DON", "'", "T"));
  EXPECT_THAT(Gpt2("'hello"), ElementsAre("'", "hello"));
  EXPECT_THAT(Gpt2("'sup"), ElementsAre("'s", "up"));
  EXPECT_THAT(Gpt2("'"), ElementsAre("'"));
  EXPECT_THAT(Gpt2("x 's"), ElementsAre("x", " '", "s"));
}

TEST(Gpt2PreTokenizer, LettersNumbersAndPunctuationTakeOneLeadingSpace) {
  EXPECT_THAT(Gpt2("Hello, world!"), ElementsAre("Hello", ",", " world", "!"));
  EXPECT_THAT(Gpt2("The year 2026."), ElementsAre("The", " year", " 2026", "."));
  EXPECT_THAT(Gpt2("abc123def"), ElementsAre("abc", "123", "def"));
  EXPECT_THAT(Gpt2("3.14"), ElementsAre("3", ".", "14"));
  EXPECT_THAT(Gpt2(" !! ?"), ElementsAre(" !!", " ?"));
  EXPECT_THAT(Gpt2("(x)"), ElementsAre("(", "x", ")"));
  EXPECT_THAT(Gpt2("\xE4\xBD\xA0\xE5\xA5\xBD \xE4\xB8\x96"),
              ElementsAre("\xE4\xBD\xA0\xE5\xA5\xBD", " \xE4\xB8\x96"));
  // A combining mark is neither letter nor number: it is punctuation here.
  EXPECT_THAT(Gpt2("cafe\xCC\x81 ok"), ElementsAre("cafe", "\xCC\x81", " ok"));
  // A tab is no "space" for the optional prefix.
  EXPECT_THAT(Gpt2("\thello"), ElementsAre("\t", "hello"));
}

TEST(Gpt2PreTokenizer, WhitespaceLeavesItsLastCharacterToWhatFollows) {
  EXPECT_THAT(Gpt2("a  b"), ElementsAre("a", " ", " b"));
  EXPECT_THAT(Gpt2("  hello"), ElementsAre(" ", " hello"));
  EXPECT_THAT(Gpt2("a\n\nb"), ElementsAre("a", "\n", "\n", "b"));
  EXPECT_THAT(Gpt2("a \n b"), ElementsAre("a", " \n", " b"));
  EXPECT_THAT(Gpt2("x\r\n\r\ny"), ElementsAre("x", "\r\n\r", "\n", "y"));
  // At the end the whole run is one piece.
  EXPECT_THAT(Gpt2("hello  \n"), ElementsAre("hello", "  \n"));
  EXPECT_THAT(Gpt2("   "), ElementsAre("   "));
  EXPECT_THAT(Gpt2(" "), ElementsAre(" "));
}

TEST(Gpt2PreTokenizer, InvalidUtf8IsPunctuation) {
  EXPECT_THAT(Gpt2("a\xFF\xFE b"), ElementsAre("a", "\xFF\xFE", " b"));
  EXPECT_THAT(Gpt2(" \x80"), ElementsAre(" \x80"));
}

std::vector<std::string> Llama3(std::string_view text) {
  return Split(text, PreTokenizer::kLlama3);
}

TEST(Llama3PreTokenizer, DigitRunsSplitIntoGroupsOfThreeFromTheLeft) {
  EXPECT_THAT(Llama3("12345"), ElementsAre("123", "45"));
  EXPECT_THAT(Llama3("1"), ElementsAre("1"));
  EXPECT_THAT(Llama3("123"), ElementsAre("123"));
  EXPECT_THAT(Llama3("1234567"), ElementsAre("123", "456", "7"));
  EXPECT_THAT(Llama3(" 2024年"), ElementsAre(" ", "202", "4", "年"));
  EXPECT_THAT(Llama3("In 2024, 1,000,000 people"),
              ElementsAre("In", " ", "202", "4", ",", " ", "1", ",", "000", ",", "000", " people"));
  EXPECT_THAT(Llama3("abc12345def"), ElementsAre("abc", "123", "45", "def"));
  EXPECT_THAT(Llama3("3.14159"), ElementsAre("3", ".", "141", "59"));
  EXPECT_THAT(Llama3("v1.2.3-rc4"), ElementsAre("v", "1", ".", "2", ".", "3", "-rc", "4"));
  // Every \p{N} counts, not only ASCII: Arabic-Indic and fullwidth digits,
  // superscripts (No) and Roman numerals (Nl), mixed in one run.
  EXPECT_THAT(Llama3("٣٤٥٦"), ElementsAre("٣٤٥", "٦"));
  EXPECT_THAT(Llama3("１２３４"), ElementsAre("１２３", "４"));
  EXPECT_THAT(Llama3("x12²3"), ElementsAre("x", "12²", "3"));
  EXPECT_THAT(Llama3("Ⅻ1"), ElementsAre("Ⅻ1"));
  // A digit never leads a letter run, and a run ends at the first non-digit.
  EXPECT_THAT(Llama3("12ab"), ElementsAre("12", "ab"));
  EXPECT_THAT(Llama3("1234\n"), ElementsAre("123", "4", "\n"));
}

TEST(Llama3PreTokenizer, RestOfThePatternIsQwen2s) {
  EXPECT_THAT(Llama3("I'll DON'T we're"), ElementsAre("I", "'ll", " DON", "'T", " we", "'re"));
  EXPECT_THAT(Llama3("a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(Llama3("a \r\n  b"), ElementsAre("a", " \r\n", " ", " b"));
  EXPECT_THAT(Llama3("x = f(a, b)"), ElementsAre("x", " =", " f", "(a", ",", " b", ")"));
  EXPECT_THAT(Llama3("你好，世界"), ElementsAre("你好", "，世界"));
  EXPECT_THAT(Llama3("cafe\xCC\x81 ok"), ElementsAre("cafe", "\xCC\x81", " ok"));
}

std::vector<std::string> Gpt4o(std::string_view text) { return Split(text, PreTokenizer::kGpt4o); }

TEST(Gpt4oPreTokenizer, WordsSplitWhereLowerCaseTurnsUpper) {
  EXPECT_THAT(Gpt4o("HelloWorld"), ElementsAre("Hello", "World"));
  EXPECT_THAT(Gpt4o("camelCase"), ElementsAre("camel", "Case"));
  // Capitals run on into the lower-case letters after them.
  EXPECT_THAT(Gpt4o("HTTPServer"), ElementsAre("HTTPServer"));
  EXPECT_THAT(Gpt4o("getHTTPResponse"), ElementsAre("get", "HTTPResponse"));
  EXPECT_THAT(Gpt4o("ABC"), ElementsAre("ABC"));
  EXPECT_THAT(Gpt4o("iPhone XR"), ElementsAre("i", "Phone", " XR"));
  EXPECT_THAT(Gpt4o("Hello, world!"), ElementsAre("Hello", ",", " world", "!"));
}

TEST(Gpt4oPreTokenizer, ContractionsEndTheWordBeforeThem) {
  EXPECT_THAT(Gpt4o("DON'T"), ElementsAre("DON'T"));
  EXPECT_THAT(Gpt4o("we're"), ElementsAre("we're"));
  EXPECT_THAT(Gpt4o("I'll we've she'd it's I'm"),
              ElementsAre("I'll", " we've", " she'd", " it's", " I'm"));
  EXPECT_THAT(Gpt4o("WE'RE They'Ll HELLO'S"), ElementsAre("WE'RE", " They'Ll", " HELLO'S"));
  EXPECT_THAT(Gpt4o("don'tStop"), ElementsAre("don't", "Stop"));
  EXPECT_THAT(Gpt4o("can'tt"), ElementsAre("can't", "t"));
  EXPECT_THAT(Gpt4o("rock'n'roll"), ElementsAre("rock", "'n", "'roll"));
  // With no word before it, the apostrophe leads the next word or is
  // punctuation.
  EXPECT_THAT(Gpt4o("'sup"), ElementsAre("'sup"));
  EXPECT_THAT(Gpt4o("2's"), ElementsAre("2", "'s"));
  EXPECT_THAT(Gpt4o("x 's"), ElementsAre("x", " '", "s"));
}

TEST(Gpt4oPreTokenizer, DigitsInGroupsOfThree) {
  EXPECT_THAT(Gpt4o("12345"), ElementsAre("123", "45"));
  EXPECT_THAT(Gpt4o("In 2024, 1,000,000"),
              ElementsAre("In", " ", "202", "4", ",", " ", "1", ",", "000", ",", "000"));
  EXPECT_THAT(Gpt4o("abc1234def"), ElementsAre("abc", "123", "4", "def"));
  EXPECT_THAT(Gpt4o("٣٤٥٦"), ElementsAre("٣٤٥", "٦"));
}

TEST(Gpt4oPreTokenizer, PunctuationTakesTheLineBreaksAndSlashesAfterIt) {
  EXPECT_THAT(Gpt4o("x/\n/"), ElementsAre("x", "/\n/"));
  EXPECT_THAT(Gpt4o("a //\n\n//b"), ElementsAre("a", " //\n\n//", "b"));
  EXPECT_THAT(Gpt4o("end.\r\n//"), ElementsAre("end", ".\r\n//"));
  EXPECT_THAT(Gpt4o("});\n/* c */"), ElementsAre("});\n/", "*", " c", " */"));
  EXPECT_THAT(Gpt4o("path/to/file"), ElementsAre("path", "/to", "/file"));
  // After a line break alone, a slash is punctuation of its own.
  EXPECT_THAT(Gpt4o("x\n/"), ElementsAre("x", "\n", "/"));
}

TEST(Gpt4oPreTokenizer, WhitespaceRuns) {
  EXPECT_THAT(Gpt4o("  Hello"), ElementsAre(" ", " Hello"));
  EXPECT_THAT(Gpt4o("a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(Gpt4o("\tHello"), ElementsAre("\tHello"));
  EXPECT_THAT(Gpt4o("a \r\n  b"), ElementsAre("a", " \r\n", " ", " b"));
  EXPECT_THAT(Gpt4o("\n\nWorld"), ElementsAre("\n\n", "World"));
  EXPECT_THAT(Gpt4o("x  "), ElementsAre("x", "  "));
  EXPECT_THAT(Gpt4o("a\xE3\x80\x80"
                    "b"),
              ElementsAre("a",
                          "\xE3\x80\x80"
                          "b"));
}

// llama.cpp's form of the pattern (see pre_tokenizer.h), not tokenizer.json's.
TEST(Gpt4oPreTokenizer, MarksArePunctuation) {
  EXPECT_THAT(Gpt4o("cafe\xCC\x81 ok"), ElementsAre("cafe", "\xCC\x81", " ok"));
  EXPECT_THAT(Gpt4o("e\xCC\x81t"), ElementsAre("e", "\xCC\x81t"));
  EXPECT_THAT(Gpt4o("\xCC\x81"
                    "abc"),
              ElementsAre("\xCC\x81"
                          "abc"));
  EXPECT_THAT(Gpt4o("हिंदी"), ElementsAre("ह", "िं", "द", "ी"));
}

TEST(Gpt4oPreTokenizer, OnlyAsciiLettersHaveACase) {
  // Lu: É. A run of capitals ends after its last non-ASCII letter.
  EXPECT_THAT(Gpt4o("ÉTÉ"), ElementsAre("ÉTÉ"));
  EXPECT_THAT(Gpt4o("ÉT"), ElementsAre("É", "T"));
  EXPECT_THAT(Gpt4o("ÉCOLE's"), ElementsAre("É", "COLE's"));
  EXPECT_THAT(Gpt4o("ÀBc"), ElementsAre("ÀBc"));
  EXPECT_THAT(Gpt4o("HÉ's"), ElementsAre("HÉ's"));
  // Ll: é, and Cyrillic words of either case.
  EXPECT_THAT(Gpt4o("éA"), ElementsAre("é", "A"));
  EXPECT_THAT(Gpt4o("ПриветМир"), ElementsAre("ПриветМир"));
  EXPECT_THAT(Gpt4o("приВЕТ"), ElementsAre("приВЕТ"));
  EXPECT_THAT(Gpt4o("aÀB"), ElementsAre("aÀ", "B"));
  // Lt (ǅ), Lm (ʰ) and Lo (你好) alike.
  EXPECT_THAT(Gpt4o("ǅa aǅB"), ElementsAre("ǅa", " aǅ", "B"));
  EXPECT_THAT(Gpt4o("ʰa aʰB"), ElementsAre("ʰa", " aʰ", "B"));
  EXPECT_THAT(Gpt4o("你好World"), ElementsAre("你好World"));
  EXPECT_THAT(Gpt4o("Hello你好World"), ElementsAre("Hello你好", "World"));
}

TEST(Gpt4oPreTokenizer, InvalidUtf8IsPunctuation) {
  EXPECT_THAT(Gpt4o("ab\xFF"
                    "cd"),
              ElementsAre("ab",
                          "\xFF"
                          "cd"));
  EXPECT_THAT(Gpt4o("\xFF\xFE!\n/"), ElementsAre("\xFF\xFE!\n/"));
  EXPECT_THAT(Gpt4o("x \xE4\xBD"), ElementsAre("x", " \xE4\xBD"));
  // 0xC0 is never valid; the 'B' after it is still a capital.
  EXPECT_THAT(Gpt4o("aA\xC0"
                    "Bc"),
              ElementsAre("a", "A",
                          "\xC0"
                          "Bc"));
}

// Random text from characters the scanners treat differently, and invalid
// bytes. `max_digit_run` bounds how many \p{N} codepoints follow one another.
std::string RandomText(std::mt19937& rng, int max_digit_run) {
  static const char* const kNumbers[] = {"7", "0", "٣", "²", "１", "Ⅻ"};
  static const char* const kOthers[] = {
      "a",    "Z",    "s",   "t", "l", "'", " ",  " ",  "\xC2\xA0", "\t",           "\n",
      "\r",   ".",    ",",   "!", "(", "é", "你", "，", "\xCC\x81", "\xE3\x80\x80", "🙂",
      "\x80", "\xFF", "\xC0"};
  std::string text;
  int digit_run = 0;
  const int length = static_cast<int>(rng() % 30);
  for (int i = 0; i < length; ++i) {
    if (rng() % 3 == 0 && digit_run < max_digit_run) {
      text += kNumbers[rng() % std::size(kNumbers)];
      ++digit_run;
    } else {
      text += kOthers[rng() % std::size(kOthers)];
      digit_run = 0;
    }
  }
  return text;
}

TEST(Llama3PreTokenizer, AgreesWithQwen2WhereNoDigitsAreAdjacent) {
  std::mt19937 rng(20240);
  for (int trial = 0; trial < 5000; ++trial) {
    const std::string text = RandomText(rng, 1);
    ASSERT_EQ(PreTokenize(PreTokenizer::kLlama3, text), PreTokenize(PreTokenizer::kQwen2, text))
        << "text: " << text;
  }
}

// Qwen2 gives every \p{N} codepoint a piece of its own; Llama 3 joins up to
// three neighbours and leaves everything else alone.
std::vector<std::string_view> GroupDigitsByThree(std::string_view text,
                                                 const std::vector<std::string_view>& pieces) {
  const auto is_digit = [](std::string_view piece) {
    const Utf8Unit u = DecodeUtf8(piece, 0);
    return u.valid && u.length == piece.size() && IsNumber(u.codepoint);
  };
  std::vector<std::string_view> grouped;
  int run = 0;
  for (const std::string_view piece : pieces) {
    if (is_digit(piece) && run > 0 && run < 3) {
      const std::string_view last = grouped.back();
      grouped.back() = text.substr(last.data() - text.data(), last.size() + piece.size());
      ++run;
      continue;
    }
    grouped.push_back(piece);
    run = is_digit(piece) ? 1 : 0;
  }
  return grouped;
}

TEST(Llama3PreTokenizer, IsQwen2WithDigitsGroupedByThree) {
  std::mt19937 rng(31337);
  for (int trial = 0; trial < 5000; ++trial) {
    const std::string text = RandomText(rng, 7);
    ASSERT_EQ(PreTokenize(PreTokenizer::kLlama3, text),
              GroupDigitsByThree(text, PreTokenize(PreTokenizer::kQwen2, text)))
        << "text: " << text;
  }
}

TEST(PreTokenizer, PiecesConcatenateToInputForRandomBytes) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int length = static_cast<int>(rng() % 40);
    for (int i = 0; i < length; ++i) {
      // Bias towards characters the scanner cares about.
      static const char kInteresting[] = " \t\r\nab'sZ9.!\xC3\xA9\xE4\xBD\xA0\xCC\x81";
      text.push_back(rng() % 2 ? kInteresting[rng() % (sizeof(kInteresting) - 1)]
                               : static_cast<char>(rng() % 256));
    }
    for (PreTokenizer kind : {PreTokenizer::kQwen2, PreTokenizer::kQwen35, PreTokenizer::kGpt2,
                              PreTokenizer::kLlama3, PreTokenizer::kGpt4o}) {
      std::string joined;
      for (std::string_view piece : PreTokenize(kind, text)) {
        ASSERT_FALSE(piece.empty());
        joined.append(piece);
      }
      ASSERT_EQ(joined, text);
    }
  }
}

TEST(PreTokenizer, Names) {
  EXPECT_EQ(*PreTokenizerFromName("qwen2"), PreTokenizer::kQwen2);
  EXPECT_EQ(*PreTokenizerFromName("deepseek-r1-qwen"), PreTokenizer::kQwen2);
  EXPECT_EQ(*PreTokenizerFromName("qwen35"), PreTokenizer::kQwen35);
  // llama.cpp's deepseek-llm is a chain of regexes of its own.
  const absl::StatusOr<PreTokenizer> bad = PreTokenizerFromName("deepseek-llm");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnimplemented);
  const std::string message(bad.status().message());
  EXPECT_THAT(message, HasSubstr("\"deepseek-llm\""));
  for (const char* name : {"qwen2", "deepseek-r1-qwen", "qwen35", "olmo", "granite-docling",
                           "llama3", "llama-bpe", "dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}) {
    EXPECT_THAT(message, HasSubstr(std::string(" ") + name)) << name;
  }
  EXPECT_THAT(message, HasSubstr(SupportedPreTokenizerNames()));
  EXPECT_EQ(PreTokenizerName(PreTokenizer::kQwen35), "qwen35");
  EXPECT_EQ(PreTokenizerName(PreTokenizer::kGpt2), "gpt2");
  EXPECT_EQ(PreTokenizerName(PreTokenizer::kLlama3), "llama3");

  // The GPT-2 pattern's names, and whether llama.cpp cleans up spaces.
  for (const char* name : {"olmo", "gpt-2", "mpt", "jais", "phi-2", "exaone4"}) {
    const absl::StatusOr<PreTokenizerInfo> info = LookUpPreTokenizer(name);
    ASSERT_TRUE(info.ok()) << name;
    EXPECT_EQ(info->kind, PreTokenizer::kGpt2) << name;
    EXPECT_TRUE(info->clean_up_spaces) << name;
  }
  EXPECT_FALSE(LookUpPreTokenizer("trillion")->clean_up_spaces);
  EXPECT_FALSE(LookUpPreTokenizer("qwen2")->clean_up_spaces);
  // llama.cpp's "default" is a chain of other regexes, not this scanner.
  const absl::StatusOr<PreTokenizerInfo> fallback = LookUpPreTokenizer("default");
  ASSERT_FALSE(fallback.ok());
  EXPECT_THAT(std::string(fallback.status().message()), HasSubstr("olmo"));
}

TEST(PreTokenizer, Llama3Names) {
  // LLAMA_VOCAB_PRE_TYPE_LLAMA3 in llama.cpp: clean_spaces, ignore_merges and
  // add_bos.
  for (const char* name : {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                           "midm-2.0", "lfm2", "jina-v5-nano"}) {
    const absl::StatusOr<PreTokenizerInfo> info = LookUpPreTokenizer(name);
    ASSERT_TRUE(info.ok()) << name << ": " << info.status();
    EXPECT_EQ(info->kind, PreTokenizer::kLlama3) << name;
    EXPECT_TRUE(info->clean_up_spaces) << name;
    EXPECT_TRUE(info->ignore_merges) << name;
    EXPECT_TRUE(info->add_bos_by_default) << name;
  }
  // _DBRX, _SMAUG and _CHATGLM4: the same regex and clean_spaces, merges
  // always run, no BOS unless the file asks for it.
  for (const char* name : {"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}) {
    const absl::StatusOr<PreTokenizerInfo> info = LookUpPreTokenizer(name);
    ASSERT_TRUE(info.ok()) << name << ": " << info.status();
    EXPECT_EQ(info->kind, PreTokenizer::kLlama3) << name;
    EXPECT_TRUE(info->clean_up_spaces) << name;
    EXPECT_FALSE(info->ignore_merges) << name;
    EXPECT_FALSE(info->add_bos_by_default) << name;
  }
  // The other tables keep llama.cpp's defaults.
  for (const char* name : {"qwen2", "qwen35", "olmo"}) {
    EXPECT_FALSE(LookUpPreTokenizer(name)->ignore_merges) << name;
    EXPECT_FALSE(LookUpPreTokenizer(name)->add_bos_by_default) << name;
  }
  // Names are exact.
  EXPECT_FALSE(LookUpPreTokenizer("Llama3").ok());
  EXPECT_FALSE(LookUpPreTokenizer("glm").ok());
}

TEST(PreTokenizer, Gpt4oNames) {
  // LLAMA_VOCAB_PRE_TYPE_GPT4O and _MINIMAX_M2 in llama.cpp: clean_spaces
  // off, merges always run, no BOS unless the file asks for it.
  for (const char* name : {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}) {
    const absl::StatusOr<PreTokenizerInfo> info = LookUpPreTokenizer(name);
    ASSERT_TRUE(info.ok()) << name << ": " << info.status();
    EXPECT_EQ(info->kind, PreTokenizer::kGpt4o) << name;
    EXPECT_FALSE(info->clean_up_spaces) << name;
    EXPECT_FALSE(info->ignore_merges) << name;
    EXPECT_FALSE(info->add_bos_by_default) << name;
    EXPECT_THAT(SupportedPreTokenizerNames(), HasSubstr(name));
  }
  EXPECT_EQ(PreTokenizerName(PreTokenizer::kGpt4o), "gpt-4o");
  EXPECT_FALSE(LookUpPreTokenizer("gpt4o").ok());
  EXPECT_FALSE(LookUpPreTokenizer("o200k").ok());
}

}  // namespace
}  // namespace moetier
