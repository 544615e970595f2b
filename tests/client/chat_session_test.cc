// The interactive chat's conversation and slash commands, without a daemon.
#include "chat/chat_session.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Kind = ChatInput::Kind;

std::vector<std::string> Roles(const v1::ChatRequest& request) {
  std::vector<std::string> out;
  for (const v1::ChatMessage& m : request.messages()) out.push_back(m.role() + ":" + m.content());
  return out;
}

v1::ChatRequest Settings() {
  v1::ChatRequest r;
  r.set_max_new_tokens(64);
  r.mutable_sampling()->set_temperature(0.8f);
  r.mutable_sampling()->set_top_k(40);
  r.mutable_sampling()->set_top_p(0.95f);
  r.mutable_sampling()->set_min_p(0.05f);
  return r;
}

TEST(ChatSessionTest, EachTurnSendsTheWholeConversation) {
  ChatSession session(Settings(), "be brief");
  EXPECT_EQ(session.Take("  hello there \n").kind, Kind::kSend);
  v1::ChatRequest first = session.Request();
  EXPECT_THAT(Roles(first), ElementsAre("system:be brief", "user:hello there"));
  EXPECT_EQ(first.max_new_tokens(), 64);
  EXPECT_FLOAT_EQ(first.sampling().temperature(), 0.8f);
  session.AddReply("Hi.");
  EXPECT_EQ(session.Take("and then?").kind, Kind::kSend);
  EXPECT_THAT(Roles(session.Request()), ElementsAre("system:be brief", "user:hello there",
                                                    "assistant:Hi.", "user:and then?"));
}

TEST(ChatSessionTest, EmptyLinesSendNothing) {
  ChatSession session(Settings(), "");
  EXPECT_EQ(session.Take("").kind, Kind::kNothing);
  EXPECT_EQ(session.Take(" \t ").kind, Kind::kNothing);
  EXPECT_TRUE(session.messages().empty());
}

TEST(ChatSessionTest, ClearForgetsAllButTheSystemMessage) {
  ChatSession session(Settings(), "sys");
  session.Take("one");
  session.AddReply("1");
  const ChatInput cleared = session.Take("/clear");
  EXPECT_EQ(cleared.kind, Kind::kInfo);
  EXPECT_EQ(cleared.text, "(conversation forgotten)");
  session.Take("two");
  EXPECT_THAT(Roles(session.Request()), ElementsAre("system:sys", "user:two"));
  session.AddReply("2");
  EXPECT_EQ(session.Take("/reset").kind, Kind::kInfo);
  EXPECT_THAT(Roles(session.Request()), ElementsAre("system:sys"));
  EXPECT_EQ(session.Take("/clear now").kind, Kind::kError);
}

TEST(ChatSessionTest, ByeAndItsAliasesQuit) {
  ChatSession session(Settings(), "");
  for (const char* line : {"/bye", "/exit", "/quit", "  /bye  "}) {
    EXPECT_EQ(session.Take(line).kind, Kind::kQuit) << line;
  }
  EXPECT_EQ(session.Take("/bye now").kind, Kind::kError);
}

TEST(ChatSessionTest, SetChangesTheNextTurnsSettings) {
  ChatSession session(Settings(), "");
  ChatInput in = session.Take("/set temp 0.2");
  EXPECT_EQ(in.kind, Kind::kInfo);
  EXPECT_EQ(in.text, "(temp 0.2)");
  EXPECT_EQ(session.Take("/set top_p 0.5").kind, Kind::kInfo);
  EXPECT_EQ(session.Take("/set top_k 7").kind, Kind::kInfo);
  EXPECT_EQ(session.Take("/set min_p 0").kind, Kind::kInfo);
  EXPECT_EQ(session.Take("/set seed 1234").kind, Kind::kInfo);
  EXPECT_EQ(session.Take("/set max_tokens 9").kind, Kind::kInfo);
  session.Take("hi");
  const v1::ChatRequest r = session.Request();
  EXPECT_FLOAT_EQ(r.sampling().temperature(), 0.2f);
  EXPECT_FLOAT_EQ(r.sampling().top_p(), 0.5f);
  EXPECT_EQ(r.sampling().top_k(), 7);
  EXPECT_FLOAT_EQ(r.sampling().min_p(), 0.0f);
  ASSERT_TRUE(r.sampling().has_seed());
  EXPECT_EQ(r.sampling().seed(), 1234u);
  EXPECT_EQ(r.max_new_tokens(), 9);
  // Only the settings change: the conversation is the same.
  EXPECT_THAT(Roles(r), ElementsAre("user:hi"));

  EXPECT_EQ(session.Take("/set seed random").kind, Kind::kInfo);
  EXPECT_FALSE(session.Request().sampling().has_seed());
  EXPECT_EQ(session.Take("/set temperature 0").kind, Kind::kInfo);
  EXPECT_FLOAT_EQ(session.Request().sampling().temperature(), 0.0f);
}

