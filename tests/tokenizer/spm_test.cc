// SentencePiece (tokenizer.ggml.model "llama") on a small hand-made
// vocabulary, each expectation worked out from llama.cpp's
// llm_tokenizer_spm_session and llama_vocab::impl::tokenize / detokenize.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "gguf/gguf_reader.h"
#include "gguf/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kSpace[] = "\xE2\x96\x81";  // "▁"
constexpr int32_t kUnk = 0;
constexpr int32_t kBos = 1;
constexpr int32_t kEos = 2;
constexpr int32_t kByte0 = 3;  // <0x00>; <0xNN> is kByte0 + 0xNN

std::string Sp(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == ' ') {
      out += kSpace;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// <unk> <s> </s>, optionally the 256 byte tokens, then normal tokens with
// their scores (written with ' ' for "▁"), and a user-defined <tool>.
struct SmallVocab {
  explicit SmallVocab(bool with_bytes = true) {
    config.model = TokenizerModel::kSentencePiece;
    Add("<unk>", TokenType::kUnknown, 0);
    Add("<s>", TokenType::kControl, 0);
    Add("</s>", TokenType::kControl, 0);
    if (with_bytes) {
      for (int b = 0; b < 256; ++b) Add(absl::StrFormat("<0x%02X>", b), TokenType::kByte, 0);
    }
    const std::pair<const char*, float> normal[] = {
        {" ", -100}, {"a", -100},  {"b", -100}, {"c", -100}, {"p", -100}, {"q", -100}, {"r", -100},
        {"x", -100}, {"y", -100},  {"z", -100}, {"ab", -1},  {"bc", -2},  {" a", -3},  {" ab", -4},
        {"abc", -5}, {"aa", -1.5}, {"  ", -10}, {"xy", -1},  {"yz", -1},  {"pq", -2},  {"qr", -1},
    };
    for (const auto& [text, score] : normal) Add(Sp(text), TokenType::kNormal, score);
    Add("<tool>", TokenType::kUserDefined, 0);
    config.bos_id = kBos;
    config.eos_id = kEos;
    config.unknown_id = kUnk;
    config.add_bos = true;
    config.add_space_prefix = true;
  }

  void Add(std::string text, TokenType type, float score) {
    config.tokens.push_back(std::move(text));
    config.token_types.push_back(type);
    config.scores.push_back(score);
  }

  int32_t Id(std::string_view text) const {
    const std::string stored = Sp(text);
    for (size_t i = 0; i < config.tokens.size(); ++i) {
      if (config.tokens[i] == stored) return static_cast<int32_t>(i);
    }
    ADD_FAILURE() << "no token " << text;
    return kNoToken;
  }

  Tokenizer Build() const {
    absl::StatusOr<Tokenizer> t = Tokenizer::Create(config);
    EXPECT_TRUE(t.ok()) << t.status();
    return *std::move(t);
  }

  TokenizerConfig config;
};

std::vector<int32_t> Enc(const Tokenizer& t, std::string_view text, bool parse_special = false,
                         bool add_special = false) {
  absl::StatusOr<std::vector<int32_t>> ids = t.Encode(text, parse_special, add_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

std::string Dec(const Tokenizer& t, const std::vector<int32_t>& ids, bool render_special = false) {
  absl::StatusOr<std::string> text = t.Detokenize(ids, render_special);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string();
}

TEST(SentencePiece, MergesHighestScoreFirst) {
  const SmallVocab v;
  const Tokenizer t = v.Build();
  EXPECT_EQ(t.model(), TokenizerModel::kSentencePiece);
  // "▁abc": ab (-1) beats bc (-2) and ▁a (-3); then ▁ab (-4) beats abc (-5).
  EXPECT_THAT(Enc(t, "abc"), ElementsAre(v.Id(" ab"), v.Id("c")));
  // qr (-1) beats pq (-2) although it is further right.
  EXPECT_THAT(Enc(t, "pqr"), ElementsAre(v.Id(" "), v.Id("p"), v.Id("qr")));
}

TEST(SentencePiece, EqualScoresMergeLeftmostFirst) {
  const SmallVocab v;
  const Tokenizer t = v.Build();
  EXPECT_THAT(Enc(t, "xyz"), ElementsAre(v.Id(" "), v.Id("xy"), v.Id("z")));
  EXPECT_THAT(Enc(t, "aaa"), ElementsAre(v.Id(" "), v.Id("aa"), v.Id("a")));
}

TEST(SentencePiece, SpacesBecomeTheEscapeCharacter) {
  const SmallVocab v;
  const Tokenizer t = v.Build();
  EXPECT_THAT(Enc(t, "a  b"), ElementsAre(v.Id(" a"), v.Id("  "), v.Id("b")));
  // The space prefix comes on top of a leading space.
  EXPECT_THAT(Enc(t, " abc"), ElementsAre(v.Id(" "), v.Id(" ab"), v.Id("c")));
  EXPECT_THAT(Enc(t, "   "), ElementsAre(v.Id("  "), v.Id("  ")));
  EXPECT_THAT(Enc(t, " "), ElementsAre(v.Id("  ")));
}

TEST(SentencePiece, EmptyText) {
  const SmallVocab v;
  const Tokenizer t = v.Build();
  EXPECT_THAT(Enc(t, ""), ElementsAre());
  EXPECT_THAT(Enc(t, "", false, /*add_special=*/true), ElementsAre(kBos));
  EXPECT_EQ(Dec(t, {}), "");
}

TEST(SentencePiece, ByteFallbackForCharactersOutsideTheVocabulary) {
  const SmallVocab v;
  const Tokenizer t = v.Build();
  EXPECT_THAT(Enc(t, "\xC3\xA9"), ElementsAre(v.Id(" "), kByte0 + 0xC3, kByte0 + 0xA9));
  EXPECT_THAT(Enc(t, "\n"), ElementsAre(v.Id(" "), kByte0 + 0x0A));
  EXPECT_THAT(Enc(t, "a\xF0\x9F\x98\x80"),
              ElementsAre(v.Id(" a"), kByte0 + 0xF0, kByte0 + 0x9F, kByte0 + 0x98, kByte0 + 0x80));
  // Invalid UTF-8 goes through as its bytes too.
  EXPECT_THAT(Enc(t, "\xFF"), ElementsAre(v.Id(" "), kByte0 + 0xFF));
  EXPECT_EQ(Dec(t, Enc(t, "a\xC3\xA9\n\xFF")), "a\xC3\xA9\n\xFF");
}

TEST(SentencePiece, UnknownTokenWhenTheVocabularyHasNoByteTokens) {
  SmallVocab v(/*with_bytes=*/false);
  {
    const Tokenizer t = v.Build();
    // One unknown token per character, not per byte.
    EXPECT_THAT(Enc(t, "a\xC3\xA9\xE4\xBD\xA0"), ElementsAre(v.Id(" a"), kUnk, kUnk));
  }
  v.config.unknown_id = kNoToken;
  const Tokenizer t = v.Build();
  const absl::StatusOr<std::vector<int32_t>> ids = t.Encode("a\xC3\xA9", false);
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("no token for \"\xC3\xA9\""));
}

TEST(SentencePiece, SpecialTokensAndTheSpacePrefix) {
  const SmallVocab v;
  const Tokenizer t = v.Build();
  // Text after a special token gets the space prefix again.
  EXPECT_THAT(Enc(t, "<s>ab</s>", /*parse_special=*/true), ElementsAre(kBos, v.Id(" ab"), kEos));
  EXPECT_THAT(Enc(t, "a</s>b", true), ElementsAre(v.Id(" a"), kEos, v.Id(" "), v.Id("b")));
  EXPECT_THAT(Enc(t, "</s>", true, /*add_special=*/true), ElementsAre(kBos, kEos));
  // Without parse_special a control token is text, here all bytes.
  EXPECT_THAT(Enc(t, "</s>", false),
              ElementsAre(v.Id(" "), kByte0 + '<', kByte0 + '/', kByte0 + 's', kByte0 + '>'));
  // User-defined tokens are matched either way.
  EXPECT_THAT(Enc(t, "a<tool>b", false),
              ElementsAre(v.Id(" a"), v.Id("<tool>"), v.Id(" "), v.Id("b")));
}

TEST(SentencePiece, AddSpecialAndSpacePrefixFlags) {
  SmallVocab v;
  v.config.add_eos = true;
  {
    const Tokenizer t = v.Build();
    EXPECT_THAT(Enc(t, "ab", false, true), ElementsAre(kBos, v.Id(" ab"), kEos));
    EXPECT_THAT(Enc(t, "ab", false, false), ElementsAre(v.Id(" ab")));
  }
  v.config.add_bos = false;
  v.config.add_eos = false;
  v.config.add_space_prefix = false;
  const Tokenizer t = v.Build();
  EXPECT_THAT(Enc(t, "ab", false, true), ElementsAre(v.Id("ab")));
  EXPECT_THAT(Enc(t, "</s>ab", true), ElementsAre(kEos, v.Id("ab")));
  // Without the prefix nothing is stripped when detokenizing either.
  EXPECT_EQ(Dec(t, {v.Id(" ab")}), " ab");
}

TEST(SentencePiece, DetokenizeAsLlamaCpp) {
  const SmallVocab v;
  const Tokenizer t = v.Build();
  const int32_t ab = v.Id(" ab");
  const int32_t c = v.Id("c");
  // One leading space of the first piece goes.
  EXPECT_EQ(Dec(t, {ab, c}), "abc");
  EXPECT_EQ(Dec(t, {v.Id(" "), ab, c}), " abc");
  // An unrendered bos takes that removal, so the text keeps its space.
  EXPECT_EQ(Dec(t, {kBos, ab, c}), " abc");
  EXPECT_EQ(Dec(t, {kBos, ab, c}, /*render_special=*/true), "<s> abc");
  EXPECT_EQ(Dec(t, {ab, kEos, ab}, true), "ab</s> ab");
  EXPECT_EQ(Dec(t, {kByte0 + 0xC3, kByte0 + 0xA9}), "\xC3\xA9");
  EXPECT_EQ(Dec(t, {kUnk}), "");
  EXPECT_EQ(Dec(t, {kUnk}, true), "<unk>");
  EXPECT_EQ(t.TokenPiece(ab, false), " ab");
  EXPECT_EQ(t.TokenPiece(kByte0 + 0x0A, false), "\n");
  EXPECT_EQ(t.score(v.Id("ab")), -1.0f);
  EXPECT_FALSE(t.Detokenize(std::vector<int32_t>{t.vocab_size()}, false).ok());

  // The streaming decoder hands out pieces as they are.
  StreamingDecoder decoder(t, /*render_special=*/false);
  std::string streamed;
  for (const int32_t id : {kBos, ab, c, kByte0 + 0xC3, kByte0 + 0xA9}) {
    ASSERT_TRUE(decoder.Push(id, &streamed).ok());
  }
  decoder.Flush(&streamed);
  EXPECT_EQ(streamed, " abc\xC3\xA9");
}

TEST(SentencePiece, RoundTripsRandomText) {
  const SmallVocab v;
  const Tokenizer t = v.Build();
  std::mt19937 rng(2026);
  const std::vector<std::string> alphabet = {"a", "b", "c", "p", "q",        "r",
                                             "x", "y", "z", " ", "\n",       "\t",
                                             "<", "/", "s", ">", "\xC3\xA9", "\xE4\xBD\xA0"};
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    const int length = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < length; ++i) text += alphabet[rng() % alphabet.size()];
    // Without bos the text comes back as it was; with bos it keeps the
    // space Encode put in front.
    EXPECT_EQ(Dec(t, Enc(t, text)), text);
    EXPECT_EQ(Dec(t, Enc(t, text, false, true)), " " + text);
  }
}

