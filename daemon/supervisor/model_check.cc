#include "supervisor/model_check.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "store/worker_channel.h"
#include "util/subprocess.h"

namespace moetier {
namespace {

// The worker's reason is one line; anything past this is noise.
constexpr size_t kReasonBytesMax = 64 * 1024;

}  // namespace

absl::Status CheckModelWithWorker(const std::string& worker_executable_path,
                                  const std::string& model_path, const std::string& device,
                                  int64_t timeout_ms) {
  std::vector<std::string> argv = {
      worker_executable_path, absl::StrFormat("%s=%s", store::kWorkerFlagCheckModel, model_path)};
  if (!device.empty()) argv.push_back(absl::StrFormat("%s=%s", store::kWorkerFlagDevice, device));
  absl::StatusOr<ProcessOutcome> outcome = RunAndCapture(argv, timeout_ms, kReasonBytesMax);
  if (!outcome.ok()) return absl::UnavailableError(outcome.status().message());
  absl::string_view reason = absl::StripAsciiWhitespace(outcome->output);
  absl::ConsumePrefix(&reason, "moetier-worker: error: ");
  if (outcome->timed_out) {
    return absl::UnavailableError(
        absl::StrFormat("%s did not finish the model check within %d ms",
                        worker_executable_path, timeout_ms));
  }
  if (!outcome->exited) {
    return absl::UnavailableError(absl::StrFormat("%s died of signal %d (%s) checking the model",
                                                  worker_executable_path, outcome->term_signal,
                                                  strsignal(outcome->term_signal)));
  }
  if (outcome->exit_status == 0) return absl::OkStatus();
  if (outcome->exit_status == store::kWorkerCheckModelRefused) {
    return absl::FailedPreconditionError(reason);
  }
  return absl::UnavailableError(absl::StrFormat("%s exited with status %d checking the model: %s",
                                                worker_executable_path, outcome->exit_status,
                                                reason));
}

}  // namespace moetier
