// The interactive chat against the fake front door: prompts, counts, Ctrl-C
// during an answer and at the prompt, commands in a pipe; and the line
// input that notices Ctrl-C while it waits.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chat/line_input.h"
#include "client_test_util.h"
#include "commands/chat_loop.h"
#include "commands/dispatch.h"
#include "connection/interrupt.h"
#include "fake_moetier_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier::client {
namespace {

using testing::ClientRun;
using ::testing::ElementsAre;
using testing::FakeMoetier;
using testing::FakeServer;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunClient;
using testing::TempDir;

std::vector<std::string> Roles(const v1::ChatRequest& r) {
  std::vector<std::string> out;
  for (const v1::ChatMessage& m : r.messages()) out.push_back(m.role() + ":" + m.content());
  return out;
}

class ChatLoopTest : public ::testing::Test {
 protected:
  ChatLoopTest() : socket_(dir_.File("moetier.sock")), server_(socket_) { ClearInterrupt(); }
  ~ChatLoopTest() override { ClearInterrupt(); }

  ClientRun Run(std::vector<std::string> args, const std::string& stdin_text, bool in_is_terminal) {
    args.insert(args.begin(), {"--socket", socket_});
    return RunClient(args, stdin_text, in_is_terminal);
  }
  FakeMoetier& fake() { return server_.service(); }

  TempDir dir_;
  std::string socket_;
  FakeServer server_;
};

TEST_F(ChatLoopTest, AtATerminalPromptsAndCountsEachAnswer) {
  const ClientRun run =
      Run({"chat", "--temp", "0.7"}, "hi\n/set temp 0\n\nagain\n/bye\nnever sent\n", true);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, ">>> reply 1\n>>> >>> >>> reply 2\n>>> ");
  EXPECT_THAT(run.err, HasSubstr("/help for the commands, /bye or Ctrl-D to end\n"));
  // The fake reports 2 tokens at 10, then 20 decode tok/s.
  EXPECT_THAT(run.err, HasSubstr("[2 tokens, 10.0 tok/s]\n(temp 0)\n[2 tokens, 20.0 tok/s]\n"));
  const std::vector<v1::ChatRequest> requests = fake().chat_requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_FLOAT_EQ(requests[0].sampling().temperature(), 0.7f);
  EXPECT_FLOAT_EQ(requests[1].sampling().temperature(), 0.0f);
  EXPECT_THAT(Roles(requests[1]), ElementsAre("user:hi", "assistant:reply 1", "user:again"));
}

TEST_F(ChatLoopTest, FromAPipeNoPromptNoCountsAndEndOfInputEnds) {
  const ClientRun run = Run({"chat"}, "one\ntwo", false);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "reply 1\nreply 2\n");
  EXPECT_EQ(run.err, "");
}

TEST_F(ChatLoopTest, ABadCommandEndsAPipedChatButNotATerminalOne) {
  ClientRun run = Run({"chat"}, "/nope\nhi\n", false);
  EXPECT_EQ(run.status, 2);
  EXPECT_THAT(run.err, HasSubstr("moetier chat: unknown command '/nope'; the commands are /bye"));
  EXPECT_TRUE(fake().chat_requests().empty());
  run = Run({"chat"}, "/nope\nhi\n", true);
  EXPECT_EQ(run.status, 0);
  EXPECT_EQ(fake().chat_requests().size(), 1u);
}

// The part of the answer written before Ctrl-C stays in the conversation,
// and the chat goes on.
TEST_F(ChatLoopTest, CtrlCStopsTheAnswerNotTheChat) {
  FakeMoetier::Script script;
  script.piece_delay_ms = 300;
  fake().SetScript(script);
  std::thread interrupter([this] {
    if (fake().WaitForStreams(1, 5000)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(450));
      DeliverInterrupt();
    }
  });
  const ClientRun run = Run({"chat"}, "first\nsecond\n", true);
  interrupter.join();
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, ">>> reply \n>>> reply 2\n>>> \n");
  EXPECT_THAT(run.err, HasSubstr("[1 token; stopped]\n"));
  EXPECT_THAT(run.err, Not(HasSubstr("interrupted")));
  EXPECT_TRUE(fake().WaitForCancelled(1, 5000));
  const std::vector<v1::ChatRequest> requests = fake().chat_requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_THAT(Roles(requests[1]), ElementsAre("user:first", "assistant:reply ", "user:second"));
}

