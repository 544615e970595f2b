// A device allocation for the CUDA tests, filled from and read back into
// host vectors; failed copies fail the test.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "gtest/gtest.h"

namespace moetier::cuda_test {

// Owns one device allocation; copies abort the test on failure.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes) != cudaSuccess) ptr_ = nullptr;
  }
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    Upload(host.data(), bytes_);
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void Upload(const void* src, size_t bytes) {
    ASSERT_NE(ptr_, nullptr) << "cudaMalloc of " << bytes_ << " bytes failed";
    ASSERT_EQ(cudaMemcpy(ptr_, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  template <typename T>
  std::vector<T> Download(size_t n) const {
    std::vector<T> out(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
    EXPECT_EQ(cudaMemcpy(out.data(), ptr_, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

}  // namespace moetier::cuda_test
