#include "gguf/tokenizer/chat_template.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gguf/tokenizer/chat_template_text.h"
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

// Qwen1.5's chat models (Qwen1.5-MoE-A2.7B-Chat among them) and Qwen2's
// hard-code their own default system text; the turn is rendered with it.
TEST(ChatTemplate, DefaultSystemTextComesFromTheTemplate) {
  constexpr std::string_view kQwen15Template =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
      "'<|im_start|>system\\nYou are a helpful assistant<|im_end|>\\n' }}{% endif "
      "%}{{'<|im_start|>' "
      "+ message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
      "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  absl::StatusOr<ChatTemplate> qwen15 = ChatTemplate::Detect(kQwen15Template);
  ASSERT_TRUE(qwen15.ok()) << qwen15.status();
  EXPECT_EQ(qwen15->style(), ChatTemplateStyle::kQwen2);
  EXPECT_EQ(qwen15->default_system(), "You are a helpful assistant");
  EXPECT_EQ(Render(*qwen15, {{"user", "Hi"}}),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi"
            "<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render(*qwen15, {{"system", "S"}, {"user", "Hi"}}, {.add_generation_prompt = false}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");

  // The newline may be the template's own character instead of a Jinja escape.
  const std::string raw_newline = "{{ '<|im_start|>system\nBe brief.<|im_end|>\n' }}";
  ASSERT_TRUE(ChatTemplate::Detect(raw_newline).ok());
  EXPECT_EQ(ChatTemplate::Detect(raw_newline)->default_system(), "Be brief.");

  // Jinja's escapes in the literal are decoded, and braces are text there
  // (Qwen2.5-Math's default asks for \boxed{}).
  const std::string escaped =
      "{{ '<|im_start|>system\\nPut the answer in \\\\boxed{}, it\\'s \"final\".<|im_end|>\\n' }}";
  ASSERT_TRUE(ChatTemplate::Detect(escaped).ok());
  EXPECT_EQ(ChatTemplate::Detect(escaped)->default_system(),
            "Put the answer in \\boxed{}, it's \"final\".");

  // A system turn built from the messages is not a default; a thinking
  // switch is Qwen3's even beside a hard-coded turn.
  EXPECT_EQ(ChatTemplate::Detect(kQwen3Template)->style(), ChatTemplateStyle::kQwen3);
  EXPECT_EQ(ChatTemplate::Detect(raw_newline + std::string(kQwen3Template))->style(),
            ChatTemplateStyle::kQwen3);
  EXPECT_EQ(ChatTemplate::Detect(kPlainChatMl)->default_system(), "");
  EXPECT_EQ(ChatTemplate(ChatTemplateStyle::kChatMl).default_system(), "");
  EXPECT_EQ(ChatTemplate(ChatTemplateStyle::kQwen2).default_system(), kQwen2DefaultSystem);
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
  // An assistant turn after the last user turn keeps its (here empty)
  // think block, as Qwen3's template writes it.
  EXPECT_EQ(Render(t, {{"user", "Hi"}, {"assistant", "Hello!"}}, {.add_generation_prompt = false}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "Hello!<|im_end|>\n");
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
  // ... and says which families are supported.
  for (const char* family : {"ChatML", "Qwen3.5", "Mixtral-8x7B-Instruct-v0.1", "Tulu"}) {
    EXPECT_THAT(std::string(llama3.status().message()), HasSubstr(family));
  }

  const auto mistral = ChatTemplate::Detect("{{ bos_token }}[INST] {{ message }} [/INST]");
  ASSERT_FALSE(mistral.ok());
  EXPECT_THAT(std::string(mistral.status().message()), HasSubstr("[INST]"));
  EXPECT_THAT(std::string(mistral.status().message()), HasSubstr("other than those"));

  // Tulu 2's layout differs from Tulu 3's: named, not rendered.
  const auto tulu2 = ChatTemplate::Detect(
      "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + "
      "message['content'] }}{% endif %}{% endfor %}");
  ASSERT_FALSE(tulu2.ok());
  EXPECT_THAT(std::string(tulu2.status().message()), HasSubstr("<|user|>"));

  const auto unknown = ChatTemplate::Detect("User: {{ text }}\nBot:");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("unsupported chat template"));
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("User: {{ text }} Bot:"));

  const auto empty = ChatTemplate::Detect("");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("no tokenizer.chat_template"));

  EXPECT_FALSE(ChatTemplate::Detect("<|im_start|>{{ role }}").ok());
}