TEST(SentencePiece, EndOfGeneration) {
  const SmallVocab v;
  const Tokenizer t = v.Build();
  EXPECT_TRUE(t.IsEndOfGeneration(kEos));
  EXPECT_FALSE(t.IsEndOfGeneration(kBos));
  EXPECT_THAT(t.end_of_generation_ids(), ElementsAre(kEos));
}

std::string CreateError(TokenizerConfig config) {
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(std::move(config));
  EXPECT_FALSE(t.ok());
  return t.ok() ? std::string() : std::string(t.status().message());
}

TEST(SentencePiece, RejectsInconsistentConfig) {
  {
    SmallVocab v;
    v.config.scores.clear();
    EXPECT_THAT(CreateError(v.config), HasSubstr("needs one score per token"));
  }
  {
    SmallVocab v;
    v.config.scores.pop_back();
    EXPECT_THAT(CreateError(v.config), HasSubstr("scores has 280 entries but"));
  }
  {
    SmallVocab v;
    v.config.scores[5] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_THAT(CreateError(v.config), HasSubstr("scores[5] is NaN"));
  }
  {
    SmallVocab v;
    v.config.tokens[kByte0 + 1] = "<0xZZ>";
    EXPECT_THAT(CreateError(v.config), HasSubstr("not of the form <0xXX>"));
  }
  {
    SmallVocab v;
    v.config.merges = {"a b"};
    EXPECT_THAT(CreateError(v.config), HasSubstr("takes no merges"));
  }
  {
    SmallVocab v;
    v.config.bos_id = kNoToken;
    EXPECT_THAT(CreateError(v.config), HasSubstr("add_bos_token is true"));
  }
  {
    SmallVocab v;
    v.config.unknown_id = 5000;
    EXPECT_THAT(CreateError(v.config), HasSubstr("unknown_token_id = 5000 is outside"));
  }
}

