#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "synth/bpe_trainer.h"
#include "gguf/tokenizer/byte_level.h"
#include "gguf/tokenizer/tokenizer.h"

namespace moetier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A vocabulary of the 256 byte tokens plus `extra` tokens given in raw bytes
// (stored mapped), with merges given as raw "left right" byte strings.
TokenizerConfig ByteVocab(const std::vector<std::string>& extra,
                          const std::vector<std::pair<std::string, std::string>>& merges) {
  TokenizerConfig config;
  for (int b = 0; b < 256; ++b)
    config.tokens.emplace_back(ByteToMappedUtf8(static_cast<uint8_t>(b)));
  for (const std::string& e : extra) config.tokens.push_back(ByteLevelEncode(e));
  for (const auto& [l, r] : merges) {
    config.merges.push_back(ByteLevelEncode(l) + " " + ByteLevelEncode(r));
  }
  return config;
}

Tokenizer MustCreate(TokenizerConfig config) {
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(std::move(config));
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

std::vector<int32_t> MustEncode(const Tokenizer& t, std::string_view text, bool parse_special) {
  absl::StatusOr<std::vector<int32_t>> ids = t.Encode(text, parse_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

std::string MustDecode(const Tokenizer& t, const std::vector<int32_t>& ids, bool render_special) {
  absl::StatusOr<std::string> text = t.Detokenize(ids, render_special);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string();
}

const BpeVocabulary& TrainedVocab() {
  static const BpeVocabulary* const vocab =
      new BpeVocabulary(TrainByteLevelBpe(BuiltinTrainingCorpus(), 2000));
  return *vocab;
}

Tokenizer TrainedTokenizer() {
  TokenizerConfig config;
  config.tokens = TrainedVocab().tokens;
  config.merges = TrainedVocab().merges;
  return MustCreate(std::move(config));
}

TEST(BpeMergeLoop, LowestRankFirst) {
  // "b c" outranks "a b", so "abc" becomes a + bc, not ab + c.
  const Tokenizer t = MustCreate(ByteVocab({"bc", "ab"}, {{"b", "c"}, {"a", "b"}}));
  EXPECT_THAT(MustEncode(t, "abc", false), ElementsAre('a', 256));
  const Tokenizer swapped = MustCreate(ByteVocab({"bc", "ab"}, {{"a", "b"}, {"b", "c"}}));
  EXPECT_THAT(MustEncode(swapped, "abc", false), ElementsAre(257, 'c'));
}

TEST(BpeMergeLoop, LeftmostWinsATie) {
  const Tokenizer t = MustCreate(ByteVocab({"aa"}, {{"a", "a"}}));
  EXPECT_THAT(MustEncode(t, "aaa", false), ElementsAre(256, 'a'));
  EXPECT_THAT(MustEncode(t, "aaaa", false), ElementsAre(256, 256));
}

TEST(BpeMergeLoop, StalePairsAreSkipped) {
  // After both "a b" merges, the queued "b a" pair in the middle is stale.
  const Tokenizer t =
      MustCreate(ByteVocab({"ab", "ba", "abab"}, {{"a", "b"}, {"b", "a"}, {"ab", "ab"}}));
  EXPECT_THAT(MustEncode(t, "abab", false), ElementsAre(258));
  EXPECT_THAT(MustEncode(t, "bab", false), ElementsAre('b', 256));
}

TEST(BpeMergeLoop, MergedTextMissingFromVocabularyFallsBackToBytes) {
  // The merge "x y" exists but "xy" is no token: emit the bytes.
  const Tokenizer t = MustCreate(ByteVocab({}, {{"x", "y"}}));
  EXPECT_THAT(MustEncode(t, "xy", false), ElementsAre('x', 'y'));
}

TEST(BpeMergeLoop, MergesChainThroughTextsThatAreNoTokens) {
  // " the": " t" (rank 0) and "he" (rank 2) first, then " t"+"he" (rank 1).
  // "he" itself is no token, but it is a symbol the merge loop can use.
  const Tokenizer t = MustCreate(ByteVocab({" t", " the"}, {{" ", "t"}, {" t", "he"}, {"h", "e"}}));
  EXPECT_THAT(MustEncode(t, " the", false), ElementsAre(257));
  EXPECT_THAT(MustEncode(t, " th", false), ElementsAre(256, 'h'));
  // Without the merge that joins them, "he" is emitted byte by byte.
  EXPECT_THAT(MustEncode(t, "he", false), ElementsAre('h', 'e'));
}

TEST(BpeMergeLoop, MissingByteTokenIsAnError) {
  TokenizerConfig config = ByteVocab({}, {});
  config.tokens['q'] = "not-q";
  const Tokenizer t = MustCreate(std::move(config));
  const absl::StatusOr<std::vector<int32_t>> ids = t.Encode("quiz", false);
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("0x71"));
}

TEST(BpeTrainer, ProducesAConsistentVocabulary) {
  const BpeVocabulary& vocab = TrainedVocab();
  ASSERT_EQ(vocab.merges.size(), 2000u);
  ASSERT_EQ(vocab.tokens.size(), 256u + vocab.merges.size());
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(vocab.tokens[b], ByteToMappedUtf8(static_cast<uint8_t>(b)));
  }
  absl::flat_hash_set<std::string> seen(vocab.tokens.begin(), vocab.tokens.end());
  EXPECT_EQ(seen.size(), vocab.tokens.size()) << "tokens are not unique";
  for (size_t i = 0; i < vocab.merges.size(); ++i) {
    const std::string& merge = vocab.merges[i];
    const size_t space = merge.find(' ', 1);
    ASSERT_NE(space, std::string::npos) << merge;
    EXPECT_EQ(merge.find(' ', space + 1), std::string::npos) << merge;
    const std::string left = merge.substr(0, space);
    const std::string right = merge.substr(space + 1);
    EXPECT_EQ(vocab.tokens[256 + i], left + right);
    // Both sides exist before the merge that uses them.
    EXPECT_TRUE(seen.contains(left));
    EXPECT_TRUE(seen.contains(right));
  }
  // The most frequent pair of English text with the qwen2 split is a
  // space-prefixed one; check the vocabulary learned common words whole.
  EXPECT_TRUE(seen.contains(ByteLevelEncode(" the")));
  EXPECT_TRUE(seen.contains(ByteLevelEncode(" return")));
  EXPECT_TRUE(seen.contains(ByteLevelEncode("的")));
}

TEST(BpeTrainer, IsDeterministicAndStopsWhenNoPairRepeats) {
  const BpeVocabulary a = TrainByteLevelBpe("the cat sat on the mat; the cat ate", 1000);
  const BpeVocabulary b = TrainByteLevelBpe("the cat sat on the mat; the cat ate", 1000);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.merges, b.merges);
  EXPECT_LT(a.merges.size(), 1000u);
  EXPECT_GT(a.merges.size(), 3u);
  // The most frequent pair comes first: "a a" occurs three times.
  EXPECT_EQ(TrainByteLevelBpe("aaab aab", 10).merges.front(), "a a");
  EXPECT_TRUE(TrainByteLevelBpe("abc", 10).merges.empty());
  EXPECT_TRUE(TrainByteLevelBpe("", 10).merges.empty());
}