// --- the Mistral-Instruct and Tulu templates -------------------------------

// Mixtral-8x7B-Instruct-v0.1's template as published, and a copy laid out
// differently (whitespace control, line breaks, double quotes), which
// renders the same.
constexpr std::string_view kMixtralTemplate =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
    "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
    "message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}";
constexpr std::string_view kMixtralRelaidTemplate =
    "{{- bos_token }}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message[\"role\"] == \"user\") != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception(\"Conversation roles must alternate "
    "user/assistant/user/assistant/...\") }}\n"
    "    {%- endif %}\n"
    "    {%- if message['role'] == 'user' %}\n"
    "        {{- '[INST] ' + message['content'] + ' [/INST]' }}\n"
    "    {%- elif message['role'] == 'assistant' %}\n"
    "        {{- message['content'] + eos_token }}\n"
    "    {%- else %}\n"
    "        {{- raise_exception('Only user and assistant roles are supported!') }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n";
constexpr std::string_view kTuluTemplate =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\\n' + "
    "message['content'] + '\\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + "
    "message['content'] + '\\n' }}{% elif message['role'] == 'assistant' %}{% if not loop.last "
    "%}{{ '<|assistant|>\\n'  + message['content'] + eos_token + '\\n' }}{% else %}{{ "
    "'<|assistant|>\\n'  + message['content'] + eos_token }}{% endif %}{% endif %}{% if "
    "loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}";

TEST(CanonicalTemplateText, LayoutDoesNotMatterButOutputDoes) {
  EXPECT_EQ(CanonicalTemplateText(kMixtralTemplate), CanonicalTemplateText(kMixtralRelaidTemplate));
  // Whitespace that reaches the output counts: a line break not trimmed by
  // "-" or trim_blocks ...
  EXPECT_NE(CanonicalTemplateText("{{ a }}{{ b }}"), CanonicalTemplateText("{{ a }}\n{{ b }}"));
  // ... but trim_blocks takes the newline after a block tag, lstrip_blocks
  // the indentation before one, "-" all whitespace on its side.
  EXPECT_EQ(CanonicalTemplateText("{% if x %}\n  {% endif %}"),
            CanonicalTemplateText("{% if x %}{% endif %}"));
  EXPECT_EQ(CanonicalTemplateText("{{ a }}  \n\t{{- b }}"), CanonicalTemplateText("{{a}}{{b}}"));
  EXPECT_NE(CanonicalTemplateText("{{ a }}  {{ b }}"), CanonicalTemplateText("{{a}}{{b}}"));
  // Inside a tag, spacing does not matter, but a space between two names does.
  EXPECT_EQ(CanonicalTemplateText("{%if not loop.last%}"),
            CanonicalTemplateText("{% if  not\n loop.last %}"));
  EXPECT_NE(CanonicalTemplateText("{% if not x %}"), CanonicalTemplateText("{% if notx %}"));
  EXPECT_EQ(CanonicalTemplateText("{{ a + b }}"), CanonicalTemplateText("{{a+b}}"));
  // Spaces inside a string literal count; quote style does not; comments vanish.
  EXPECT_NE(CanonicalTemplateText("{{ '[INST] ' }}"), CanonicalTemplateText("{{ '[INST]' }}"));
  EXPECT_EQ(CanonicalTemplateText("{{ \"[INST] \" }}{# note #}"),
            CanonicalTemplateText("{{'[INST] '}}"));
  // Jinja drops one trailing newline of the template.
  EXPECT_EQ(CanonicalTemplateText("{{ a }}\n"), CanonicalTemplateText("{{ a }}"));
  EXPECT_NE(CanonicalTemplateText("{{ a }}\n\n"), CanonicalTemplateText("{{ a }}"));
  EXPECT_NE(CanonicalTemplateText("{{ a "), CanonicalTemplateText("{{ a }}"));
}

