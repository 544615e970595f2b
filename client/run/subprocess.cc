#include "run/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace moetier::client {

absl::StatusOr<pid_t> Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("no program to start");
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls are allowed in a threaded process.
  std::vector<char*> argv;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int output_fd = -1;
  if (!options.output_path.empty()) {
    output_fd = open(options.output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (output_fd < 0) {
      return absl::UnavailableError(
          absl::StrFormat("cannot create %s: %s", options.output_path, std::strerror(errno)));
    }
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    if (output_fd >= 0) close(output_fd);
    return absl::UnavailableError(
        absl::StrFormat("cannot start %s: fork: %s", options.argv[0], std::strerror(error)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // the parent died before prctl
    if (options.own_process_group) setpgid(0, 0);
    // Our interrupt handling blocks these; the child must see them.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    if (output_fd >= 0) {
      dup2(output_fd, STDOUT_FILENO);
      dup2(output_fd, STDERR_FILENO);
    } else {
      dup2(STDERR_FILENO, STDOUT_FILENO);
    }
    execv(argv[0], argv.data());
    const char* what = "moetier: cannot execute the program: ";
    (void)!write(STDERR_FILENO, what, std::strlen(what));
    const char* why = std::strerror(errno);
    (void)!write(STDERR_FILENO, why, std::strlen(why));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  if (output_fd >= 0) close(output_fd);
  return pid;
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) {
    return absl::StrFormat("exited with status %d", WEXITSTATUS(wait_status));
  }
  if (WIFSIGNALED(wait_status)) {
    return absl::StrFormat("killed by signal %d (%s)", WTERMSIG(wait_status),
                           strsignal(WTERMSIG(wait_status)));
  }
  return absl::StrFormat("ended with wait status %d", wait_status);
}

std::optional<int> TryReap(pid_t pid) {
  int wait_status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &wait_status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid) return wait_status;
  return std::nullopt;
}

std::optional<int> WaitFor(pid_t pid, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    if (std::optional<int> status = TryReap(pid); status.has_value()) return status;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace moetier::client
