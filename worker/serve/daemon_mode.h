// moetier-worker --daemon: the worker as moetierd runs it (daemon/README.md,
// "What a worker's daemon mode must do"; serve/README.md).
//
//   1. join the daemon on --control-socket (proto/store/worker_channel.h) and
//      attach to its expert store, checking it holds the --model file;
//   2. heartbeat the store from a thread from then on, loading included;
//   3. load the hyperparameters and dense weights from the model file and
//      build the engine with the experts read from the store;
//   4. serve the control channel (serve/control_server.h) until the daemon
//      closes it.
#pragma once

#include <cstdint>
#include <cstdio>

#include "absl/status/status.h"
#include "standalone/options.h"

namespace moetier {

struct DaemonModeTuning {
  int64_t join_timeout_ms = 30000;  // connect + welcome
  int64_t heartbeat_interval_ms = 500;
  int64_t miss_timeout_ms = 60000;  // one expert read by the daemon
};

// Runs daemon mode as `options` describes (options.daemon is set and the
// command is complete). Returns OK when the daemon closed the control
// channel; an error (one line, naming what failed) otherwise. Progress
// notes go to `err`.
absl::Status RunDaemonMode(const WorkerOptions& options, std::FILE* err,
                           const DaemonModeTuning& tuning = {});

}  // namespace moetier
