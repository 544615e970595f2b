// Tests of the vocabulary, merges and chat template moetier-synth writes:
// the tiny one is consistent, the full one puts Qwen3's special tokens at
// their real ids, and the project's tokenizer and chat template load them.
#include "synth/synth_tokenizer.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gguf/gguf_reader.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "synth/synth_model.h"
#include "synth/synth_writer.h"
#include "synth_test_util.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;

void CheckVocabulary(const SynthVocabulary& v, int64_t n_vocab) {
  ASSERT_EQ(static_cast<int64_t>(v.tokens.size()), n_vocab);
  ASSERT_EQ(v.token_types.size(), v.tokens.size());
  EXPECT_EQ(v.tokens[v.eos_id], "<|im_end|>");
  EXPECT_EQ(v.tokens[v.bos_id], "<|endoftext|>");
  EXPECT_EQ(v.tokens[v.pad_id], "<|endoftext|>");
  EXPECT_EQ(v.tokens[v.im_start_id], "<|im_start|>");
  EXPECT_EQ(v.tokens[v.think_id], "<think>");
  EXPECT_EQ(v.tokens[v.think_end_id], "</think>");
  EXPECT_EQ(v.token_types[v.eos_id], 3);
  EXPECT_EQ(v.token_types[v.bos_id], 3);
  EXPECT_EQ(v.token_types[v.im_start_id], 3);
  EXPECT_EQ(v.token_types[v.think_id], 4);
  EXPECT_EQ(v.token_types[v.think_end_id], 4);

  std::map<std::string, size_t> index;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    EXPECT_TRUE(index.emplace(v.tokens[i], i).second) << "duplicate token '" << v.tokens[i] << "'";
  }
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(v.token_types[i], 1) << i;
  ASSERT_GT(v.merges.size(), 0u);
  for (size_t m = 0; m < v.merges.size(); ++m) {
    const std::vector<std::string> parts = absl::StrSplit(v.merges[m], absl::MaxSplits(' ', 1));
    ASSERT_EQ(parts.size(), 2u) << v.merges[m];
    EXPECT_TRUE(index.count(parts[0])) << "merge " << m << " left '" << parts[0] << "' is no token";
    EXPECT_TRUE(index.count(parts[1]))
        << "merge " << m << " right '" << parts[1] << "' is no token";
    EXPECT_EQ(v.tokens[256 + m], parts[0] + parts[1]) << "merge " << m;
    EXPECT_EQ(v.token_types[256 + m], 1);
    // Merge inputs are earlier tokens, so a tokenizer can apply merges in rank order.
    EXPECT_LT(index[parts[0]], 256 + m);
    EXPECT_LT(index[parts[1]], 256 + m);
  }
  for (size_t i = 256 + v.merges.size(); i < v.tokens.size(); ++i) {
    if (v.token_types[i] == 5) {
      EXPECT_EQ(v.tokens[i], absl::StrCat("[PAD", i, "]"));
    } else {
      EXPECT_TRUE(v.token_types[i] == 3 || v.token_types[i] == 4) << i;
    }
  }
  int specials = 0;
  for (int32_t t : v.token_types) specials += (t == 3 || t == 4);
  EXPECT_EQ(specials, 5);
}

TEST(SynthTokenizerTest, TinyVocabularyIsConsistent) {
  const absl::StatusOr<SynthVocabulary> v = BuildSynthVocabulary(512);
  ASSERT_TRUE(v.ok()) << v.status();
  CheckVocabulary(*v, 512);
  // Compact layout: specials take the last five ids.
  EXPECT_EQ(v->bos_id, 507u);
  EXPECT_EQ(v->im_start_id, 508u);
  EXPECT_EQ(v->eos_id, 509u);
  EXPECT_EQ(v->think_id, 510u);
  EXPECT_EQ(v->think_end_id, 511u);
  EXPECT_FALSE(BuildSynthVocabulary(260).ok());
}

