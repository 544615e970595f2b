// `moetier run` with a stand-in daemon (fake_moetierd) and a stand-in
// moetier-synth (a shell script): the process handling, not the model.
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "run/model_cache.h"

namespace moetier::client {
namespace {

using testing::ClientRun;
using ::testing::Contains;
using ::testing::HasSubstr;
using testing::RunClient;
using ::testing::StartsWith;
using testing::TempDir;

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string ValueOf(const std::vector<std::string>& lines, const std::string& prefix) {
  for (const std::string& line : lines) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "";
}

class RunCommandTest : public ::testing::Test {
 protected:
  RunCommandTest() {
    model_ = dir_.File("model.gguf");
    std::ofstream(model_) << "GGUF";
    args_out_ = dir_.File("daemon-args");
  }

  ClientRun Run(std::vector<std::string> extra, const std::string& stdin_text = "") {
    std::vector<std::string> args = {
        "run",      "--moetierd", FAKE_MOETIERD_PATH,
        "--worker", "/bin/true",  "--daemon-arg=--args_out=" + args_out_};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunClient(args, stdin_text);
  }

  TempDir dir_;
  std::string model_;
  std::string args_out_;
};

TEST_F(RunCommandTest, StartsGeneratesShowsTheMapAndStops) {
  const ClientRun run = Run({"--model", model_, "--daemon-arg=--serving_delay_ms=300", "--",
                             "--temp", "0", "-n", "3", "hello"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, StartsWith("Hello, world\n\nmodel     qwen3moe, 2 layers x 20 experts"));
  EXPECT_THAT(run.out, HasSubstr("layer 0   VVVv"));
  EXPECT_THAT(run.err, HasSubstr("moetier run: started " FAKE_MOETIERD_PATH));
  EXPECT_THAT(run.err, HasSubstr("serves at"));
  EXPECT_THAT(run.err, HasSubstr("moetier run: stopping moetierd\n"));

  const std::vector<std::string> args = ReadLines(args_out_);
  EXPECT_THAT(args, Contains("--model_path=" + model_));
  EXPECT_THAT(args, Contains("--devices=cpu"));
  EXPECT_THAT(args, Contains("--allow_unlocked_memory=true"));
  EXPECT_THAT(args, Contains("--worker_executable_path=/bin/true"));
  EXPECT_THAT(args, Contains("--serving_delay_ms=300"));
  const std::string socket = ValueOf(args, "--api_socket_path=");
  ASSERT_THAT(socket, HasSubstr("/moetier-run-"));
  EXPECT_EQ(ValueOf(args, "--worker_socket_path="),
            socket.substr(0, socket.rfind('/')) + "/worker.sock");
  // The daemon is gone (and reaped), and so is its private directory.
  const pid_t pid = std::stoi(ValueOf(args, "pid "));
  EXPECT_EQ(kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  EXPECT_FALSE(std::filesystem::exists(socket.substr(0, socket.rfind('/'))));
}

// No prompt: a chat (here from a pipe, one message a line), no map; the
// llama.cpp thread, context and rope flags reach the worker.
TEST_F(RunCommandTest, WithoutAPromptChatsThroughTheDaemon) {
  const ClientRun run = Run({model_, "-t", "3", "-c", "2048", "--rope-scaling", "yarn",
                             "--rope-scale", "4", "--yarn-orig-ctx", "512"},
                            "hello\nand again\n");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "reply 1\nreply 2\n");
  EXPECT_THAT(run.err, HasSubstr("moetier run: stopping moetierd\n"));
  const std::vector<std::string> args = ReadLines(args_out_);
  EXPECT_THAT(args, Contains("--model_path=" + model_));
  EXPECT_THAT(args, Contains("--worker_extra_args=--threads=3"));
  EXPECT_THAT(args, Contains("--worker_extra_args=--ctx=2048"));
  EXPECT_THAT(args, Contains("--worker_extra_args=--rope-scaling=yarn"));
  EXPECT_THAT(args, Contains("--worker_extra_args=--rope-scale=4"));
  EXPECT_THAT(args, Contains("--worker_extra_args=--yarn-orig-ctx=512"));
}

TEST_F(RunCommandTest, AFirstWordThatIsNoFileSaysItWasTakenForTheModel) {
  const ClientRun run = Run({"tell", "me", "a", "joke"});
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err,
            "moetier run: cannot open the model tell: No such file or directory (the first word is "
            "the model; give a prompt with -p)\n");
}

TEST_F(RunCommandTest, ReportsADaemonThatExitsEarlyWithItsLog) {
  const ClientRun run = Run({"--model", model_, "--daemon-arg=--exit_before_serving=3"});
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("moetier run: moetierd exited with status 3 before serving; the "
                                 "end of its log:\nfake moetierd: failing on purpose\n"));
  EXPECT_EQ(run.out, "");
}

TEST_F(RunCommandTest, GivesUpAfterTheStartTimeout) {
  const ClientRun run =
      Run({"--model", model_, "--daemon-arg=--serving_delay_ms=60000", "--start-timeout-s", "1"});
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("moetierd did not serve within 1 s (--start-timeout-s); "
                                 "stopped it (exited with status 0)"));
  EXPECT_THAT(run.err, HasSubstr("fake moetierd: listening on"));
}

