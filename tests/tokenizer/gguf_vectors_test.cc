// The tokenizer against llama.cpp: tests/data/vectors/tiny-f32.tokenize.json
// holds text -> ids that llama.cpp produced for the vocabulary stored in
// tiny-f32.gguf (special tokens parsed). Also FromGgufMetadata's errors.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gguf/tokenizer/byte_level.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/tokenizer.h"
#include "gguf/tokenizer/unicode.h"
#include "tests/tokenizer/json_fixture.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;

const std::string kVectorsDir = std::string(MOETIER_TEST_DATA_DIR) + "/vectors";

struct TokenizeCase {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<TokenizeCase> ReadCases(const std::string& path) {
  std::vector<TokenizeCase> cases;
  absl::StatusOr<testing::JsonValue> json = testing::ReadJsonFile(path);
  EXPECT_TRUE(json.ok()) << json.status();
  if (!json.ok()) return cases;
  for (const testing::JsonValue& c : json->array) {
    TokenizeCase tc;
    tc.text = c.Find("text")->string;
    for (const testing::JsonValue& id : c.Find("ids")->array) {
      tc.ids.push_back(static_cast<int32_t>(id.number));
    }
    cases.push_back(std::move(tc));
  }
  return cases;
}

class TinyF32Vocab : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(kVectorsDir + "/tiny-f32.gguf");
    ASSERT_TRUE(file.ok()) << file.status();
    absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromGgufMetadata((*file)->metadata());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::make_unique<Tokenizer>(*std::move(tokenizer));
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(TinyF32Vocab, MatchesLlamaCppOnEveryCase) {
  const std::vector<TokenizeCase> cases = ReadCases(kVectorsDir + "/tiny-f32.tokenize.json");
  ASSERT_GE(cases.size(), 10u);
  for (const TokenizeCase& c : cases) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(c.text, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c.ids) << "text: \"" << c.text << "\"";
    absl::StatusOr<std::string> text = tokenizer_->Detokenize(c.ids, /*render_special=*/true);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c.text);
  }
}

TEST_F(TinyF32Vocab, SpecialIdsAndChatTemplate) {
  const Tokenizer& t = *tokenizer_;
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.merge_count(), 253u);
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::kQwen2);
  EXPECT_EQ(t.eos_id(), 511);
  EXPECT_EQ(t.pad_id(), 509);
  EXPECT_EQ(t.bos_id(), 509);
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.token_text(510), "<|im_start|>");
  EXPECT_EQ(t.token_type(510), TokenType::kControl);
  EXPECT_EQ(t.end_of_generation_ids(), (std::vector<int32_t>{509, 511}));

  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Detect(t.chat_template());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->style(), ChatTemplateStyle::kChatMl);
  const std::vector<ChatMessage> messages = {{"user", "hello"}};
  absl::StatusOr<std::string> prompt = chat->Render(messages, {});
  ASSERT_TRUE(prompt.ok());
  absl::StatusOr<std::vector<int32_t>> ids = t.Encode(*prompt, true);
  ASSERT_TRUE(ids.ok());
  // <|im_start|> user \n hello <|im_end|> \n <|im_start|> assistant \n
  EXPECT_EQ(ids->front(), 510);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 510), 2);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 511), 1);
  // Without parse_special the markers stay text.
  absl::StatusOr<std::vector<int32_t>> plain = t.Encode(*prompt, false);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(std::count(plain->begin(), plain->end(), 510), 0);
  EXPECT_EQ(*t.Detokenize(*plain, false), *prompt);
}

// Metadata for a 260-token vocabulary, to be broken in one way per test.
GgufMetadata ValidMetadata(std::string_view model = "gpt2", std::string_view pre = "qwen2",
                           bool with_merges = true, size_t type_count = 260) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(ByteToMappedUtf8(static_cast<uint8_t>(b)));
  tokens.push_back(ByteLevelEncode("ab"));
  tokens.push_back("<|endoftext|>");
  tokens.push_back("<|im_start|>");
  tokens.push_back("<|im_end|>");
  std::vector<int32_t> types(type_count, 1);
  for (size_t i = 257; i < type_count; ++i) types[i] = 3;
  GgufMetadata m;
  m.Add({"tokenizer.ggml.model", GgufValue::String(std::string(model))});
  m.Add({"tokenizer.ggml.pre", GgufValue::String(std::string(pre))});
  m.Add({"tokenizer.ggml.tokens", GgufValue::StringArray(tokens)});
  m.Add({"tokenizer.ggml.token_type", GgufValue::Int32Array(types)});
  if (with_merges) m.Add({"tokenizer.ggml.merges", GgufValue::StringArray({"a b"})});
  m.Add({"tokenizer.ggml.eos_token_id", GgufValue::Uint32(259)});
  m.Add({"tokenizer.ggml.padding_token_id", GgufValue::Uint32(257)});
  return m;
}

std::string ErrorOf(const GgufMetadata& m) {
  absl::StatusOr<Tokenizer> t = Tokenizer::FromGgufMetadata(m);
  EXPECT_FALSE(t.ok());
  return t.ok() ? std::string() : std::string(t.status().message());
}