TEST(BpeTrainer, TrainsThousandsOfMergesQuickly) {
  const auto start = std::chrono::steady_clock::now();
  const BpeVocabulary vocab = TrainByteLevelBpe(BuiltinTrainingCorpus(), 3000);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(vocab.merges.size(), 3000u);
  // Generous: the target is well under 2 s in an optimized build; this
  // only catches an accidental quadratic blow-up (sanitizer builds included).
  EXPECT_LT(seconds, 20.0);
  EXPECT_GE(BuiltinTrainingCorpus().size(), 30000u);
  EXPECT_LE(BuiltinTrainingCorpus().size(), 60000u);
}

TEST(BpeRoundTrip, TrainedVocabularyIsByteExact) {
  const Tokenizer t = TrainedTokenizer();
  const std::string texts[] = {
      "",
      "Hello, world!",
      "The harbour empties a little before it fills again.",
      "int main() {\n  return 0;\n}\n",
      "def f(x):\n\treturn x ** 2  # square\r\n",
      "你好，世界！今天天气很好。",
      "emoji 🙂🙃 and combining e\xCC\x81",
      "   leading and trailing   ",
      "\n\n\n",
      std::string("nul\0byte", 8),
      "invalid \xFF\xFE utf-8 \xE4\xBD and \xC0\xAF",
  };
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = MustEncode(t, text, true);
    EXPECT_EQ(MustDecode(t, ids, true), text);
  }
  // Merges make ordinary text shorter than its byte count.
  EXPECT_LT(MustEncode(t, texts[2], true).size(), texts[2].size() / 2);
}

