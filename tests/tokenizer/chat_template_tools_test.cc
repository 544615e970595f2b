// Tools, tool calls and tool results in the native chat templates: the
// refusals and error paths. Byte-for-byte agreement with the real Qwen
// templates is checked by tests/interop/check_chat_templates.py.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gguf/tokenizer/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

const Json kWeatherTool = Json::parse(
    R"({"type": "function", "function": {"name": "get_weather", "parameters": {}}})");

ChatMessage Calling(std::vector<ChatToolCall> calls) {
  ChatMessage message{.role = "assistant", .content = ""};
  message.tool_calls = std::move(calls);
  return message;
}

ChatMessage ToolResult(std::string content) {
  return ChatMessage{.role = "tool", .content = std::move(content)};
}

std::string ErrorOf(const absl::StatusOr<std::string>& rendered) {
  EXPECT_FALSE(rendered.ok()) << "rendered: " << (rendered.ok() ? *rendered : "");
  if (rendered.ok()) return "";
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument) << rendered.status();
  return std::string(rendered.status().message());
}

std::string RenderOk(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                     const ChatRenderOptions& options = {}) {
  absl::StatusOr<std::string> text = t.Render(messages, options);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

const std::vector<ChatTemplateStyle> kStylesWithoutTools = {
    ChatTemplateStyle::kChatMl,          ChatTemplateStyle::kQwen2,
    ChatTemplateStyle::kMistralInstruct, ChatTemplateStyle::kMistralInstructSpaced,
    ChatTemplateStyle::kMistralV1,       ChatTemplateStyle::kTulu,
    ChatTemplateStyle::kTuluBos,
};

TEST(ChatTemplateTools, StylesWithoutToolsRefuseToolsNamingTheStyle) {
  const std::vector<ChatMessage> ask = {{"user", "Weather?"}};
  for (const ChatTemplateStyle style : kStylesWithoutTools) {
    const ChatTemplate t(style);
    const std::string name(ChatTemplateStyleName(style));
    const std::string error = ErrorOf(t.Render(ask, {.tools = {kWeatherTool}}));
    EXPECT_THAT(error, HasSubstr("the " + name + " chat template does not support tools"));
    // Without tools the same chat renders.
    EXPECT_TRUE(t.Render(ask, {}).ok()) << name;
  }
}

TEST(ChatTemplateTools, StylesWithoutToolsRefuseToolCallsAndToolResults) {
  for (const ChatTemplateStyle style : kStylesWithoutTools) {
    const ChatTemplate t(style);
    const std::string name(ChatTemplateStyleName(style));
    const std::string calls = ErrorOf(t.Render(
        std::vector<ChatMessage>{{"user", "Weather?"}, Calling({{.id = "c", .name = "f"}})}, {}));
    EXPECT_THAT(calls, HasSubstr("message 1 has tool calls"));
    EXPECT_THAT(calls, HasSubstr(name));
    const std::string result = ErrorOf(t.Render(
        std::vector<ChatMessage>{{"user", "Weather?"}, {"assistant", "x"}, ToolResult("18C")},
        {}));
    EXPECT_THAT(result, HasSubstr("message 2 has role tool"));
    EXPECT_THAT(result, HasSubstr(name));
  }
}

TEST(ChatTemplateTools, AToolCallNeedsAName) {
  for (const ChatTemplateStyle style : {ChatTemplateStyle::kQwen3, ChatTemplateStyle::kQwen35}) {
    const ChatTemplate t(style);
    const std::string error = ErrorOf(t.Render(
        std::vector<ChatMessage>{{"user", "Weather?"},
                                 Calling({{.id = "a", .name = "get_weather"},
                                          {.id = "b", .name = "", .arguments = Json::object()}})},
        {}));
    EXPECT_THAT(error, HasSubstr("message 1, tool call 1 has no function name"));
  }
}

TEST(ChatTemplateTools, ArgumentsMustBeAnObjectOrAString) {
  const ChatTemplate t(ChatTemplateStyle::kQwen3);
  for (const Json& arguments : {Json(nullptr), Json(3), Json::array({1, 2}), Json(true)}) {
    const std::string error = ErrorOf(t.Render(
        std::vector<ChatMessage>{
            {"user", "Weather?"},
            Calling({{.id = "c", .name = "get_weather", .arguments = arguments}})},
        {}));
    EXPECT_THAT(error, HasSubstr("message 1, tool call 0 (get_weather)"));
    EXPECT_THAT(error, HasSubstr(std::string("not ") + arguments.type_name()));
  }
}

TEST(ChatTemplateTools, Qwen3PastesStringArgumentsQwen35RefusesThem) {
  const std::vector<ChatMessage> chat = {
      {"user", "Weather?"},
      Calling({{.id = "c", .name = "get_weather", .arguments = R"({"city": "Paris"})"}})};
  EXPECT_EQ(RenderOk(ChatTemplate(ChatTemplateStyle::kQwen3), chat, {.add_generation_prompt = false}),
            "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
            "</tool_call><|im_end|>\n");
  const std::string error = ErrorOf(ChatTemplate(ChatTemplateStyle::kQwen35).Render(chat, {}));
  EXPECT_THAT(error, HasSubstr("Can only get item pairs from a mapping."));
  EXPECT_THAT(error, HasSubstr("message 1, tool call 0 (get_weather)"));
}

TEST(ChatTemplateTools, ToolsMustBeObjectsAndToolCallsComeFromTheAssistant) {
  const ChatTemplate t(ChatTemplateStyle::kQwen3);
  const std::vector<ChatMessage> ask = {{"user", "Weather?"}};
  EXPECT_THAT(ErrorOf(t.Render(ask, {.tools = {kWeatherTool, Json("get_weather")}})),
              HasSubstr("tool 1 is not a JSON object"));
  ChatMessage user_calling = Calling({{.id = "c", .name = "get_weather"}});
  user_calling.role = "user";
  EXPECT_THAT(ErrorOf(t.Render(std::vector<ChatMessage>{user_calling}, {})),
              HasSubstr("only assistant messages make tool calls"));
}

TEST(ChatTemplateTools, Qwen35RaisesWhereItsTemplateRaises) {
  const ChatTemplate t(ChatTemplateStyle::kQwen35);
  EXPECT_THAT(ErrorOf(t.Render(std::vector<ChatMessage>{{"system", "S"}}, {})),
              HasSubstr("No user query found in messages."));
  // A tool response pasted as user text is not a query.
  EXPECT_THAT(ErrorOf(t.Render(
                  std::vector<ChatMessage>{{"user", " <tool_response>\n18C\n</tool_response>\n"}},
                  {})),
              HasSubstr("No user query found in messages."));
  EXPECT_THAT(ErrorOf(t.Render(std::vector<ChatMessage>{{"user", "Hi"}, {"system", "S"}}, {})),
              HasSubstr("System message must be at the beginning."));
}

TEST(ChatTemplateTools, Qwen3GroupsToolResultsAndKeepsReasoningAfterTheLastQuery) {
  ChatMessage calling = Calling({{.id = "a", .name = "f", .arguments = Json::parse(R"({"x": 1.0})")},
                                 {.id = "b", .name = "g", .arguments = Json::object()}});
  calling.reasoning_content = "\nthink\n";
  const std::vector<ChatMessage> chat = {
      {"user", "Q1"}, {"assistant", "<think>\nold\n</think>\n\nA1"}, {"user", "Q2"}, calling,
      ToolResult("r1"), ToolResult("r2")};
  EXPECT_EQ(RenderOk(ChatTemplate(ChatTemplateStyle::kQwen3), chat, {.enable_thinking = false}),
            "<|im_start|>user\nQ1<|im_end|>\n"
            "<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nthink\n</think>\n\n"
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1.0}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n"
            "<tool_response>\nr2\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

}  // namespace
}  // namespace moetier
