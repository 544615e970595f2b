// Tool-call bodies: malformed calls (returned as content, with a warning),
// and the typing of XML parameter values by the tools' schemas.
#include <string>
#include <string_view>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "chat/chat_output_parser.h"
#include "chat/tool_call_body.h"
#include "chat/tool_schemas.h"

namespace moetier {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

std::vector<Json> TripTools() {
  return {Json::parse(R"({"type": "function", "function": {"name": "plan_trip",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string"},
        "zip": {"type": "string"},
        "days": {"type": "integer"},
        "budget": {"type": "number"},
        "refundable": {"type": "boolean"},
        "preferences": {"type": "object"},
        "stops": {"type": "array"},
        "note": {"type": ["string", "null"]},
        "guests": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}}})")};
}

// Every split of the text gives what the one-shot parse gives.
ParsedChatOutput ParseSplitEveryWay(ChatOutputFormat format, const std::vector<Json>& tools,
                                    std::string_view text) {
  const ParsedChatOutput whole = ParseChatOutput(format, false, tools, text);
  for (size_t split = 0; split <= text.size(); ++split) {
    ChatOutputParser parser(format, false, tools);
    ParsedChatOutput streamed;
    AppendDelta(parser.Push(text.substr(0, split)), streamed);
    AppendDelta(parser.Push(text.substr(split)), streamed);
    AppendDelta(parser.Finish(), streamed);
    EXPECT_EQ(streamed.content, whole.content) << "split at " << split;
    EXPECT_EQ(streamed.tool_calls.size(), whole.tool_calls.size()) << "split at " << split;
    EXPECT_EQ(parser.warnings(), whole.warnings) << "split at " << split;
  }
  return whole;
}

TEST(ChatToolCallTest, TruncatedJsonIsContent) {
  constexpr std::string_view kText =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par\n"
      "</tool_call>";
  const ParsedChatOutput out = ParseSplitEveryWay(ChatOutputFormat::kQwen3, {}, kText);
  EXPECT_EQ(out.content, kText);
  EXPECT_THAT(out.tool_calls, IsEmpty());
  ASSERT_THAT(out.warnings, SizeIs(1));
  EXPECT_THAT(out.warnings[0], HasSubstr("not valid JSON"));
}

TEST(ChatToolCallTest, MissingCloseTagAtTheEndIsContent) {
  constexpr std::string_view kText =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
  const ParsedChatOutput out = ParseSplitEveryWay(ChatOutputFormat::kQwen3, {}, kText);
  EXPECT_EQ(out.content, kText);
  EXPECT_THAT(out.tool_calls, IsEmpty());
  ASSERT_THAT(out.warnings, SizeIs(1));
  EXPECT_THAT(out.warnings[0], HasSubstr("no </tool_call>"));
}

TEST(ChatToolCallTest, FunctionTagWithoutClosingAngleIsContent) {
  constexpr std::string_view kUnclosed = "<tool_call>\n<function=get_weather\n</tool_call>";
  ParsedChatOutput out = ParseSplitEveryWay(ChatOutputFormat::kQwen35, {}, kUnclosed);
  EXPECT_EQ(out.content, kUnclosed);
  ASSERT_THAT(out.warnings, SizeIs(1));
  EXPECT_THAT(out.warnings[0], HasSubstr("without a closing '>'"));

  // The next '>' belongs to a parameter tag: the name would run into it.
  constexpr std::string_view kRunOn =
      "<tool_call>\n<function=get_weather\n<parameter=city>\nParis\n</parameter>\n</function>\n"
      "</tool_call>";
  out = ParseSplitEveryWay(ChatOutputFormat::kQwen35, {}, kRunOn);
  EXPECT_EQ(out.content, kRunOn);
  ASSERT_THAT(out.warnings, SizeIs(1));
  EXPECT_THAT(out.warnings[0], HasSubstr("malformed name"));
}

TEST(ChatToolCallTest, UnknownStructureIsContent) {
  for (std::string_view body :
       {"<tool_call>\nget_weather(city=\"Paris\")\n</tool_call>",
        "<tool_call>\n[{\"name\": \"get_weather\"}]\n</tool_call>",
        "<tool_call>\n{\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": 7}\n</tool_call>",
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>",
        "<tool_call>\n<function=f>\nstray text\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n</function>\ntrailing\n</tool_call>"}) {
    const ParsedChatOutput out = ParseChatOutput(ChatOutputFormat::kQwen35, false, {}, body);
    EXPECT_EQ(out.content, body);
    EXPECT_THAT(out.tool_calls, IsEmpty()) << body;
    EXPECT_THAT(out.warnings, SizeIs(1)) << body;
  }
}