// GGUF metadata of SmallVocab as a llama-family converter writes it.
GgufMetadata SpmMetadata(const SmallVocab& v) {
  GgufMetadata m;
  m.Add({"tokenizer.ggml.model", GgufValue::String("llama")});
  m.Add({"tokenizer.ggml.tokens", GgufValue::StringArray(v.config.tokens)});
  std::vector<int32_t> types;
  for (const TokenType type : v.config.token_types) types.push_back(static_cast<int32_t>(type));
  m.Add({"tokenizer.ggml.token_type", GgufValue::Int32Array(types)});
  m.Add({"tokenizer.ggml.scores", GgufValue::Float32Array(v.config.scores)});
  return m;
}

TEST(SentencePieceGguf, LlamaCppDefaults) {
  const SmallVocab v;
  GgufMetadata m = SpmMetadata(v);
  // Neither pre-tokenizer nor merges matter to a llama vocabulary.
  m.Add({"tokenizer.ggml.pre", GgufValue::String("default")});
  m.Add({"tokenizer.ggml.merges", GgufValue::StringArray({"a b"})});
  absl::StatusOr<Tokenizer> t = Tokenizer::FromGgufMetadata(m);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->model(), TokenizerModel::kSentencePiece);
  EXPECT_EQ(TokenizerModelName(t->model()), "llama");
  EXPECT_EQ(TokenizerModelName(TokenizerModel::kByteLevelBpe), "gpt2");
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->unknown_id(), 0);
  EXPECT_TRUE(t->add_bos());
  EXPECT_FALSE(t->add_eos());
  EXPECT_TRUE(t->add_space_prefix());
  EXPECT_FALSE(t->clean_up_spaces());
  EXPECT_THAT(*t->Encode("abc", false, true), ElementsAre(kBos, v.Id(" ab"), v.Id("c")));
}

