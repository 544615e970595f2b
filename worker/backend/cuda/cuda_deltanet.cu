// The Gated DeltaNet mixer's element-wise and row kernels around the delta
// rule (cuda_delta_rule.cu): the causal depthwise conv with its state, the
// L2 norm of the q and k heads, the gates, and the gated RMSNorm. Each
// mirrors the CPU block's arithmetic (blocks/cpu/deltanet_block.cc).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace moetier::cuda {
namespace {

using internal::AsStream;
using internal::LaunchStatus;

constexpr int kThreads = 256;
constexpr int kMaxConvKernel = 64;

__device__ __forceinline__ float Silu(float z) { return z / (1.0f + expf(-z)); }

// One thread per channel, tokens in order.
__global__ void CausalConvSiluKernel(const float* x, const float* w, float* state, int n_tokens,
                                     int channels, int K, float* y) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const float* wc = w + static_cast<int64_t>(c) * K;  // taps, oldest first
  // Input j of the window: state row K-1+j for j < 0, else x row j.
  auto input = [&](int j) {
    return j < 0 ? state[static_cast<int64_t>(K - 1 + j) * channels + c]
                 : x[static_cast<int64_t>(j) * channels + c];
  };
  for (int t = 0; t < n_tokens; ++t) {
    float sum = 0.0f;
    for (int i = 0; i < K; ++i) sum += wc[i] * input(t - (K - 1) + i);
    y[static_cast<int64_t>(t) * channels + c] = Silu(sum);
  }
  // The state becomes the last K - 1 raw inputs, in increasing order so
  // that a row is read before it is overwritten.
  for (int r = 0; r < K - 1; ++r) {
    state[static_cast<int64_t>(r) * channels + c] = input(n_tokens - (K - 1) + r);
  }
}

__device__ __forceinline__ double WarpSumDouble(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(internal::kFullMask, v, o);
  return v;
}

constexpr int kL2Warps = 4;  // rows per block

// One warp per (token, head): x / max(||x||, eps) * scale, the sum in double.
__global__ void L2NormHeadsKernel(float* x, int64_t n_rows, int n_heads, int head_dim,
                                  int64_t token_stride, float eps, float scale) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kL2Warps + threadIdx.x / 32;
  if (row >= n_rows) return;  // the whole warp
  float* xr = x + (row / n_heads) * token_stride + (row % n_heads) * head_dim;
  double sum = 0.0;
  for (int i = lane; i < head_dim; i += 32) sum += static_cast<double>(xr[i]) * xr[i];
  sum = WarpSumDouble(sum);
  const float f = static_cast<float>(1.0 / fmax(sqrt(sum), static_cast<double>(eps))) * scale;
  for (int i = lane; i < head_dim; i += 32) xr[i] *= f;
}

__global__ void DeltaRuleGatesKernel(const float* beta_in, const float* alpha_in, const float* a,
                                     const float* dt_bias, int64_t n, int n_heads,
                                     float* beta_out, float* g_out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int j = static_cast<int>(i % n_heads);
    const float b = beta_in[i];
    const float z = alpha_in[i] + dt_bias[j];
    const float softplus = z > 20.0f ? z : log1pf(expf(z));
    beta_out[i] = 1.0f / (1.0f + expf(-b));
    g_out[i] = a[j] * softplus;
  }
}

// One block per row: RMSNorm(x) * w * silu(z).
__global__ void RmsNormGatedKernel(const float* x, const float* w, const float* z, int n,
                                   float eps, float* y) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  const float* zr = z + row * n;
  float* yr = y + row * n;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  ss = internal::BlockSum(ss, scratch);
  const float scale =
      static_cast<float>(1.0 / sqrt(static_cast<double>(ss) / n + static_cast<double>(eps)));
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * w[i] * Silu(zr[i]);
}

unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

}  // namespace

absl::Status CausalConv1dSilu(const float* x, const float* w, float* state, int n_tokens,
                              int channels, int kernel, float* y, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(x != nullptr && w != nullptr && state != nullptr && y != nullptr,
                       "null pointer");
  MOETIER_CUDA_REQUIRE(x != y, "y must not alias x (the state reads x after y is written)");
  MOETIER_CUDA_REQUIRE(n_tokens >= 0 && channels > 0, "bad shape");
  MOETIER_CUDA_REQUIRE(kernel >= 1 && kernel <= kMaxConvKernel,
                       absl::StrCat("kernel ", kernel, " is outside 1..", kMaxConvKernel));
  if (n_tokens == 0) return absl::OkStatus();
  const unsigned blocks = static_cast<unsigned>((channels + kThreads - 1) / kThreads);
  CausalConvSiluKernel<<<blocks, kThreads, 0, AsStream(stream)>>>(x, w, state, n_tokens, channels,
                                                                 kernel, y);
  return LaunchStatus("CausalConv1dSilu");
}

absl::Status L2NormHeads(float* x, int n_tokens, int n_heads, int head_dim, int64_t token_stride,
                         float eps, float scale, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(x != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n_tokens >= 0 && n_heads > 0 && head_dim > 0, "bad shape");
  MOETIER_CUDA_REQUIRE(token_stride >= static_cast<int64_t>(n_heads) * head_dim,
                       "token_stride is shorter than the heads of a token");
  const int64_t rows = static_cast<int64_t>(n_tokens) * n_heads;
  if (rows == 0) return absl::OkStatus();
  const int64_t blocks = (rows + kL2Warps - 1) / kL2Warps;
  MOETIER_CUDA_REQUIRE(blocks <= INT32_MAX, "too many rows");
  L2NormHeadsKernel<<<static_cast<unsigned>(blocks), kL2Warps * 32, 0, AsStream(stream)>>>(
      x, rows, n_heads, head_dim, token_stride, eps, scale);
  return LaunchStatus("L2NormHeads");
}

absl::Status DeltaRuleGates(const float* beta_in, const float* alpha_in, const float* a,
                            const float* dt_bias, int n_tokens, int n_heads, float* beta_out,
                            float* g_out, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(beta_in != nullptr && alpha_in != nullptr && a != nullptr &&
                           dt_bias != nullptr && beta_out != nullptr && g_out != nullptr,
                       "null pointer");
  MOETIER_CUDA_REQUIRE(n_tokens >= 0 && n_heads > 0, "bad shape");
  const int64_t n = static_cast<int64_t>(n_tokens) * n_heads;
  if (n == 0) return absl::OkStatus();
  DeltaRuleGatesKernel<<<GridFor(n), kThreads, 0, AsStream(stream)>>>(
      beta_in, alpha_in, a, dt_bias, n, n_heads, beta_out, g_out);
  return LaunchStatus("DeltaRuleGates");
}

absl::Status RmsNormGated(const float* x, const float* w, const float* z, int64_t n_rows, int n,
                          float eps, float* y, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(x != nullptr && w != nullptr && z != nullptr && y != nullptr,
                       "null pointer");
  MOETIER_CUDA_REQUIRE(n > 0 && n_rows >= 0 && n_rows <= INT32_MAX, "bad shape");
  if (n_rows == 0) return absl::OkStatus();
  RmsNormGatedKernel<<<static_cast<unsigned>(n_rows), kThreads, 0, AsStream(stream)>>>(x, w, z, n,
                                                                                      eps, y);
  return LaunchStatus("RmsNormGated");
}

}  // namespace moetier::cuda