TEST_F(RunCommandTest, MissingProgramsAndModelsAreNamed) {
  ClientRun run = RunClient({"run", "--moetierd", dir_.File("nope"), "--model", model_});
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("moetier run: " + dir_.File("nope") + " is not an executable"));
  run = Run({"--model", dir_.File("missing.gguf")});
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err, "moetier run: cannot open the model " + dir_.File("missing.gguf") +
                         ": No such file or directory\n");
}

TEST_F(RunCommandTest, MakesTheSyntheticModelOnceAndReusesIt) {
  const std::string synth = dir_.File("fake-synth.sh");
  const std::string calls = dir_.File("synth-calls");
  std::ofstream(synth) << "#!/bin/sh\n"
                          "echo \"$@\" >> "
                       << calls
                       << "\n"
                          "while [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n"
                          "printf GGUF > \"$out\"\n";
  ASSERT_EQ(chmod(synth.c_str(), 0755), 0);
  const char* old_cache = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old_cache != nullptr ? old_cache : "";
  setenv("XDG_CACHE_HOME", dir_.File("cache").c_str(), 1);
  const ClientRun first = Run({"--synth", synth, "--", "-n", "2"});
  const ClientRun second = Run({"--synth", synth});
  if (old_cache != nullptr) {
    setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  } else {
    unsetenv("XDG_CACHE_HOME");
  }
  ASSERT_EQ(first.status, 0) << first.err;
  ASSERT_EQ(second.status, 0) << second.err;
  const std::string model = dir_.File("cache/moetier/") + kSyntheticModelName;
  EXPECT_THAT(first.err, HasSubstr("writing a small synthetic one to " + model));
  EXPECT_THAT(second.err, ::testing::Not(HasSubstr("writing a small synthetic one")));
  const std::vector<std::string> synth_calls = ReadLines(calls);
  ASSERT_EQ(synth_calls.size(), 1u);
  EXPECT_THAT(synth_calls[0], StartsWith("--preset small --quant q4_k_m --seed 1 --out " + model));
  EXPECT_THAT(ReadLines(args_out_), Contains("--model_path=" + model));
  // Only the finished model is left in the cache.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_.File("cache/moetier")),
                          std::filesystem::directory_iterator()),
            1);
}

TEST(ModelCacheTest, CacheDirectoryFollowsXdg) {
  EXPECT_EQ(CacheDirectory("/xdg", "/home/u"), "/xdg/moetier");
  EXPECT_EQ(CacheDirectory(nullptr, "/home/u"), "/home/u/.cache/moetier");
  EXPECT_EQ(CacheDirectory("relative", "/home/u"), "/home/u/.cache/moetier");
  EXPECT_EQ(CacheDirectory(nullptr, nullptr), "");
}

}  // namespace
}  // namespace moetier::client