TEST(ChatTemplate, DetectsTheMistralAndTuluTemplatesByTheirText) {
  EXPECT_EQ(ChatTemplate::Detect(kMixtralTemplate)->style(), ChatTemplateStyle::kMistralInstruct);
  EXPECT_EQ(ChatTemplate::Detect(kMixtralRelaidTemplate)->style(),
            ChatTemplateStyle::kMistralInstruct);
  EXPECT_EQ(ChatTemplate::Detect(kTuluTemplate)->style(), ChatTemplateStyle::kTulu);
  EXPECT_EQ(ChatTemplate::Detect("{{ bos_token }}" + std::string(kTuluTemplate))->style(),
            ChatTemplateStyle::kTuluBos);
  // One character of output changed: not the known template.
  std::string changed(kMixtralTemplate);
  changed.replace(changed.find("' [/INST]'"), 10, "'[/INST]'");
  const absl::StatusOr<ChatTemplate> unknown = ChatTemplate::Detect(changed);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("[INST]"));
}

TEST(ChatTemplate, MixtralDropsTheBosItsTokenizerAdds) {
  const ChatTemplate t(ChatTemplateStyle::kMistralInstruct);
  EXPECT_EQ(t.special_tokens().bos_token, "<s>");
  EXPECT_TRUE(t.special_tokens().add_bos);
  // The template gives "<s>[INST] Hello [/INST]"; llama.cpp's server drops
  // the "<s>" because the vocabulary adds bos.
  EXPECT_EQ(Render(t, {{"user", "Hello"}}), "[INST] Hello [/INST]");
  EXPECT_EQ(Render(t, {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "And you?"}}),
            "[INST] Hi [/INST]Hello!</s>[INST] And you? [/INST]");
  // No generation prompt in this template: the same text either way.
  EXPECT_EQ(Render(t, {{"user", "Hi"}, {"assistant", "Hello!"}}, {.add_generation_prompt = false}),
            "[INST] Hi [/INST]Hello!</s>");
  // A vocabulary that does not add bos keeps the template's.
  const ChatTemplate no_add(ChatTemplateStyle::kMistralInstruct,
                            {.bos_token = "<s>", .eos_token = "</s>", .add_bos = false});
  EXPECT_EQ(Render(no_add, {{"user", "Hello"}}), "<s>[INST] Hello [/INST]");
}

TEST(ChatTemplate, MistralVariants) {
  const ChatTemplate v01(ChatTemplateStyle::kMistralInstructSpaced);
  EXPECT_EQ(Render(v01, {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "And you?"}}),
            "[INST] Hi [/INST]Hello!</s> [INST] And you? [/INST]");
  const ChatTemplate v1(ChatTemplateStyle::kMistralV1);
  EXPECT_EQ(Render(v1, {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "And you?"}}),
            " [INST] Hi [/INST] Hello!</s> [INST] And you? [/INST]");
  EXPECT_EQ(Render(v1, {{"system", "Be brief."}, {"user", "Hi"}}),
            " [INST] Be brief.\n\nHi [/INST]");
}

TEST(ChatTemplate, MistralRefusesWhatItsTemplateRefuses) {
  const ChatTemplate t(ChatTemplateStyle::kMistralInstruct);
  const auto message = [&](const std::vector<ChatMessage>& messages) {
    const absl::StatusOr<std::string> r = t.Render(messages, {});
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  // A system message first breaks the alternation check, which the
  // template runs before the role check.
  EXPECT_EQ(message({{"system", "S"}, {"user", "Hi"}}),
            "Conversation roles must alternate user/assistant/user/assistant/...");
  EXPECT_EQ(message({{"assistant", "Hi"}}),
            "Conversation roles must alternate user/assistant/user/assistant/...");
  EXPECT_EQ(message({{"user", "Hi"}, {"user", "Hi"}}),
            "Conversation roles must alternate user/assistant/user/assistant/...");
  EXPECT_EQ(message({{"user", "Hi"}, {"system", "S"}}),
            "Only user and assistant roles are supported!");
  const ChatTemplate v1(ChatTemplateStyle::kMistralV1);
  // v1 takes a first system message, then checks alternation from the next.
  const absl::StatusOr<std::string> two_users =
      v1.Render(std::vector<ChatMessage>{{"system", "S"}, {"user", "Hi"}, {"user", "Hi"}}, {});
  ASSERT_FALSE(two_users.ok());
  EXPECT_EQ(two_users.status().message(),
            "After the optional system message, conversation roles must alternate "
            "user/assistant/user/assistant/...");
  const absl::StatusOr<std::string> late = v1.Render(
      std::vector<ChatMessage>{{"system", "S"}, {"user", "Hi"}, {"system", "T"}}, {});
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().message(),
            "Only user and assistant roles are supported, with the exception of an initial "
            "optional system message!");
}