TEST(SentencePieceGguf, KeysOverrideDefaults) {
  const SmallVocab v;
  GgufMetadata m = SpmMetadata(v);
  m.Add({"tokenizer.ggml.add_space_prefix", GgufValue::Bool(false)});
  m.Add({"tokenizer.ggml.add_bos_token", GgufValue::Bool(false)});
  m.Add({"tokenizer.ggml.eos_token_id", GgufValue::Uint32(1)});
  absl::StatusOr<Tokenizer> t = Tokenizer::FromGgufMetadata(m);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->add_space_prefix());
  EXPECT_FALSE(t->add_bos());
  EXPECT_EQ(t->eos_id(), 1);
  EXPECT_THAT(*t->Encode("abc", false, true), ElementsAre(v.Id("abc")));
}

TEST(SentencePieceGguf, IntegerScoresAreAccepted) {
  const SmallVocab v;
  GgufMetadata m;
  m.Add({"tokenizer.ggml.model", GgufValue::String("llama")});
  m.Add({"tokenizer.ggml.tokens", GgufValue::StringArray(v.config.tokens)});
  std::vector<int32_t> scores;
  for (const float s : v.config.scores) scores.push_back(static_cast<int32_t>(std::lround(s * 2)));
  m.Add({"tokenizer.ggml.scores", GgufValue::Int32Array(scores)});
  absl::StatusOr<Tokenizer> t = Tokenizer::FromGgufMetadata(m);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->score(v.Id("aa")), -3.0f);
  // No token types: every token is normal, so <s> is plain text.
  EXPECT_EQ(t->token_type(kBos), TokenType::kNormal);
}

