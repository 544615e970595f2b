// Each subcommand against the fake front door on a temporary unix socket.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "client_test_util.h"
#include "connection/interrupt.h"
#include "fake_moetier_service.h"
#include "commands/generation.h"
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

class CommandsTest : public ::testing::Test {
 protected:
  CommandsTest() : socket_(dir_.File("moetier.sock")), server_(socket_) {}

  ClientRun Run(std::vector<std::string> args, const std::string& stdin_text = "",
                bool in_is_terminal = false) {
    args.insert(args.begin(), {"--socket", socket_});
    return RunClient(args, stdin_text, in_is_terminal);
  }
  FakeMoetier& fake() { return server_.service(); }
  void Script(const std::function<void(FakeMoetier::Script&)>& edit) {
    FakeMoetier::Script s;
    edit(s);
    fake().SetScript(s);
  }

  TempDir dir_;
  std::string socket_;
  FakeServer server_;
};

TEST_F(CommandsTest, GenerateStreamsTextAndSendsTheRequest) {
  const ClientRun run = Run({"generate", "--temp", "0", "--seed", "7", "-n", "3", "hi", "there"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "Hello, world\n");
  EXPECT_EQ(run.err, "");
  const std::vector<v1::GenerateRequest> requests = fake().generate_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].prompt(), "hi there");
  EXPECT_EQ(requests[0].max_new_tokens(), 3);
  EXPECT_EQ(requests[0].sampling().temperature(), 0.0f);
  EXPECT_EQ(requests[0].sampling().seed(), 7u);
  EXPECT_EQ(requests[0].sampling().top_k(), 40);
}

TEST_F(CommandsTest, GenerateStatsGoToStderr) {
  const ClientRun run = Run({"generate", "--stats", "--seed", "5", "abcd"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "Hello, world\n");
  EXPECT_EQ(run.err,
            "prompt 4 tokens, generated 3 (max tokens); prefill 100.0 tok/s, decode 10.0 tok/s; "
            "seed 5; worker cpu; queued 0.5 ms\n");
}

TEST(GenerationStatsTest, CachedPromptTokensAreShownWhenThereAreAny) {
  v1::GenerationStats stats;
  stats.set_prompt_tokens(120);
  stats.set_cached_prompt_tokens(100);
  stats.set_generated_tokens(8);
  EXPECT_THAT(FormatGenerationStats(stats),
              ::testing::StartsWith("prompt 120 tokens (100 cached), generated 8"));
  stats.set_cached_prompt_tokens(0);
  EXPECT_THAT(FormatGenerationStats(stats),
              ::testing::StartsWith("prompt 120 tokens, generated 8"));
}

TEST_F(CommandsTest, GenerateReadsThePromptFromStdin) {
  const ClientRun run = Run({"generate"}, "from a pipe\n");
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(fake().generate_requests().size(), 1u);
  EXPECT_EQ(fake().generate_requests()[0].prompt(), "from a pipe\n");
  const ClientRun tty = Run({"generate"}, "", /*in_is_terminal=*/true);
  EXPECT_EQ(tty.status, 2);
  EXPECT_THAT(tty.err, HasSubstr("no prompt"));
}

TEST_F(CommandsTest, GenerateWithTokenIds) {
  const ClientRun run = Run({"generate", "--prompt-tokens", "3,1,4"});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(fake().generate_requests().size(), 1u);
  EXPECT_THAT(fake().generate_requests()[0].prompt_token_ids(), ElementsAre(3, 1, 4));
  EXPECT_EQ(fake().generate_requests()[0].prompt(), "");
}

// The client's deadline ends the call; the server sees it cancelled, which
// is what frees the sequence in the real daemon.
TEST_F(CommandsTest, DeadlineCancelsTheStream) {
  Script([](FakeMoetier::Script& s) { s.piece_delay_ms = 400; });
  const ClientRun run = Run({"--timeout-ms", "150", "generate", "slow"});
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(
      run.err,
      "moetier generate: Generate ran past its deadline (--timeout-ms) (DEADLINE_EXCEEDED)\n");
  EXPECT_TRUE(fake().WaitForCancelled(1, 5000));
}

// Ctrl-C (delivered as the signal thread would) cancels the call in flight.
TEST_F(CommandsTest, InterruptCancelsTheStream) {
  Script([](FakeMoetier::Script& s) {
    s.pieces = {"first", " second", " third"};
    s.piece_delay_ms = 300;
  });
  ClearInterrupt();
  std::thread interrupter([this] {
    if (fake().WaitForStreams(1, 5000)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(450));
      DeliverInterrupt();
    }
  });
  const ClientRun run = Run({"generate", "go"});
  interrupter.join();
  ClearInterrupt();
  EXPECT_EQ(run.status, 130);
  EXPECT_EQ(run.out, "first\n");
  EXPECT_EQ(run.err, "moetier generate: interrupted; the request was cancelled\n");
  EXPECT_TRUE(fake().WaitForCancelled(1, 5000));
}

