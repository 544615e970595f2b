#include "run/private_daemon.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "run/subprocess.h"

namespace moetier::client {
namespace {

// sun_path holds 108 bytes; leave room for "/worker.sock".
constexpr size_t kMaxDirectoryLength = 90;

std::string TempRoot(const std::string& requested) {
  if (!requested.empty()) return requested;
  const char* tmpdir = std::getenv("TMPDIR");
  if (tmpdir != nullptr && tmpdir[0] != '\0' && std::strlen(tmpdir) < kMaxDirectoryLength - 20) {
    return tmpdir;
  }
  return "/tmp";
}

// Where a private daemon keeps its heat profile, so that one `moetier run`
// starts where the last left off (XDG base directories); "" without a home.
std::string UserStateDirectory() {
  const char* state = std::getenv("XDG_STATE_HOME");
  if (state != nullptr && state[0] == '/') return std::string(state) + "/moetier";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') return std::string(home) + "/.local/state/moetier";
  return {};
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrivateDaemon>> PrivateDaemon::Start(
    const PrivateDaemonOptions& options) {
  std::string pattern = TempRoot(options.temp_root) + "/moetier-run-XXXXXX";
  if (pattern.size() > kMaxDirectoryLength) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the temporary directory %s is too long for a unix socket path", pattern));
  }
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(
        absl::StrFormat("cannot create a directory like %s: %s", pattern, std::strerror(errno)));
  }
  std::unique_ptr<PrivateDaemon> daemon(new PrivateDaemon());
  daemon->directory_ = pattern;
  daemon->socket_path_ = pattern + "/moetier.sock";
  daemon->log_path_ = pattern + "/moetierd.log";

  std::vector<std::string>& argv = daemon->argv_;
  argv = {options.moetierd_path, "--model_path=" + options.model_path, "--devices=cpu",
          // A private daemon runs without systemd's LimitMEMLOCK=infinity.
          "--allow_unlocked_memory=true", "--api_socket_path=" + daemon->socket_path_,
          // Our own group: the directory is ours alone anyway.
          "--api_socket_group=", "--worker_socket_path=" + pattern + "/worker.sock"};
  if (!options.worker_path.empty())
    argv.push_back("--worker_executable_path=" + options.worker_path);
  // Before the extra arguments, which may override it.
  if (const std::string state = UserStateDirectory(); !state.empty()) {
    argv.push_back("--state_directory=" + state);
  }
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());

  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.output_path = daemon->log_path_;
  spawn.own_process_group = true;
  absl::StatusOr<pid_t> pid = Spawn(spawn);
  if (!pid.ok()) return pid.status();  // the destructor removes the directory
  daemon->pid_ = *pid;
  return daemon;
}

PrivateDaemon::~PrivateDaemon() {
  if (pid_ > 0 && !ended_.has_value()) Stop(/*grace_ms=*/30000);
  if (!directory_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
}

std::optional<std::string> PrivateDaemon::Ended() {
  if (!ended_.has_value() && pid_ > 0) {
    if (std::optional<int> status = TryReap(pid_); status.has_value()) Record(*status);
  }
  return ended_;
}

std::string PrivateDaemon::Stop(int grace_ms) {
  if (Ended().has_value()) return *ended_;
  kill(pid_, SIGTERM);
  std::optional<int> status = WaitFor(pid_, grace_ms);
  if (!status.has_value()) {
    kill(pid_, SIGKILL);
    status = WaitFor(pid_, 10000);
  }
  if (status.has_value()) {
    Record(*status);
  } else {
    ended_ = "did not stop after SIGKILL";
  }
  return *ended_;
}

void PrivateDaemon::Record(int wait_status) {
  ended_ = DescribeWaitStatus(wait_status);
  clean_exit_ = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

std::string PrivateDaemon::LogTail(int lines) const {
  std::ifstream in(log_path_);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  const size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  return absl::StrJoin(all.begin() + static_cast<ptrdiff_t>(from), all.end(), "\n");
}

}  // namespace moetier::client
