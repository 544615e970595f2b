// moetierd as a program: --help, refusing a bad configuration before doing
// anything, and a whole run — manifest, store, preload or cache, a worker
// admitted — ended by SIGTERM with exit status 0.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store_test_util.h"
#include "test_model.h"

extern char** environ;

namespace moetier {
namespace {

using daemon_test::ScratchDir;
using daemon_test::TestModel;
using daemon_test::WaitFor;
using ::testing::HasSubstr;
using ::testing::Not;

// Starts moetierd with `args`, stdout and stderr into `log`.
pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> all = {MOETIERD};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << std::strerror(rc);
  return pid;
}

// Waits for `pid` up to timeout_ms; returns its wait status, or -1.
int WaitExit(pid_t pid, int64_t timeout_ms) {
  int status = 0;
  const bool done = WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout_ms);
  if (!done) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  return status;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string FirstReport(const std::string& dir, const std::string& suffix) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == suffix) return ReadAll(e.path().string());
  }
  return "";
}

int CountFiles(const std::string& dir, const std::string& suffix) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == suffix) ++n;
  }
  return n;
}

TEST(MoetierdTest, HelpListsTheFlags) {
  ScratchDir dir;
  const pid_t pid = Spawn({"--help"}, dir.File("log"));
  const int status = WaitExit(pid, 10000);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const std::string out = ReadAll(dir.File("log"));
  EXPECT_THAT(out, HasSubstr("--ram-budget-bytes=SIZE"));
  EXPECT_THAT(out, HasSubstr("--io-queue-depth=N"));

  const pid_t short_pid = Spawn({"-h"}, dir.File("short"));
  const int short_status = WaitExit(short_pid, 10000);
  ASSERT_TRUE(WIFEXITED(short_status));
  EXPECT_EQ(WEXITSTATUS(short_status), 0);
  EXPECT_EQ(ReadAll(dir.File("short")), out);
}

TEST(MoetierdTest, AnInvalidConfigurationExitsWithTwoAndSaysWhy) {
  ScratchDir dir;
  const pid_t pid = Spawn({"--model-path=" + dir.File("none.gguf"), "--devices=cpu",
                           "--ram-budget-bytes=12 parsecs"},
                          dir.File("log"));
  const int status = WaitExit(pid, 10000);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_THAT(ReadAll(dir.File("log")), HasSubstr("not a byte size"));

  const pid_t pid2 = Spawn({"--model-path=" + dir.File("none.gguf"), "--devices=tpu"},
                           dir.File("log2"));
  const int status2 = WaitExit(pid2, 10000);
  ASSERT_TRUE(WIFEXITED(status2));
  EXPECT_EQ(WEXITSTATUS(status2), 2);
  EXPECT_THAT(ReadAll(dir.File("log2")), HasSubstr("model_path"));
}

// 2 layers of 4 experts: 8 experts in all.
absl::StatusOr<TestModel> SmallModel(const ScratchDir& dir) {
  daemon_test::TestModelOptions o;
  o.n_layer = 2;
  o.n_expert = 4;
  return daemon_test::WriteTestModel(dir.path(), "m", o);
}

// A config serving `model` with the fake worker, its sockets and the
// worker's reports (NAME-reports/) in `dir`.
std::string WriteConfig(const ScratchDir& dir, const std::string& name, const TestModel& model,
                        const std::string& extra = "") {
  const std::string reports = dir.File(name + "-reports");
  std::filesystem::create_directory(reports);
  const std::string path = dir.File(name + ".conf");
  std::ofstream(path) << "model_path: \"" << model.path << "\"\n"
                      << "devices: \"cpu\"\n"
                      << "worker_executable_path: \"" << MOETIER_FAKE_WORKER << "\"\n"
                      << "worker_socket_path: \"" << dir.File(name + "-w.sock") << "\"\n"
                      << "api_socket_path: \"" << dir.File(name + "-api.sock") << "\"\n"
                      << "worker_extra_args: \"--fake-report-dir=" << reports << "\"\n"
                      << "allow_unlocked_memory: true\n"
                      << extra;
  return path;
}