// A piece that is not valid UTF-8 cannot be parsed as a proto3 string; the
// client must end the call with a message instead of waiting forever.
TEST_F(CommandsTest, UnparsableStreamMessageEndsTheCall) {
  Script([](FakeMoetier::Script& s) { s.pieces = {"ok ", "\xe4\xbd", "\xa0 more"}; });
  const auto start = std::chrono::steady_clock::now();
  const ClientRun run = Run({"generate", "x"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.out, "ok \n");
  EXPECT_EQ(run.err,
            "moetier generate: the daemon sent a message this client cannot parse (see the "
            "protobuf error above); the stream was cancelled (INTERNAL)\n");
}

TEST_F(CommandsTest, ModelNotLoadedIsPassedThrough) {
  Script([](FakeMoetier::Script& s) {
    s.fail_with = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "model not loaded");
  });
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"generate", "x"},
           {"chat", "--message", "x"},
           {"score", "--tokens", "1", "--logits-out", dir_.File("l.f32")},
           {"tokenize", "x"},
           {"detokenize", "1"},
           {"status"},
           {"bench"}}) {
    const ClientRun run = Run(args);
    EXPECT_EQ(run.status, 1) << args[0];
    EXPECT_EQ(run.err, "moetier " + args[0] + ": model not loaded (FAILED_PRECONDITION)\n");
  }
}

TEST_F(CommandsTest, ChatOneShotSendsSystemAndUser) {
  const ClientRun run =
      Run({"chat", "--system", "be brief", "--message", "hello", "--think", "--stats"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "reply 1\n");
  EXPECT_THAT(run.err, HasSubstr("generated 2 (max tokens)"));
  const std::vector<v1::ChatRequest> requests = fake().chat_requests();
  ASSERT_EQ(requests.size(), 1u);
  ASSERT_EQ(requests[0].messages_size(), 2);
  EXPECT_EQ(requests[0].messages(0).role(), "system");
  EXPECT_EQ(requests[0].messages(0).content(), "be brief");
  EXPECT_EQ(requests[0].messages(1).role(), "user");
  EXPECT_EQ(requests[0].messages(1).content(), "hello");
  EXPECT_TRUE(requests[0].enable_thinking());
}

TEST_F(CommandsTest, ChatFromAPipeKeepsHistoryAndResets) {
  const ClientRun run = Run({"chat", "--system", "sys"}, "first\n\n  second  \n/reset\nthird\n");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "reply 1\nreply 2\nreply 1\n");
  const std::vector<v1::ChatRequest> requests = fake().chat_requests();
  ASSERT_EQ(requests.size(), 3u);
  const auto roles = [](const v1::ChatRequest& r) {
    std::vector<std::string> out;
    for (const v1::ChatMessage& m : r.messages()) out.push_back(m.role() + ":" + m.content());
    return out;
  };
  EXPECT_THAT(roles(requests[0]), ElementsAre("system:sys", "user:first"));
  EXPECT_THAT(roles(requests[1]),
              ElementsAre("system:sys", "user:first", "assistant:reply 1", "user:second"));
  EXPECT_THAT(roles(requests[2]), ElementsAre("system:sys", "user:third"));
}

TEST_F(CommandsTest, ChatAtATerminalPromptsAndEndsOnExit) {
  const ClientRun run = Run({"chat"}, "hi\n/exit\nnever sent\n", /*in_is_terminal=*/true);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, ">>> reply 1\n>>> ");
  EXPECT_THAT(run.err, HasSubstr("/help for the commands"));
  EXPECT_EQ(fake().chat_requests().size(), 1u);
}

// UNAVAILABLE from a daemon that answers (a worker restarting) is its own
// message, not "not running"; at a terminal the chat goes on.
TEST_F(CommandsTest, UnavailableFromALiveDaemonIsPassedThrough) {
  Script([](FakeMoetier::Script& s) {
    s.fail_with = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker is restarting; retry");
  });
  const ClientRun run = Run({"chat"}, "one\ntwo\n", /*in_is_terminal=*/true);
  EXPECT_EQ(run.status, 0);
  EXPECT_EQ(fake().chat_requests().size(), 2u);
  EXPECT_THAT(run.err, HasSubstr("moetier chat: the worker is restarting; retry (UNAVAILABLE)\n"
                                 "moetier chat: the worker is restarting; retry (UNAVAILABLE)\n"));
}

TEST_F(CommandsTest, ChatErrorInAPipeEndsTheChat) {
  Script([](FakeMoetier::Script& s) {
    s.fail_with = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "prompt too long");
  });
  const ClientRun run = Run({"chat"}, "a\nb\n");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err, "moetier chat: prompt too long (INVALID_ARGUMENT)\n");
  EXPECT_EQ(fake().chat_requests().size(), 1u);
}

