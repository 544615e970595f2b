// The real moetier-worker process in tests that play the daemon's side:
// start it, wait for its exit, and admit it the way moetierd's supervisor
// does (SO_PEERCRED, WorkerHello, DaemonWelcome with the store segment over
// SCM_RIGHTS). Test targets that include this define MOETIER_WORKER.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "control/control_channel.h"
#include "gtest/gtest.h"
#include "store/expert_store.h"
#include "store/worker_channel.h"

extern char** environ;

namespace moetier::serve_test {

inline constexpr char kWorker[] = MOETIER_WORKER;
inline constexpr int64_t kTimeoutMs = 60000;

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline bool IsOneLine(const std::string& s) {
  return !s.empty() && s.back() == '\n' && s.find('\n') == s.size() - 1;
}

// Starts the worker with stdout and stderr going to files; 0 on failure.
inline pid_t Spawn(const std::vector<std::string>& args, const std::string& out_path,
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
inline int WaitExit(pid_t pid, int64_t timeout_ms) {
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

}  // namespace moetier::serve_test