// A TCP port nobody listens on right now.
int FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// gRPC's default SO_REUSEPORT would let a second daemon bind the same port
// and take half the connections; it must fail and say why instead.
TEST(MoetierdTest, ASecondDaemonOnTheSamePortFailsWithAddressInUse) {
  ScratchDir dir;
  absl::StatusOr<TestModel> model = SmallModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string listen = absl::StrFormat("listen_address: \"127.0.0.1:%d\"\n", FreeTcpPort());
  const pid_t first = Spawn({"--config=" + WriteConfig(dir, "a", *model, listen)}, dir.File("a.log"));
  const bool serving = WaitFor(
      [&] { return ReadAll(dir.File("a.log")).find("serving the API") != std::string::npos; },
      20000);
  const pid_t second = Spawn({"--config=" + WriteConfig(dir, "b", *model, listen)}, dir.File("b.log"));
  const int second_status = WaitExit(second, 20000);
  kill(first, SIGTERM);
  const int first_status = WaitExit(first, 10000);
  ASSERT_TRUE(serving) << ReadAll(dir.File("a.log"));
  ASSERT_TRUE(WIFEXITED(second_status)) << ReadAll(dir.File("b.log"));
  EXPECT_NE(WEXITSTATUS(second_status), 0);
  EXPECT_THAT(ReadAll(dir.File("b.log")), HasSubstr("address in use"));
  ASSERT_TRUE(WIFEXITED(first_status));
  EXPECT_EQ(WEXITSTATUS(first_status), 0) << ReadAll(dir.File("a.log"));
}

class MoetierdRunTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MoetierdRunTest, ServesAWorkerAndStopsCleanlyOnSigterm) {
  ScratchDir dir;
  absl::StatusOr<TestModel> model = SmallModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string reports = dir.File("run-reports");
  std::vector<std::string> args = {"--config=" + WriteConfig(dir, "run", *model)};
  if (!GetParam().empty()) args.push_back(GetParam());
  const pid_t pid = Spawn(args, dir.File("log"));
  int early_status = 0;
  bool exited_early = false;
  const bool admitted = WaitFor(
      [&] {
        exited_early = exited_early || waitpid(pid, &early_status, WNOHANG) == pid;
        return exited_early || (CountFiles(reports, ".ok") == 1 &&
                                ReadAll(dir.File("log")).find("] ready") != std::string::npos);
      },
      20000);
  ASSERT_FALSE(exited_early) << ReadAll(dir.File("log"));
  kill(pid, SIGTERM);
  const int status = WaitExit(pid, 10000);
  const std::string log = ReadAll(dir.File("log"));
  ASSERT_TRUE(admitted) << log;
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 0) << log;
  EXPECT_THAT(log, HasSubstr("admitted"));
  EXPECT_THAT(log, HasSubstr("ready"));
  EXPECT_THAT(log, HasSubstr("received SIGTERM"));
  EXPECT_THAT(log, HasSubstr("stopped"));
  EXPECT_EQ(CountFiles(reports, ".stopped"), 1) << "the worker was stopped, not abandoned";
  EXPECT_FALSE(std::filesystem::exists(dir.File("run-w.sock")));
  if (GetParam().empty()) {
    EXPECT_THAT(log, HasSubstr("preload finished: all 8 experts resident"));
    EXPECT_THAT(FirstReport(reports, ".ok"), HasSubstr("experts=8 hits=8 misses=0"));
  } else {
    EXPECT_THAT(log, HasSubstr("RAM caches the model file"));
    // Every expert came through the miss path, across processes.
    EXPECT_THAT(FirstReport(reports, ".ok"), HasSubstr("experts=8 hits=0 misses=8"));
  }
}

// A datagram socket standing in for systemd's notify socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~NotifySocket() {
    close(fd_);
    unlink(path_.c_str());
  }
  bool bound() const { return bound_; }
  // Every message received so far, in order.
  const std::vector<std::string>& Drain() {
    char buffer[1024];
    for (ssize_t n; (n = recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT)) > 0;) {
      messages_.emplace_back(buffer, static_cast<size_t>(n));
    }
    return messages_;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
  std::vector<std::string> messages_;
};

int IndexOf(const std::vector<std::string>& messages, const std::string& text) {
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].find(text) != std::string::npos) return static_cast<int>(i);
  }
  return -1;
}