// The file holds exactly n_tokens rows of n_vocab little-endian floats.
TEST_F(CommandsTest, ScoreWritesRawFloatRows) {
  const std::string path = dir_.File("logits.f32");
  const ClientRun run = Run({"score", "--tokens", "2,0,5", "--logits-out", path});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "wrote 3 x 8 float32 logits (96 B) to " + path + "\n");
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 3u * 8u * 4u);
  const int ids[] = {2, 0, 5};
  for (int row = 0; row < 3; ++row) {
    for (int col = 0; col < 8; ++col) {
      const size_t at = (static_cast<size_t>(row) * 8 + col) * 4;
      const uint32_t bits = static_cast<uint8_t>(bytes[at]) |
                            static_cast<uint8_t>(bytes[at + 1]) << 8 |
                            static_cast<uint8_t>(bytes[at + 2]) << 16 |
                            static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 3])) << 24;
      float value;
      std::memcpy(&value, &bits, sizeof(value));
      EXPECT_EQ(value, ids[row] * 1000.0f + col) << row << "," << col;
    }
  }
  ASSERT_EQ(fake().score_requests().size(), 1u);
  EXPECT_THAT(fake().score_requests()[0].token_ids(), ElementsAre(2, 0, 5));
}

TEST_F(CommandsTest, ScoreRefusesAMalformedReply) {
  Script([](FakeMoetier::Script& s) { s.short_logits = true; });
  const std::string path = dir_.File("logits.f32");
  const ClientRun run = Run({"score", "--tokens", "1,2", "--logits-out", path});
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err,
            "moetier score: the daemon sent 60 bytes of logits with n_vocab 8 for 2 tokens; "
            "expected 2 tokens x n_vocab x 4 bytes\n");
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(CommandsTest, ScoreReportsAnUnwritableFile) {
  const std::string path = dir_.File("no/such/dir/logits.f32");
  const ClientRun run = Run({"score", "--tokens", "1", "--logits-out", path});
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err, "moetier score: cannot create " + path + ": No such file or directory\n");
}

