// Row operations, routing, sampling and the MoE combine on fp32 activations.
// One block per row (or per token); reductions go through shared memory.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace moetier::cuda {
namespace {

using internal::ArgMax;
using internal::AsStream;
using internal::LaunchStatus;

constexpr int kRowThreads = 256;

// One row of n values RMS-normed with weights w into yr (which may be xr);
// every thread of the block takes part. RmsNorm and QkNormRope share it,
// so their rows round alike.
__device__ void RmsNormRow(const float* xr, const float* w, int n, float eps, float* yr,
                           float* scratch) {
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  ss = internal::BlockSum(ss, scratch);
  const float scale =
      static_cast<float>(1.0 / sqrt(static_cast<double>(ss) / n + static_cast<double>(eps)));
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
}

__global__ void RmsNormKernel(const float* x, const float* w, int n, float eps, float* y) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  RmsNormRow(x + row * n, w, n, eps, y + row * n, scratch);
}

// Rotates one head in place; thread i rotates pair i.
// Pair i is (i, i + n_rot/2) (NEOX) or, with `adjacent`, (2i, 2i + 1) (NORM).
// Pairs with pair_uses_position[i] == 0 rotate by position 0: unchanged but
// for the scaling's magnitude.
__device__ void RopeHead(float* xh, double pos, int n_rot, float freq_base,
                         const RopeScaling& scaling, const float* freq_factors, bool adjacent,
                         const uint8_t* pair_uses_position) {
  const int half = n_rot / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const bool moves = pair_uses_position == nullptr || pair_uses_position[i] != 0;
    const float factor = freq_factors != nullptr ? freq_factors[i] : 1.0f;
    const double theta =
        moves ? pos * RopePairFrequency(i, n_rot, freq_base, scaling, factor) : 0.0;
    const float c = static_cast<float>(cos(theta)) * scaling.magnitude;
    const float s = static_cast<float>(sin(theta)) * scaling.magnitude;
    const int a = adjacent ? 2 * i : i;
    const int b = adjacent ? 2 * i + 1 : i + half;
    const float x0 = xh[a];
    const float x1 = xh[b];
    xh[a] = x0 * c - x1 * s;
    xh[b] = x0 * s + x1 * c;
  }
}

// One block per (token, head).
__global__ void RopeKernel(float* x, const int32_t* positions, int n_heads, int head_dim, int n_rot,
                           float freq_base, RopeScaling scaling, const float* freq_factors,
                           bool adjacent, const uint8_t* pair_uses_position) {
  const int t = blockIdx.y;
  const int h = blockIdx.x;
  RopeHead(x + (static_cast<int64_t>(t) * n_heads + h) * head_dim, positions[t], n_rot, freq_base,
           scaling, freq_factors, adjacent, pair_uses_position);
}

// One block per (token, head) of q, then of k: the head's RMS norm (with a
// weight) and its rotation, in one launch instead of four.
__global__ void QkNormRopeKernel(float* q, float* k, const float* q_norm, const float* k_norm,
                                 const int32_t* positions, int n_head, int n_head_kv, int head_dim,
                                 int n_rot, float freq_base, RopeScaling scaling,
                                 const float* freq_factors, bool adjacent,
                                 const uint8_t* pair_uses_position, float eps) {
  __shared__ float scratch[32];
  const int t = blockIdx.y;
  const bool is_q = static_cast<int>(blockIdx.x) < n_head;
  const int h = is_q ? blockIdx.x : blockIdx.x - n_head;
  const int n_heads = is_q ? n_head : n_head_kv;
  float* xh = (is_q ? q : k) + (static_cast<int64_t>(t) * n_heads + h) * head_dim;
  const float* norm = is_q ? q_norm : k_norm;
  if (norm != nullptr) {
    RmsNormRow(xh, norm, head_dim, eps, xh, scratch);
    __syncthreads();  // the rotation reads values other threads normed
  }
  RopeHead(xh, positions[t], n_rot, freq_base, scaling, freq_factors, adjacent, pair_uses_position);
}

