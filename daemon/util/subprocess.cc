#include "util/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

extern char** environ;

namespace moetier {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void InitChildSpawnAttributes(posix_spawnattr_t* attr, bool own_process_group) {
  posix_spawnattr_init(attr);
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(attr, &none);
  posix_spawnattr_setsigdefault(attr, &all);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (own_process_group) {
    posix_spawnattr_setpgroup(attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  posix_spawnattr_setflags(attr, flags);
}

absl::StatusOr<ProcessOutcome> RunAndCapture(const std::vector<std::string>& argv,
                                             int64_t timeout_ms, size_t output_bytes_max) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to run");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrFormat("pipe: %s", std::strerror(errno)));
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawnattr_t attr;
  InitChildSpawnAttributes(&attr, /*own_process_group=*/false);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot start %s: %s", argv[0], std::strerror(rc)));
  }

  ProcessOutcome outcome;
  const int64_t deadline_ms = NowMs() + timeout_ms;
  char buffer[4096];
  while (true) {
    const int64_t left_ms = deadline_ms - NowMs();
    if (left_ms <= 0) {
      outcome.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // every copy of the write end is closed
    const size_t room = output_bytes_max - std::min(output_bytes_max, outcome.output.size());
    outcome.output.append(buffer, std::min(room, static_cast<size_t>(n)));
  }
  close(fds[0]);
  // A child may close its output and go on; the timeout still holds.
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, outcome.timed_out ? 0 : WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrFormat("waitpid: %s", std::strerror(errno)));
    }
    if (done == 0 && NowMs() >= deadline_ms) {
      outcome.timed_out = true;
      kill(pid, SIGKILL);
    } else if (done == 0) {
      usleep(10'000);
    }
  }
  outcome.exited = WIFEXITED(status);
  if (outcome.exited) outcome.exit_status = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) outcome.term_signal = WTERMSIG(status);
  return outcome;
}

}  // namespace moetier
