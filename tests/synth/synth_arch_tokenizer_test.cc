// The tokenizers of the synthetic architectures beyond qwen3moe: the BPE
// layouts put the special tokens at their real ids, the merges and the
// SentencePiece vocabulary behave like the real ones, and the project's own
// tokenizer and chat templates load them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gguf/gguf_reader.h"
#include "gguf/tensor/quant_codec.h"
#include "gguf/tensor/tensor_type.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "synth/bpe_trainer.h"
#include "synth/synth_model.h"
#include "synth/synth_tokenizer.h"
#include "synth/synth_writer.h"
#include "synth_arch_expected.h"
#include "synth_test_util.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;
using namespace synth_test;           // NOLINT: the helpers of this directory's tests
using namespace synth_arch_expected;  // NOLINT: the restated expectations

// ---------------------------------------------------------------- tokenizers

void CheckBpeVocabulary(const SynthVocabulary& v, const SynthBpeLayout& layout, int64_t n_vocab) {
  ASSERT_EQ(static_cast<int64_t>(v.tokens.size()), n_vocab);
  ASSERT_EQ(v.token_types.size(), v.tokens.size());
  EXPECT_TRUE(v.scores.empty());
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    EXPECT_TRUE(index.emplace(v.tokens[i], i).second) << "duplicate token '" << v.tokens[i] << "'";
  }
  const bool real = n_vocab >= layout.real_min_vocab();
  for (size_t s = 0; s < layout.leading.size(); ++s) {
    EXPECT_EQ(v.tokens[s], layout.leading[s].text);
    EXPECT_EQ(v.token_types[s], static_cast<int32_t>(layout.leading[s].type));
  }
  for (size_t s = 0; s < layout.trailing.size(); ++s) {
    const int64_t id =
        real ? layout.trailing[s].real_id
             : n_vocab - static_cast<int64_t>(layout.trailing.size()) + static_cast<int64_t>(s);
    EXPECT_EQ(v.tokens[static_cast<size_t>(id)], layout.trailing[s].text);
    EXPECT_EQ(SynthTokenId(v, layout.trailing[s].text), id);
  }
  EXPECT_EQ(v.first_merge_id, static_cast<int64_t>(layout.leading.size()) + 256);
  ASSERT_GT(v.merges.size(), 100u);
  for (size_t m = 0; m < v.merges.size(); ++m) {
    const std::vector<std::string> parts = absl::StrSplit(v.merges[m], absl::MaxSplits(' ', 1));
    ASSERT_EQ(parts.size(), 2u);
    const size_t id = static_cast<size_t>(v.first_merge_id) + m;
    EXPECT_EQ(v.tokens[id], parts[0] + parts[1]) << "merge " << m;
    EXPECT_LT(index[parts[0]], id);
    EXPECT_LT(index[parts[1]], id);
  }
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.token_types[i] == 5) {
      EXPECT_EQ(v.tokens[i], absl::StrCat("[PAD", i, "]"));
    }
  }
}

