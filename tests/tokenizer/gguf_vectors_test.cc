// The tokenizer against llama.cpp: tests/data/vectors/tiny-f32.tokenize.json
// holds text -> ids that llama.cpp produced for the vocabulary stored in
// tiny-f32.gguf (special tokens parsed). Also FromGgufMetadata's errors.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gguf/tokenizer/byte_level.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/tokenizer.h"
#include "gguf/tokenizer/unicode.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;

const std::string kVectorsDir = std::string(MOETIER_TEST_DATA_DIR) + "/vectors";

struct TokenizeCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Just enough JSON for an array of {"text": string, "ids": [int...]}
// objects: whitespace, strings with escapes (\uXXXX with surrogate pairs),
// integers. Fails the test on anything else.
class TinyJsonReader {
 public:
  explicit TinyJsonReader(std::string text) : s_(std::move(text)) {}

  std::vector<TokenizeCase> ReadCases() {
    std::vector<TokenizeCase> cases;
    Expect('[');
    if (Peek() == ']') return cases;
    while (true) {
      cases.push_back(ReadCase());
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      Expect(']');
      return cases;
    }
  }

  bool failed() const { return failed_; }

 private:
  TokenizeCase ReadCase() {
    TokenizeCase c;
    Expect('{');
    while (!failed_) {
      const std::string key = ReadString();
      Expect(':');
      if (key == "text") {
        c.text = ReadString();
      } else if (key == "ids") {
        c.ids = ReadIntArray();
      } else {
        Fail("unexpected key " + key);
      }
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      Expect('}');
      break;
    }
    return c;
  }

  std::vector<int32_t> ReadIntArray() {
    std::vector<int32_t> ids;
    Expect('[');
    if (Peek() == ']') {
      ++pos_;
      return ids;
    }
    while (!failed_) {
      Peek();
      size_t end = pos_;
      while (end < s_.size() && (isdigit(static_cast<unsigned char>(s_[end])) || s_[end] == '-')) {
        ++end;
      }
      if (end == pos_) Fail("expected an integer");
      ids.push_back(std::atoi(s_.substr(pos_, end - pos_).c_str()));
      pos_ = end;
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      Expect(']');
      break;
    }
    return ids;
  }

  std::string ReadString() {
    std::string out;
    Expect('"');
    while (!failed_ && pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) break;
      c = s_[pos_++];
      switch (c) {
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
          out.push_back(c);
          break;
        case 'u': {
          uint32_t cp = ReadHex4();
          if (cp >= 0xD800 && cp <= 0xDBFF && s_.compare(pos_, 2, "\\u") == 0) {
            pos_ += 2;
            const uint32_t low = ReadHex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
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

  uint32_t ReadHex4() {
    if (pos_ + 4 > s_.size()) {
      Fail("short \\u escape");
      return 0;
    }
    const uint32_t v = static_cast<uint32_t>(std::stoul(s_.substr(pos_, 4), nullptr, 16));
    pos_ += 4;
    return v;
  }

  char Peek() {
    while (pos_ < s_.size() && isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
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
    if (!failed_) ADD_FAILURE() << "JSON: " << what << " at byte " << pos_;
    failed_ = true;
    pos_ = s_.size();
  }

  std::string s_;
  size_t pos_ = 0;
  bool failed_ = false;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
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
  TinyJsonReader reader(ReadFile(kVectorsDir + "/tiny-f32.tokenize.json"));
  const std::vector<TokenizeCase> cases = reader.ReadCases();
  ASSERT_FALSE(reader.failed());
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

TEST(FromGgufMetadata, ClearErrors) {
  const std::string model_error = ErrorOf(ValidMetadata("bert"));
  EXPECT_THAT(model_error, HasSubstr("unsupported tokenizer model \"bert\""));
  EXPECT_THAT(model_error, HasSubstr("supported: gpt2 (byte-level BPE), llama (SentencePiece)"));
  const std::string pre_error = ErrorOf(ValidMetadata("gpt2", "llama-bpe"));
  EXPECT_THAT(pre_error, HasSubstr("llama-bpe"));
  EXPECT_THAT(pre_error, HasSubstr("supported: qwen2"));
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