TEST(ChatToolCallTest, UnclosedCallBeforeTheNextOneIsContentAndTheNextIsACall) {
  constexpr std::string_view kText =
      "<tool_call>\n{\"name\": \"get_weather\",\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const ParsedChatOutput out = ParseSplitEveryWay(ChatOutputFormat::kQwen3, {}, kText);
  EXPECT_EQ(out.content, "<tool_call>\n{\"name\": \"get_weather\",");
  ASSERT_THAT(out.tool_calls, SizeIs(1));
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_THAT(out.warnings, SizeIs(1));
}

TEST(ChatToolCallTest, OverlongCallIsReleasedAsContent) {
  ChatOutputParser parser(ChatOutputFormat::kQwen3, false, {}, /*max_tool_call_bytes=*/32);
  ParsedChatOutput out;
  AppendDelta(parser.Push("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"text\": \""), out);
  EXPECT_EQ(out.content, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"text\": \"");
  AppendDelta(parser.Push("more\"}}\n</tool_call>"), out);
  AppendDelta(parser.Finish(), out);
  EXPECT_THAT(out.tool_calls, IsEmpty());
  EXPECT_THAT(out.content, HasSubstr("more\"}}\n</tool_call>"));
  ASSERT_THAT(parser.warnings(), SizeIs(1));
  EXPECT_THAT(parser.warnings()[0], HasSubstr("longer than 32 bytes"));
}

TEST(ChatToolCallTest, UnknownParameterIsKeptWithAWarning) {
  constexpr std::string_view kText =
      "<tool_call>\n<function=plan_trip>\n<parameter=city>\nLyon\n</parameter>\n"
      "<parameter=pets>\n2\n</parameter>\n</function>\n</tool_call>";
  const ParsedChatOutput out = ParseSplitEveryWay(ChatOutputFormat::kQwen35, TripTools(), kText);
  ASSERT_THAT(out.tool_calls, SizeIs(1));
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"city":"Lyon","pets":2})");
  ASSERT_THAT(out.warnings, SizeIs(1));
  EXPECT_THAT(out.warnings[0], HasSubstr("'pets' is not in the function's schema"));
}

TEST(ChatToolCallTest, UnofferedFunctionIsKeptWithAWarning) {
  const ParsedChatOutput out = ParseChatOutput(
      ChatOutputFormat::kQwen3, false, TripTools(),
      "<tool_call>\n{\"name\": \"book_hotel\", \"arguments\": {\"nights\": 2}}\n</tool_call>");
  ASSERT_THAT(out.tool_calls, SizeIs(1));
  EXPECT_EQ(out.tool_calls[0].name, "book_hotel");
  ASSERT_THAT(out.warnings, SizeIs(1));
  EXPECT_THAT(out.warnings[0], HasSubstr("does not offer"));
}

TEST(ChatToolCallTest, SchemaTypesXmlValues) {
  constexpr std::string_view kText =
      "<tool_call>\n<function=plan_trip>\n"
      "<parameter=city>\nLyon\n</parameter>\n"
      "<parameter=zip>\n69001\n</parameter>\n"
      "<parameter=days>\n4\n</parameter>\n"
      "<parameter=budget>\n1250.5\n</parameter>\n"
      "<parameter=refundable>\nTrue\n</parameter>\n"
      "<parameter=preferences>\n{\"hotel\": \"central\", \"stars\": 4}\n</parameter>\n"
      "<parameter=stops>\n[\"Vieux Lyon\", \"Fourviere\"]\n</parameter>\n"
      "<parameter=note>\nnull\n</parameter>\n"
      "<parameter=guests>\n2\n</parameter>\n"
      "</function>\n</tool_call>";
  const ParsedChatOutput out = ParseSplitEveryWay(ChatOutputFormat::kQwen35, TripTools(), kText);
  ASSERT_THAT(out.tool_calls, SizeIs(1));
  EXPECT_EQ(out.tool_calls[0].arguments,
            R"({"city":"Lyon","zip":"69001","days":4,"budget":1250.5,"refundable":true,)"
            R"("preferences":{"hotel":"central","stars":4},"stops":["Vieux Lyon","Fourviere"],)"
            R"("note":null,"guests":2})");
  EXPECT_THAT(out.warnings, IsEmpty());
}