TEST(SynthArchTokenizerTest, BpeLayoutsPutTheSpecialsWhereRealFilesHaveThem) {
  for (const int64_t n : {int64_t{512}, kQwen35Vocab}) {
    const absl::StatusOr<SynthVocabulary> v = BuildSynthBpeVocabulary(Qwen35BpeLayout(), n);
    ASSERT_TRUE(v.ok()) << v.status();
    CheckBpeVocabulary(*v, Qwen35BpeLayout(), n);
  }
  const SynthVocabulary q35 = *BuildSynthBpeVocabulary(Qwen35BpeLayout(), kQwen35Vocab);
  EXPECT_EQ(q35.tokens[248044], "<|endoftext|>");
  EXPECT_EQ(q35.tokens[248045], "<|im_start|>");
  EXPECT_EQ(q35.tokens[248046], "<|im_end|>");
  EXPECT_EQ(q35.tokens[248068], "<think>");
  EXPECT_EQ(q35.token_types[248068], 4);
  EXPECT_EQ(q35.tokens[248069], "</think>");
  EXPECT_EQ(q35.token_types[248319], 5);

  for (const int64_t n : {int64_t{512}, kOlmoeVocab}) {
    const absl::StatusOr<SynthVocabulary> v = BuildSynthBpeVocabulary(OlmoeBpeLayout(), n);
    ASSERT_TRUE(v.ok()) << v.status();
    CheckBpeVocabulary(*v, OlmoeBpeLayout(), n);
  }
  const SynthVocabulary olmoe = *BuildSynthBpeVocabulary(OlmoeBpeLayout(), kOlmoeVocab);
  EXPECT_EQ(olmoe.tokens[1], "<|padding|>");
  EXPECT_EQ(olmoe.tokens[50279], "<|endoftext|>");
  EXPECT_EQ(olmoe.token_types[50279], 3);
  // 50280 tokens in a 50304-row embedding: the converter's [PAD<id>] rows.
  for (int64_t id = 50280; id < kOlmoeVocab; ++id) {
    EXPECT_EQ(olmoe.tokens[static_cast<size_t>(id)], absl::StrCat("[PAD", id, "]"));
    EXPECT_EQ(olmoe.token_types[static_cast<size_t>(id)], 5);
  }
  EXPECT_EQ(olmoe.tokens[2], "\xC4\x80");  // byte 0x00 maps to U+0100
  EXPECT_FALSE(BuildSynthBpeVocabulary(OlmoeBpeLayout(), 260).ok());
}

