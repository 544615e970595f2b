// moetierd + moetier-worker end to end: real processes, the tiny model,
// the CPU worker, the gRPC API.
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "absl/strings/str_split.h"
#include "daemon_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gguf/tokenizer/unicode.h"

namespace moetier::e2e {
namespace {

using ::testing::HasSubstr;

const std::string kTinyModel = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/tiny-f32.gguf";

// Runs the standalone worker; returns its stdout.
std::string RunStandalone(const std::vector<std::string>& args, int* exit_code) {
  std::string command = std::string(MOETIER_WORKER) + " --standalone --model " + kTinyModel;
  for (const std::string& a : args) command += " '" + a + "'";
  command += " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

v1::GenerateRequest Greedy(const std::string& prompt, int max_new_tokens) {
  v1::GenerateRequest r;
  r.set_prompt(prompt);
  r.set_max_new_tokens(max_new_tokens);
  r.set_parse_special_tokens(true);
  return r;
}

v1::GenerateRequest Endless(int max_new_tokens) {
  v1::GenerateRequest r = Greedy("a long story", max_new_tokens);
  r.set_ignore_end_of_generation(true);
  return r;
}

// A generation that has started streaming; cancel or finish it.
class StreamingCall {
 public:
  StreamingCall(v1::Moetier::Stub& stub, const v1::GenerateRequest& request) {
    reader_ = stub.Generate(&context_, request);
  }
  bool ReadOne() {
    v1::GenerateResponse piece;
    return reader_->Read(&piece);
  }
  void Cancel() { context_.TryCancel(); }
  grpc::Status Finish() {
    v1::GenerateResponse piece;
    while (reader_->Read(&piece)) {
    }
    return reader_->Finish();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader_;
};

class FrontDoorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    DaemonSetup setup;
    setup.model_path = kTinyModel;
    daemon_ = RunningDaemon::Start(setup, &error).release();
    ASSERT_NE(daemon_, nullptr) << error;
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(daemon_, nullptr); }
  static RunningDaemon* daemon_;
};
RunningDaemon* FrontDoorTest::daemon_ = nullptr;

TEST_F(FrontDoorTest, GenerateStreamsTextTokensAndFinalStats) {
  const Generation g = Generate(daemon_->stub(), Endless(16));
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_EQ(g.token_ids.size(), 16u);
  EXPECT_EQ(g.stats.generated_tokens(), 16);
  EXPECT_GT(g.stats.prompt_tokens(), 0);
  EXPECT_EQ(g.stats.stop_reason(), v1::STOP_REASON_MAX_TOKENS);
  EXPECT_EQ(g.stats.worker_device(), "cpu");
  EXPECT_GT(g.stats.decode_tokens_per_s(), 0);
  // The streamed text is exactly the detokenized ids.
  grpc::ClientContext context;
  v1::DetokenizeRequest request;
  request.mutable_token_ids()->Add(g.token_ids.begin(), g.token_ids.end());
  v1::DetokenizeResponse text;
  ASSERT_TRUE(daemon_->stub().Detokenize(&context, request, &text).ok());
  EXPECT_EQ(g.text, text.text());
}

TEST_F(FrontDoorTest, GreedyGenerationEqualsTheStandaloneWorker) {
  const Generation g = Generate(daemon_->stub(), Greedy("The quick brown fox", 24));
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  int exit_code = 0;
  const std::string standalone = RunStandalone(
      {"--prompt", "The quick brown fox", "-n", "24", "--temp", "0", "--threads", "2"},
      &exit_code);
  ASSERT_EQ(exit_code, 0);
  // The API carries valid UTF-8; the standalone worker writes raw bytes.
  EXPECT_EQ(g.text + "\n", SanitizeUtf8(standalone));
}

TEST_F(FrontDoorTest, ScoreEqualsTheStandaloneWorkersLogitsBitForBit) {
  const std::string ids_text = ReadFile(std::string(MOETIER_TEST_DATA_DIR) + "/vectors/tiny-f32.ids");
  std::vector<int32_t> ids;
  for (absl::string_view field : absl::StrSplit(ids_text, absl::ByAnyChar(", \n"), absl::SkipEmpty())) {
    ids.push_back(std::stoi(std::string(field)));
  }
  ASSERT_FALSE(ids.empty());
  grpc::ClientContext context;
  v1::ScoreRequest request;
  request.mutable_token_ids()->Add(ids.begin(), ids.end());
  v1::ScoreResponse response;
  const grpc::Status s = daemon_->stub().Score(&context, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.n_vocab(), 512);
  const std::string out = daemon_->dir() + "/standalone.f32";
  int exit_code = 0;
  RunStandalone({"--tokens", absl::StrJoin(ids, ","), "--logits-out", out, "--threads", "2"},
                &exit_code);
  ASSERT_EQ(exit_code, 0);
  const std::string want = ReadFile(out);
  ASSERT_EQ(want.size(), ids.size() * 512 * sizeof(float));
  EXPECT_TRUE(response.logits_f32le() == want) << "Score differs from --logits-out";
}

TEST_F(FrontDoorTest, ChatRendersThroughTheTemplate) {
  grpc::ClientContext context;
  v1::ChatRequest request;
  v1::ChatMessage* m = request.add_messages();
  m->set_role("user");
  m->set_content("Hello there");
  request.set_max_new_tokens(8);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      daemon_->stub().Chat(&context, request);
  v1::GenerateResponse piece;
  v1::GenerationStats stats;
  while (reader->Read(&piece)) {
    if (piece.has_final_stats()) stats = piece.final_stats();
  }
  const grpc::Status s = reader->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  // "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n" and
  // the empty think block are more than the message's own tokens.
  EXPECT_GT(stats.prompt_tokens(), 8);
  EXPECT_GT(stats.generated_tokens(), 0);

  grpc::ClientContext bad_context;
  v1::ChatRequest bad;
  bad.add_messages()->set_role("wizard");
  reader = daemon_->stub().Chat(&bad_context, bad);
  while (reader->Read(&piece)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(FrontDoorTest, StatusShowsResidencyAndCountersThatMove) {
  const v1::Status before = daemon_->GetStatus();
  ASSERT_EQ(before.n_layer(), 4u);
  ASSERT_EQ(before.layers_size(), 4);
  EXPECT_EQ(before.n_expert(), 8u);
  EXPECT_EQ(before.store_mode(), "fully resident");
  EXPECT_DOUBLE_EQ(before.preload_fraction(), 1.0);
  for (const v1::LayerResidency& layer : before.layers()) {
    ASSERT_EQ(layer.tier_size(), 8);
    for (int t : layer.tier()) EXPECT_EQ(t, v1::EXPERT_TIER_RAM);
  }
  ASSERT_EQ(before.workers_size(), 1);
  EXPECT_EQ(before.workers(0).state(), "ready");
  EXPECT_GT(before.workers(0).pid(), 0);

  ASSERT_TRUE(Generate(daemon_->stub(), Endless(8)).status.ok());
  const v1::Status after = daemon_->GetStatus();
  // 2 experts per layer per token, 4 layers, prompt + 8 tokens.
  EXPECT_GE(after.ram().hits(), before.ram().hits() + 8 * 4 * 2);
  EXPECT_EQ(after.ram().misses(), before.ram().misses());
  EXPECT_EQ(after.queue().requests_completed(), before.queue().requests_completed() + 1);
  EXPECT_EQ(after.workers(0).requests_served(), before.workers(0).requests_served() + 1);
  EXPECT_EQ(after.bytes_read_from_disk(), before.bytes_read_from_disk());
  float hottest = 0;
  for (const v1::LayerResidency& layer : after.layers()) {
    for (float h : layer.heat()) hottest = std::max(hottest, h);
  }
  EXPECT_FLOAT_EQ(hottest, 1.0f);
}

TEST_F(FrontDoorTest, CancellingMidStreamFreesTheSequence) {
  StreamingCall call(daemon_->stub(), Endless(3000));
  ASSERT_TRUE(call.ReadOne());
  ASSERT_TRUE(call.ReadOne());
  call.Cancel();
  EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::CANCELLED);
  bool freed = false;
  for (int i = 0; i < 200 && !freed; ++i) {
    const v1::Status s = daemon_->GetStatus();
    freed = s.queue().active_requests() == 0 && s.queue().requests_cancelled() >= 1;
    if (!freed) usleep(20000);
  }
  EXPECT_TRUE(freed) << "the cancelled generation still occupies the worker";
  EXPECT_TRUE(Generate(daemon_->stub(), Greedy("after", 4)).status.ok());
}

// Sixteen clients at once on `daemon` get what each gets alone.
void ExpectSixteenConcurrentClientsGetTheirSoloOutput(RunningDaemon& daemon) {
  constexpr int kClients = 16;
  std::vector<Generation> solo(kClients);
  for (int i = 0; i < kClients; ++i) {
    solo[i] = Generate(daemon.stub(), Greedy("client " + std::to_string(i), 12));
    ASSERT_TRUE(solo[i].status.ok()) << solo[i].status.error_message();
  }
  std::vector<Generation> together(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      // Each client its own channel, as separate processes would have.
      std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
          "unix:" + daemon.socket_path(), grpc::InsecureChannelCredentials());
      std::unique_ptr<v1::Moetier::Stub> stub = v1::Moetier::NewStub(channel);
      together[i] = Generate(*stub, Greedy("client " + std::to_string(i), 12));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(together[i].status.ok()) << i << ": " << together[i].status.error_message();
    EXPECT_EQ(together[i].token_ids, solo[i].token_ids) << "client " << i;
    EXPECT_EQ(together[i].text, solo[i].text) << "client " << i;
  }
}

TEST_F(FrontDoorTest, SixteenConcurrentClientsEachGetTheirSoloOutput) {
  ExpectSixteenConcurrentClientsGetTheirSoloOutput(*daemon_);
}

// The same with a worker that decodes four sequences together (--parallel 4).
TEST(FrontDoorOwnDaemonTest, SixteenClientsOnABatchingWorkerGetTheirSoloOutput) {
  std::string error;
  DaemonSetup setup;
  setup.model_path = kTinyModel;
  setup.worker_flags = {"--parallel=4"};
  std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Start(setup, &error);
  ASSERT_NE(daemon, nullptr) << error;
  ExpectSixteenConcurrentClientsGetTheirSoloOutput(*daemon);
}

TEST_F(FrontDoorTest, LimitsAnswerInvalidArgumentNamingTheLimit) {
  Generation g = Generate(daemon_->stub(), Greedy(std::string((1 << 20) + 1, 'x'), 4));
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(g.status.error_message(), HasSubstr("max_prompt_bytes"));
  g = Generate(daemon_->stub(), Greedy("hi", 100000));
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(g.status.error_message(), HasSubstr("max_new_tokens_limit"));
  v1::GenerateRequest bad_ids;
  bad_ids.add_prompt_token_ids(512);
  g = Generate(daemon_->stub(), bad_ids);
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(g.status.error_message(), HasSubstr("512"));
  grpc::ClientContext context;
  v1::ScoreRequest score;
  v1::ScoreResponse response;
  EXPECT_EQ(daemon_->stub().Score(&context, score, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(FrontDoorTest, HealthIsServingForTheServerAndTheService) {
  std::unique_ptr<grpc::health::v1::Health::Stub> health =
      grpc::health::v1::Health::NewStub(daemon_->channel());
  auto check = [&](const char* service) {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status s = health->Check(&context, request, &response);
    EXPECT_TRUE(s.ok()) << "'" << service << "': " << s.error_message();
    return response.status();
  };
  // The daemon's main loop publishes health within a tick of the worker
  // becoming ready.
  for (int i = 0; i < 250 && check("") != grpc::health::v1::HealthCheckResponse::SERVING; ++i) {
    usleep(20000);
  }
  EXPECT_EQ(check(""), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(check("moetier.v1.Moetier"), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(FrontDoorTest, TheSocketIsNotOpenToOthers) {
  struct stat st {};
  ASSERT_EQ(stat(daemon_->socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  if (geteuid() != 0) GTEST_SKIP() << "needs root to connect as another user";
  const pid_t child = fork();
  if (child == 0) {
    // nobody:nogroup, neither the socket's owner nor in its group.
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, daemon_->socket_path().c_str(), sizeof(addr.sun_path) - 1);
    const int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    _exit(rc == 0 ? 0 : (errno == EACCES ? 13 : 1));
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 13) << "another user could connect (or another error)";
}

// Tests with a daemon of their own: they kill or stop it, or need other limits.

TEST(FrontDoorOwnDaemonTest, AFullQueueAnswersResourceExhausted) {
  std::string error;
  DaemonSetup setup;
  setup.model_path = kTinyModel;
  setup.extra_config = {"max_queued_requests: 1", "max_active_sequences: 1"};
  std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Start(setup, &error);
  ASSERT_NE(daemon, nullptr) << error;
  StreamingCall running(daemon->stub(), Endless(3000));
  ASSERT_TRUE(running.ReadOne());  // it holds the worker
  StreamingCall queued(daemon->stub(), Endless(10));
  bool is_queued = false;
  for (int i = 0; i < 200 && !is_queued; ++i) {
    is_queued = daemon->GetStatus().queue().queued_requests() == 1;
    if (!is_queued) usleep(10000);
  }
  ASSERT_TRUE(is_queued);
  const Generation refused = Generate(daemon->stub(), Endless(10));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("max_queued_requests=1"));
  const auto t0 = std::chrono::steady_clock::now();
  running.Cancel();
  queued.Cancel();
  EXPECT_EQ(running.Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(queued.Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << daemon->Log();
}

TEST(FrontDoorOwnDaemonTest, AKilledWorkerEndsItsCallAndTheNextCallNeedsNoDiskRead) {
  std::string error;
  DaemonSetup setup;
  setup.model_path = kTinyModel;
  std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Start(setup, &error);
  ASSERT_NE(daemon, nullptr) << error;
  const v1::Status before = daemon->GetStatus();
  const pid_t worker = before.workers(0).pid();
  ASSERT_GT(worker, 0);
  StreamingCall call(daemon->stub(), Endless(3000));
  ASSERT_TRUE(call.ReadOne());
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  const grpc::Status ended = call.Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE) << ended.error_message();
  // The next call waits for the restarted worker and succeeds.
  const Generation next = Generate(daemon->stub(), Greedy("again", 4));
  EXPECT_TRUE(next.status.ok()) << next.status.error_message();
  const v1::Status after = daemon->GetStatus();
  EXPECT_NE(after.workers(0).pid(), worker);
  EXPECT_EQ(after.workers(0).restarts(), before.workers(0).restarts() + 1);
  EXPECT_EQ(after.bytes_read_from_disk(), before.bytes_read_from_disk())
      << "the restarted worker made the daemon read experts again";
}

TEST(FrontDoorOwnDaemonTest, SigtermStopsCleanlyAndRemovesTheSocket) {
  std::string error;
  DaemonSetup setup;
  setup.model_path = kTinyModel;
  std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Start(setup, &error);
  ASSERT_NE(daemon, nullptr) << error;
  const std::string socket = daemon->socket_path();
  ASSERT_TRUE(std::filesystem::exists(socket));
  const int status = daemon->Terminate(20000);
  ASSERT_TRUE(WIFEXITED(status)) << daemon->Log();
  EXPECT_EQ(WEXITSTATUS(status), 0) << daemon->Log();
  EXPECT_FALSE(std::filesystem::exists(socket));
  EXPECT_THAT(daemon->Log(), HasSubstr("stopped"));
}

}  // namespace
}  // namespace moetier::e2e