TEST(FromGgufMetadata, AcceptsAValidVocabulary) {
  absl::StatusOr<Tokenizer> t = Tokenizer::FromGgufMetadata(ValidMetadata());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Encode("ab<|im_end|>", true), (std::vector<int32_t>{256, 259}));
  EXPECT_EQ(t->eos_id(), 259);
  EXPECT_EQ(t->bos_id(), kNoToken);
  EXPECT_EQ(t->end_of_generation_ids(), (std::vector<int32_t>{257, 259}));
  absl::StatusOr<Tokenizer> qwen35 = Tokenizer::FromGgufMetadata(ValidMetadata("gpt2", "qwen35"));
  ASSERT_TRUE(qwen35.ok()) << qwen35.status();
  EXPECT_EQ(qwen35->pre_tokenizer(), PreTokenizer::kQwen35);
  EXPECT_FALSE(qwen35->clean_up_spaces());
  absl::StatusOr<Tokenizer> olmo = Tokenizer::FromGgufMetadata(ValidMetadata("gpt2", "olmo"));
  ASSERT_TRUE(olmo.ok()) << olmo.status();
  EXPECT_EQ(olmo->model(), TokenizerModel::kByteLevelBpe);
  EXPECT_EQ(olmo->pre_tokenizer(), PreTokenizer::kGpt2);
  EXPECT_TRUE(olmo->clean_up_spaces());
  EXPECT_FALSE(olmo->add_space_prefix());
  EXPECT_FALSE(olmo->add_bos());
}

Tokenizer MustLoad(const GgufMetadata& m) {
  absl::StatusOr<Tokenizer> t = Tokenizer::FromGgufMetadata(m);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

// Token 257 plays the part of <|begin_of_text|> or GLM's [gMASK].
TEST(FromGgufMetadata, Llama3NamesAddBosUnlessTheFileSaysOtherwise) {
  GgufMetadata m = ValidMetadata("gpt2", "llama-bpe");
  m.Add({"tokenizer.ggml.bos_token_id", GgufValue::Uint32(257)});
  const Tokenizer t = MustLoad(m);
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::kLlama3);
  EXPECT_TRUE(t.clean_up_spaces());
  EXPECT_TRUE(t.ignore_merges());
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(*t.Encode("ab", true, /*add_special=*/true), (std::vector<int32_t>{257, 256}));

  m.Add({"tokenizer.ggml.add_bos_token", GgufValue::Bool(false)});
  EXPECT_FALSE(MustLoad(m).add_bos());
}

TEST(FromGgufMetadata, Glm4AddsNoBos) {
  // As llama.cpp's converter writes GLM-4 files: a bos id, no add_bos_token.
  GgufMetadata m = ValidMetadata("gpt2", "glm4");
  m.Add({"tokenizer.ggml.bos_token_id", GgufValue::Uint32(257)});
  for (const bool with_bos_id : {true, false}) {
    const Tokenizer t = MustLoad(with_bos_id ? m : ValidMetadata("gpt2", "chatglm-bpe"));
    EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::kLlama3);
    EXPECT_TRUE(t.clean_up_spaces());
    EXPECT_FALSE(t.ignore_merges());
    EXPECT_FALSE(t.add_bos());
    EXPECT_EQ(*t.Encode("ab", true, /*add_special=*/true), (std::vector<int32_t>{256}));
  }
  // llama.cpp clears only the default bos id; the file's keys still rule.
  m.Add({"tokenizer.ggml.add_bos_token", GgufValue::Bool(true)});
  EXPECT_EQ(*MustLoad(m).Encode("ab", true, /*add_special=*/true),
            (std::vector<int32_t>{257, 256}));
}

TEST(FromGgufMetadata, ClearErrors) {
  const std::string model_error = ErrorOf(ValidMetadata("bert"));
  EXPECT_THAT(model_error, HasSubstr("unsupported tokenizer model \"bert\""));
  EXPECT_THAT(model_error, HasSubstr("supported: gpt2 (byte-level BPE), llama (SentencePiece)"));
  const std::string pre_error = ErrorOf(ValidMetadata("gpt2", "deepseek-llm"));
  EXPECT_THAT(pre_error, HasSubstr("deepseek-llm"));
  EXPECT_THAT(pre_error, HasSubstr("supported: qwen2"));
  EXPECT_THAT(pre_error, HasSubstr("llama-bpe"));
  EXPECT_THAT(ErrorOf(ValidMetadata("gpt2", "qwen2", false)),
              HasSubstr("tokenizer.ggml.merges is missing"));
  EXPECT_THAT(ErrorOf(ValidMetadata("gpt2", "qwen2", true, 259)),
              HasSubstr("token_type has 259 entries but tokenizer.ggml.tokens has 260"));

  GgufMetadata bad_id = ValidMetadata();
  bad_id.Add({"tokenizer.ggml.bos_token_id", GgufValue::Uint32(260)});
  EXPECT_THAT(ErrorOf(bad_id), HasSubstr("tokenizer.ggml.bos_token_id = 260 is outside"));

  EXPECT_THAT(ErrorOf(GgufMetadata()), HasSubstr("tokenizer.ggml.model is missing"));
}

}  // namespace
}  // namespace moetier
