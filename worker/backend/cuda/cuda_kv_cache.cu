// The KV cache on the device: storing keys and values in their cache type
// (F32, F16, Q8_0, Q4_0) and the causal GQA attention that reads them as
// stored. The block types are written by the CPU codec's rules
// (gguf/tensor/codec_simple.cc) with the same float operations in the same
// order, so a device cache holds the bytes the CPU engine would store.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace moetier::cuda {
namespace {

using internal::AsStream;
using internal::LaunchStatus;

constexpr int kQ8_0BlockBytes = 34;  // fp16 scale, 32 int8 levels
constexpr int kQ4_0BlockBytes = 18;  // fp16 scale, 32 4-bit levels
constexpr int kBlockValues = 32;

__device__ __forceinline__ float HalfAt(const uint8_t* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));
}

// Value i of one cached row, per cache type. Rows start at 2-byte aligned
// addresses (4 for F32), which the host checks.
struct KvF32 {
  static __device__ __forceinline__ float Load(const uint8_t* row, int i) {
    return reinterpret_cast<const float*>(row)[i];
  }
};
struct KvF16 {
  static __device__ __forceinline__ float Load(const uint8_t* row, int i) {
    return __half2float(reinterpret_cast<const __half*>(row)[i]);
  }
};
struct KvQ8_0 {
  static __device__ __forceinline__ float Load(const uint8_t* row, int i) {
    const uint8_t* block = row + (i / kBlockValues) * kQ8_0BlockBytes;
    const int8_t q = static_cast<int8_t>(block[2 + i % kBlockValues]);
    return __fmul_rn(HalfAt(block), static_cast<float>(q));
  }
};
struct KvQ4_0 {
  static __device__ __forceinline__ float Load(const uint8_t* row, int i) {
    const uint8_t* block = row + (i / kBlockValues) * kQ4_0BlockBytes;
    const int j = i % kBlockValues;
    const uint8_t byte = block[2 + (j & 15)];
    const int q = (j < 16 ? (byte & 0x0F) : (byte >> 4)) - 8;
    return __fmul_rn(HalfAt(block), static_cast<float>(q));
  }
};

constexpr int kAttnThreads = 256;  // also the largest head_dim
constexpr int kAttnTile = 64;      // cache positions scored per pass

// One block per (query head, query token). Positions are taken in tiles of
// kAttnTile: each warp scores positions of the tile (q . k reduced across
// the warp), then every thread updates its output dimension with a running
// max and sum (the one-pass softmax), so no n_kv-sized scratch is needed.
template <typename KF, typename VF>
__global__ void AttentionKernel(const float* q, const uint8_t* k_cache, int64_t k_head_stride,
                                int64_t k_row_stride, const uint8_t* v_cache,
                                int64_t v_head_stride, int64_t v_row_stride, int64_t n_past,
                                const int32_t* n_past_on_device, int n_head, int group,
                                int head_dim, float scale, float* out) {
  __shared__ float q_s[kAttnThreads];
  __shared__ float p_s[kAttnTile];
  const int h = blockIdx.x;
  const int t = blockIdx.y;
  const int g = h / group;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int n_warps = blockDim.x / 32;
  const int64_t n_kv = n_past + (n_past_on_device != nullptr ? *n_past_on_device : 0) + t + 1;
  const float* qh = q + (static_cast<int64_t>(t) * n_head + h) * head_dim;
  const uint8_t* kh = k_cache + g * k_head_stride;
  const uint8_t* vh = v_cache + g * v_head_stride;
  const int d = threadIdx.x;
  if (d < head_dim) q_s[d] = qh[d];
  __syncthreads();

  float running_max = -INFINITY;
  float running_sum = 0.0f;
  float acc = 0.0f;
  for (int64_t t0 = 0; t0 < n_kv; t0 += kAttnTile) {
    const int count = static_cast<int>(n_kv - t0 < kAttnTile ? n_kv - t0 : kAttnTile);
    for (int j = warp; j < count; j += n_warps) {
      const uint8_t* kr = kh + (t0 + j) * k_row_stride;
      float dot = 0.0f;
      for (int i = lane; i < head_dim; i += 32) dot += q_s[i] * KF::Load(kr, i);
      dot = internal::WarpSum(dot);
      if (lane == 0) p_s[j] = dot * scale;
    }
    __syncthreads();
    float tile_max = -INFINITY;
    for (int j = 0; j < count; ++j) tile_max = fmaxf(tile_max, p_s[j]);
    const float new_max = fmaxf(running_max, tile_max);
    // exp(-inf) = 0 covers the first tile.
    const float correction = expf(running_max - new_max);
    __syncthreads();  // every thread has read p_s before it is overwritten
    if (threadIdx.x < count) p_s[threadIdx.x] = expf(p_s[threadIdx.x] - new_max);
    __syncthreads();
    float tile_sum = 0.0f;
    float tile_acc = 0.0f;
    for (int j = 0; j < count; ++j) {
      tile_sum += p_s[j];
      if (d < head_dim) tile_acc += p_s[j] * VF::Load(vh + (t0 + j) * v_row_stride, d);
    }
    running_sum = running_sum * correction + tile_sum;
    acc = acc * correction + tile_acc;
    running_max = new_max;
    __syncthreads();  // p_s is rewritten by the next tile
  }
  if (d < head_dim) out[(static_cast<int64_t>(t) * n_head + h) * head_dim + d] = acc / running_sum;
}

