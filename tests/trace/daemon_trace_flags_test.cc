// moetier-worker --daemon with the routing trace flags, as moetierd's
// worker_extra_args would pass them: the real worker process joined to a
// daemon side run in this test (the handshake of
// tests/worker_serve/daemon_mode_test.cc). Recording appends every
// request's tokens to the worker's file ({worker} in the path becomes its
// index); replaying that file serves the same logits and says so in the
// worker's log.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "cache/routing_trace.h"
#include "control/control_channel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "moetier/worker/v1/control.pb.h"
#include "serve_test_util.h"
#include "store/worker_channel.h"
#include "vectors.h"

extern char** environ;

namespace moetier {
namespace {

namespace control_v1 = ::moetier::worker::v1;
using serve_test::DaemonSide;
using serve_test::ScratchDir;
using ::testing::HasSubstr;
using ::testing::Not;

const char kWorker[] = MOETIER_WORKER;
constexpr int64_t kTimeoutMs = 60000;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool IsOneLine(const std::string& s) {
  return !s.empty() && s.back() == '\n' && s.find('\n') == s.size() - 1;
}

// Starts the worker with stdout and stderr going to files; 0 on failure.
pid_t Spawn(const std::vector<std::string>& args, const std::string& out_path,
            const std::string& err_path) {
  std::vector<std::string> copies = args;
  std::string program = kWorker;
  std::vector<char*> argv = {program.data()};
  for (std::string& a : copies) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, kWorker, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << kWorker << ": " << std::strerror(rc);
  return rc == 0 ? pid : 0;
}

// The exit code, or -1 (after SIGKILL) when it did not exit in time.
int WaitExit(pid_t pid, int64_t timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0 || std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// The daemon's listening socket and its side of the handshake.
class ControlListener {
 public:
  explicit ControlListener(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0)
        << std::strerror(errno);
    EXPECT_EQ(listen(fd_, 4), 0);
  }
  ~ControlListener() {
    close(fd_);
    unlink(path_.c_str());
  }

  // Accepts the worker `pid`, checks its hello, admits it to the store and
  // sends the segment; returns the control channel (-1 on failure).
  int Admit(ExpertStore& store, pid_t pid, uint32_t index, const std::string& device) {
    pollfd pfd{fd_, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(kTimeoutMs)) != 1) {
      ADD_FAILURE() << "the worker did not connect";
      return -1;
    }
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(fd, 0);
    ucred cred{};
    socklen_t length = sizeof(cred);
    EXPECT_EQ(getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length), 0);
    EXPECT_EQ(cred.pid, pid);
    store::WorkerHello hello{};
    absl::StatusOr<int> extra = store::ReceiveChannelMessage(
        fd, {reinterpret_cast<uint8_t*>(&hello), sizeof(hello)}, kTimeoutMs);
    EXPECT_TRUE(extra.ok()) << extra.status();
    EXPECT_EQ(hello.magic, store::kWorkerHelloMagic);
    EXPECT_EQ(hello.worker_index, index);
    EXPECT_EQ(std::string(hello.device), device);
    EXPECT_EQ(hello.pid, pid);
    store::DaemonWelcome welcome{};
    welcome.magic = store::kDaemonWelcomeMagic;
    welcome.layout_version = store::kLayoutVersion;
    welcome.worker_index = index;
    welcome.epoch = store.AdmitWorker(index, cred.pid, device);
    welcome.segment_bytes = store.segment_bytes();
    welcome.model_fingerprint = store.manifest().fingerprint;
    const absl::Status sent = store::SendChannelMessage(
        fd, {reinterpret_cast<const uint8_t*>(&welcome), sizeof(welcome)}, store.segment_fd());
    EXPECT_TRUE(sent.ok()) << sent;
    control::ConfigureControlSocket(fd);
    return fd;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// Scores `ids` on the control channel; the logits' bytes.
std::string Score(int control_fd, uint64_t id, const std::vector<int32_t>& ids) {
  control_v1::WorkerRequest score;
  score.set_id(id);
  score.mutable_score()->mutable_token_ids()->Add(ids.begin(), ids.end());
  EXPECT_TRUE(control::SendControlMessage(control_fd, score).ok());
  std::string bytes;
  while (true) {
    control_v1::WorkerReply reply;
    const absl::Status s = control::ReceiveControlMessage(control_fd, &reply, kTimeoutMs);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return "";
    EXPECT_EQ(reply.id(), id);
    if (reply.kind_case() == control_v1::WorkerReply::kDone) {
      EXPECT_EQ(reply.done().stop_reason(), control_v1::STOP_COMPLETE)
          << reply.done().error_message();
      return bytes;
    }
    EXPECT_EQ(reply.kind_case(), control_v1::WorkerReply::kLogits);
    bytes += reply.logits().floats_f32le();
  }
}

struct Served {
  std::vector<std::string> logits;  // per request
  std::string err;                  // the worker's log
  int exit_code = -1;
};

// Runs a daemon-mode worker with `extra` flags, serves `requests` Scores of
// `ids`, closes the channel and waits for the worker to exit.
Served Serve(const ScratchDir& dir, const std::vector<std::string>& extra,
             const std::vector<int32_t>& ids, int requests) {
  Served result;
  const std::string model = serve_test::VectorsModel("tiny-q8_0");
  absl::StatusOr<std::unique_ptr<DaemonSide>> daemon = DaemonSide::Start(model, 0);
  EXPECT_TRUE(daemon.ok()) << daemon.status();
  if (!daemon.ok()) return result;
  ExpertStore& store = *(*daemon)->store;
  ControlListener listener(dir.File("control.sock"));
  std::vector<std::string> args = {"--daemon", "--control-socket=" + dir.File("control.sock"),
                                   "--worker-index=1", "--device=cpu", "--model=" + model,
                                   "--threads", "2", "--ctx=64", "--huge-pages=off"};
  args.insert(args.end(), extra.begin(), extra.end());
  const pid_t pid = Spawn(args, dir.File("worker.out"), dir.File("worker.err"));
  if (pid == 0) return result;
  const int control_fd = listener.Admit(store, pid, 1, "cpu");
  if (control_fd >= 0) {
    control_v1::WorkerReply ready;
    const absl::Status s = control::ReceiveControlMessage(control_fd, &ready, kTimeoutMs);
    EXPECT_TRUE(s.ok()) << s << "\n" << ReadFile(dir.File("worker.err"));
    if (s.ok()) {
      for (int r = 0; r < requests; ++r) result.logits.push_back(Score(control_fd, r + 1, ids));
    }
    close(control_fd);
  }
  result.exit_code = WaitExit(pid, kTimeoutMs);
  result.err = ReadFile(dir.File("worker.err"));
  store.ReleaseWorker(1);
  return result;
}

TEST(DaemonTraceFlagsTest, RecordsEveryRequestAndReplaysWithTheSameLogits) {
  ScratchDir dir;
  const std::vector<int32_t> ids =
      moetier::testing::ReadIds(moetier::testing::TestDataPath("vectors/tiny-q8_0.ids"));
  const Served plain = Serve(dir, {}, ids, 1);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(plain.logits.size(), 1u);
  EXPECT_THAT(plain.err, Not(HasSubstr("routing")));

  const Served recorded =
      Serve(dir, {"--routing-trace-out=" + dir.File("routing-{worker}.trace")}, ids, 2);
  ASSERT_EQ(recorded.exit_code, 0) << recorded.err;
  ASSERT_EQ(recorded.logits.size(), 2u);
  EXPECT_TRUE(recorded.logits[0] == plain.logits[0]) << "recording changed the logits";
  const std::string trace_path = dir.File("routing-1.trace");
  EXPECT_THAT(recorded.err, HasSubstr(absl::StrCat("routing of ", 2 * ids.size(),
                                                   " tokens recorded to ", trace_path)));
  absl::StatusOr<RoutingTrace> trace = ReadRoutingTrace(trace_path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->n_token(), 2 * ids.size());  // both requests, one after the other
  const size_t half = trace->experts.size() / 2;
  EXPECT_TRUE(std::equal(trace->experts.begin(), trace->experts.begin() + half,
                         trace->experts.begin() + half));

  const Served replayed = Serve(dir, {"--routing-from-trace", trace_path}, ids, 1);
  ASSERT_EQ(replayed.exit_code, 0) << replayed.err;
  ASSERT_EQ(replayed.logits.size(), 1u);
  EXPECT_TRUE(replayed.logits[0] == plain.logits[0]) << "replaying its own routing differs";
  EXPECT_THAT(replayed.err, HasSubstr("routing replayed from " + trace_path));
}

TEST(DaemonTraceFlagsTest, ABadTraceStopsTheWorkerWithOneLine) {
  ScratchDir dir;
  {
    std::ofstream out(dir.File("bad.trace"));
    out << "0,1;2,3\n";  // two layers for a four-layer model
  }
  const std::string model = serve_test::VectorsModel("tiny-q8_0");
  absl::StatusOr<std::unique_ptr<DaemonSide>> daemon = DaemonSide::Start(model, 0);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ControlListener listener(dir.File("control.sock"));
  const pid_t pid = Spawn({"--daemon", "--control-socket=" + dir.File("control.sock"),
                           "--worker-index=1", "--device=cpu", "--model=" + model,
                           "--routing-from-trace=" + dir.File("bad.trace")},
                          dir.File("worker.out"), dir.File("worker.err"));
  ASSERT_NE(pid, 0);
  const int control_fd = listener.Admit(*(*daemon)->store, pid, 1, "cpu");
  EXPECT_EQ(WaitExit(pid, kTimeoutMs), 1);
  if (control_fd >= 0) close(control_fd);
  const std::string err = ReadFile(dir.File("worker.err"));
  EXPECT_THAT(err, HasSubstr("2 layers but the model has 4"));
  EXPECT_TRUE(IsOneLine(err)) << err;
  (*daemon)->store->ReleaseWorker(1);
}

}  // namespace
}  // namespace moetier
