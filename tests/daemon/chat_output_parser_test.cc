// The chat output parser on outputs written the way Qwen3-30B-A3B and
// Qwen3.6-35B-A3B write them under their chat templates
// (shared/templates/Qwen-Qwen3-0.6B.jinja, Qwen3.5-4B.jinja), fed whole,
// split in two at every byte and byte by byte.
#include "chat/chat_output_parser.h"

#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace moetier {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

std::vector<Json> WeatherTools() {
  return {Json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "description": "Weather forecast for a city",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}})")};
}

ParsedChatOutput Streamed(ChatOutputFormat format, bool starts_in_reasoning,
                          const std::vector<Json>& tools,
                          const std::vector<std::string_view>& pieces) {
  ChatOutputParser parser(format, starts_in_reasoning, tools);
  ParsedChatOutput response;
  for (std::string_view piece : pieces) AppendDelta(parser.Push(piece), response);
  AppendDelta(parser.Finish(), response);
  response.warnings = parser.warnings();
  return response;
}

// Ids are random per response; everything else must match.
void ExpectSameOutput(const ParsedChatOutput& actual, const ParsedChatOutput& expected) {
  EXPECT_EQ(actual.reasoning, expected.reasoning);
  EXPECT_EQ(actual.content, expected.content);
  ASSERT_EQ(actual.tool_calls.size(), expected.tool_calls.size());
  for (size_t i = 0; i < actual.tool_calls.size(); ++i) {
    EXPECT_EQ(actual.tool_calls[i].name, expected.tool_calls[i].name) << "call " << i;
    EXPECT_EQ(actual.tool_calls[i].arguments, expected.tool_calls[i].arguments) << "call " << i;
  }
  EXPECT_EQ(actual.warnings, expected.warnings);
}

void ExpectIdsUnique(const ParsedChatOutput& response) {
  std::set<std::string> ids;
  for (const ParsedChatToolCall& call : response.tool_calls) {
    EXPECT_TRUE(call.id.starts_with("call_")) << call.id;
    ids.insert(call.id);
  }
  EXPECT_EQ(ids.size(), response.tool_calls.size());
}

// The one-shot parse, after checking that every 2-way split and a
// byte-by-byte feed give the same.
ParsedChatOutput ParseEveryWay(ChatOutputFormat format, bool starts_in_reasoning,
                               const std::vector<Json>& tools, std::string_view text) {
  const ParsedChatOutput whole = ParseChatOutput(format, starts_in_reasoning, tools, text);
  ExpectIdsUnique(whole);
  for (size_t split = 0; split <= text.size(); ++split) {
    SCOPED_TRACE("split at byte " + std::to_string(split));
    ExpectSameOutput(
        Streamed(format, starts_in_reasoning, tools, {text.substr(0, split), text.substr(split)}),
        whole);
    if (::testing::Test::HasFailure()) return whole;
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  SCOPED_TRACE("byte by byte");
  const ParsedChatOutput byte_by_byte = Streamed(format, starts_in_reasoning, tools, bytes);
  ExpectSameOutput(byte_by_byte, whole);
  ExpectIdsUnique(byte_by_byte);
  return whole;
}

constexpr std::string_view kQwen3ThinkThenCall =
    "<think>\n"
    "Okay, the user wants the weather in Paris for the next three days. I have a get_weather "
    "tool that takes a city and a number of days.\n\n"
    "The city is clearly Paris. \"Next three days\" means days should be 3, which is within "
    "what the tool accepts.\n\n"
    "So I'll call get_weather with city \"Paris\" and days 3.\n"
    "</think>\n\n"
    "I'll look up the forecast for Paris.\n"
    "<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n"
    "</tool_call>";

TEST(ChatOutputParserTest, Qwen3ReasoningSentenceAndToolCall) {
  const ParsedChatOutput out =
      ParseEveryWay(ChatOutputFormat::kQwen3, false, WeatherTools(), kQwen3ThinkThenCall);
  EXPECT_EQ(out.reasoning,
            "Okay, the user wants the weather in Paris for the next three days. I have a "
            "get_weather tool that takes a city and a number of days.\n\n"
            "The city is clearly Paris. \"Next three days\" means days should be 3, which is "
            "within what the tool accepts.\n\n"
            "So I'll call get_weather with city \"Paris\" and days 3.");
  EXPECT_EQ(out.content, "I'll look up the forecast for Paris.");
  ASSERT_THAT(out.tool_calls, SizeIs(1));
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"city":"Paris","days":3})");
  EXPECT_THAT(out.warnings, IsEmpty());
}

