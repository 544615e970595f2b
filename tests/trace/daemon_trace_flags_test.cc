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