__global__ void SiluMulKernel(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

constexpr int kMaxExperts = 1024;
constexpr int kMaxTopK = 64;

// One block per token: the probabilities (softmax or per-expert sigmoid)
// into probs, kept in shared memory too with their selection values (plus
// the bias), then k rounds of block argmax over the experts not yet taken.
__global__ void RouterTopKKernel(const float* logits, int n_expert, int k, RouterParams router,
                                 const float* selection_bias, float* probs, int32_t* ids,
                                 float* weights) {
  __shared__ float p[kMaxExperts];
  __shared__ float selection[kMaxExperts];
  __shared__ bool taken[kMaxExperts];
  __shared__ float scratch[32];
  __shared__ ArgMax arg_scratch[32];
  const int64_t token = blockIdx.x;
  const float* lg = logits + token * n_expert;
  if (router.gating == RouterGating::kSigmoid) {
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
      p[e] = 1.0f / (1.0f + expf(-lg[e]));  // ggml_sigmoid's formula
    }
  } else {
    float max = -INFINITY;
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) max = fmaxf(max, lg[e]);
    max = internal::BlockMax(max, scratch);
    float sum = 0.0f;
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
      p[e] = expf(lg[e] - max);
      sum += p[e];
    }
    sum = internal::BlockSum(sum, scratch);
    const float inv = 1.0f / sum;
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) p[e] *= inv;
  }
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
    probs[token * n_expert + e] = p[e];
    selection[e] = selection_bias != nullptr ? p[e] + selection_bias[e] : p[e];
    taken[e] = false;
  }
  __syncthreads();
  float chosen_sum = 0.0f;  // meaningful in thread 0
  for (int j = 0; j < k; ++j) {
    ArgMax best{-INFINITY, -1};
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
      if (!taken[e]) best = internal::BetterOf(best, ArgMax{selection[e], e});
    }
    best = internal::BlockArgMax(best, arg_scratch);
    if (threadIdx.x == 0) {
      ids[token * k + j] = best.index;
      // -1 only when the values are NaN.
      const float w = best.index >= 0 ? p[best.index] : best.value;
      weights[token * k + j] = w;
      chosen_sum += w;
      if (best.index >= 0) taken[best.index] = true;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (router.renormalize) {
      const float denom = fmaxf(chosen_sum, kMinRouterWeightSum);
      for (int j = 0; j < k; ++j) weights[token * k + j] /= denom;
    }
    if (router.weights_scale != 1.0f) {
      for (int j = 0; j < k; ++j) weights[token * k + j] *= router.weights_scale;
    }
  }
}

__global__ void ArgmaxKernel(const float* logits, int n_vocab, int32_t* ids) {
  __shared__ ArgMax scratch[32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * n_vocab;
  ArgMax best{-INFINITY, -1};
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) {
    best = internal::BetterOf(best, ArgMax{row[i], i});
  }
  best = internal::BlockArgMax(best, scratch);
  if (threadIdx.x == 0) ids[blockIdx.x] = best.index < 0 ? 0 : best.index;
}

// One block. Thread i owns the contiguous chunk [i * chunk, (i + 1) * chunk)
// of the vocabulary; thread 0 walks the chunk sums, then the chosen chunk.
__global__ void SampleTemperatureKernel(const float* logits, int n_vocab, float inv_temp,
                                        float uniform, int32_t* id) {
  __shared__ float scratch[32];
  __shared__ float chunk_sum[kRowThreads];
  float max = -INFINITY;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) max = fmaxf(max, logits[i] * inv_temp);
  max = internal::BlockMax(max, scratch);
  const int chunk = (n_vocab + blockDim.x - 1) / blockDim.x;
  const int begin = threadIdx.x * chunk;
  const int end = min(n_vocab, begin + chunk);
  float sum = 0.0f;
  for (int i = begin; i < end; ++i) sum += expf(logits[i] * inv_temp - max);
  chunk_sum[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x != 0) return;
  float total = 0.0f;
  for (int c = 0; c < static_cast<int>(blockDim.x); ++c) total += chunk_sum[c];
  const float target = uniform * total;
  float cumulative = 0.0f;
  int c = 0;
  for (; c < static_cast<int>(blockDim.x) - 1; ++c) {
    if (cumulative + chunk_sum[c] > target) break;
    cumulative += chunk_sum[c];
  }
  // Rounding may leave target beyond the last positive weight: then the last
  // token with nonzero probability is taken.
  int pick = -1;
  for (int i = c * chunk; i < min(n_vocab, (c + 1) * chunk); ++i) {
    const float p = expf(logits[i] * inv_temp - max);
    if (p > 0.0f) pick = i;
    cumulative += p;
    if (cumulative > target && p > 0.0f) break;
  }
  if (pick < 0) {
    for (int i = n_vocab - 1; i >= 0 && pick < 0; --i) {
      if (expf(logits[i] * inv_temp - max) > 0.0f) pick = i;
    }
  }
  *id = pick < 0 ? 0 : pick;
}

