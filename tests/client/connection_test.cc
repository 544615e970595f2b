#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "client_test_util.h"
#include "connection/rpc_error.h"
#include "connection/target.h"
#include "fake_moetier_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier::client {
namespace {

using testing::FakeServer;
using ::testing::HasSubstr;
using testing::RunClient;
using testing::TempDir;

// A socket file that nobody listens on: bound, then closed.
void MakeStaleSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  close(fd);
}

TEST(TargetTest, AddressThenSocketThenEnvironmentThenDefault) {
  GlobalOptions g;
  EXPECT_EQ(ResolveTarget(g, nullptr).where, "/run/moetier/moetier.sock");
  EXPECT_EQ(ResolveTarget(g, "").where, "/run/moetier/moetier.sock");
  EXPECT_EQ(ResolveTarget(g, "/env.sock").where, "/env.sock");
  EXPECT_EQ(ResolveTarget(g, "/env.sock").GrpcUri(), "unix:/env.sock");
  g.socket_path = "/flag.sock";
  EXPECT_EQ(ResolveTarget(g, "/env.sock").where, "/flag.sock");
  g.address = "127.0.0.1:50051";
  const Target tcp = ResolveTarget(g, "/env.sock");
  EXPECT_EQ(tcp.kind, Target::Kind::kTcp);
  EXPECT_EQ(tcp.GrpcUri(), "127.0.0.1:50051");
}

TEST(ProbeTest, MissingRefusedAndAccepting) {
  TempDir dir;
  EXPECT_EQ(ProbeUnixSocket(dir.File("none.sock")).state, SocketState::kMissing);
  EXPECT_EQ(ProbeUnixSocket(dir.File("no/such/dir.sock")).state, SocketState::kMissing);
  MakeStaleSocket(dir.File("stale.sock"));
  EXPECT_EQ(ProbeUnixSocket(dir.File("stale.sock")).state, SocketState::kRefused);
  FakeServer server(dir.File("live.sock"));
  EXPECT_EQ(ProbeUnixSocket(dir.File("live.sock")).state, SocketState::kAccepting);
}

TEST(RpcErrorTest, CodesAndMessagesOnOneLine) {
  const Target tcp{Target::Kind::kTcp, "10.0.0.1:50051"};
  EXPECT_EQ(
      DescribeRpcError(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "model not loaded"), tcp,
                       "Generate"),
      "model not loaded (FAILED_PRECONDITION)");
  EXPECT_EQ(DescribeRpcError(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad\nthing"), tcp,
                             "Generate"),
            "bad thing (INVALID_ARGUMENT)");
  EXPECT_EQ(DescribeRpcError(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "x"), tcp, "Score"),
            "Score ran past its deadline (--timeout-ms) (DEADLINE_EXCEEDED)");
  EXPECT_EQ(DescribeRpcError(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""), tcp, "Chat"),
            "moetierd at 10.0.0.1:50051 does not implement Chat (older than this client?) "
            "(UNIMPLEMENTED)");
  EXPECT_THAT(DescribeRpcError(grpc::Status(grpc::StatusCode::UNAVAILABLE, "refused"), tcp, "x"),
              HasSubstr("moetierd is not reachable at 10.0.0.1:50051: refused; is it running "
                        "with --listen_address=10.0.0.1:50051? (UNAVAILABLE)"));
  EXPECT_EQ(DescribeRpcError(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, ""), tcp, "x"),
            "RESOURCE_EXHAUSTED");
}

TEST(ConnectionErrorTest, SocketThatDoesNotExistSaysHowToStartTheDaemon) {
  TempDir dir;
  const std::string path = dir.File("missing/moetier.sock");
  const testing::ClientRun run = RunClient({"--socket", path, "status"});
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err, "moetier status: moetierd is not running at " + path +
                         "; start it with `systemctl start moetierd` or `moetier run`\n");
  EXPECT_EQ(run.out, "");
}

TEST(ConnectionErrorTest, StaleSocketCountsAsNotRunning) {
  TempDir dir;
  const std::string path = dir.File("moetier.sock");
  MakeStaleSocket(path);
  const testing::ClientRun run = RunClient({"--socket", path, "tokenize", "hi"});
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("moetierd is not running at " + path));
}

TEST(ConnectionErrorTest, EnvironmentSocketIsUsed) {
  TempDir dir;
  FakeServer server(dir.File("env.sock"));
  const std::string socket = dir.File("env.sock");
  std::istringstream in;
  std::ostringstream out, err;
  ClientIo io;
  io.in = &in;
  io.out = &out;
  io.err = &err;
  io.env_socket = socket.c_str();
  EXPECT_EQ(RunMoetier({"moetier", "detokenize", "104,105"}, io), 0) << err.str();
  EXPECT_EQ(out.str(), "hi\n");
}

// Without permission to the socket the message names the group to join.
// Root ignores file modes, so there this check cannot apply.
TEST(ConnectionErrorTest, SocketWithoutPermissionNamesTheGroup) {
  if (geteuid() == 0) {
    GTEST_SKIP() << "running as root, where file permissions do not apply; "
                    "DroppedPrivilegesSeePermissionDenied covers this case";
  }
  TempDir dir;
  const std::string path = dir.File("moetier.sock");
  FakeServer server(path);
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  const group* g = getgrgid(st.st_gid);
  const std::string group_name = g != nullptr ? g->gr_name : std::to_string(st.st_gid);
  const testing::ClientRun run = RunClient({"--socket", path, "status"});
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err, "moetier status: permission denied on " + path + "; add yourself to group " +
                         group_name + " (sudo usermod -aG " + group_name +
                         " $USER) and log in again\n");
}

// As root (CI): a child that drops to nobody meets the permission check for
// real, on a socket owned by another group with mode 0660.
TEST(ConnectionErrorTest, DroppedPrivilegesSeePermissionDenied) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop privileges; the test above covers this";
  const group* adm = getgrnam("adm");
  const gid_t gid = adm != nullptr ? adm->gr_gid : 4;
  const std::string group_name = adm != nullptr ? adm->gr_name : "4";
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  const std::string path = dir.File("moetier.sock");
  MakeStaleSocket(path);
  ASSERT_EQ(chown(path.c_str(), 0, gid), 0);
  ASSERT_EQ(chmod(path.c_str(), 0660), 0);

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    const std::string message =
        DescribeRpcError(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connect failed"),
                         Target{Target::Kind::kUnix, path}, "GetStatus");
    (void)!write(fds[1], message.data(), message.size());
    _exit(0);
  }
  close(fds[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) message.append(buffer, n);
  close(fds[0]);
  int wait_status = 0;
  ASSERT_EQ(waitpid(pid, &wait_status, 0), pid);
  ASSERT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0)
      << "could not drop to nobody";
  EXPECT_EQ(message, "permission denied on " + path + "; add yourself to group " + group_name +
                         " (sudo usermod -aG " + group_name + " $USER) and log in again");
}

}  // namespace
}  // namespace moetier::client