TEST(SynthTokenizerTest, FullVocabularyUsesQwen3Ids) {
  const absl::StatusOr<SynthVocabulary> v = BuildSynthVocabulary(kQwenVocab);
  ASSERT_TRUE(v.ok()) << v.status();
  CheckVocabulary(*v, kQwenVocab);
  EXPECT_EQ(v->eos_id, 151645u);
  EXPECT_EQ(v->bos_id, 151643u);
  EXPECT_EQ(v->pad_id, 151643u);
  EXPECT_EQ(v->im_start_id, 151644u);
  EXPECT_EQ(v->think_id, 151667u);
  EXPECT_EQ(v->think_end_id, 151668u);
  EXPECT_EQ(v->tokens[151935], "[PAD151935]");
  EXPECT_EQ(v->token_types[151935], 5);
}

TEST(SynthTokenizerTest, ChatTemplateIsQwen3ChatML) {
  const std::string_view t = SynthChatTemplate();
  EXPECT_THAT(std::string(t), HasSubstr("'<|im_start|>' + message['role'] + '\\n'"));
  EXPECT_THAT(std::string(t), HasSubstr("'<|im_end|>\\n'"));
  EXPECT_THAT(std::string(t), HasSubstr("add_generation_prompt"));
  EXPECT_THAT(std::string(t), HasSubstr("'<|im_start|>assistant\\n'"));
  EXPECT_THAT(std::string(t), HasSubstr("enable_thinking"));
  EXPECT_THAT(std::string(t), HasSubstr("'<think>\\n\\n</think>\\n\\n'"));
}

// The project's tokenizer and chat template accept what the tool writes.
TEST(SynthTokenizerTest, ProjectTokenizerLoadsTheMetadata) {
  for (int64_t n_vocab : {int64_t{512}, kQwenVocab}) {
    SynthShape s = *SynthPreset("tiny");
    s.n_vocab = n_vocab;
    absl::StatusOr<GgufMetadata> md = synth_test::MetadataOf(s);
    ASSERT_TRUE(md.ok()) << md.status();
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromGgufMetadata(*md);
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ(tok->vocab_size(), n_vocab);
    EXPECT_EQ(tok->token_text(tok->eos_id()), "<|im_end|>");
    EXPECT_EQ(tok->token_text(tok->bos_id()), "<|endoftext|>");
    EXPECT_FALSE(tok->add_bos());
    EXPECT_TRUE(tok->IsEndOfGeneration(tok->TokenId("<|im_end|>")));
    EXPECT_TRUE(tok->IsEndOfGeneration(tok->TokenId("<|endoftext|>")));

    const std::string text =
        "<|im_start|>user\nThe quick brown fox, and the model.<|im_end|>\n<think>";
    absl::StatusOr<std::vector<int32_t>> ids = tok->Encode(text, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(ids->front(), tok->TokenId("<|im_start|>"));
    EXPECT_EQ(ids->back(), tok->TokenId("<think>"));
    EXPECT_NE(std::find(ids->begin(), ids->end(), tok->eos_id()), ids->end());
    // Learned merges make words shorter than their bytes.
    EXPECT_LT(ids->size(), text.size() / 2) << n_vocab;
    absl::StatusOr<std::string> back = tok->Detokenize(*ids, /*render_special=*/true);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, text);
    if (n_vocab == kQwenVocab) {
      EXPECT_EQ(ids->back(), 151667);
    }

    absl::StatusOr<ChatTemplate> chat = ChatTemplate::Detect(tok->chat_template());
    ASSERT_TRUE(chat.ok()) << chat.status();
    EXPECT_EQ(chat->style(), ChatTemplateStyle::kQwen3);
    const ChatMessage hello[] = {{"user", "Hello"}};
    absl::StatusOr<std::string> prompt = chat->Render(hello, ChatRenderOptions{});
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    EXPECT_EQ(*prompt, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  }
}

}  // namespace
}  // namespace moetier