// ggml's reference q8_0 rounding (round half away from zero), as the CPU
// codec writes it; __f*_rn keeps nvcc from fusing what the CPU rounds twice,
// and a NaN from 0 * inf (a scale whose inverse overflows) is level 0 there
// too.
__device__ void QuantizeBlockQ8_0(const float* x, uint8_t* block) {
  float amax = 0.0f;
  for (int e = 0; e < kBlockValues; ++e) amax = fmaxf(amax, fabsf(x[e]));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  *reinterpret_cast<__half*>(block) = __float2half_rn(d);
  for (int e = 0; e < kBlockValues; ++e) {
    const float r = roundf(__fmul_rn(x[e], id));
    const float q = isnan(r) ? 0.0f : fminf(fmaxf(r, -127.0f), 127.0f);
    block[2 + e] = static_cast<uint8_t>(static_cast<int8_t>(q));
  }
}

// The signed extreme (the first of equal magnitudes) maps to -8.
__device__ void QuantizeBlockQ4_0(const float* x, uint8_t* block) {
  float amax = 0.0f;
  float extreme = 0.0f;
  for (int e = 0; e < kBlockValues; ++e) {
    if (fabsf(x[e]) > amax) {
      amax = fabsf(x[e]);
      extreme = x[e];
    }
  }
  const float d = __fdiv_rn(extreme, -8.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  *reinterpret_cast<__half*>(block) = __float2half_rn(d);
  auto level = [id](float v) {
    const float l = floorf(__fadd_rn(__fmul_rn(v, id), 8.5f));
    return static_cast<uint8_t>(isnan(l) ? 0.0f : fminf(fmaxf(l, 0.0f), 15.0f));
  };
  for (int j = 0; j < kBlockValues / 2; ++j) {
    block[2 + j] = static_cast<uint8_t>(level(x[j]) | (level(x[j + kBlockValues / 2]) << 4));
  }
}

// One block per (KV head, token); for the block types one thread per
// 32-value block.
template <TensorType kType>
__global__ void StoreKvKernel(const float* src, int n_head_kv, int head_dim, uint8_t* cache,
                              int64_t head_stride, int64_t row_stride, int64_t pos0,
                              const int32_t* pos0_on_device) {
  const int g = blockIdx.x;
  const int t = blockIdx.y;
  const float* s = src + (static_cast<int64_t>(t) * n_head_kv + g) * head_dim;
  const int64_t pos = pos0 + (pos0_on_device != nullptr ? *pos0_on_device : 0) + t;
  uint8_t* row = cache + g * head_stride + pos * row_stride;
  if constexpr (kType == TensorType::kF32) {
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
      reinterpret_cast<float*>(row)[i] = s[i];
    }
  } else if constexpr (kType == TensorType::kF16) {
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
      reinterpret_cast<__half*>(row)[i] = __float2half_rn(s[i]);
    }
  } else {
    for (int b = threadIdx.x; b < head_dim / kBlockValues; b += blockDim.x) {
      if constexpr (kType == TensorType::kQ8_0) {
        QuantizeBlockQ8_0(s + b * kBlockValues, row + b * kQ8_0BlockBytes);
      } else {
        QuantizeBlockQ4_0(s + b * kBlockValues, row + b * kQ4_0BlockBytes);
      }
    }
  }
}