TEST(BpeRoundTrip, RandomBytes) {
  const Tokenizer t = TrainedTokenizer();
  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int length = static_cast<int>(rng() % 200);
    for (int i = 0; i < length; ++i) text.push_back(static_cast<char>(rng() % 256));
    ASSERT_EQ(MustDecode(t, MustEncode(t, text, false), false), text);
  }
}

TEST(StreamingDecoder, MultiByteCharacterSplitOverTwoTokens) {
  // 你 is E4 BD A0; the vocabulary has a token for the first two bytes only.
  const Tokenizer t = MustCreate(ByteVocab({"\xE4\xBD"}, {{"\xE4", "\xBD"}}));
  const std::vector<int32_t> ids = MustEncode(t, "a你b", false);
  ASSERT_THAT(ids, ElementsAre('a', 256, 0xA0, 'b'));
  StreamingDecoder decoder(t, false);
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    std::string piece;
    ASSERT_TRUE(decoder.Push(id, &piece).ok());
    pieces.push_back(piece);
  }
  std::string rest;
  decoder.Flush(&rest);
  EXPECT_THAT(pieces, ElementsAre("a", "", "你", "b"));
  EXPECT_EQ(rest, "");
}

TEST(StreamingDecoder, FlushReleasesAnIncompleteTail) {
  const Tokenizer t = MustCreate(ByteVocab({}, {}));
  StreamingDecoder decoder(t, false);
  std::string text;
  ASSERT_TRUE(decoder.Push('x', &text).ok());
  ASSERT_TRUE(decoder.Push(0xE4, &text).ok());
  EXPECT_EQ(text, "x");
  decoder.Flush(&text);
  EXPECT_EQ(text, "x\xE4");
  // An impossible continuation is not held back.
  ASSERT_TRUE(decoder.Push(0x80, &text).ok());
  EXPECT_EQ(text, "x\xE4\x80");
  EXPECT_FALSE(decoder.Push(100000, &text).ok());
}

TEST(StreamingDecoder, StreamEqualsDetokenizeOneTokenAtATime) {
  const Tokenizer t = TrainedTokenizer();
  const std::string text = "混合 text: 你好🙂, café, and \xFF bytes.";
  const std::vector<int32_t> ids = MustEncode(t, text, false);
  StreamingDecoder decoder(t, false);
  std::string streamed;
  for (int32_t id : ids) {
    const size_t before = streamed.size();
    ASSERT_TRUE(decoder.Push(id, &streamed).ok());
    // Every emitted chunk ends on a character boundary or an invalid byte.
    const std::string chunk = streamed.substr(before);
    if (!chunk.empty()) {
      const auto last = static_cast<unsigned char>(chunk.back());
      EXPECT_FALSE(last >= 0xC2 && last <= 0xF4) << "held-back lead byte was emitted";
    }
  }
  decoder.Flush(&streamed);
  EXPECT_EQ(streamed, text);
}

// Control tokens <|im_start|> <|im_end|> <|endoftext|>, a user-defined
// <think>, and a user-defined token that contains another.
struct SpecialVocab {
  int32_t im_start, im_end, endoftext, think, ab, abc;
  std::optional<Tokenizer> tokenizer;
};

SpecialVocab MakeSpecialVocab() {
  TokenizerConfig config = ByteVocab({"im", "us", "er"}, {{"i", "m"}, {"u", "s"}, {"e", "r"}});
  config.token_types.assign(config.tokens.size(), TokenType::kNormal);
  const auto add = [&](std::string text, TokenType type) {
    config.tokens.push_back(std::move(text));
    config.token_types.push_back(type);
    return static_cast<int32_t>(config.tokens.size() - 1);
  };
  SpecialVocab v{};
  v.im_start = add("<|im_start|>", TokenType::kControl);
  v.im_end = add("<|im_end|>", TokenType::kControl);
  v.endoftext = add("<|endoftext|>", TokenType::kControl);
  v.think = add("<think>", TokenType::kUserDefined);
  v.ab = add("ab", TokenType::kUserDefined);
  v.abc = add("abc", TokenType::kUserDefined);
  add("[PAD1]", TokenType::kUnused);
  config.eos_id = v.im_end;
  config.pad_id = v.endoftext;
  v.tokenizer.emplace(MustCreate(std::move(config)));
  return v;
}

