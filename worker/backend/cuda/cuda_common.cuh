// Shared pieces of the CUDA kernel files: argument checks, launch status,
// reductions. Internal to backend/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moetier::cuda::internal {

inline cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Status of the launch just made (configuration errors; not kernel faults,
// which surface at the next synchronization).
inline absl::Status LaunchStatus(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("CUDA kernel ", kernel, " failed to launch: ", cudaGetErrorString(err)));
}

inline bool Aligned(const void* p, uintptr_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

#define MOETIER_CUDA_REQUIRE(cond, what)                                        \
  do {                                                                          \
    if (!(cond)) return absl::InvalidArgumentError(absl::StrCat(__func__, ": ", what)); \
  } while (0)

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `scratch` holds 32 floats; the block must call
// this uniformly.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int n_warps = blockDim.x / 32;
  float total = lane < n_warps ? scratch[lane] : 0.0f;
  return WarpSum(total);
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int n_warps = blockDim.x / 32;
  float best = lane < n_warps ? scratch[lane] : -INFINITY;
  return WarpMax(best);
}

// (value, index) pair that prefers the larger value, then the lower index;
// index -1 is empty.
struct ArgMax {
  float value;
  int index;
};

__device__ __forceinline__ ArgMax BetterOf(ArgMax a, ArgMax b) {
  if (b.index < 0) return a;
  if (a.index < 0) return b;
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

__device__ __forceinline__ ArgMax WarpArgMax(ArgMax v) {
  for (int o = 16; o > 0; o >>= 1) {
    ArgMax other;
    other.value = __shfl_xor_sync(kFullMask, v.value, o);
    other.index = __shfl_xor_sync(kFullMask, v.index, o);
    v = BetterOf(v, other);
  }
  return v;
}

// `scratch` holds 32 ArgMax; every thread gets the result.
__device__ __forceinline__ ArgMax BlockArgMax(ArgMax v, ArgMax* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = WarpArgMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int n_warps = blockDim.x / 32;
  ArgMax best = lane < n_warps ? scratch[lane] : ArgMax{-INFINITY, -1};
  return WarpArgMax(best);
}

}  // namespace moetier::cuda::internal
