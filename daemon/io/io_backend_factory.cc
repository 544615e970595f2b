#include "io/io_backend_factory.h"

#include "absl/strings/str_format.h"
#include "io/pread_backend.h"
#include "io/uring_backend.h"
#include "log/daemon_log.h"

namespace moetier {

absl::StatusOr<IoBackendKind> ParseIoBackendKind(std::string_view name) {
  if (name == "auto") return IoBackendKind::kAuto;
  if (name == "io_uring") return IoBackendKind::kIoUring;
  if (name == "pread") return IoBackendKind::kPread;
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown io backend '%s'; use auto, io_uring or pread", name));
}

absl::StatusOr<std::unique_ptr<IoBackend>> CreateIoBackend(const IoBackendOptions& options) {
  if (options.queue_depth == 0) {
    return absl::InvalidArgumentError("io queue depth must be at least 1");
  }
  if (options.kind != IoBackendKind::kPread) {
    absl::StatusOr<std::unique_ptr<UringBackend>> uring =
        UringBackend::Create(options.queue_depth, options.direct_io);
    if (uring.ok()) {
      LogInfo("reading the model with io_uring (queue depth %d, %s)", options.queue_depth,
              options.direct_io ? "O_DIRECT" : "buffered");
      return std::unique_ptr<IoBackend>(std::move(*uring));
    }
    if (options.kind == IoBackendKind::kIoUring) {
      return absl::Status(uring.status().code(),
                          absl::StrFormat("io_backend is io_uring, but %s; set io_backend to "
                                          "auto or pread",
                                          uring.status().message()));
    }
    LogWarning("io_uring is unavailable (%s); reading the model with pread instead",
               uring.status().message());
  }
  LogInfo("reading the model with pread (queue depth %d, %s)", options.queue_depth,
          options.direct_io ? "O_DIRECT" : "buffered");
  return std::unique_ptr<IoBackend>(
      std::make_unique<PreadBackend>(options.queue_depth, nullptr, options.direct_io));
}

}  // namespace moetier