TEST_F(CommandsTest, TokenizeAndDetokenize) {
  ClientRun run = Run({"tokenize", "ab c"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "97,98,32,99\n");
  run = Run({"tokenize"}, "z");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "122\n");
  run = Run({"detokenize", "104", "105"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "hi\n");
  run = Run({"detokenize", "--special", "--tokens", "104"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "<special>h\n");
}

TEST_F(CommandsTest, StatusPrintsTheMap) {
  const ClientRun run = Run({"status"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("layer 0   VVVvrrRRRrrr!!!. ..!!  vram 4 ram 8 disk 8\n"));
  EXPECT_THAT(run.out, HasSubstr("legend"));
  EXPECT_THAT(run.out, Not(HasSubstr("\x1b")));
  const ClientRun colour = Run({"status", "--color=always"});
  ASSERT_EQ(colour.status, 0) << colour.err;
  EXPECT_THAT(colour.out, HasSubstr("\x1b[1;31m#"));
}

TEST_F(CommandsTest, StatusJsonKeepsProtoFieldNames) {
  const ClientRun run = Run({"status", "--json"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("\"n_layer\": 2"));
  EXPECT_THAT(run.out, HasSubstr("\"model_path\": \"/models/tiny.gguf\""));
  EXPECT_THAT(run.out, HasSubstr("\"EXPERT_TIER_VRAM\""));
  // uint64 fields are JSON strings, as proto3's JSON mapping has them.
  EXPECT_THAT(run.out, HasSubstr("\"requests_rejected\": \"0\""));
}

TEST_F(CommandsTest, StatusJsonCarriesTheDeviceCache) {
  Script([](FakeMoetier::Script& s) { testing::AddSampleGpuWorker(s.status); });
  const ClientRun run = Run({"status", "--json"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("\"expert_cache_bytes\": \"6442450944\""));
  EXPECT_THAT(run.out, HasSubstr("\"resident_bytes\": \"4831838208\""));
  EXPECT_THAT(run.out, HasSubstr("\"misses_on_host\": \"40\""));
  EXPECT_THAT(run.out, HasSubstr("\"prefetch_issued\": \"80\""));
  EXPECT_THAT(run.out, HasSubstr("\"prefetch_used\": \"56\""));
  EXPECT_THAT(run.out, HasSubstr("\"prefetch_wasted\": \"10\""));
  EXPECT_THAT(run.out, HasSubstr("\"bytes_copied\": \"3221225472\""));
  EXPECT_THAT(run.out, HasSubstr("\"copy_bytes_per_s\": 12884901888"));
  // The plain map shows the same worker's cache line.
  const ClientRun map = Run({"status"});
  ASSERT_EQ(map.status, 0) << map.err;
  EXPECT_THAT(map.out, HasSubstr("   VRAM cache 6.0 GiB, 4.5 GiB resident   hits 75.0%"));
}

TEST_F(CommandsTest, StatusWatchStreamsUpdates) {
  Script([](FakeMoetier::Script& s) { s.watch_updates = 5; });
  const ClientRun run = Run({"status", "--watch", "--interval-ms", "50", "--count", "2"});
  ASSERT_EQ(run.status, 0) << run.err;
  size_t maps = 0;
  for (size_t at = run.out.find("legend"); at != std::string::npos;
       at = run.out.find("legend", at + 1)) {
    ++maps;
  }
  EXPECT_EQ(maps, 2u);
  EXPECT_EQ(fake().last_watch_interval_ms(), 50u);
  const ClientRun json = Run({"status", "--watch", "--json", "--interval-ms", "50"});
  ASSERT_EQ(json.status, 0) << json.err;
  // One compact object per line, one line per update, until the stream ends.
  const std::vector<std::string> lines = absl::StrSplit(json.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 5u);
  for (const std::string& line : lines) {
    EXPECT_EQ(line.front(), '{');
    EXPECT_EQ(line.back(), '}');
  }
}

TEST_F(CommandsTest, StatusWatchFallsBackToPolling) {
  Script([](FakeMoetier::Script& s) { s.watch_unimplemented = true; });
  const ClientRun run = Run({"status", "--watch", "--interval-ms", "50", "--count", "3"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(fake().get_status_calls(), 3);
}

// Medians of the fake's per-call rates and the counters it advanced.
TEST_F(CommandsTest, BenchReportsMediansAndCounterDeltas) {
  const ClientRun run = Run({"bench", "--runs", "3", "--warmup", "1", "--prefill-tokens", "40",
                             "--decode-tokens", "6", "--decode-prompt-tokens", "5"});
  ASSERT_EQ(run.status, 0) << run.err;
  const std::vector<v1::GenerateRequest> requests = fake().generate_requests();
  ASSERT_EQ(requests.size(), 7u);
  // warmup (decode), 3 prefill, 3 decode; greedy; exact prompt lengths.
  EXPECT_EQ(requests[0].prompt_token_ids_size(), 5);
  EXPECT_EQ(requests[1].prompt_token_ids_size(), 40);
  EXPECT_EQ(requests[1].max_new_tokens(), 1);
  EXPECT_EQ(requests[4].prompt_token_ids_size(), 5);
  EXPECT_EQ(requests[4].max_new_tokens(), 6);
  EXPECT_EQ(requests[4].sampling().temperature(), 0.0f);
  EXPECT_TRUE(requests[4].ignore_end_of_generation());
  // Calls 1-3 give prefill 200, 300, 100; calls 4-6 decode 20, 30, 10.
  EXPECT_THAT(run.out, HasSubstr("\"prefill_tokens_per_s\": 200,"));
  EXPECT_THAT(run.out, HasSubstr("\"prefill_tokens_per_s_runs\": [\n      200,\n      300,\n"
                                 "      100\n    ]"));
  EXPECT_THAT(run.out, HasSubstr("\"decode_tokens_per_s\": 20,"));
  EXPECT_THAT(run.out, HasSubstr("\"generated_tokens\": 3,"));
  // Each call adds 10 RAM hits and 2 misses, 4096 bytes read, 1024 copied.
  EXPECT_THAT(run.out, HasSubstr("\"ram_hit_rate\": 0.8333333333333334,\n    \"ram_hits\": 30,"));
  EXPECT_THAT(run.out, HasSubstr("\"bytes_read_from_disk\": 12288,"));
  EXPECT_THAT(run.out, HasSubstr("\"bytes_copied_to_vram\": 6144,"));
  EXPECT_THAT(run.out, HasSubstr("\"vram_hit_rate\": 0.5,"));
  EXPECT_THAT(run.out, HasSubstr("\"model\": \"/models/tiny.gguf\""));
  EXPECT_THAT(run.err, HasSubstr("bench: decode 3/3"));
}

TEST_F(CommandsTest, BudgetReportsWhatTheDaemonApplied) {
  ClientRun run = Run({"budget", "--device", "cuda:0", "--expert-cache-mib", "10000"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "cuda:0: expert cache 8190.0 MiB (8587837440 bytes) in effect\n");
  run = Run({"budget", "--device", "cuda:0", "--expert-cache-mib", "100"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "cuda:0: expert cache 99.0 MiB (103809024 bytes) in effect\n");
  run = Run({"budget", "--device", "cpu", "--expert-cache-mib", "1"});
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err,
            "moetier budget: device 'cpu': this worker was started without an expert cache "
            "(FAILED_PRECONDITION)\n");
}

}  // namespace
}  // namespace moetier::client
