// CUDA device discovery. Safe to call on machines without a GPU or driver:
// the binaries link the CUDA runtime statically and never the driver library.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moetier {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  uint64_t total_memory_bytes = 0;
  uint64_t free_memory_bytes = 0;
  int multiprocessor_count = 0;
};

// Number of usable CUDA devices; 0 when there is no driver or no device.
int CudaDeviceCount();

// Every visible device, or an error that says why none can be used (no
// driver, driver too old for this runtime, ...).
absl::StatusOr<std::vector<CudaDeviceInfo>> ListCudaDevices();

}  // namespace moetier