__global__ void AddInPlaceKernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] += y[i];
  }
}

__global__ void AddRowBiasKernel(float* rows, const float* bias, int64_t total, int n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    rows[i] += bias[i % n];
  }
}

// One block per destination row.
__global__ void GatherRowsKernel(const float* src, const int32_t* rows, int n, float* dst) {
  const int64_t r = blockIdx.x;
  const float* s = src + static_cast<int64_t>(rows[r]) * n;
  float* d = dst + r * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

// first row r = src row r's first n values, second row r = its last n.
__global__ void SplitRowHalvesKernel(const float* src, int64_t n_rows, int n, float* first,
                                     float* second) {
  const int64_t total = n_rows * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n;
    const int64_t c = i % n;
    first[i] = src[2 * r * n + c];
    second[i] = src[2 * r * n + n + c];
  }
}

__global__ void MulSigmoidKernel(float* x, const float* gate, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] *= 1.0f / (1.0f + expf(-gate[i]));
  }
}

// One block per row.
__global__ void AddSigmoidScaledRowsKernel(float* x, const float* y, const float* logits, int n) {
  const int64_t row = blockIdx.x;
  const float scale = 1.0f / (1.0f + expf(-logits[row]));
  for (int i = threadIdx.x; i < n; i += blockDim.x) x[row * n + i] += scale * y[row * n + i];
}

// One block per token; each thread sums its elements over j = 0..k-1 in
// order, then adds the sum to the residual (as the CPU engine does).
__global__ void MoeCombineKernel(const float* expert_out, const int32_t* rows,
                                 const float* weights, int k, int n, float* x) {
  const int64_t t = blockIdx.x;
  const int32_t* tr = rows + t * k;
  const float* tw = weights + t * k;
  float* xt = x + t * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) acc += tw[j] * expert_out[static_cast<int64_t>(tr[j]) * n + i];
    xt[i] += acc;
  }
}

}  // namespace

absl::Status RmsNorm(const float* x, const float* w, int64_t n_rows, int n, float eps, float* y,
                     CudaStream stream) {
  MOETIER_CUDA_REQUIRE(x != nullptr && w != nullptr && y != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n > 0 && n_rows >= 0 && n_rows <= INT32_MAX, "bad shape");
  if (n_rows == 0) return absl::OkStatus();
  RmsNormKernel<<<static_cast<unsigned>(n_rows), kRowThreads, 0, AsStream(stream)>>>(x, w, n, eps,
                                                                                    y);
  return LaunchStatus("RmsNorm");
}

namespace {

absl::Status Rope(float* x, const int32_t* positions, int n_tokens, int n_heads, int head_dim,
                  int n_rot, float freq_base, const RopeScaling& scaling, const float* freq_factors,
                  bool adjacent, const uint8_t* pair_uses_position, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(x != nullptr && positions != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n_tokens >= 0 && n_tokens <= 65535 && n_heads > 0 && head_dim > 0,
                       "bad shape");
  MOETIER_CUDA_REQUIRE(n_rot > 0 && n_rot % 2 == 0 && n_rot <= head_dim,
                       absl::StrCat("n_rot ", n_rot, " must be even and at most head_dim ",
                                    head_dim));
  if (n_tokens == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_tokens));
  RopeKernel<<<grid, 128, 0, AsStream(stream)>>>(x, positions, n_heads, head_dim, n_rot, freq_base,
                                                 scaling, freq_factors, adjacent,
                                                 pair_uses_position);
  return LaunchStatus(adjacent ? "RopeAdjacentPairs" : "RopeNeox");
}

}  // namespace

