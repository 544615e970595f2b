#include "backend/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moetier {

int CudaDeviceCount() {
  int count = 0;  // cudaGetDeviceCount leaves it unwritten on failure
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later probes start clean
    return 0;
  }
  return count;
}

absl::StatusOr<std::vector<CudaDeviceInfo>> ListCudaDevices() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    int runtime_version = 0;
    cudaRuntimeGetVersion(&runtime_version);
    return absl::UnavailableError(absl::StrCat(
        "no usable CUDA device: ", cudaGetErrorString(err), " (CUDA runtime ",
        runtime_version / 1000, ".", (runtime_version % 1000) / 10,
        "; a GPU needs an NVIDIA driver that supports this runtime)"));
  }
  std::vector<CudaDeviceInfo> devices;
  devices.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaGetDeviceProperties failed for cuda:", i));
    }
    CudaDeviceInfo info;
    info.ordinal = i;
    info.name = prop.name;
    info.compute_capability_major = prop.major;
    info.compute_capability_minor = prop.minor;
    info.total_memory_bytes = prop.totalGlobalMem;
    info.multiprocessor_count = prop.multiProcessorCount;
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      info.free_memory_bytes = free_bytes;
    }
    devices.push_back(std::move(info));
  }
  return devices;
}

}  // namespace moetier
