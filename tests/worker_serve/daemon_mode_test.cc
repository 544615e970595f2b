// The real moetier-worker --daemon process, joined to a daemon side run in
// this test: the store (daemon/store) and a test-local accept loop doing the
// handshake the supervisor does (SO_PEERCRED, WorkerHello, DaemonWelcome
// with the segment over SCM_RIGHTS). The worker announces itself, serves a
// Score whose bytes equal `moetier-worker --standalone --logits-out`, reads
// its experts from the store (fully resident or a cache), and exits 0 when
// the channel closes; bad flags and a bad device exit with one clear line.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "control/control_channel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "moetier/worker/v1/control.pb.h"
#include "serve_test_util.h"
#include "worker_process.h"
#include "store/worker_channel.h"
#include "vectors.h"

namespace moetier {
namespace {

namespace control_v1 = ::moetier::worker::v1;
using serve_test::ControlListener;
using serve_test::DaemonSide;
using serve_test::IsOneLine;
using serve_test::kTimeoutMs;
using serve_test::ReadFile;
using serve_test::ScratchDir;
using serve_test::Spawn;
using serve_test::WaitExit;
using ::testing::HasSubstr;
using ::testing::Not;

struct RunResult {
  int exit_code = -1;
  std::string err;
};

RunResult RunToEnd(const ScratchDir& dir, const std::vector<std::string>& args) {
  const std::string out = dir.File("run.out");
  const std::string err = dir.File("run.err");
  RunResult r;
  const pid_t pid = Spawn(args, out, err);
  if (pid == 0) return r;
  r.exit_code = WaitExit(pid, kTimeoutMs);
  r.err = ReadFile(err);
  return r;
}

// The daemon's listening socket and its side of the handshake.

std::vector<int32_t> VectorIds() {
  return moetier::testing::ReadIds(moetier::testing::TestDataPath("vectors/tiny-q8_0.ids"));
}

class DaemonModeTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(DaemonModeTest, ServesScoreLikeStandaloneAndExitsWhenTheChannelCloses) {
  const uint32_t cache_slots = GetParam();
  const std::string model = serve_test::VectorsModel("tiny-q8_0");
  absl::StatusOr<std::unique_ptr<DaemonSide>> daemon = DaemonSide::Start(model, cache_slots);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ExpertStore& store = *(*daemon)->store;
  ScratchDir dir;
  ControlListener listener(dir.File("control.sock"));
  const pid_t pid =
      Spawn({"--daemon", "--control-socket=" + dir.File("control.sock"), "--worker-index=1",
             "--device=cpu", "--model=" + model, "--threads", "2", "--ctx=64", "--huge-pages=off"},
            dir.File("worker.out"), dir.File("worker.err"));
  ASSERT_NE(pid, 0);
  const int control_fd = listener.Admit(store, pid, 1, "cpu");
  ASSERT_GE(control_fd, 0);

  control_v1::WorkerReply ready;
  absl::Status s = control::ReceiveControlMessage(control_fd, &ready, kTimeoutMs);
  ASSERT_TRUE(s.ok()) << s << "\n" << ReadFile(dir.File("worker.err"));
  ASSERT_EQ(ready.kind_case(), control_v1::WorkerReply::kReady);
  EXPECT_EQ(ready.id(), 0u);
  EXPECT_EQ(ready.ready().n_vocab(), 512);
  EXPECT_EQ(ready.ready().max_ctx(), 64);
  EXPECT_EQ(ready.ready().backend(), "cpu");
  EXPECT_EQ(ready.ready().threads(), 2);
  EXPECT_EQ(ready.ready().model_fingerprint(), (*daemon)->manifest.fingerprint);

  const std::vector<int32_t> ids = VectorIds();
  control_v1::WorkerRequest score;
  score.set_id(1);
  score.mutable_score()->mutable_token_ids()->Add(ids.begin(), ids.end());
  ASSERT_TRUE(control::SendControlMessage(control_fd, score).ok());
  std::string bytes;
  control_v1::DoneReply done;
  while (true) {
    control_v1::WorkerReply reply;
    s = control::ReceiveControlMessage(control_fd, &reply, kTimeoutMs);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(reply.id(), 1u);
    if (reply.kind_case() == control_v1::WorkerReply::kDone) {
      done = reply.done();
      break;
    }
    ASSERT_EQ(reply.kind_case(), control_v1::WorkerReply::kLogits);
    EXPECT_EQ(reply.logits().first_float() * sizeof(float), bytes.size());
    bytes += reply.logits().floats_f32le();
  }
  EXPECT_EQ(done.stop_reason(), control_v1::STOP_COMPLETE) << done.error_message();

  // The same ids through the standalone worker, which reads the file.
  const std::string logits_path = dir.File("standalone.f32");
  std::vector<std::string> id_strings;
  for (int32_t id : ids) id_strings.push_back(std::to_string(id));
  const RunResult standalone =
      RunToEnd(dir, {"--standalone", "--model", model, "--tokens", absl::StrJoin(id_strings, ","),
                     "--logits-out", logits_path, "--threads", "1"});
  ASSERT_EQ(standalone.exit_code, 0) << standalone.err;
  const std::string want = ReadFile(logits_path);
  ASSERT_EQ(bytes.size(), ids.size() * 512 * sizeof(float));
  EXPECT_TRUE(bytes == want) << "daemon-mode Score differs from --standalone --logits-out";

  // The experts came from the store, and the worker kept its heartbeat.
  const store::WorkerStatusPage page = store.WorkerStatus(1);
  EXPECT_GT(page.ram_hits, 0u);
  if (cache_slots > 0) {
    EXPECT_GT(page.ram_misses, 0u);
  } else {
    EXPECT_EQ(page.ram_misses, 0u);
  }
  EXPECT_GT(page.heartbeat_ns, 0u);