TEST(ChatToolCallTest, TypedValueFallsBackToTheText) {
  const ToolSchemas schemas(TripTools());
  auto typed = [&](std::string_view parameter, std::string_view raw) {
    return TypedParameterValue(raw, schemas.ParameterSchema("plan_trip", parameter));
  };
  EXPECT_EQ(typed("days", "four"), Json("four"));
  EXPECT_EQ(typed("refundable", "yes"), Json("yes"));
  EXPECT_EQ(typed("refundable", "false"), Json(false));
  EXPECT_EQ(typed("preferences", "{hotel: central}"), Json("{hotel: central}"));
  EXPECT_EQ(typed("zip", "007"), Json("007"));
  EXPECT_EQ(typed("city", "true"), Json("true"));
  EXPECT_EQ(typed("note", "42"), Json("42"));  // string or null: a number stays text
  EXPECT_EQ(typed("guests", "null"), Json(nullptr));
}

TEST(ChatToolCallTest, UntypedValuesParseOnlyWhatIsJsonOtherThanAString) {
  EXPECT_EQ(TypedParameterValue("3", nullptr), Json(3));
  EXPECT_EQ(TypedParameterValue("-2.5e3", nullptr), Json(-2500.0));
  EXPECT_EQ(TypedParameterValue("true", nullptr), Json(true));
  EXPECT_EQ(TypedParameterValue("null", nullptr), Json(nullptr));
  EXPECT_EQ(TypedParameterValue("[1, 2]", nullptr), Json::parse("[1,2]"));
  EXPECT_EQ(TypedParameterValue("{\"a\": {}}", nullptr), Json::parse(R"({"a":{}})"));
  EXPECT_EQ(TypedParameterValue("Paris", nullptr), Json("Paris"));
  EXPECT_EQ(TypedParameterValue("\"quoted\"", nullptr), Json("\"quoted\""));
  EXPECT_EQ(TypedParameterValue("", nullptr), Json(""));
}

TEST(ChatToolCallTest, SchemasTakeBareFunctionsAndSkipNamelessTools) {
  const ToolSchemas schemas({Json::parse(R"({"name": "ping", "parameters": {"type": "object",
                                 "properties": {"host": {"type": "string"}}}})"),
                             Json::parse(R"({"type": "function", "function": {}})"),
                             Json::parse(R"("not an object")")});
  EXPECT_TRUE(schemas.HasFunction("ping"));
  EXPECT_TRUE(schemas.DeclaresParameters("ping"));
  EXPECT_NE(schemas.ParameterSchema("ping", "host"), nullptr);
  EXPECT_EQ(schemas.ParameterSchema("ping", "port"), nullptr);
  EXPECT_FALSE(schemas.HasFunction(""));
}

TEST(ChatToolCallTest, JsonArgumentsMayBeAnEncodedObjectOrAbsent) {
  std::vector<std::string> notes;
  const ToolSchemas no_tools({});
  absl::StatusOr<ParsedToolCall> call = ParseToolCallBody(
      R"({"name": "f", "arguments": "{\"a\": 1, \"b\": [true]}"})", no_tools, notes);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->arguments, R"({"a":1,"b":[true]})");
  call = ParseToolCallBody(R"({"name": "get_time"})", no_tools, notes);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->arguments, "{}");
  EXPECT_FALSE(ParseToolCallBody(R"({"name": "f", "arguments": "[1]"})", no_tools, notes).ok());
  EXPECT_THAT(notes, IsEmpty());
}

TEST(ChatToolCallTest, EitherQwenFormatTakesEitherBody) {
  // Qwen3-Coder is a qwen3moe model that writes the XML form.
  const ParsedChatOutput xml = ParseChatOutput(
      ChatOutputFormat::kQwen3, false, {},
      "<tool_call>\n<function=ls>\n<parameter=path>\n/tmp\n</parameter>\n</function>\n</tool_call>");
  ASSERT_THAT(xml.tool_calls, SizeIs(1));
  EXPECT_EQ(xml.tool_calls[0].arguments, R"({"path":"/tmp"})");
  const ParsedChatOutput json = ParseChatOutput(
      ChatOutputFormat::kQwen35, false, {},
      "<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"path\": \"/tmp\"}}\n</tool_call>");
  ASSERT_THAT(json.tool_calls, SizeIs(1));
  EXPECT_EQ(json.tool_calls[0].arguments, R"({"path":"/tmp"})");
}

TEST(ChatToolCallTest, RepeatedParameterKeepsTheLastValue) {
  const ParsedChatOutput out = ParseChatOutput(
      ChatOutputFormat::kQwen35, false, {},
      "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=a>\n2\n</parameter>\n"
      "</function>\n</tool_call>");
  ASSERT_THAT(out.tool_calls, SizeIs(1));
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"a":2})");
  ASSERT_THAT(out.warnings, SizeIs(1));
  EXPECT_THAT(out.warnings[0], HasSubstr("given twice"));
}

}  // namespace
}  // namespace moetier