TEST_F(ChatLoopTest, CtrlCBeforeAnyTextForgetsTheQuestion) {
  FakeMoetier::Script script;
  script.piece_delay_ms = 400;
  fake().SetScript(script);
  std::thread interrupter([this] {
    if (fake().WaitForStreams(1, 5000)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      DeliverInterrupt();
    }
  });
  const ClientRun run = Run({"chat"}, "first\nsecond\n", true);
  interrupter.join();
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("[0 tokens; stopped]\n"));
  const std::vector<v1::ChatRequest> requests = fake().chat_requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_THAT(Roles(requests[1]), ElementsAre("user:second"));
}

// stdin read through its descriptor: Ctrl-C at the prompt ends the chat
// with 130 instead of waiting for a line that never comes.
TEST_F(ChatLoopTest, CtrlCAtThePromptEndsTheChat) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "hi\n", 3), 3);
  std::istringstream unused;
  std::ostringstream out, err;
  ClientIo io;
  io.in = &unused;
  io.in_fd = fds[0];
  io.out = &out;
  io.err = &err;
  io.in_is_terminal = true;
  std::thread interrupter([this] {
    // The answer is instant; by then the chat waits at its next prompt.
    if (fake().WaitForStreams(1, 5000)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      DeliverInterrupt();
    }
  });
  const int status = RunMoetier({"moetier", "--socket", socket_, "chat"}, io);
  interrupter.join();
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(status, 130) << err.str();
  EXPECT_EQ(out.str(), ">>> reply 1\n>>> \n");
  EXPECT_FALSE(Interrupted());
}

TEST(TurnCountsTest, TokensRateAndStop) {
  EXPECT_EQ(FormatTurnCounts(42, 12.34, false), "[42 tokens, 12.3 tok/s]");
  EXPECT_EQ(FormatTurnCounts(1, 3.0, true), "[1 token, 3.0 tok/s; stopped]");
  EXPECT_EQ(FormatTurnCounts(0, 0.0, true), "[0 tokens; stopped]");
}

class FdLineInputTest : public ::testing::Test {
 protected:
  FdLineInputTest() {
    ClearInterrupt();
    EXPECT_EQ(pipe(fds_), 0);
  }
  ~FdLineInputTest() override {
    ClearInterrupt();
    close(fds_[0]);
    if (fds_[1] >= 0) close(fds_[1]);
  }
  void Write(const std::string& s) {
    ASSERT_EQ(write(fds_[1], s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  int fds_[2] = {-1, -1};
};

TEST_F(FdLineInputTest, SplitsLinesAndKeepsALastLineWithoutNewline) {
  FdLineInput input(fds_[0]);
  Write("one\ntwo\nthr");
  std::string line;
  ASSERT_EQ(input.Read(&line), LineRead::kLine);
  EXPECT_EQ(line, "one");
  ASSERT_EQ(input.Read(&line), LineRead::kLine);
  EXPECT_EQ(line, "two");
  Write("ee");
  close(fds_[1]);
  fds_[1] = -1;
  ASSERT_EQ(input.Read(&line), LineRead::kLine);
  EXPECT_EQ(line, "three");
  EXPECT_EQ(input.Read(&line), LineRead::kEnd);
}

TEST_F(FdLineInputTest, AnInterruptWakesAReadThatWaits) {
  FdLineInput input(fds_[0]);
  Write("par");
  DeferInterrupt defer;  // else the interrupt would end the test program
  std::thread interrupter([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    DeliverInterrupt();
  });
  std::string line;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(input.Read(&line), LineRead::kInterrupted);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));
  interrupter.join();
  // Once cleared, reading goes on where it was.
  ClearInterrupt();
  Write("tial\n");
  ASSERT_EQ(input.Read(&line), LineRead::kLine);
  EXPECT_EQ(line, "partial");
}

}  // namespace
}  // namespace moetier::client