TEST(ChatOutputParserTest, Qwen3TwoCallsWithoutContent) {
  constexpr std::string_view kText =
      "<think>\n"
      "The user asks to compare the weather in Paris and London today.\n\n"
      "I need one get_weather call per city; they are independent, so I can make both now.\n"
      "</think>\n\n"
      "<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>\n"
      "<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"London\"}}\n"
      "</tool_call>";
  const ParsedChatOutput out = ParseEveryWay(ChatOutputFormat::kQwen3, false, WeatherTools(), kText);
  EXPECT_EQ(out.reasoning,
            "The user asks to compare the weather in Paris and London today.\n\n"
            "I need one get_weather call per city; they are independent, so I can make both now.");
  EXPECT_EQ(out.content, "");
  ASSERT_THAT(out.tool_calls, SizeIs(2));
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(out.tool_calls[1].arguments, R"({"city":"London"})");
  EXPECT_NE(out.tool_calls[0].id, out.tool_calls[1].id);
}

TEST(ChatOutputParserTest, Qwen3AnswerWithoutTools) {
  constexpr std::string_view kText =
      "<think>\n"
      "The user asks what 17 × 23 is. 17 × 20 = 340 and 17 × 3 = 51, so 391.\n\n"
      "Check: 23 × 17 = 230 + 161 = 391. Good.\n"
      "</think>\n\n"
      "17 × 23 = **391**.\n\n"
      "You can check it as 17 × 20 + 17 × 3 = 340 + 51.";
  const ParsedChatOutput out = ParseEveryWay(ChatOutputFormat::kQwen3, false, {}, kText);
  EXPECT_EQ(out.reasoning,
            "The user asks what 17 × 23 is. 17 × 20 = 340 and 17 × 3 = 51, so 391.\n\n"
            "Check: 23 × 17 = 230 + 161 = 391. Good.");
  EXPECT_EQ(out.content,
            "17 × 23 = **391**.\n\nYou can check it as 17 × 20 + 17 × 3 = 340 + 51.");
  EXPECT_THAT(out.tool_calls, IsEmpty());
}

TEST(ChatOutputParserTest, Qwen3ThinkingOffIsAllContent) {
  // enable_thinking=false: the prompt holds the empty think block.
  const ParsedChatOutput out = ParseEveryWay(ChatOutputFormat::kQwen3, false, {},
                                             "The capital of France is Paris.\n");
  EXPECT_EQ(out.reasoning, "");
  EXPECT_EQ(out.content, "The capital of France is Paris.\n");
}

constexpr std::string_view kQwen35ReasoningThenTwoCalls =
    "The user wants a three-day forecast for Paris and for Berlin.\n\n"
    "get_weather takes one city at a time, so I'll call it twice with days = 3.\n"
    "</think>\n\n"
    "I'll check both cities.\n\n"
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nBerlin\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";

TEST(ChatOutputParserTest, Qwen35StartsInReasoningAndWritesXmlCalls) {
  const ParsedChatOutput out = ParseEveryWay(ChatOutputFormat::kQwen35, true, WeatherTools(),
                                             kQwen35ReasoningThenTwoCalls);
  EXPECT_EQ(out.reasoning,
            "The user wants a three-day forecast for Paris and for Berlin.\n\n"
            "get_weather takes one city at a time, so I'll call it twice with days = 3.");
  EXPECT_EQ(out.content, "I'll check both cities.");
  ASSERT_THAT(out.tool_calls, SizeIs(2));
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"city":"Paris","days":3})");
  EXPECT_EQ(out.tool_calls[1].arguments, R"({"city":"Berlin","days":3})");
  EXPECT_THAT(out.warnings, IsEmpty());
}

TEST(ChatOutputParserTest, Qwen35MultiLineValueLosesOnlyItsFramingNewlines) {
  const std::vector<Json> tools = {Json::parse(R"({"type": "function", "function": {
      "name": "write_file", "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "content": {"type": "string"}}}}})")};
  constexpr std::string_view kText =
      "I need to write the header file.\n</think>\n\n"
      "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/vec.h\n</parameter>\n"
      "<parameter=content>\n\n#include <vector>\n\nint Sum(const std::vector<int>& v);\n\n"
      "</parameter>\n</function>\n</tool_call>";
  const ParsedChatOutput out = ParseEveryWay(ChatOutputFormat::kQwen35, true, tools, kText);
  ASSERT_THAT(out.tool_calls, SizeIs(1));
  EXPECT_EQ(Json::parse(out.tool_calls[0].arguments)["content"],
            "\n#include <vector>\n\nint Sum(const std::vector<int>& v);\n");
  EXPECT_EQ(Json::parse(out.tool_calls[0].arguments)["path"], "src/vec.h");
}

