// A moetierd of our own for `moetier run`: CPU worker, sockets and log in a
// fresh temporary directory, stopped and cleaned up when done.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moetier::client {

struct PrivateDaemonOptions {
  std::string moetierd_path;
  std::string worker_path;  // empty: moetierd's default (next to it)
  std::string model_path;
  std::vector<std::string> extra_args;
  std::string temp_root;  // where the directory goes; empty: $TMPDIR or /tmp
};

class PrivateDaemon {
 public:
  static absl::StatusOr<std::unique_ptr<PrivateDaemon>> Start(const PrivateDaemonOptions& options);

  // Stops the daemon if it still runs and removes the directory.
  ~PrivateDaemon();
  PrivateDaemon(const PrivateDaemon&) = delete;
  PrivateDaemon& operator=(const PrivateDaemon&) = delete;

  const std::string& directory() const { return directory_; }
  const std::string& socket_path() const { return socket_path_; }
  const std::string& log_path() const { return log_path_; }
  pid_t pid() const { return pid_; }
  const std::vector<std::string>& argv() const { return argv_; }

  // How the daemon ended, if it has (reaps it).
  std::optional<std::string> Ended();

  // SIGTERM, then SIGKILL after `grace_ms`. How it ended.
  std::string Stop(int grace_ms);

  // Whether it has ended with exit status 0.
  bool ExitedCleanly() const { return clean_exit_; }

  // The last `lines` lines of its log.
  std::string LogTail(int lines) const;

 private:
  PrivateDaemon() = default;
  void Record(int wait_status);

  std::string directory_;
  std::string socket_path_;
  std::string log_path_;
  std::vector<std::string> argv_;
  pid_t pid_ = -1;
  std::optional<std::string> ended_;
  bool clean_exit_ = false;
};

}  // namespace moetier::client
