// Picks the read backend at start: io_uring when the kernel allows it (probed
// with io_uring_queue_init), else pread with the reason logged.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "io/io_backend.h"

namespace moetier {

enum class IoBackendKind { kAuto, kIoUring, kPread };

// "auto", "io_uring", "pread".
absl::StatusOr<IoBackendKind> ParseIoBackendKind(std::string_view name);

struct IoBackendOptions {
  IoBackendKind kind = IoBackendKind::kAuto;
  uint32_t queue_depth = 32;  // reads in flight
  bool direct_io = true;      // O_DIRECT where the file system allows it
};

// kIoUring fails when io_uring is unavailable; kAuto falls back to pread.
absl::StatusOr<std::unique_ptr<IoBackend>> CreateIoBackend(const IoBackendOptions& options);

}  // namespace moetier