// What systemd would see: preload progress with a timeout extension, then
// READY=1, then the watchdog fed, then STOPPING=1.
TEST(MoetierdTest, TellsSystemdWhereStartUpIsThenFeedsTheWatchdog) {
  ScratchDir dir;
  absl::StatusOr<TestModel> model = SmallModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  NotifySocket notify(dir.File("notify"));
  ASSERT_TRUE(notify.bound());
  setenv("NOTIFY_SOCKET", dir.File("notify").c_str(), 1);
  setenv("WATCHDOG_USEC", "400000", 1);  // fed every 200 ms
  const pid_t pid =
      Spawn({"--model_path=" + model->path, "--devices=cpu",
             "--worker_executable_path=" MOETIER_FAKE_WORKER,
             "--worker_socket_path=" + dir.File("w.sock"),
             "--api_socket_path=" + dir.File("api.sock"), "--allow_unlocked_memory",
             "--preload_bytes_per_s=256KiB", "--worker_extra_args=--fake-report-dir=" + dir.path()},
            dir.File("log"));
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  const bool fed = WaitFor([&] { return IndexOf(notify.Drain(), "WATCHDOG=1") >= 0; }, 20000);
  kill(pid, SIGTERM);
  const int status = WaitExit(pid, 10000);
  const std::string log = ReadAll(dir.File("log"));
  ASSERT_TRUE(fed) << log;
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 0) << log;
  const std::vector<std::string>& messages = notify.Drain();
  const int progress = IndexOf(messages, "STATUS=preloading experts: ");
  const int ready = IndexOf(messages, "READY=1");
  ASSERT_GE(progress, 0) << log;
  ASSERT_GE(ready, 0) << log;
  EXPECT_LT(progress, ready);
  EXPECT_THAT(messages[progress], ::testing::MatchesRegex(
                                      "STATUS=preloading experts: [0-9]+% \\(.* of .*\\)\n"
                                      "EXTEND_TIMEOUT_USEC=[0-9]+"));
  EXPECT_THAT(messages[ready - 1], HasSubstr("STATUS=preloading experts: 100%"));
  EXPECT_GT(IndexOf(messages, "WATCHDOG=1"), ready) << "fed only once ready";
  EXPECT_EQ(messages.back(), "STOPPING=1");
  EXPECT_THAT(log, HasSubstr("at most 256.0 KiB/s (preload_bytes_per_s)"));
  EXPECT_THAT(log, HasSubstr("watchdog fed every 0.2 s"));
}

// Under systemd stderr is the journal: priorities instead of timestamps.
TEST(MoetierdTest, LogsWithSyslogPrioritiesWhenStderrIsTheJournal) {
  ScratchDir dir;
  std::ofstream(dir.File("bad.gguf")) << "not a model";
  for (const bool journal : {true, false}) {
    const std::string log_path = dir.File(journal ? "journal" : "plain");
    std::ofstream(log_path).close();
    struct stat st {};
    ASSERT_EQ(stat(log_path.c_str(), &st), 0);
    // Spawn truncates the file but keeps its inode: the stream is this file.
    const std::string stream = journal ? absl::StrFormat("%d:%d", st.st_dev, st.st_ino)
                                       : absl::StrFormat("%d:%d", st.st_dev, st.st_ino + 1);
    setenv("JOURNAL_STREAM", stream.c_str(), 1);
    const pid_t pid =
        Spawn({"--model_path=" + dir.File("bad.gguf"), "--devices=cpu"}, log_path);
    unsetenv("JOURNAL_STREAM");
    const int status = WaitExit(pid, 10000);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 1);
    const std::string log = ReadAll(log_path);
    if (journal) {
      EXPECT_THAT(log, ::testing::StartsWith("<3>cannot open the model: ")) << log;
      EXPECT_THAT(log, Not(HasSubstr("moetierd["))) << log;
    } else {
      EXPECT_THAT(log, ::testing::MatchesRegex("[0-9-]+ [0-9:.]+ E moetierd\\[[0-9]+\\] cannot "
                                               "open the model: .*"))
          << log;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(MoetierdModes, MoetierdRunTest,
                         ::testing::Values("", "--ram-budget-bytes=560KiB"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param.empty() ? "Preload" : "Cache";
                         });

}  // namespace
}  // namespace moetier