TEST(SynthArchTokenizerTest, Gpt2PreTokenizerSplitsLikeTheRegex) {
  auto split = [](std::string_view text) {
    std::vector<std::string> out;
    for (const std::string_view p : PreTokenizeGpt2(text)) out.emplace_back(p);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("I'm here  now"), (V{"I", "'m", " here", " ", " now"}));
  EXPECT_EQ(split("x = 123 + 4"), (V{"x", " =", " 123", " +", " 4"}));
  EXPECT_EQ(split("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split("abc!!! def  "), (V{"abc", "!!!", " def", "  "}));
  EXPECT_EQ(split("don'T"), (V{"don", "'", "T"}));  // contractions are lower case only
  EXPECT_EQ(split("你好，世界"), (V{"你好", "，", "世界"}));
}

// The olmoe vocabulary under llama.cpp's BPE merge loop. The project's
// tokenizer has no "olmo" pre-tokenizer, so this encodes under "qwen2",
// which splits the test text the same way (letter runs with one leading
// space); the merges are what is being checked.
TEST(SynthArchTokenizerTest, OlmoeMergesEncodeWordsCompactly) {
  for (const int64_t n_vocab : {int64_t{4096}, kOlmoeVocab}) {
    SynthShape s = *SynthPreset(SynthArch::kOlmoe, "tiny");
    s.n_vocab = n_vocab;
    absl::StatusOr<std::vector<GgufKeyValue>> kvs = BuildSynthMetadata(s, SynthQuant::kF32, "t");
    ASSERT_TRUE(kvs.ok()) << kvs.status();
    GgufMetadata md;
    for (GgufKeyValue& kv : *kvs) {
      if (kv.key == "tokenizer.ggml.pre") kv.value = GgufValue::String("qwen2");
      md.Add(std::move(kv));
    }
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromGgufMetadata(md);
    ASSERT_TRUE(tok.ok()) << tok.status();
    const std::string text = "The harbour empties a little before it fills again<|endoftext|>";
    absl::StatusOr<std::vector<int32_t>> ids = tok->Encode(text, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(ids->back(), tok->eos_id());
    EXPECT_LT(ids->size(), 16u) << n_vocab;
    EXPECT_EQ(*tok->Detokenize(*ids, /*render_special=*/true), text);
    if (n_vocab == kOlmoeVocab) {
      EXPECT_EQ(ids->back(), 50279);
    }
    EXPECT_FALSE(tok->add_bos());
  }
}

TEST(SynthArchTokenizerTest, Qwen35TokenizerAndTemplateLoadInTheProject) {
  for (const int64_t n_vocab : {int64_t{512}, kQwen35Vocab}) {
    SynthShape s = *SynthPreset(SynthArch::kQwen35Moe, "tiny");
    s.n_vocab = n_vocab;
    absl::StatusOr<GgufMetadata> md = MetadataOf(s);
    ASSERT_TRUE(md.ok()) << md.status();
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromGgufMetadata(*md);
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ(tok->token_text(tok->eos_id()), "<|im_end|>");
    EXPECT_EQ(tok->bos_id(), kNoToken);
    EXPECT_FALSE(tok->add_bos());
    EXPECT_TRUE(tok->IsEndOfGeneration(tok->TokenId("<|im_end|>")));

    absl::StatusOr<ChatTemplate> chat = ChatTemplate::ForTokenizer(*tok);
    ASSERT_TRUE(chat.ok()) << chat.status();
    EXPECT_EQ(chat->style(), ChatTemplateStyle::kQwen35);
    const ChatMessage hello[] = {{"user", "Hello"}};
    const absl::StatusOr<std::string> prompt = chat->Render(hello, ChatRenderOptions{});
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    EXPECT_EQ(*prompt, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n");
    absl::StatusOr<std::vector<int32_t>> ids = tok->Encode(*prompt, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(ids->front(), tok->TokenId("<|im_start|>"));
    EXPECT_EQ((*ids)[ids->size() - 2], tok->TokenId("<think>"));
    EXPECT_EQ(*tok->Detokenize(*ids, /*render_special=*/true), *prompt);
    if (n_vocab == kQwen35Vocab) {
      EXPECT_EQ(ids->front(), 248045);
      EXPECT_EQ((*ids)[ids->size() - 2], 248068);
      EXPECT_EQ(tok->eos_id(), 248046);
    }
  }
  // The generation prompt of the real template opens a think block.
  EXPECT_THAT(std::string(SynthQwen35ChatTemplate()), HasSubstr("{{- '<think>\\n' }}"));
  EXPECT_THAT(std::string(SynthQwen35ChatTemplate()), HasSubstr("<tool_call>"));
}

// llama.cpp's SentencePiece tokenization (llm_tokenizer_spm): spaces become
// U+2581 with one prepended, then the adjacent pair whose concatenation is a
// token with the highest score is merged (leftmost on ties) until none is;
// symbols that are no token become their <0xXX> byte tokens.
std::vector<int32_t> SpmEncode(const SynthVocabulary& v, std::string_view text) {
  std::map<std::string, int32_t> ids;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.token_types[i] == 1) ids.emplace(v.tokens[i], static_cast<int32_t>(i));
  }
  std::string escaped(kSentencePieceSpace);
  for (const char c : text) {
    if (c == ' ') {
      escaped += kSentencePieceSpace;
    } else {
      escaped += c;
    }
  }
  std::vector<std::string> symbols;
  for (size_t i = 0; i < escaped.size();) {
    const unsigned char c = static_cast<unsigned char>(escaped[i]);
    const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    symbols.push_back(escaped.substr(i, len));
    i += len;
  }
  while (true) {
    int best = -1;
    float best_score = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = ids.find(symbols[i] + symbols[i + 1]);
      if (it == ids.end()) continue;
      const float score = v.scores[static_cast<size_t>(it->second)];
      if (best < 0 || score > best_score) {
        best = static_cast<int>(i);
        best_score = score;
      }
    }
    if (best < 0) break;
    symbols[static_cast<size_t>(best)] += symbols[static_cast<size_t>(best) + 1];
    symbols.erase(symbols.begin() + best + 1);
  }
  std::vector<int32_t> out;
  for (const std::string& s : symbols) {
    const auto it = ids.find(s);
    if (it != ids.end()) {
      out.push_back(it->second);
      continue;
    }
    for (const char c : s)
      out.push_back(static_cast<int32_t>(kSpmFirstByteId) + static_cast<uint8_t>(c));
  }
  return out;
}

std::string SpmDecode(const SynthVocabulary& v, const std::vector<int32_t>& ids) {
  std::string out;
  for (const int32_t id : ids) {
    if (v.token_types[static_cast<size_t>(id)] == 6) {
      out += static_cast<char>(id - kSpmFirstByteId);
      continue;
    }
    std::string piece = v.tokens[static_cast<size_t>(id)];
    for (size_t p; (p = piece.find(kSentencePieceSpace)) != std::string::npos;) {
      piece.replace(p, kSentencePieceSpace.size(), " ");
    }
    out += piece;
  }
  return out.substr(1);  // the prepended space
}

TEST(SynthArchTokenizerTest, SentencePieceVocabularyIsLikeMixtrals) {
  for (const int64_t n_vocab : {int64_t{512}, kMixtralVocab}) {
    const absl::StatusOr<SynthVocabulary> vocab = BuildSynthSpmVocabulary(n_vocab);
    ASSERT_TRUE(vocab.ok()) << vocab.status();
    const SynthVocabulary& v = *vocab;
    ASSERT_EQ(static_cast<int64_t>(v.tokens.size()), n_vocab);
    ASSERT_EQ(v.scores.size(), v.tokens.size());
    ASSERT_EQ(v.token_types.size(), v.tokens.size());
    EXPECT_TRUE(v.merges.empty());
    EXPECT_EQ(v.tokens[0], "<unk>");
    EXPECT_EQ(v.token_types[0], 2);
    EXPECT_EQ(v.tokens[1], "<s>");
    EXPECT_EQ(v.token_types[1], 3);
    EXPECT_EQ(v.tokens[2], "</s>");
    EXPECT_EQ(v.token_types[2], 3);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      EXPECT_EQ(v.tokens[static_cast<size_t>(3 + b)], name);
      EXPECT_EQ(v.token_types[static_cast<size_t>(3 + b)], 6);
    }
    for (size_t i = 0; i < kSpmFixedTokens; ++i) EXPECT_EQ(v.scores[i], 0.0f);
    // Normal pieces: scores fall with the rank; U+2581 only as the first
    // character; every multi-character piece is the concatenation of two
    // better-scored pieces, so the merge loop can reach it.
    std::map<std::string, size_t> index;
    size_t normal = 0;
    for (size_t i = kSpmFixedTokens; i < v.tokens.size(); ++i) {
      EXPECT_TRUE(index.emplace(v.tokens[i], i).second) << "duplicate " << v.tokens[i];
      if (v.token_types[i] == 5) {
        EXPECT_EQ(v.tokens[i], absl::StrCat("[PAD", i, "]"));
        EXPECT_EQ(v.scores[i], kSpmPadScore);
        continue;
      }
      ASSERT_EQ(v.token_types[i], 1) << i;
      ++normal;
      EXPECT_EQ(v.scores[i], -static_cast<float>(i - kSpmFixedTokens)) << i;
      const size_t space = v.tokens[i].find(kSentencePieceSpace, 1);
      EXPECT_EQ(space, std::string::npos) << v.tokens[i];
    }
    EXPECT_EQ(static_cast<int64_t>(normal + kSpmFixedTokens) +
                  std::count(v.token_types.begin(), v.token_types.end(), 5),
              n_vocab);

    const std::string text = "The harbour empties a little before it fills again.";
    const std::vector<int32_t> ids = SpmEncode(v, text);
    EXPECT_EQ(SpmDecode(v, ids), text);
    EXPECT_LT(ids.size(), n_vocab == kMixtralVocab ? 16u : 40u) << n_vocab;
    // Text outside the vocabulary falls back to byte tokens and still round-trips.
    const std::string rare = "\xE2\x9C\x93 tab\there";
    EXPECT_EQ(SpmDecode(v, SpmEncode(v, rare)), rare);
  }
  EXPECT_FALSE(BuildSynthSpmVocabulary(259).ok());
  EXPECT_THAT(std::string(SynthMixtralChatTemplate()),
              HasSubstr("'[INST] ' + message['content'] + ' [/INST]'"));
  EXPECT_THAT(std::string(SynthMixtralChatTemplate()), HasSubstr("message['content'] + eos_token"));
  EXPECT_THAT(std::string(SynthOlmoeChatTemplate()), HasSubstr("'<|assistant|>\\n'"));
}

}  // namespace
}  // namespace moetier