// The checks both entry points share: a supported type, head_dim whole
// blocks for the block types, rows aligned for their scale or values, and
// rows that do not overlap.
absl::Status CheckCacheLayout(const char* which, TensorType type, const void* data,
                              int n_head_kv, int head_dim, int64_t head_stride,
                              int64_t row_stride) {
  if (!CudaKvCacheTypeSupported(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(which, " cache type ", std::string(TensorTypeName(type)),
                     " is not one of the CUDA KV cache types (f32, f16, q8_0, q4_0)"));
  }
  if ((type == TensorType::kQ8_0 || type == TensorType::kQ4_0) && head_dim % kBlockValues != 0) {
    return absl::InvalidArgumentError(absl::StrCat(which, " cache type ",
                                                   std::string(TensorTypeName(type)),
                                                   " needs head_dim a multiple of 32, not ",
                                                   head_dim));
  }
  const int64_t align = type == TensorType::kF32 ? 4 : 2;
  if (head_stride < 0 || row_stride < 0 || head_stride % align != 0 ||
      row_stride % align != 0 || !internal::Aligned(data, static_cast<uintptr_t>(align))) {
    return absl::InvalidArgumentError(
        absl::StrCat(which, " cache address and strides ", head_stride, " and ", row_stride,
                     " must be non-negative multiples of ", align, " bytes"));
  }
  // Rows of different heads or positions must not overlap: one stride
  // steps over whole rows and the other over everything the first spans
  // (head-major or position-major).
  const int64_t row = TensorRowBytes(type, head_dim);
  const bool head_major = row_stride >= row && (n_head_kv == 1 || head_stride >= row_stride);
  const bool position_major = head_stride >= row && row_stride >= n_head_kv * head_stride;
  if (!head_major && !position_major) {
    return absl::InvalidArgumentError(absl::StrCat(
        which, " cache strides ", head_stride, " (heads) and ", row_stride,
        " (positions) make rows of ", row, " bytes overlap for ", n_head_kv, " KV heads"));
  }
  return absl::OkStatus();
}

template <typename KF>
void LaunchAttentionWithKeys(const dim3& grid, cudaStream_t s, const float* q,
                             const KvCacheView& k, const KvCacheView& v, int64_t n_past,
                             const int32_t* n_past_on_device, int n_head, int group, int head_dim,
                             float scale, float* out) {
  const auto* kc = static_cast<const uint8_t*>(k.data);
  const auto* vc = static_cast<const uint8_t*>(v.data);
#define MOETIER_ATTENTION_LAUNCH(VF)                                                         \
  AttentionKernel<KF, VF><<<grid, kAttnThreads, 0, s>>>(q, kc, k.head_stride, k.row_stride, vc, \
                                                         v.head_stride, v.row_stride, n_past,  \
                                                         n_past_on_device, n_head, group,      \
                                                         head_dim, scale, out)
  switch (v.type) {
    case TensorType::kF32:
      MOETIER_ATTENTION_LAUNCH(KvF32);
      break;
    case TensorType::kF16:
      MOETIER_ATTENTION_LAUNCH(KvF16);
      break;
    case TensorType::kQ8_0:
      MOETIER_ATTENTION_LAUNCH(KvQ8_0);
      break;
    default:
      MOETIER_ATTENTION_LAUNCH(KvQ4_0);
      break;
  }
#undef MOETIER_ATTENTION_LAUNCH
}

}  // namespace

bool CudaKvCacheTypeSupported(TensorType type) {
  for (TensorType supported : kCudaKvCacheTypes) {
    if (type == supported) return true;
  }
  return false;
}