TEST(ChatTemplate, Tulu) {
  const ChatTemplate t(ChatTemplateStyle::kTulu);
  EXPECT_EQ(Render(t, {{"user", "Hello"}}), "<|user|>\nHello\n<|assistant|>\n");
  EXPECT_EQ(Render(t, {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"},
                       {"user", "And you?"}}),
            "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\nHello!<|endoftext|>\n"
            "<|user|>\nAnd you?\n<|assistant|>\n");
  // The last assistant turn ends with eos and no newline; the generation
  // prompt follows whatever the last message is.
  EXPECT_EQ(Render(t, {{"user", "Hi"}, {"assistant", "Hello!"}}, {.add_generation_prompt = false}),
            "<|user|>\nHi\n<|assistant|>\nHello!<|endoftext|>");
  EXPECT_EQ(Render(t, {{"user", "Hi"}, {"assistant", "Hello!"}}),
            "<|user|>\nHi\n<|assistant|>\nHello!<|endoftext|><|assistant|>\n");
  const ChatTemplate with_bos(ChatTemplateStyle::kTuluBos,
                              {.bos_token = "<|endoftext|>", .eos_token = "<|endoftext|>"});
  EXPECT_EQ(Render(with_bos, {{"user", "Hi"}}), "<|endoftext|><|user|>\nHi\n<|assistant|>\n");
}

// A SentencePiece vocabulary with <unk> <s> </s> and a few pieces, carrying
// Mixtral's template.
absl::StatusOr<Tokenizer> SmallMixtralTokenizer() {
  TokenizerConfig config;
  config.model = TokenizerModel::kSentencePiece;
  const std::pair<std::string, TokenType> specials[] = {
      {"<unk>", TokenType::kUnknown}, {"<s>", TokenType::kControl}, {"</s>", TokenType::kControl}};
  for (const auto& [text, type] : specials) {
    config.tokens.push_back(text);
    config.token_types.push_back(type);
    config.scores.push_back(0);
  }
  for (const char* piece : {"\xE2\x96\x81", "H", "i", "[", "]", "I", "N", "S", "T", "/"}) {
    config.tokens.push_back(piece);
    config.token_types.push_back(TokenType::kNormal);
    config.scores.push_back(-1);
  }
  config.unknown_id = 0;
  config.bos_id = 1;
  config.eos_id = 2;
  config.add_bos = true;
  config.add_space_prefix = true;
  config.chat_template = std::string(kMixtralTemplate);
  return Tokenizer::Create(std::move(config));
}

TEST(ChatTemplate, ForTokenizerTakesTheVocabularysTokensSoBosIsNotDoubled) {
  absl::StatusOr<Tokenizer> tokenizer = SmallMixtralTokenizer();
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<ChatTemplate> t = ChatTemplate::ForTokenizer(*tokenizer);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->style(), ChatTemplateStyle::kMistralInstruct);
  EXPECT_EQ(t->special_tokens().bos_token, "<s>");
  EXPECT_EQ(t->special_tokens().eos_token, "</s>");
  const std::string prompt = Render(*t, {{"user", "Hi"}, {"assistant", "Hi"}, {"user", "Hi"}});
  EXPECT_EQ(prompt, "[INST] Hi [/INST]Hi</s>[INST] Hi [/INST]");
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(prompt, true, true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_FALSE(ids->empty());
  EXPECT_EQ(ids->front(), 1);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 1), 1) << "one bos";
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 2), 1) << "the </s> after the answer";
}

}  // namespace
}  // namespace moetier
