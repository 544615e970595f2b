// The tokenizer against independent implementations: token ids that
// JavaScript tokenizers produced for real vocabularies (Mistral/Mixtral and
// Llama 2 SentencePiece, GPT-2 byte-level BPE with the olmo pre-tokenizer),
// stored with the part of each vocabulary the texts use. How they were made:
// tests/data/tokenizer/README.md.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gguf/gguf_reader.h"
#include "gguf/tokenizer/pre_tokenizer.h"
#include "gguf/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tokenizer/json_fixture.h"

namespace moetier {
namespace {

using testing::JsonValue;

const std::string kFixtureDir = std::string(MOETIER_TEST_DATA_DIR) + "/tokenizer";

struct OracleCase {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<std::string> pieces;  // GPT-2 fixture only
};

struct Fixture {
  std::string oracle;
  GgufMetadata metadata;
  std::vector<OracleCase> cases;
};

std::vector<int32_t> Ints(const JsonValue& array) {
  std::vector<int32_t> out;
  for (const JsonValue& v : array.array) out.push_back(static_cast<int32_t>(v.number));
  return out;
}

// The fixture as GGUF metadata of the full vocabulary: the ids it does not
// list become unused placeholders, which no text here can reach.
Fixture LoadFixture(const std::string& name) {
  Fixture f;
  absl::StatusOr<JsonValue> json = testing::ReadJsonFile(kFixtureDir + "/" + name);
  EXPECT_TRUE(json.ok()) << json.status();
  if (!json.ok()) return f;
  const JsonValue& root = *json;
  const std::string model = root.Find("model")->string;
  f.oracle = root.Find("oracle")->string;
  const auto vocab_size = static_cast<size_t>(root.Find("vocab_size")->number);

  std::vector<std::string> tokens(vocab_size);
  std::vector<int32_t> types(vocab_size, static_cast<int32_t>(TokenType::kUnused));
  std::vector<float> scores(vocab_size, 0.0f);
  for (size_t id = 0; id < vocab_size; ++id) tokens[id] = absl::StrFormat("[absent %d]", id);
  for (const JsonValue& token : root.Find("tokens")->array) {
    const auto id = static_cast<size_t>(token.array[0].number);
    EXPECT_LT(id, vocab_size);
    if (id >= vocab_size) continue;
    types[id] = static_cast<int32_t>(token.array[1].number);
    scores[id] = static_cast<float>(token.array[2].number);
    tokens[id] = token.array[3].string;
  }

  f.metadata.Add({"tokenizer.ggml.model", GgufValue::String(model)});
  if (const JsonValue* pre = root.Find("pre")) {
    f.metadata.Add({"tokenizer.ggml.pre", GgufValue::String(pre->string)});
  }
  f.metadata.Add({"tokenizer.ggml.tokens", GgufValue::StringArray(tokens)});
  f.metadata.Add({"tokenizer.ggml.token_type", GgufValue::Int32Array(types)});
  if (model == "llama") f.metadata.Add({"tokenizer.ggml.scores", GgufValue::Float32Array(scores)});
  if (const JsonValue* merges = root.Find("merges")) {
    std::vector<std::string> list;
    for (const JsonValue& m : merges->array) list.push_back(m.string);
    f.metadata.Add({"tokenizer.ggml.merges", GgufValue::StringArray(list)});
  }
  for (const auto& [field, key] : {std::pair{"bos_id", "tokenizer.ggml.bos_token_id"},
                                   std::pair{"eos_id", "tokenizer.ggml.eos_token_id"},
                                   std::pair{"unknown_id", "tokenizer.ggml.unknown_token_id"}}) {
    if (const JsonValue* id = root.Find(field)) {
      f.metadata.Add({key, GgufValue::Uint32(static_cast<uint32_t>(id->number))});
    }
  }

  for (const JsonValue& c : root.Find("cases")->array) {
    OracleCase oracle_case{c.Find("text")->string, Ints(*c.Find("ids")), {}};
    if (const JsonValue* pieces = c.Find("pieces")) {
      for (const JsonValue& p : pieces->array) oracle_case.pieces.push_back(p.string);
    }
    f.cases.push_back(std::move(oracle_case));
  }
  return f;
}

class SentencePieceOracle : public ::testing::TestWithParam<const char*> {};

TEST_P(SentencePieceOracle, MatchesEveryCase) {
  const Fixture f = LoadFixture(GetParam());
  ASSERT_GE(f.cases.size(), 80u);
  absl::StatusOr<Tokenizer> t = Tokenizer::FromGgufMetadata(f.metadata);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->model(), TokenizerModel::kSentencePiece);
  ASSERT_TRUE(t->add_bos());  // llama.cpp's default; the fixture has no key
  for (const OracleCase& c : f.cases) {
    SCOPED_TRACE(::testing::Message() << "text: \"" << c.text << "\" (oracle: " << f.oracle << ")");
    absl::StatusOr<std::vector<int32_t>> ids = t->Encode(c.text, /*parse_special=*/false,
                                                         /*add_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c.ids);
    EXPECT_EQ(*t->Encode(c.text, /*parse_special=*/true, /*add_special=*/true), c.ids);

    // llama_detokenize: after the bos the space Encode added stays; without
    // the bos it goes.
    ASSERT_FALSE(c.ids.empty());
    EXPECT_EQ(*t->Detokenize(c.ids, false), " " + c.text);
    const std::vector<int32_t> without_bos(c.ids.begin() + 1, c.ids.end());
    EXPECT_EQ(*t->Detokenize(without_bos, false), c.text);
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, SentencePieceOracle,
                         ::testing::Values("mistral-spm.json", "llama2-spm.json"));

TEST(Gpt2Oracle, MatchesEveryCase) {
  const Fixture f = LoadFixture("gpt2-bpe.json");
  ASSERT_GE(f.cases.size(), 80u);
  absl::StatusOr<Tokenizer> t = Tokenizer::FromGgufMetadata(f.metadata);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->pre_tokenizer(), PreTokenizer::kGpt2);
  ASSERT_FALSE(t->add_bos());
  for (const OracleCase& c : f.cases) {
    SCOPED_TRACE(::testing::Message() << "text: \"" << c.text << "\" (oracle: " << f.oracle << ")");
    std::vector<std::string> pieces;
    for (const std::string_view piece : PreTokenize(PreTokenizer::kGpt2, c.text)) {
      pieces.emplace_back(piece);
    }
    EXPECT_EQ(pieces, c.pieces);
    absl::StatusOr<std::vector<int32_t>> ids = t->Encode(c.text, /*parse_special=*/true,
                                                         /*add_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c.ids);
    // The pieces give back the text byte for byte; Detokenize then applies
    // llama.cpp's clean-up of spaces, which olmo asks for.
    std::string joined;
    for (const int32_t id : c.ids) joined.append(t->TokenPiece(id, false));
    EXPECT_EQ(joined, c.text);
  }
  EXPECT_EQ(*t->Detokenize(*t->Encode("Hello , world .", false), false), "Hello, world.");
}

}  // namespace
}  // namespace moetier
