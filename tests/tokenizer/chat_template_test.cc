#include "gguf/tokenizer/chat_template.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;

// Excerpts of the real templates, enough for detection.
constexpr std::string_view kQwen3Template =
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + "
    "'<|im_end|>\\n' }}{%- endif %}...{%- if add_generation_prompt %}{{- "
    "'<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false "
    "%}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";
constexpr std::string_view kQwen2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
constexpr std::string_view kPlainChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

std::string Render(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                   ChatRenderOptions options = {}) {
  absl::StatusOr<std::string> text = t.Render(messages, options);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string();
}

TEST(ChatTemplate, DetectsChatMlVariants) {
  EXPECT_EQ(ChatTemplate::Detect(kQwen3Template)->style(), ChatTemplateStyle::kQwen3);
  EXPECT_EQ(ChatTemplate::Detect(kQwen2Template)->style(), ChatTemplateStyle::kQwen2);
  EXPECT_EQ(ChatTemplate::Detect(kPlainChatMl)->style(), ChatTemplateStyle::kChatMl);
}

TEST(ChatTemplate, ForTokenizerUsesThePreTokenizerToTellQwen35Apart) {
  TokenizerConfig config;
  for (int i = 0; i < 8; ++i) config.tokens.push_back("t" + std::to_string(i));
  config.chat_template = std::string(kQwen3Template);
  config.pre_tokenizer = PreTokenizer::kQwen2;
  absl::StatusOr<Tokenizer> qwen3 = Tokenizer::Create(config);
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ(ChatTemplate::ForTokenizer(*qwen3)->style(), ChatTemplateStyle::kQwen3);
  config.pre_tokenizer = PreTokenizer::kQwen35;
  absl::StatusOr<Tokenizer> qwen35 = Tokenizer::Create(config);
  ASSERT_TRUE(qwen35.ok()) << qwen35.status();
  EXPECT_EQ(ChatTemplate::ForTokenizer(*qwen35)->style(), ChatTemplateStyle::kQwen35);
  config.chat_template = std::string(kPlainChatMl);
  absl::StatusOr<Tokenizer> plain = Tokenizer::Create(config);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(ChatTemplate::ForTokenizer(*plain)->style(), ChatTemplateStyle::kChatMl);
  config.chat_template.clear();
  absl::StatusOr<Tokenizer> none = Tokenizer::Create(config);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(ChatTemplate::ForTokenizer(*none).ok());
}

TEST(ChatTemplate, Qwen3SingleUserMessage) {
  const ChatTemplate t(ChatTemplateStyle::kQwen3);
  EXPECT_EQ(Render(t, {{"user", "Hello"}}),
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Qwen3SystemAndUser) {
  const ChatTemplate t(ChatTemplateStyle::kQwen3);
  EXPECT_EQ(Render(t, {{"system", "Be brief."}, {"user", "Hi"}}),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Qwen3MultiTurn) {
  const ChatTemplate t(ChatTemplateStyle::kQwen3);
  EXPECT_EQ(Render(t, {{"user", "2+2?"}, {"assistant", "4."}, {"user", "And 3+3?"}}),
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n4.<|im_end|>\n"
            "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(Render(t, {{"user", "Hi"}, {"assistant", "Hello!"}}, {.add_generation_prompt = false}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n");
}

TEST(ChatTemplate, Qwen3ThinkingDisabled) {
  const ChatTemplate t(ChatTemplateStyle::kQwen3);
  EXPECT_EQ(Render(t, {{"user", "Hello"}}, {.enable_thinking = false}),
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // No generation prompt, nothing to append to.
  EXPECT_EQ(
      Render(t, {{"user", "Hello"}}, {.add_generation_prompt = false, .enable_thinking = false}),
      "<|im_start|>user\nHello<|im_end|>\n");
}

TEST(ChatTemplate, OtherVariants) {
  const ChatTemplate qwen35(ChatTemplateStyle::kQwen35);
  EXPECT_EQ(Render(qwen35, {{"user", "Hi"}}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(Render(qwen35, {{"user", "Hi"}}, {.enable_thinking = false}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const ChatTemplate qwen2(ChatTemplateStyle::kQwen2);
  EXPECT_EQ(Render(qwen2, {{"user", "Hi"}}),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render(qwen2, {{"system", "S"}, {"user", "Hi"}}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  // Plain ChatML ignores enable_thinking, as its template does.
  const ChatTemplate chatml(ChatTemplateStyle::kChatMl);
  EXPECT_EQ(Render(chatml, {{"user", "Hi"}}, {.enable_thinking = false}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, ValidatesMessages) {
  const ChatTemplate t(ChatTemplateStyle::kQwen3);
  const absl::StatusOr<std::string> bad_role =
      t.Render(std::vector<ChatMessage>{{"user", "a"}, {"robot", "b"}}, {});
  ASSERT_FALSE(bad_role.ok());
  EXPECT_THAT(std::string(bad_role.status().message()), HasSubstr("message 1"));
  EXPECT_THAT(std::string(bad_role.status().message()), HasSubstr("robot"));
  EXPECT_FALSE(t.Render(std::vector<ChatMessage>{}, {}).ok());
}

TEST(ChatTemplate, UnsupportedTemplatesAreNamed) {
  const auto llama3 = ChatTemplate::Detect(
      "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
      "'<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{% endfor %}");
  ASSERT_FALSE(llama3.ok());
  EXPECT_THAT(std::string(llama3.status().message()), HasSubstr("unsupported chat template"));
  EXPECT_THAT(std::string(llama3.status().message()), HasSubstr("Llama 3"));

  const auto mistral = ChatTemplate::Detect("{{ bos_token }}[INST] {{ message }} [/INST]");
  ASSERT_FALSE(mistral.ok());
  EXPECT_THAT(std::string(mistral.status().message()), HasSubstr("[INST]"));

  const auto unknown = ChatTemplate::Detect("User: {{ text }}\nBot:");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("unsupported chat template"));
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("User: {{ text }} Bot:"));

  const auto empty = ChatTemplate::Detect("");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("no tokenizer.chat_template"));

  EXPECT_FALSE(ChatTemplate::Detect("<|im_start|>{{ role }}").ok());
}

}  // namespace
}  // namespace moetier
