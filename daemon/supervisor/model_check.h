// Asks the worker executable whether it can serve the model
// (`moetier-worker --check-model FILE`, worker_channel.h) before the daemon
// spends minutes filling its store: a model the workers would refuse is a
// configuration error, not a reason to restart them forever.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace moetier {

inline constexpr int64_t kModelCheckTimeoutMs = 120'000;

// Ok when the worker accepts the model. FailedPrecondition with the
// worker's own reason when it refuses it; Unavailable when the check could
// not run (the executable cannot be started, crashed or timed out).
// `device` ("cpu", "cuda:N"; empty: none) also asks whether that device's
// engine computes every tensor.
absl::Status CheckModelWithWorker(const std::string& worker_executable_path,
                                  const std::string& model_path, const std::string& device = "",
                                  int64_t timeout_ms = kModelCheckTimeoutMs);

}  // namespace moetier
