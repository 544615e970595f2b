// moetier-worker: one compute device's engine. moetierd starts it in daemon
// mode (serve/daemon_mode.h), and once with --check-model before it fills its
// store; --standalone runs it alone on a GGUF file (see --help).
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "serve/daemon_mode.h"
#include "setup/worker_engine.h"
#include "standalone/options.h"
#include "standalone/standalone.h"
#include "store/worker_channel.h"

namespace {

// Statuses are printed on one line so scripts can show them as they are.
void PrintError(absl::string_view message) {
  std::string line(message);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fprintf(stderr, "moetier-worker: error: %s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<moetier::WorkerOptions> options = moetier::ParseWorkerArgs(argc, argv);
  if (!options.ok()) {
    PrintError(options.status().message());
    return 2;
  }
  if (options->help) {
    const std::string usage = moetier::WorkerUsage();
    std::fwrite(usage.data(), 1, usage.size(), stdout);
    return 0;
  }
  if (!options->check_model_path.empty()) {
    const absl::Status status =
        moetier::CheckModelForDevice(options->check_model_path, options->device);
    if (!status.ok()) {
      PrintError(status.message());
      return moetier::store::kWorkerCheckModelRefused;
    }
    return 0;
  }
  if (options->daemon) {
    const absl::Status status = moetier::RunDaemonMode(*options, stderr);
    if (!status.ok()) {
      PrintError(status.message());
      return 1;
    }
    return 0;
  }
  if (!options->standalone) {
    PrintError(
        "daemon mode (--daemon) is for moetierd, which starts and drives the workers itself; "
        "use --standalone to run this worker alone (see --help)");
    return 2;
  }
  const absl::Status status = moetier::RunStandalone(*options, stdout, stderr);
  if (!status.ok()) {
    PrintError(status.message());
    return 1;
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}
