// The client against the real moetierd and moetier-worker on a tiny
// synthetic model: `moetier run` as the README uses it, and Score's file
// against the worker's own --logits-out. Skips where those programs are not
// built (a build of the client's targets only).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "client_test_util.h"
#include "connection/health_check.h"
#include "connection/target.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "run/private_daemon.h"
#include "run/subprocess.h"

namespace moetier::client {
namespace {

using testing::ClientRun;
using ::testing::HasSubstr;
using testing::RunClient;
using testing::TempDir;

const std::string kDaemon = std::string(MOETIER_BINARY_DIR) + "/daemon/moetierd";
const std::string kWorker = std::string(MOETIER_BINARY_DIR) + "/worker/moetier-worker";
const std::string kSynth = std::string(MOETIER_BINARY_DIR) + "/tools/synth/moetier-synth";

bool Executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs a program to its end; its wait status.
int RunProgram(std::vector<std::string> argv, const std::string& output_path) {
  SpawnOptions spawn;
  spawn.argv = std::move(argv);
  spawn.output_path = output_path;
  absl::StatusOr<pid_t> pid = Spawn(spawn);
  if (!pid.ok()) return -1;
  std::optional<int> status = WaitFor(*pid, 120000);
  return status.value_or(-1);
}

class RealDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& program : {kDaemon, kWorker, kSynth}) {
      if (!Executable(program)) GTEST_SKIP() << program << " is not built";
    }
    model_ = dir_.File("tiny.gguf");
    ASSERT_EQ(RunProgram({kSynth, "--preset", "tiny", "--quant", "q8_0", "--seed", "3", "--out",
                          model_, "--quiet"},
                         dir_.File("synth.log")),
              0)
        << ReadFile(dir_.File("synth.log"));
  }

  TempDir dir_;
  std::string model_;
};

TEST_F(RealDaemonTest, RunGeneratesThroughTheDaemonAndShowsTheMap) {
  const ClientRun run = RunClient({"run", "--model", model_, "--moetierd", kDaemon, "--worker",
                                   kWorker, "--daemon-arg=--worker_extra_args=--threads=2", "--",
                                   "-n", "8", "--temp", "0", "--ignore-eos", "--stats", "Hello"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("generated 8 (max tokens)"));
  EXPECT_THAT(run.err, HasSubstr("worker cpu"));
  EXPECT_THAT(run.out, HasSubstr("\nmodel     qwen3moe, 2 layers x 8 experts (top 2)"));
  EXPECT_THAT(run.out, HasSubstr("\nlayer 1   "));
  EXPECT_THAT(run.out, HasSubstr("RAM 16 (100.0%)   disk 0 (0.0%)   of 16\n"));
  EXPECT_THAT(run.out, HasSubstr("#0 cpu ready"));
}

// Without a prompt, lines from a pipe are chat turns through the model's
// template; the second turn carries the first turn's question and answer.
TEST_F(RealDaemonTest, RunChatsOneTurnPerPipedLine) {
  const ClientRun run = RunClient({"run", model_, "--moetierd", kDaemon, "--worker", kWorker, "-t",
                                   "2", "-n", "4", "--temp", "0", "--stats"},
                                  "Hello\nAnd then?\n");
  ASSERT_EQ(run.status, 0) << run.err;
  std::vector<int> prompt_tokens;
  for (size_t at = run.err.find("\nprompt "); at != std::string::npos;
       at = run.err.find("\nprompt ", at + 1)) {
    prompt_tokens.push_back(std::atoi(run.err.c_str() + at + 8));
  }
  ASSERT_EQ(prompt_tokens.size(), 2u) << run.err;
  // The chat template's second prompt holds the first one, its 4-token
  // answer and the new question.
  EXPECT_GT(prompt_tokens[1], prompt_tokens[0] + 4) << run.err;
  EXPECT_THAT(run.err, HasSubstr("generated 4 (max tokens)"));
  EXPECT_THAT(run.out, ::testing::Not(HasSubstr("\nmodel ")));  // no map after a chat
}

// Same ids, same engine: the bytes `moetier score` writes are the bytes the
// worker writes on its own (up to kernel rounding).
TEST_F(RealDaemonTest, ScoreFileMatchesTheWorkersLogitsFile) {
  PrivateDaemonOptions options;
  options.moetierd_path = kDaemon;
  options.worker_path = kWorker;
  options.model_path = model_;
  options.extra_args = {"--worker_extra_args=--threads=2"};
  absl::StatusOr<std::unique_ptr<PrivateDaemon>> daemon = PrivateDaemon::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const Target target{Target::Kind::kUnix, (*daemon)->socket_path()};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool serving = false;
  std::shared_ptr<grpc::Channel> channel;
  while (!serving && std::chrono::steady_clock::now() < deadline && !(*daemon)->Ended()) {
    struct stat st {};
    if (stat(target.where.c_str(), &st) == 0) {
      if (channel == nullptr) channel = CreateChannel(target);
      ServingState state = ServingState::kUnknown;
      serving = CheckHealth(channel, 1000, &state).ok() && state == ServingState::kServing;
    }
    if (!serving) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(serving) << (*daemon)->LogTail(30);

  const std::string client_file = dir_.File("client.f32");
  const ClientRun run = RunClient(
      {"--socket", target.where, "score", "--tokens", "1,2,3,300,7", "--logits-out", client_file});
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string worker_file = dir_.File("worker.f32");
  ASSERT_EQ(RunProgram({kWorker, "--standalone", "--model", model_, "--threads", "2", "--tokens",
                        "1,2,3,300,7", "--logits-out", worker_file},
                       dir_.File("worker.log")),
            0)
      << ReadFile(dir_.File("worker.log"));

  const std::string a = ReadFile(client_file);
  const std::string b = ReadFile(worker_file);
  ASSERT_EQ(a.size(), 5u * 512u * sizeof(float));  // tiny: vocab 512
  ASSERT_EQ(a.size(), b.size());
  std::vector<float> x(a.size() / 4), y(b.size() / 4);
  std::memcpy(x.data(), a.data(), a.size());
  std::memcpy(y.data(), b.data(), b.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(x[i])) << i;
    ASSERT_NEAR(x[i], y[i], 1e-3f * std::max(1.0f, std::fabs(y[i]))) << "logit " << i;
  }

  // Tokenize agrees with the worker's tokenizer too.
  const ClientRun ids = RunClient({"--socket", target.where, "tokenize", "Hello world"});
  ASSERT_EQ(ids.status, 0) << ids.err;
  ASSERT_EQ(RunProgram({kWorker, "--standalone", "--model", model_, "--tokenize", "Hello world"},
                       dir_.File("tokenize.out")),
            0);
  EXPECT_THAT(ReadFile(dir_.File("tokenize.out")), HasSubstr(ids.out));
  EXPECT_EQ((*daemon)->Stop(10000), "exited with status 0");
}

}  // namespace
}  // namespace moetier::client