TEST(ChatOutputParserTest, Qwen35ThinkingOffAnswersDirectly) {
  const ParsedChatOutput out =
      ParseEveryWay(ChatOutputFormat::kQwen35, false, {}, "Paris is the capital of France.");
  EXPECT_EQ(out.reasoning, "");
  EXPECT_EQ(out.content, "Paris is the capital of France.");
}

TEST(ChatOutputParserTest, HoldsBackOnlyWhatCanStillBeAMarker) {
  ChatOutputParser parser(ChatOutputFormat::kQwen3, false, {});
  EXPECT_TRUE(parser.Push("<thi").empty());
  EXPECT_EQ(parser.Push("nk>\nFirst").reasoning, "First");
  EXPECT_EQ(parser.Push(" idea.\n</th").reasoning, " idea.");
  EXPECT_EQ(parser.Push("ink>\n\nSay a < b").content, "Say a < b");
  EXPECT_EQ(parser.Push(" and <to").content, " and");
  EXPECT_EQ(parser.Push("y>").content, " <toy>");
  const ChatDelta last = parser.Finish();
  EXPECT_TRUE(last.empty());
}

TEST(ChatOutputParserTest, LiteralAnglesInContentStayContent) {
  constexpr std::string_view kText =
      "Use x < y, then <tool or <tool_ or <tool_cal and finally <tools>.";
  const ParsedChatOutput out = ParseEveryWay(ChatOutputFormat::kQwen3, false, WeatherTools(), kText);
  EXPECT_EQ(out.content, kText);
  EXPECT_THAT(out.tool_calls, IsEmpty());
  EXPECT_THAT(out.warnings, IsEmpty());
}

TEST(ChatOutputParserTest, ThinkTagsLaterInContentAreContent) {
  constexpr std::string_view kText =
      "<think>\nShort.\n</think>\n\nQwen wraps reasoning in <think> ... </think> tags.";
  const ParsedChatOutput out = ParseEveryWay(ChatOutputFormat::kQwen3, false, {}, kText);
  EXPECT_EQ(out.reasoning, "Short.");
  EXPECT_EQ(out.content, "Qwen wraps reasoning in <think> ... </think> tags.");
}

TEST(ChatOutputParserTest, OutputThatStopsInsideTheOpeningIsContent) {
  EXPECT_EQ(ParseEveryWay(ChatOutputFormat::kQwen3, false, {}, "<th").content, "<th");
  EXPECT_EQ(ParseEveryWay(ChatOutputFormat::kQwen3, false, {}, " \n").content, " \n");
  const ParsedChatOutput late_think =
      ParseEveryWay(ChatOutputFormat::kQwen3, false, {}, "\n<think>\nx\n</think>\n\ny");
  EXPECT_EQ(late_think.reasoning, "x");
  EXPECT_EQ(late_think.content, "y");
}

TEST(ChatOutputParserTest, UnterminatedThinkIsReasoning) {
  const ParsedChatOutput out = ParseEveryWay(ChatOutputFormat::kQwen3, false, {},
                                             "<think>\nThe user asks about tides. First, the");
  EXPECT_EQ(out.reasoning, "The user asks about tides. First, the");
  EXPECT_EQ(out.content, "");
}

TEST(ChatOutputParserTest, ToolCallInsideReasoningIsReasoning) {
  const ParsedChatOutput out = ParseEveryWay(
      ChatOutputFormat::kQwen35, true, WeatherTools(),
      "Maybe <tool_call>\n<function=get_weather>\n</function>\n</tool_call> later.\n</think>\n\nOK.");
  EXPECT_THAT(out.reasoning, HasSubstr("<tool_call>"));
  EXPECT_EQ(out.content, "OK.");
  EXPECT_EQ(out.tool_calls.size(), 0u);
}

TEST(ChatOutputParserTest, TextAfterTheLastCallIsContent) {
  const ParsedChatOutput out = ParseEveryWay(
      ChatOutputFormat::kQwen3, false, WeatherTools(),
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
      "</tool_call>\n\nThen I will summarise.\n");
  EXPECT_EQ(out.content, "Checking.\n\nThen I will summarise.\n");
  ASSERT_THAT(out.tool_calls, SizeIs(1));
}