TEST(ChatSessionTest, SetWithoutArgumentsShowsTheSettings) {
  ChatSession session(Settings(), "");
  session.Take("/set seed 5");
  const ChatInput in = session.Take("/set");
  EXPECT_EQ(in.kind, Kind::kInfo);
  EXPECT_EQ(in.text,
            "temp 0.8, top_p 0.95, top_k 40, min_p 0.05, seed 5, max_tokens 64, thinking off, "
            "system none");
}

TEST(ChatSessionTest, BadSetLinesAreOneLineErrorsAndChangeNothing) {
  ChatSession session(Settings(), "");
  const v1::ChatRequest before = session.Request();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/set temp hot", "/set temp: 'hot' is not a number"},
      {"/set temp", "/set temp needs a value"},
      {"/set top_k 1.5", "/set top_k: '1.5' is not an integer"},
      {"/set max_tokens -1", "/set max_tokens: '-1' is not a non-negative integer"},
      {"/set seed -3", "/set seed: '-3' is not a non-negative integer or random"},
      {"/set temp nan", "is not a number"},
      {"/set colour blue",
       "unknown setting 'colour'; one of temp, top_p, top_k, min_p, seed, max_tokens, system"},
  };
  for (const auto& [line, message] : cases) {
    const ChatInput in = session.Take(line);
    EXPECT_EQ(in.kind, Kind::kError) << line;
    EXPECT_THAT(in.text, HasSubstr(message)) << line;
    EXPECT_THAT(in.text, Not(HasSubstr("\n"))) << line;
  }
  EXPECT_EQ(session.Request().SerializeAsString(), before.SerializeAsString());
}

TEST(ChatSessionTest, SetSystemReplacesOrAddsTheSystemMessage) {
  ChatSession session(Settings(), "");
  session.Take("hi");
  session.AddReply("hello");
  EXPECT_EQ(session.Take("/set system You are terse.").kind, Kind::kInfo);
  EXPECT_THAT(Roles(session.Request()),
              ElementsAre("system:You are terse.", "user:hi", "assistant:hello"));
  session.Take("/set system Be kind.");
  session.Take("/clear");
  EXPECT_THAT(Roles(session.Request()), ElementsAre("system:Be kind."));
}

TEST(ChatSessionTest, ThinkSwitchesEnableThinking) {
  ChatSession session(Settings(), "");
  EXPECT_FALSE(session.Request().enable_thinking());
  EXPECT_EQ(session.Take("/think on").text, "(thinking on)");
  EXPECT_TRUE(session.Request().enable_thinking());
  EXPECT_EQ(session.Take("/think").text, "(thinking on)");
  EXPECT_EQ(session.Take("/think off").text, "(thinking off)");
  EXPECT_FALSE(session.Request().enable_thinking());
  const ChatInput bad = session.Take("/think maybe");
  EXPECT_EQ(bad.kind, Kind::kError);
  EXPECT_EQ(bad.text, "/think takes on or off, not 'maybe'");
}

TEST(ChatSessionTest, UnknownCommandsNameTheKnownOnes) {
  ChatSession session(Settings(), "");
  const ChatInput in = session.Take("/frobnicate 3");
  EXPECT_EQ(in.kind, Kind::kError);
  EXPECT_EQ(in.text,
            "unknown command '/frobnicate'; the commands are /bye, /clear, /set, /think, /help "
            "(/help explains them)");
  EXPECT_TRUE(session.messages().empty());
}

TEST(ChatSessionTest, HelpListsEveryCommand) {
  ChatSession session(Settings(), "");
  const ChatInput in = session.Take("/help");
  EXPECT_EQ(in.kind, Kind::kInfo);
  for (const char* command : {"/bye", "/clear", "/set", "/think on|off", "/help", "Ctrl-C"}) {
    EXPECT_THAT(in.text, HasSubstr(command));
  }
  EXPECT_EQ(session.Take("/?").text, in.text);
}

TEST(ChatSessionTest, DoubleSlashSendsALineThatStartsWithASlash) {
  ChatSession session(Settings(), "");
  EXPECT_EQ(session.Take("//usr/bin is a directory?").kind, Kind::kSend);
  EXPECT_THAT(Roles(session.Request()), ElementsAre("user:/usr/bin is a directory?"));
}

TEST(ChatSessionTest, AFailedTurnIsForgotten) {
  ChatSession session(Settings(), "sys");
  session.Take("one");
  session.AddReply("1");
  session.Take("two");
  session.DropLastUserMessage();
  EXPECT_THAT(Roles(session.Request()), ElementsAre("system:sys", "user:one", "assistant:1"));
  // Nothing else is dropped when the last message is not the user's.
  session.DropLastUserMessage();
  EXPECT_EQ(session.messages().size(), 3u);
}

}  // namespace
}  // namespace moetier::client
