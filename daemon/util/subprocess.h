// Runs a short-lived helper program to completion and keeps what it printed:
// for checks the daemon delegates to a program that links code it must not
// (the worker's model loader), before anything long-lived starts.
#pragma once

#include <spawn.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moetier {

struct ProcessOutcome {
  bool exited = false;  // ended by exit(): exit_status holds its status
  int exit_status = -1;
  int term_signal = 0;  // the signal that ended it, when !exited
  bool timed_out = false;  // killed (SIGKILL) after the timeout
  std::string output;   // stdout and stderr as written, cut at the bound
};

// Spawn attributes for a child of the daemon: no blocked signals and every
// disposition at its default (the daemon blocks its stop signals for
// sigwait, which a child must not inherit), and with `own_process_group`
// a process group of its own, so a terminal's Ctrl-C reaches only the
// daemon. The caller destroys them.
void InitChildSpawnAttributes(posix_spawnattr_t* attr, bool own_process_group);

// Spawns argv[0] (a path, not searched in PATH) with argv, the environment
// and no blocked or ignored signals, and waits for it, reading its stdout
// and stderr through one pipe. A child still running after `timeout_ms` is
// killed. Errors only when it cannot be started.
absl::StatusOr<ProcessOutcome> RunAndCapture(const std::vector<std::string>& argv,
                                             int64_t timeout_ms, size_t output_bytes_max);

}  // namespace moetier