TEST(SentencePieceGguf, ClearErrors) {
  const SmallVocab v;
  {
    GgufMetadata m;
    m.Add({"tokenizer.ggml.model", GgufValue::String("llama")});
    m.Add({"tokenizer.ggml.tokens", GgufValue::StringArray(v.config.tokens)});
    const absl::StatusOr<Tokenizer> t = Tokenizer::FromGgufMetadata(m);
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("tokenizer.ggml.scores is missing"));
  }
  {
    GgufMetadata m;
    m.Add({"tokenizer.ggml.model", GgufValue::String("llama")});
    m.Add({"tokenizer.ggml.tokens", GgufValue::StringArray(v.config.tokens)});
    m.Add({"tokenizer.ggml.scores", GgufValue::Float32Array({0.0f, 1.0f})});
    const absl::StatusOr<Tokenizer> t = Tokenizer::FromGgufMetadata(m);
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()),
                HasSubstr("tokenizer.ggml.scores has 2 entries but tokenizer.ggml.tokens has 281"));
  }
  {
    GgufMetadata m;
    m.Add({"tokenizer.ggml.model", GgufValue::String("llama")});
    m.Add({"tokenizer.ggml.tokens", GgufValue::StringArray(v.config.tokens)});
    m.Add({"tokenizer.ggml.scores", GgufValue::StringArray(v.config.tokens)});
    EXPECT_FALSE(Tokenizer::FromGgufMetadata(m).ok());
  }
  {
    GgufMetadata m = SpmMetadata(v);
    m.Add({"tokenizer.ggml.bos_token_id", GgufValue::Uint32(281)});
    const absl::StatusOr<Tokenizer> t = Tokenizer::FromGgufMetadata(m);
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("bos_token_id = 281 is outside"));
  }
  {
    GgufMetadata m;
    m.Add({"tokenizer.ggml.model", GgufValue::String("llama")});
    m.Add({"tokenizer.ggml.tokens", GgufValue::StringArray({})});
    m.Add({"tokenizer.ggml.scores", GgufValue::Float32Array({})});
    EXPECT_FALSE(Tokenizer::FromGgufMetadata(m).ok());
  }
}

}  // namespace
}  // namespace moetier
