#include "backend/cuda/cuda_device.h"

#include <gtest/gtest.h>

namespace moetier {
namespace {

TEST(CudaDeviceTest, WithoutGpuReportsWhy) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present; this case is for GPU-less machines";
  const auto devices = ListCudaDevices();
  if (devices.ok()) {
    EXPECT_TRUE(devices->empty());
  } else {
    EXPECT_EQ(devices.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(devices.status().message().find("CUDA"), absl::string_view::npos);
  }
}

TEST(CudaDeviceTest, ListsEveryVisibleDevice) {
  const int count = CudaDeviceCount();
  if (count == 0) GTEST_SKIP() << "no CUDA device or driver on this machine";
  const auto devices = ListCudaDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(static_cast<int>(devices->size()), count);
  for (const CudaDeviceInfo& info : *devices) {
    EXPECT_FALSE(info.name.empty());
    EXPECT_GE(info.compute_capability_major, 7);
    EXPECT_GT(info.total_memory_bytes, 0u);
    EXPECT_GT(info.free_memory_bytes, 0u);
    EXPECT_LE(info.free_memory_bytes, info.total_memory_bytes);
    EXPECT_GT(info.multiprocessor_count, 0);
  }
}

}  // namespace
}  // namespace moetier