TEST(SpecialTokens, ParsedWhenRequested) {
  const SpecialVocab v = MakeSpecialVocab();
  const Tokenizer& t = *v.tokenizer;
  const std::vector<int32_t> ids = MustEncode(t, "<|im_start|>user\nhi<|im_end|>\n", true);
  EXPECT_THAT(ids, ElementsAre(v.im_start, 257, 258, '\n', 'h', 'i', v.im_end, '\n'));
  EXPECT_EQ(MustDecode(t, ids, true), "<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(MustDecode(t, ids, false), "user\nhi\n");
}

TEST(SpecialTokens, ControlTokensAreTextWithoutParseSpecial) {
  const SpecialVocab v = MakeSpecialVocab();
  const Tokenizer& t = *v.tokenizer;
  const std::vector<int32_t> ids = MustEncode(t, "<|im_end|>", false);
  EXPECT_GT(ids.size(), 1u);
  for (int32_t id : ids) EXPECT_LT(id, 259);  // only byte and merged tokens
  EXPECT_EQ(MustDecode(t, ids, false), "<|im_end|>");
}

TEST(SpecialTokens, UserDefinedAlwaysMatched) {
  const SpecialVocab v = MakeSpecialVocab();
  const Tokenizer& t = *v.tokenizer;
  for (bool parse_special : {false, true}) {
    EXPECT_THAT(MustEncode(t, "<think>x", parse_special), ElementsAre(v.think, 'x'));
    // Longest first: "abc" wins over its prefix "ab".
    EXPECT_THAT(MustEncode(t, "xabcab", parse_special), ElementsAre('x', v.abc, v.ab));
  }
  // User-defined tokens render as their text even without render_special.
  EXPECT_EQ(MustDecode(t, {v.think, 'x'}, false), "<think>x");
}

TEST(SpecialTokens, AdjacentAndRepeated) {
  const SpecialVocab v = MakeSpecialVocab();
  EXPECT_THAT(MustEncode(*v.tokenizer, "<|im_end|><|im_end|><think>", true),
              ElementsAre(v.im_end, v.im_end, v.think));
  // Pre-tokenization restarts after a special token: " x" keeps its space.
  EXPECT_THAT(MustEncode(*v.tokenizer, "<think> x", true), ElementsAre(v.think, ' ', 'x'));
}

TEST(SpecialTokens, UnusedTokensRenderAsNothing) {
  const SpecialVocab v = MakeSpecialVocab();
  const int32_t pad = v.tokenizer->vocab_size() - 1;
  EXPECT_EQ(MustDecode(*v.tokenizer, {'a', pad, 'b'}, true), "ab");
  EXPECT_FALSE(v.tokenizer->Detokenize(std::vector<int32_t>{pad + 1}, true).ok());
  EXPECT_FALSE(v.tokenizer->Detokenize(std::vector<int32_t>{-1}, true).ok());
}

TEST(SpecialTokens, EndOfGeneration) {
  const SpecialVocab v = MakeSpecialVocab();
  const Tokenizer& t = *v.tokenizer;
  EXPECT_TRUE(t.IsEndOfGeneration(v.im_end));
  EXPECT_TRUE(t.IsEndOfGeneration(v.endoftext));  // by its text
  EXPECT_FALSE(t.IsEndOfGeneration(v.im_start));
  EXPECT_FALSE(t.IsEndOfGeneration('a'));
  EXPECT_THAT(t.end_of_generation_ids(), ElementsAre(v.im_end, v.endoftext));
  EXPECT_EQ(t.eos_id(), v.im_end);
  EXPECT_EQ(t.pad_id(), v.endoftext);
  EXPECT_EQ(t.bos_id(), kNoToken);
  EXPECT_EQ(t.TokenId("<think>"), v.think);
  EXPECT_EQ(t.TokenId("nope"), kNoToken);
}

TEST(TokenizerConfig, AddSpecialUsesBosAndEos) {
  TokenizerConfig config = ByteVocab({}, {});
  config.bos_id = 1;
  config.eos_id = 2;
  config.add_bos = true;
  const Tokenizer t = MustCreate(std::move(config));
  EXPECT_THAT(*t.Encode("a", false, /*add_special=*/true), ElementsAre(1, 'a'));
  EXPECT_THAT(*t.Encode("a", false), ElementsAre('a'));
}

TEST(TokenizerConfig, IgnoreMergesTakesAWordThatIsAToken) {
  // The merges build "ab" but never "abc" or " abc".
  TokenizerConfig config = ByteVocab({"ab", "abc", " abc"}, {{"a", "b"}});
  const Tokenizer merging = MustCreate(config);
  EXPECT_THAT(MustEncode(merging, "abc abc", false), ElementsAre(256, 'c', ' ', 256, 'c'));

  config.ignore_merges = true;
  const Tokenizer whole = MustCreate(std::move(config));
  EXPECT_TRUE(whole.ignore_merges());
  EXPECT_THAT(MustEncode(whole, "abc abc", false), ElementsAre(257, 258));
  // Words that are no token still merge.
  EXPECT_THAT(MustEncode(whole, "abcd abd", false), ElementsAre(256, 'c', 'd', ' ', 256, 'd'));
  EXPECT_EQ(MustDecode(whole, MustEncode(whole, "abc abcd", false), false), "abc abcd");
}

TEST(TokenizerConfig, CleanUpSpacesAsLlamaCpp) {
  TokenizerConfig config = ByteVocab({}, {});
  config.pre_tokenizer = PreTokenizer::kGpt2;
  config.clean_up_spaces = true;
  const Tokenizer t = MustCreate(std::move(config));
  const std::string text = "a , b ' c 's d 't e 're f 'll g ! h ?";
  EXPECT_EQ(MustDecode(t, MustEncode(t, text, false), false), "a, b'c's d 't e're f 'll g! h?");
  // Pieces are left alone; only whole-sequence detokenizing cleans up.
  EXPECT_EQ(t.TokenPiece(' ', false), " ");
  EXPECT_EQ(MustDecode(t, MustEncode(t, " .", false), false), ".");
}

TEST(TokenizerConfig, RejectsInconsistentInput) {
  {
    TokenizerConfig config = ByteVocab({}, {});
    config.token_types.assign(10, TokenType::kNormal);
    const auto t = Tokenizer::Create(std::move(config));
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("token_type has 10 entries"));
  }
  {
    TokenizerConfig config = ByteVocab({}, {});
    config.merges = {"a b", "nospace"};
    const auto t = Tokenizer::Create(std::move(config));
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("merges[1]"));
  }
  {
    TokenizerConfig config = ByteVocab({}, {});
    config.eos_id = 256;
    const auto t = Tokenizer::Create(std::move(config));
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("eos_token_id = 256"));
  }
  {
    TokenizerConfig config = ByteVocab({}, {});
    config.token_types.assign(256, static_cast<TokenType>(9));
    EXPECT_FALSE(Tokenizer::Create(std::move(config)).ok());
  }
  {
    TokenizerConfig config = ByteVocab({}, {});
    config.add_bos = true;
    const auto t = Tokenizer::Create(std::move(config));
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()),
                HasSubstr("add_bos_token is true, but tokenizer.ggml.bos_token_id is not set"));
  }
  {
    TokenizerConfig config = ByteVocab({}, {});
    config.model = TokenizerModel::kSentencePiece;
    config.scores.assign(config.tokens.size(), 0.0f);
    config.ignore_merges = true;
    const auto t = Tokenizer::Create(std::move(config));
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("no ignore_merges"));
  }
  {
    TokenizerConfig config = ByteVocab({}, {});
    config.scores.assign(3, 0.0f);
    const auto t = Tokenizer::Create(std::move(config));
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("scores has 3 entries"));
  }
  EXPECT_FALSE(Tokenizer::Create(TokenizerConfig{}).ok());
}

}  // namespace
}  // namespace moetier
