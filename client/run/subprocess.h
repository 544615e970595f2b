// Starting and stopping the helper processes of `moetier run`.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moetier::client {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program's path
  // stdout and stderr go to this file (created or truncated); empty: stdout
  // goes to our stderr, stderr stays ours (keeps our stdout for results).
  std::string output_path;
  // Its own process group, so a terminal's Ctrl-C reaches only us and we
  // stop it in order.
  bool own_process_group = false;
};

// fork + exec. The child gets SIGTERM when this thread ends, so nothing
// outlives a moetier that is killed.
absl::StatusOr<pid_t> Spawn(const SpawnOptions& options);

// "exited with status 1", "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

// Reaps `pid` if it has ended; its wait status, or nothing while it runs.
std::optional<int> TryReap(pid_t pid);

// Waits up to `timeout_ms` for `pid` to end; its wait status, or nothing.
std::optional<int> WaitFor(pid_t pid, int timeout_ms);

}  // namespace moetier::client