absl::Status Attention(const float* q, const KvCacheView& k, const KvCacheView& v, int n_tokens,
                       int64_t n_past, int n_head, int n_head_kv, int head_dim, float scale,
                       float* out, CudaStream stream, const int32_t* n_past_on_device) {
  MOETIER_CUDA_REQUIRE(q != nullptr && k.data != nullptr && v.data != nullptr && out != nullptr,
                       "null pointer");
  MOETIER_CUDA_REQUIRE(n_head_kv > 0 && n_head % n_head_kv == 0,
                       absl::StrCat("n_head ", n_head, " is not a multiple of n_head_kv ",
                                    n_head_kv));
  MOETIER_CUDA_REQUIRE(head_dim > 0 && head_dim <= kAttnThreads,
                       absl::StrCat("head_dim ", head_dim, " is outside 1..", kAttnThreads));
  MOETIER_CUDA_REQUIRE(n_tokens >= 0 && n_tokens <= 65535 && n_past >= 0, "bad token counts");
  if (absl::Status s = CheckCacheLayout("key", k.type, k.data, n_head_kv, head_dim,
                                        k.head_stride, k.row_stride);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckCacheLayout("value", v.type, v.data, n_head_kv, head_dim,
                                        v.head_stride, v.row_stride);
      !s.ok()) {
    return s;
  }
  if (n_tokens == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(n_head), static_cast<unsigned>(n_tokens));
  const int group = n_head / n_head_kv;
  const cudaStream_t s = AsStream(stream);
  switch (k.type) {
    case TensorType::kF32:
      LaunchAttentionWithKeys<KvF32>(grid, s, q, k, v, n_past, n_past_on_device, n_head, group, head_dim, scale, out);
      break;
    case TensorType::kF16:
      LaunchAttentionWithKeys<KvF16>(grid, s, q, k, v, n_past, n_past_on_device, n_head, group, head_dim, scale, out);
      break;
    case TensorType::kQ8_0:
      LaunchAttentionWithKeys<KvQ8_0>(grid, s, q, k, v, n_past, n_past_on_device, n_head, group, head_dim, scale,
                                      out);
      break;
    default:
      LaunchAttentionWithKeys<KvQ4_0>(grid, s, q, k, v, n_past, n_past_on_device, n_head, group, head_dim, scale,
                                      out);
      break;
  }
  return LaunchStatus("Attention");
}

absl::Status StoreKv(const float* src, int n_tokens, int n_head_kv, int head_dim, void* cache,
                     TensorType kv_type, int64_t head_stride, int64_t row_stride, int64_t pos0,
                     CudaStream stream, const int32_t* pos0_on_device) {
  MOETIER_CUDA_REQUIRE(src != nullptr && cache != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n_tokens >= 0 && n_tokens <= 65535 && n_head_kv > 0 && head_dim > 0,
                       "bad shape");
  MOETIER_CUDA_REQUIRE(pos0 >= 0, "negative position");
  if (absl::Status s =
          CheckCacheLayout("KV", kv_type, cache, n_head_kv, head_dim, head_stride, row_stride);
      !s.ok()) {
    return s;
  }
  if (n_tokens == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(n_head_kv), static_cast<unsigned>(n_tokens));
  const cudaStream_t s = AsStream(stream);
  auto* c = static_cast<uint8_t*>(cache);
  switch (kv_type) {
    case TensorType::kF32:
      StoreKvKernel<TensorType::kF32>
          <<<grid, 128, 0, s>>>(src, n_head_kv, head_dim, c, head_stride, row_stride, pos0,
                                  pos0_on_device);
      break;
    case TensorType::kF16:
      StoreKvKernel<TensorType::kF16>
          <<<grid, 128, 0, s>>>(src, n_head_kv, head_dim, c, head_stride, row_stride, pos0,
                                  pos0_on_device);
      break;
    case TensorType::kQ8_0:
      StoreKvKernel<TensorType::kQ8_0>
          <<<grid, 32, 0, s>>>(src, n_head_kv, head_dim, c, head_stride, row_stride, pos0,
                                  pos0_on_device);
      break;
    default:
      StoreKvKernel<TensorType::kQ4_0>
          <<<grid, 32, 0, s>>>(src, n_head_kv, head_dim, c, head_stride, row_stride, pos0,
                                  pos0_on_device);
      break;
  }
  return LaunchStatus("StoreKv");
}

}  // namespace moetier::cuda