  close(control_fd);
  EXPECT_EQ(WaitExit(pid, kTimeoutMs), 0) << ReadFile(dir.File("worker.err"));
  const std::string err = ReadFile(dir.File("worker.err"));
  EXPECT_THAT(err, HasSubstr("closed the control channel"));
  EXPECT_THAT(err, Not(HasSubstr("error")));
  store.ReleaseWorker(1);
}

INSTANTIATE_TEST_SUITE_P(Stores, DaemonModeTest, ::testing::Values(0u, 3u),
                         [](const ::testing::TestParamInfo<uint32_t>& param_info) {
                           return param_info.param == 0
                                      ? std::string("FullyResident")
                                      : "Cache" + std::to_string(param_info.param);
                         });

TEST(DaemonModeFailureTest, AStoreOfAnotherModelIsRefused) {
  absl::StatusOr<std::unique_ptr<DaemonSide>> daemon =
      DaemonSide::Start(serve_test::VectorsModel("tiny-q8_0"), 0);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ScratchDir dir;
  ControlListener listener(dir.File("control.sock"));
  const pid_t pid =
      Spawn({"--daemon", "--control-socket=" + dir.File("control.sock"), "--worker-index=0",
             "--device=cpu", "--model=" + serve_test::VectorsModel("tiny-f32")},
            dir.File("worker.out"), dir.File("worker.err"));
  ASSERT_NE(pid, 0);
  const int control_fd = listener.Admit(*(*daemon)->store, pid, 0, "cpu");
  ASSERT_GE(control_fd, 0);
  EXPECT_EQ(WaitExit(pid, kTimeoutMs), 1);
  const std::string err = ReadFile(dir.File("worker.err"));
  EXPECT_TRUE(IsOneLine(err)) << err;
  EXPECT_THAT(err, HasSubstr("different model"));
  close(control_fd);
  (*daemon)->store->ReleaseWorker(0);
}

TEST(DaemonModeFailureTest, BadFlagsAndDevicesExitWithOneLine) {
  ScratchDir dir;
  const std::string model = serve_test::VectorsModel("tiny-q8_0");
  const std::string socket = "--control-socket=" + dir.File("nobody.sock");
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    const char* mentions;
  };
  const std::vector<Case> cases = {
      // Built without CUDA, or no driver or device here: either way it says CUDA.
      {{"--daemon", socket, "--worker-index=0", "--device=cuda:0", "--model=" + model},
       1,
       "CUDA"},
      {{"--daemon", socket, "--worker-index=0", "--device=tpu", "--model=" + model}, 2, "'tpu'"},
      {{"--daemon", "--worker-index=0", "--device=cpu", "--model=" + model}, 2, "--control-socket"},
      {{"--daemon", socket, "--device=cpu", "--model=" + model}, 2, "--worker-index"},
      {{"--daemon", socket, "--worker-index=0", "--model=" + model}, 2, "--device"},
      {{"--daemon", socket, "--worker-index=0", "--device=cpu"}, 2, "--model"},
      {{"--daemon", socket, "--worker-index=16", "--device=cpu", "--model=" + model}, 2, "0..15"},
      {{"--daemon", socket, "--worker-index=0", "--device=cpu", "--model=" + model, "--tokens",
        "1"},
       2,
       "--tokens goes only with --standalone"},
      {{"--daemon", socket, "--worker-index=0", "--device=cpu", "--model=" + model, "--frob"},
       2,
       "--frob"},
      {{"--standalone", "--device=tpu", "--model", model, "--tokenize", "x"}, 2, "'tpu'"},
      {{"--standalone", "--worker-index=0", "--model", model, "--tokenize", "x"},
       2,
       "--worker-index goes only with --daemon"},
      {{"--standalone", "--prefix-cache-mib=64", "--model", model, "--tokenize", "x"},
       2,
       "--prefix-cache-mib goes only with --daemon"},
      {{"--daemon", socket, "--worker-index=0", "--device=cpu", "--model=" + model,
        "--prefix-cache-mib=-1"},
       2,
       "--prefix-cache-mib"},
      {{"--daemon", "--standalone", socket, "--worker-index=0", "--device=cpu", "--model=" + model},
       2,
       "exclude each other"},
      // Nobody listens on the socket: a runtime error, not a usage error.
      {{"--daemon", socket, "--worker-index=0", "--device=cpu", "--model=" + model},
       1,
       "nobody.sock"},
  };
  for (const Case& c : cases) {
    const RunResult r = RunToEnd(dir, c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << absl::StrJoin(c.args, " ") << "\n" << r.err;
    EXPECT_TRUE(IsOneLine(r.err)) << absl::StrJoin(c.args, " ") << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.mentions)) << absl::StrJoin(c.args, " ");
  }
}

TEST(DaemonModeFailureTest, HelpDocumentsDaemonMode) {
  ScratchDir dir;
  const std::string out = dir.File("help.out");
  const pid_t pid = Spawn({"--help"}, out, dir.File("help.err"));
  ASSERT_NE(pid, 0);
  EXPECT_EQ(WaitExit(pid, kTimeoutMs), 0);
  const std::string text = ReadFile(out);
  for (const char* flag : {"--daemon", "--control-socket", "--worker-index", "--device", "cuda:N",
                           "--standalone", "--threads", "--ctx", "--huge-pages", "--parallel",
                           "--prefix-cache-mib"}) {
    EXPECT_THAT(text, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace moetier