absl::Status QkNormRope(float* q, float* k, const float* q_norm, const float* k_norm,
                        const int32_t* positions, int n_tokens, int n_head, int n_head_kv,
                        int head_dim, int n_rot, float freq_base, const RopeScaling& scaling,
                        const float* freq_factors, bool adjacent, const uint8_t* pair_uses_position,
                        float eps, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(q != nullptr && k != nullptr && positions != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE((q_norm == nullptr) == (k_norm == nullptr),
                       "q and k are normed together or not at all");
  MOETIER_CUDA_REQUIRE(n_tokens >= 0 && n_tokens <= 65535 && n_head > 0 && n_head_kv > 0 &&
                           head_dim > 0,
                       "bad shape");
  MOETIER_CUDA_REQUIRE(n_rot > 0 && n_rot % 2 == 0 && n_rot <= head_dim,
                       absl::StrCat("n_rot ", n_rot, " must be even and at most head_dim ",
                                    head_dim));
  if (n_tokens == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(n_head + n_head_kv), static_cast<unsigned>(n_tokens));
  // RmsNorm's block size, so that the norm's sum reduces in its order.
  QkNormRopeKernel<<<grid, kRowThreads, 0, AsStream(stream)>>>(
      q, k, q_norm, k_norm, positions, n_head, n_head_kv, head_dim, n_rot, freq_base, scaling,
      freq_factors, adjacent, pair_uses_position, eps);
  return LaunchStatus("QkNormRope");
}

absl::Status RopeNeox(float* x, const int32_t* positions, int n_tokens, int n_heads, int head_dim,
                      int n_rot, float freq_base, const RopeScaling& scaling,
                      const float* freq_factors, const uint8_t* pair_uses_position,
                      CudaStream stream) {
  return Rope(x, positions, n_tokens, n_heads, head_dim, n_rot, freq_base, scaling, freq_factors,
              false, pair_uses_position, stream);
}

absl::Status RopeAdjacentPairs(float* x, const int32_t* positions, int n_tokens, int n_heads,
                               int head_dim, int n_rot, float freq_base, const RopeScaling& scaling,
                               const float* freq_factors, const uint8_t* pair_uses_position,
                               CudaStream stream) {
  return Rope(x, positions, n_tokens, n_heads, head_dim, n_rot, freq_base, scaling, freq_factors,
              true, pair_uses_position, stream);
}

absl::Status SiluMul(const float* gate, const float* up, int64_t n, float* out,
                     CudaStream stream) {
  MOETIER_CUDA_REQUIRE(gate != nullptr && up != nullptr && out != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n >= 0, "negative size");
  if (n == 0) return absl::OkStatus();
  const int64_t blocks = (n + kRowThreads - 1) / kRowThreads;
  SiluMulKernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kRowThreads, 0,
                  AsStream(stream)>>>(gate, up, n, out);
  return LaunchStatus("SiluMul");
}

absl::Status RouterTopK(const float* logits, int n_tokens, int n_expert, int k,
                        const RouterParams& router, const float* selection_bias, float* probs,
                        int32_t* ids, float* weights, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(logits != nullptr && probs != nullptr && ids != nullptr &&
                           weights != nullptr,
                       "null pointer");
  MOETIER_CUDA_REQUIRE(n_expert >= 1 && n_expert <= kMaxExperts,
                       absl::StrCat("n_expert ", n_expert, " is outside 1..", kMaxExperts));
  MOETIER_CUDA_REQUIRE(k >= 1 && k <= n_expert && k <= kMaxTopK,
                       absl::StrCat("k ", k, " is outside 1..min(n_expert, ", kMaxTopK, ")"));
  MOETIER_CUDA_REQUIRE(n_tokens >= 0, "negative n_tokens");
  if (n_tokens == 0) return absl::OkStatus();
  RouterTopKKernel<<<static_cast<unsigned>(n_tokens), kRowThreads, 0, AsStream(stream)>>>(
      logits, n_expert, k, router, selection_bias, probs, ids, weights);
  return LaunchStatus("RouterTopK");
}

absl::Status AddInPlace(float* x, const float* y, int64_t n, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(x != nullptr && y != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n >= 0, "negative size");
  if (n == 0) return absl::OkStatus();
  const int64_t blocks = (n + kRowThreads - 1) / kRowThreads;
  AddInPlaceKernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kRowThreads, 0,
                     AsStream(stream)>>>(x, y, n);
  return LaunchStatus("AddInPlace");
}

absl::Status AddRowBias(float* rows, const float* bias, int64_t n_rows, int n, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(rows != nullptr && bias != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n_rows >= 0 && n > 0, "bad size");
  const int64_t total = n_rows * n;
  if (total == 0) return absl::OkStatus();
  const int64_t blocks = (total + kRowThreads - 1) / kRowThreads;
  AddRowBiasKernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kRowThreads, 0,
                     AsStream(stream)>>>(rows, bias, total, n);
  return LaunchStatus("AddRowBias");
}

absl::Status GatherRows(const float* src, const int32_t* rows, int64_t n_rows, int n, float* dst,
                        CudaStream stream) {
  MOETIER_CUDA_REQUIRE(src != nullptr && rows != nullptr && dst != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n > 0 && n_rows >= 0 && n_rows <= INT32_MAX, "bad shape");
  if (n_rows == 0) return absl::OkStatus();
  GatherRowsKernel<<<static_cast<unsigned>(n_rows), kRowThreads, 0, AsStream(stream)>>>(
      src, rows, n, dst);
  return LaunchStatus("GatherRows");
}


namespace {

unsigned GridStrideBlocks(int64_t n) {
  const int64_t blocks = (n + kRowThreads - 1) / kRowThreads;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

}  // namespace

absl::Status SplitRowHalves(const float* src, int64_t n_rows, int n, float* first, float* second,
                            CudaStream stream) {
  MOETIER_CUDA_REQUIRE(src != nullptr && first != nullptr && second != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n > 0 && n_rows >= 0, "bad shape");
  if (n_rows == 0) return absl::OkStatus();
  SplitRowHalvesKernel<<<GridStrideBlocks(n_rows * n), kRowThreads, 0, AsStream(stream)>>>(
      src, n_rows, n, first, second);
  return LaunchStatus("SplitRowHalves");
}

absl::Status MulSigmoid(float* x, const float* gate, int64_t n, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(x != nullptr && gate != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n >= 0, "negative size");
  if (n == 0) return absl::OkStatus();
  MulSigmoidKernel<<<GridStrideBlocks(n), kRowThreads, 0, AsStream(stream)>>>(x, gate, n);
  return LaunchStatus("MulSigmoid");
}

absl::Status AddSigmoidScaledRows(float* x, const float* y, const float* logits, int64_t n_rows,
                                  int n, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(x != nullptr && y != nullptr && logits != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n > 0 && n_rows >= 0 && n_rows <= INT32_MAX, "bad shape");
  if (n_rows == 0) return absl::OkStatus();
  AddSigmoidScaledRowsKernel<<<static_cast<unsigned>(n_rows), kRowThreads, 0, AsStream(stream)>>>(
      x, y, logits, n);
  return LaunchStatus("AddSigmoidScaledRows");
}

absl::Status MoeCombine(const float* expert_out, const int32_t* rows, const float* weights,
                        int n_tokens, int k, int n, float* x, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(expert_out != nullptr && rows != nullptr && weights != nullptr &&
                           x != nullptr,
                       "null pointer");
  MOETIER_CUDA_REQUIRE(n_tokens >= 0 && k >= 1 && n > 0, "bad shape");
  if (n_tokens == 0) return absl::OkStatus();
  MoeCombineKernel<<<static_cast<unsigned>(n_tokens), kRowThreads, 0, AsStream(stream)>>>(
      expert_out, rows, weights, k, n, x);
  return LaunchStatus("MoeCombine");
}

absl::Status ArgmaxRows(const float* logits, int n_rows, int n_vocab, int32_t* ids,
                        CudaStream stream) {
  MOETIER_CUDA_REQUIRE(logits != nullptr && ids != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n_rows >= 0 && n_vocab > 0, "bad shape");
  if (n_rows == 0) return absl::OkStatus();
  ArgmaxKernel<<<static_cast<unsigned>(n_rows), kRowThreads, 0, AsStream(stream)>>>(logits,
                                                                                   n_vocab, ids);
  return LaunchStatus("Argmax");
}

absl::Status SampleTemperature(const float* logits, int n_vocab, float temperature, float uniform,
                               int32_t* id, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(logits != nullptr && id != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n_vocab > 0, "empty vocabulary");
  if (!(temperature > 0.0f)) return ArgmaxRows(logits, 1, n_vocab, id, stream);
  MOETIER_CUDA_REQUIRE(uniform >= 0.0f && uniform < 1.0f,
                       absl::StrCat("uniform ", uniform, " is outside [0, 1)"));
  SampleTemperatureKernel<<<1, kRowThreads, 0, AsStream(stream)>>>(logits, n_vocab,
                                                                  1.0f / temperature, uniform, id);
  return LaunchStatus("SampleTemperature");
}

}  // namespace moetier::cuda