TEST(ChatOutputParserTest, PlainFormatPassesMarkupThrough) {
  constexpr std::string_view kText =
      "<think>x</think><tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  const ParsedChatOutput out = ParseEveryWay(ChatOutputFormat::kPlain, true, {}, kText);
  EXPECT_EQ(out.content, kText);
  EXPECT_EQ(out.reasoning, "");
  EXPECT_THAT(out.tool_calls, IsEmpty());
}

TEST(ChatOutputParserTest, CountsCallsAndIndexesThemInOrder) {
  ChatOutputParser parser(ChatOutputFormat::kQwen3, false, WeatherTools());
  std::vector<ToolCallDelta> calls;
  for (std::string_view city : {"Rome", "Lima", "Pune"}) {
    const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"" +
                             std::string(city) + "\"}}\n</tool_call>\n";
    for (ToolCallDelta& delta : parser.Push(call).tool_calls) calls.push_back(delta);
  }
  parser.Finish();
  EXPECT_EQ(parser.tool_call_count(), 3);
  ASSERT_THAT(calls, SizeIs(3));
  std::set<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(calls[i].index, i);
    EXPECT_EQ(calls[i].name, "get_weather");
    ids.insert(calls[i].id);
  }
  EXPECT_EQ(ids.size(), 3u);
}

TEST(ChatOutputParserTest, IdsDifferBetweenResponses) {
  constexpr std::string_view kCall =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>";
  const ParsedChatOutput first = ParseChatOutput(ChatOutputFormat::kQwen3, false, {}, kCall);
  const ParsedChatOutput second = ParseChatOutput(ChatOutputFormat::kQwen3, false, {}, kCall);
  ASSERT_THAT(first.tool_calls, SizeIs(1));
  ASSERT_THAT(second.tool_calls, SizeIs(1));
  EXPECT_NE(first.tool_calls[0].id, second.tool_calls[0].id);
}

// Random mixes of markup fragments, fed in random pieces, parse as they do
// whole: the streaming never depends on where the text is cut.
TEST(ChatOutputParserTest, RandomMarkupStreamsLikeTheWholeText) {
  const std::vector<std::string_view> fragments = {
      "<think>", "</think>", "<tool_call>", "</tool_call>", "<function=get_weather>",
      "<parameter=city>", "</parameter>", "</function>", "<parameter=days>",
      R"({"name": "get_weather", "arguments": {"city": "Paris"}})", "{", "\n", "\n\n", " ",
      "Paris", "3", "<", "<tool", "</th", "<thi", "</tool_", "é"};
  std::mt19937 random(20261202);
  std::uniform_int_distribution<size_t> pick(0, fragments.size() - 1);
  std::uniform_int_distribution<size_t> length(0, 24);
  std::uniform_int_distribution<size_t> piece_size(1, 9);
  for (int sample = 0; sample < 400; ++sample) {
    std::string text;
    for (size_t n = length(random); n > 0; --n) text += fragments[pick(random)];
    const bool starts_in_reasoning = sample % 3 == 0;
    const ChatOutputFormat format =
        sample % 2 == 0 ? ChatOutputFormat::kQwen3 : ChatOutputFormat::kQwen35;
    std::vector<std::string_view> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t size = std::min(piece_size(random), text.size() - at);
      pieces.push_back(std::string_view(text).substr(at, size));
      at += size;
    }
    SCOPED_TRACE("text: " + text);
    const ParsedChatOutput whole =
        ParseChatOutput(format, starts_in_reasoning, WeatherTools(), text);
    ExpectSameOutput(Streamed(format, starts_in_reasoning, WeatherTools(), pieces), whole);
    ExpectIdsUnique(whole);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(ChatOutputParserTest, PushAfterFinishIsIgnoredWithAWarning) {
  ChatOutputParser parser(ChatOutputFormat::kQwen3, false, {});
  EXPECT_EQ(parser.Push("Done.").content, "Done.");
  parser.Finish();
  EXPECT_TRUE(parser.Push("more").empty());
  EXPECT_TRUE(parser.Finish().empty());
  ASSERT_THAT(parser.warnings(), SizeIs(1));
  EXPECT_THAT(parser.warnings()[0], HasSubstr("after the end"));
}

}  // namespace
}  // namespace moetier
