// Weight dequantization, the decode GEMV and the prefill GEMM. Every kernel
// decodes weights with one per-element function per type (the formulas of
// SPEC.md §2.3), so the dequantizer, the GEMV and the GEMM agree by
// construction. Multiplications that the CPU codec performs as separate
// roundings use __fmul_rn/__fsub_rn, which nvcc never contracts into FMAs:
// that keeps DequantizeToF32 bit-exact with DequantizeRow.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/gemv_slices.h"

#if MOETIER_CUDA_HAVE_CUBLAS
#include <cublas_v2.h>
#endif

namespace moetier::cuda {
namespace {

using internal::AsStream;
using internal::LaunchStatus;

// absl::StrCat of this absl takes no std::string_view.
std::string TypeName(TensorType type) { return std::string(TensorTypeName(type)); }

__device__ __forceinline__ float HalfBits(const uint8_t* p) {
  const unsigned short bits = static_cast<unsigned short>(p[0] | (p[1] << 8));
  return __half2float(__ushort_as_half(bits));
}

using gemv::ScaleMinK4;

// Per-type geometry and element decoder. `blk` points at the block that
// holds element i (0 <= i < kElems).
template <TensorType T>
struct Codec;

template <>
struct Codec<TensorType::kF32> {
  static constexpr int kElems = 1;
  static constexpr int kBytes = 4;
  __device__ static float At(const uint8_t* blk, int) {
    return *reinterpret_cast<const float*>(blk);
  }
};

template <>
struct Codec<TensorType::kF16> {
  static constexpr int kElems = 1;
  static constexpr int kBytes = 2;
  __device__ static float At(const uint8_t* blk, int) { return HalfBits(blk); }
};

template <>
struct Codec<TensorType::kBF16> {
  static constexpr int kElems = 1;
  static constexpr int kBytes = 2;
  __device__ static float At(const uint8_t* blk, int) {
    const uint32_t bits = static_cast<uint32_t>(blk[0] | (blk[1] << 8)) << 16;
    return __uint_as_float(bits);
  }
};

template <>
struct Codec<TensorType::kQ8_0> {  // d, qs[32]
  static constexpr int kElems = 32;
  static constexpr int kBytes = 34;
  __device__ static float At(const uint8_t* blk, int i) {
    const int8_t q = static_cast<int8_t>(blk[2 + i]);
    return __fmul_rn(HalfBits(blk), static_cast<float>(q));
  }
};

template <>
struct Codec<TensorType::kQ4_0> {  // d, qs[16]: element j low nibble, j+16 high
  static constexpr int kElems = 32;
  static constexpr int kBytes = 18;
  __device__ static float At(const uint8_t* blk, int i) {
    const uint8_t byte = blk[2 + (i & 15)];
    const int nib = i < 16 ? (byte & 0x0F) : (byte >> 4);
    return __fmul_rn(HalfBits(blk), static_cast<float>(nib - 8));
  }
};

template <>
struct Codec<TensorType::kQ4_K> {  // d, dmin, scales[12], qs[128]
  static constexpr int kElems = 256;
  static constexpr int kBytes = 144;
  __device__ static float At(const uint8_t* blk, int i) {
    const int j = i / 32;
    int sc, m;
    ScaleMinK4(j, blk + 4, &sc, &m);
    const uint8_t byte = blk[16 + 32 * (i / 64) + (i % 32)];
    const int nib = (i % 64) < 32 ? (byte & 0x0F) : (byte >> 4);
    const float scale = __fmul_rn(HalfBits(blk), static_cast<float>(sc));
    const float min = __fmul_rn(HalfBits(blk + 2), static_cast<float>(m));
    return __fsub_rn(__fmul_rn(scale, static_cast<float>(nib)), min);
  }
};

template <>
struct Codec<TensorType::kQ5_K> {  // d, dmin, scales[12], qh[32], qs[128]
  static constexpr int kElems = 256;
  static constexpr int kBytes = 176;
  __device__ static float At(const uint8_t* blk, int i) {
    const int j = i / 32;
    int sc, m;
    ScaleMinK4(j, blk + 4, &sc, &m);
    const uint8_t byte = blk[48 + 32 * (i / 64) + (i % 32)];
    const int nib = (i % 64) < 32 ? (byte & 0x0F) : (byte >> 4);
    const int q = nib | (((blk[16 + i % 32] >> j) & 1) << 4);
    const float scale = __fmul_rn(HalfBits(blk), static_cast<float>(sc));
    const float min = __fmul_rn(HalfBits(blk + 2), static_cast<float>(m));
    return __fsub_rn(__fmul_rn(scale, static_cast<float>(q)), min);
  }
};

template <>
struct Codec<TensorType::kQ6_K> {  // ql[128], qh[64], scales[16] (int8), d
  static constexpr int kElems = 256;
  static constexpr int kBytes = 210;
  __device__ static float At(const uint8_t* blk, int i) {
    const int h = i / 128;
    const int m = (i % 128) / 32;
    const int l = i % 32;
    const uint8_t lo_byte = blk[64 * h + 32 * (m & 1) + l];
    const int lo = m < 2 ? (lo_byte & 0x0F) : (lo_byte >> 4);
    const int hi = (blk[128 + 32 * h + l] >> (2 * m)) & 3;
    const int q = (lo | (hi << 4)) - 32;
    const int8_t sc = static_cast<int8_t>(blk[192 + i / 16]);
    return __fmul_rn(__fmul_rn(HalfBits(blk + 208), static_cast<float>(sc)),
                     static_cast<float>(q));
  }
};

// Element e of a row that starts at `row`.
template <TensorType T>
__device__ __forceinline__ float RowAt(const uint8_t* row, int64_t e) {
  using C = Codec<T>;
  return C::At(row + (e / C::kElems) * C::kBytes, static_cast<int>(e % C::kElems));
}

// ---------------------------------------------------------------------------
// Dequantization: one thread per element (grid-stride).

template <TensorType T>
__global__ void DequantF32Kernel(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[e] = RowAt<T>(src, e);
  }
}

template <TensorType T>
__global__ void DequantF16Kernel(const uint8_t* src, int64_t n, __half* dst) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[e] = __float2half_rn(RowAt<T>(src, e));
  }
}

// blockIdx.y: the output row; its source row comes from device memory.
template <TensorType T>
__global__ void DequantRowsAtKernel(const uint8_t* src, int64_t row_bytes, const int32_t* rows,
                                    int64_t n, float* dst) {
  const uint8_t* row = src + static_cast<int64_t>(rows[blockIdx.y]) * row_bytes;
  float* out = dst + static_cast<int64_t>(blockIdx.y) * n;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[e] = RowAt<T>(row, e);
  }
}

__global__ void F32ToF16Kernel(const float* src, int64_t n, __half* dst) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[e] = __float2half_rn(src[e]);
  }
}

constexpr int kElementwiseThreads = 256;
constexpr int64_t kElementwiseMaxBlocks = 65535;

unsigned ElementwiseBlocks(int64_t n) {
  const int64_t blocks = (n + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<unsigned>(blocks < kElementwiseMaxBlocks ? blocks : kElementwiseMaxBlocks);
}

// ---------------------------------------------------------------------------
// GEMV: one warp per weight row, each decoded weight used for every
// activation row; lanes sum in a fixed order whatever the batch, so a batch
// gives each row's bits alone.

constexpr int kGemvWarpsPerBlock = 4;

// y[b][r] = the warp's sum of acc[b], for the activation rows b < n_rows.
// Every lane takes part in every sum.
template <int kMaxBatch>
__device__ __forceinline__ void WriteWarpSums(const float (&acc)[kMaxBatch], int n_rows, int lane,
                                              int64_t r, int64_t rows, float* y) {
#pragma unroll
  for (int b = 0; b < kMaxBatch; ++b) {
    const float sum = internal::WarpSum(acc[b]);
    if (lane == 0 && b < n_rows) y[b * rows + r] = sum;
  }
}

// The lane's part of W[row] . x[b] into acc[b] for b < n_rows (at most
// kMaxBatch), block-quantized weights (gemv_slices.h): per step each lane
// decodes 8 weights in runs, reading its bytes with 16-bit loads and x as
// float4 / float2; x must be 16-byte aligned. Each row's sum runs in the
// same order whatever n_rows and kMaxBatch.
template <TensorType T, int kMaxBatch>
__device__ __forceinline__ void SliceRowDot(const uint8_t* __restrict__ row, int64_t n_blocks,
                                            const float* __restrict__ x, int64_t cols, int n_rows,
                                            int lane, float (&acc)[kMaxBatch]) {
  using SliceT = typename gemv::Slicer<T>::SliceT;
  constexpr int kRunLen = SliceT::kRunLen;
  const int64_t steps = gemv::StepsPerRow<T>(n_blocks);
  // Two steps' loads in flight per warp; the sums keep their order.
#pragma unroll 2
  for (int64_t step = 0; step < steps; ++step) {
    SliceT slice;
    if (!gemv::Slicer<T>::Decode(row, n_blocks, step, lane, &slice)) continue;
#pragma unroll
    for (int run = 0; run < SliceT::kRuns; ++run) {
#pragma unroll
      for (int b = 0; b < kMaxBatch; ++b) {
        if (b >= n_rows) break;
        const float* xp = x + b * cols + slice.first[run];
        float xv[kRunLen];
        if constexpr (kRunLen == 4) {
          const float4 v = *reinterpret_cast<const float4*>(xp);
          xv[0] = v.x, xv[1] = v.y, xv[2] = v.z, xv[3] = v.w;
        } else {
          static_assert(kRunLen == 2);
          const float2 v = *reinterpret_cast<const float2*>(xp);
          xv[0] = v.x, xv[1] = v.y;
        }
#pragma unroll
        for (int k = 0; k < kRunLen; ++k) acc[b] += slice.w[run][k] * xv[k];
      }
    }
  }
}

// As SliceRowDot for any type (the float ones, and block types when x is
// not 16-byte aligned): lanes stride over the row's elements.
template <TensorType T, int kMaxBatch>
__device__ __forceinline__ void ElementRowDot(const uint8_t* __restrict__ row,
                                              const float* __restrict__ x, int64_t cols,
                                              int n_rows, int lane, float (&acc)[kMaxBatch]) {
  for (int64_t c = lane; c < cols; c += 32) {
    const float wv = RowAt<T>(row, c);
#pragma unroll
    for (int b = 0; b < kMaxBatch; ++b) {
      if (b >= n_rows) break;
      acc[b] += wv * x[b * cols + c];
    }
  }
}

template <TensorType T>
constexpr bool kHasGemvSlicer = T == TensorType::kQ4_K || T == TensorType::kQ5_K ||
                                T == TensorType::kQ6_K || T == TensorType::kQ8_0 ||
                                T == TensorType::kQ4_0;

// One activation row set against one weight row per warp: the sliced dot
// where the type has a slicer and x is 16-byte aligned, else the
// element-strided one. GemvQuant and GemvQuantGroup both compute through
// here, so a grouped product has its single call's bits.
template <TensorType T, int kMaxBatch>
__device__ __forceinline__ void WarpRowGemv(const uint8_t* w, int64_t row_bytes, int64_t n_blocks,
                                            const float* x, int n_rows, int64_t rows,
                                            int64_t cols, float* y) {
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kGemvWarpsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;  // the whole warp leaves together
  const uint8_t* row = w + r * row_bytes;
  float acc[kMaxBatch];
#pragma unroll
  for (int b = 0; b < kMaxBatch; ++b) acc[b] = 0.0f;
  bool sliced = false;
  if constexpr (kHasGemvSlicer<T>) sliced = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  if (sliced) {
    if constexpr (kHasGemvSlicer<T>) SliceRowDot<T>(row, n_blocks, x, cols, n_rows, lane, acc);
  } else {
    ElementRowDot<T>(row, x, cols, n_rows, lane, acc);
  }
  WriteWarpSums(acc, n_rows, lane, r, rows, y);
}

template <TensorType T, int kBatch>
__global__ void GemvKernel(const uint8_t* w, int64_t row_bytes, int64_t n_blocks, const float* x,
                           int64_t rows, int64_t cols, float* y) {
  WarpRowGemv<T, kBatch>(w, row_bytes, n_blocks, x, kBatch, rows, cols, y);
}

// The jobs of one GemvQuantGroup launch, passed by value (kernel parameter
// space) so that nothing is copied or allocated per call.
struct GemvJobTable {
  GemvJob job[kCudaGemvMaxGroupJobs];
};

template <TensorType T>
__global__ void GemvGroupKernel(GemvJobTable table, int64_t row_bytes, int64_t n_blocks,
                                int64_t rows, int64_t cols) {
  const GemvJob& job = table.job[blockIdx.y];
  WarpRowGemv<T, kCudaGemvMaxBatch>(static_cast<const uint8_t*>(job.w), row_bytes, n_blocks,
                                    job.x, job.n_rows, rows, cols, job.y);
}

template <TensorType T>
__global__ void GemvJobTablesKernel(const GemvJob* jobs, const int32_t* n_jobs, int max_jobs,
                                    int64_t row_bytes, int64_t n_blocks, int64_t rows,
                                    int64_t cols) {
  if (static_cast<int>(blockIdx.y) % max_jobs >= *n_jobs) return;  // the whole block
  const GemvJob job = jobs[blockIdx.y];
  WarpRowGemv<T, kCudaGemvMaxBatch>(static_cast<const uint8_t*>(job.w), row_bytes, n_blocks,
                                    job.x, job.n_rows, rows, cols, job.y);
}

// ---------------------------------------------------------------------------
// Tiled fp16 GEMM (the path without cuBLAS): y[t, r] = sum_c w[r, c] x[t, c].
// 16x16 output tile per block, fp32 accumulation.

constexpr int kTile = 16;

__global__ void GemmF16TiledKernel(const __half* w, const __half* x, int64_t rows, int64_t cols,
                                   int64_t n_tokens, float* y) {
  __shared__ float w_tile[kTile][kTile + 1];
  __shared__ float x_tile[kTile][kTile + 1];
  const int tx = threadIdx.x;  // weight row within the tile
  const int ty = threadIdx.y;  // token within the tile
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTile;
  float acc = 0.0f;
  for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
    // Thread (tx, ty) loads w[r0 + ty, c0 + tx] and x[t0 + ty, c0 + tx].
    const int64_t c = c0 + tx;
    const int64_t wr = r0 + ty;
    const int64_t xt = t0 + ty;
    w_tile[ty][tx] = (wr < rows && c < cols) ? __half2float(w[wr * cols + c]) : 0.0f;
    x_tile[ty][tx] = (xt < n_tokens && c < cols) ? __half2float(x[xt * cols + c]) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTile; ++k) acc += w_tile[tx][k] * x_tile[ty][k];
    __syncthreads();
  }
  const int64_t r = r0 + tx;
  const int64_t t = t0 + ty;
  if (r < rows && t < n_tokens) y[t * rows + r] = acc;
}

// ---------------------------------------------------------------------------
// Dispatch on the weight type.

template <template <TensorType> class Op, typename... Args>
absl::Status Dispatch(TensorType type, Args&&... args) {
  switch (type) {
    case TensorType::kF32: return Op<TensorType::kF32>::Run(args...);
    case TensorType::kF16: return Op<TensorType::kF16>::Run(args...);
    case TensorType::kBF16: return Op<TensorType::kBF16>::Run(args...);
    case TensorType::kQ8_0: return Op<TensorType::kQ8_0>::Run(args...);
    case TensorType::kQ4_0: return Op<TensorType::kQ4_0>::Run(args...);
    case TensorType::kQ4_K: return Op<TensorType::kQ4_K>::Run(args...);
    case TensorType::kQ5_K: return Op<TensorType::kQ5_K>::Run(args...);
    case TensorType::kQ6_K: return Op<TensorType::kQ6_K>::Run(args...);
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "CUDA kernels do not support weight type ", TypeName(type),
      " (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)"));
}

template <TensorType T>
struct DequantF32Op {
  static absl::Status Run(const void* src, int64_t n, float* dst, cudaStream_t stream) {
    DequantF32Kernel<T><<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(
        static_cast<const uint8_t*>(src), n, dst);
    return LaunchStatus("DequantF32");
  }
};

template <TensorType T>
struct DequantRowsAtOp {
  static absl::Status Run(const void* src, const int32_t* rows, int n_rows, int64_t n, float* dst,
                          cudaStream_t stream) {
    const dim3 grid(ElementwiseBlocks(n), static_cast<unsigned>(n_rows));
    DequantRowsAtKernel<T><<<grid, kElementwiseThreads, 0, stream>>>(
        static_cast<const uint8_t*>(src), TensorRowBytes(T, n), rows, n, dst);
    return LaunchStatus("DequantRowsAt");
  }
};

template <TensorType T>
struct DequantF16Op {
  static absl::Status Run(const void* src, int64_t n, __half* dst, cudaStream_t stream) {
    DequantF16Kernel<T><<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(
        static_cast<const uint8_t*>(src), n, dst);
    return LaunchStatus("DequantF16");
  }
};

template <TensorType T>
struct GemvOp {
  template <int kBatch>
  static void Launch(const uint8_t* w, int64_t row_bytes, const float* x, int64_t rows,
                     int64_t cols, float* y, cudaStream_t stream) {
    const unsigned blocks =
        static_cast<unsigned>((rows + kGemvWarpsPerBlock - 1) / kGemvWarpsPerBlock);
    GemvKernel<T, kBatch><<<blocks, 32 * kGemvWarpsPerBlock, 0, stream>>>(
        w, row_bytes, cols / Codec<T>::kElems, x, rows, cols, y);
  }
  static absl::Status Run(const void* w_bytes, int64_t row_bytes, const float* x, int64_t rows,
                          int64_t cols, int batch, float* y, cudaStream_t stream) {
    const auto* w = static_cast<const uint8_t*>(w_bytes);
    switch (batch) {
      case 1: Launch<1>(w, row_bytes, x, rows, cols, y, stream); break;
      case 2: Launch<2>(w, row_bytes, x, rows, cols, y, stream); break;
      case 3: Launch<3>(w, row_bytes, x, rows, cols, y, stream); break;
      case 4: Launch<4>(w, row_bytes, x, rows, cols, y, stream); break;
      case 5: Launch<5>(w, row_bytes, x, rows, cols, y, stream); break;
      case 6: Launch<6>(w, row_bytes, x, rows, cols, y, stream); break;
      case 7: Launch<7>(w, row_bytes, x, rows, cols, y, stream); break;
      case 8: Launch<8>(w, row_bytes, x, rows, cols, y, stream); break;
      default: return absl::InvalidArgumentError("GemvQuant: batch must be 1..8");
    }
    return LaunchStatus("Gemv");
  }
};

template <TensorType T>
struct GemvGroupOp {
  static absl::Status Run(const GemvJobTable& table, int n_jobs, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>((rows + kGemvWarpsPerBlock - 1) / kGemvWarpsPerBlock),
                    static_cast<unsigned>(n_jobs));
    GemvGroupKernel<T><<<grid, 32 * kGemvWarpsPerBlock, 0, stream>>>(
        table, TensorRowBytes(T, cols), cols / Codec<T>::kElems, rows, cols);
    return LaunchStatus("GemvGroup");
  }
};

template <TensorType T>
struct GemvJobTablesOp {
  static absl::Status Run(const GemvJob* jobs, const int32_t* n_jobs, int max_jobs, int n_tables,
                          int64_t rows, int64_t cols, cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>((rows + kGemvWarpsPerBlock - 1) / kGemvWarpsPerBlock),
                    static_cast<unsigned>(max_jobs * n_tables));
    GemvJobTablesKernel<T><<<grid, 32 * kGemvWarpsPerBlock, 0, stream>>>(
        jobs, n_jobs, max_jobs, TensorRowBytes(T, cols), cols / Codec<T>::kElems, rows, cols);
    return LaunchStatus("GemvJobTables");
  }
};

// Checks shared by every entry point that reads weight bytes.
absl::Status CheckWeights(const char* fn, TensorType type, const void* w, int64_t n_rows,
                          int64_t cols) {
  if (!CudaWeightTypeSupported(type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        fn, ": weight type ", TypeName(type),
        " is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K are)"));
  }
  const TensorTypeInfo& info = GetTensorTypeInfo(type);
  if (n_rows < 0 || cols <= 0 || cols % info.block_elems != 0) {
    return absl::InvalidArgumentError(absl::StrCat(fn, ": ", n_rows, " x ", cols, " ",
                                                   TypeName(type), " is not a whole number of ",
                                                   info.block_elems, "-element blocks per row"));
  }
  if (w == nullptr || !internal::Aligned(w, type == TensorType::kF32 ? 4 : 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": weight pointer is null or misaligned for ", TypeName(type)));
  }
  return absl::OkStatus();
}

}  // namespace

bool CudaWeightTypeSupported(TensorType type) {
  switch (type) {
    case TensorType::kF32:
    case TensorType::kF16:
    case TensorType::kBF16:
    case TensorType::kQ8_0:
    case TensorType::kQ4_0:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K: return true;
    default: return false;
  }
}

absl::Status DequantizeToF32(TensorType type, const void* src, int64_t n_elems, float* dst,
                             CudaStream stream) {
  if (absl::Status s = CheckWeights(__func__, type, src, 1, n_elems); !s.ok()) return s;
  MOETIER_CUDA_REQUIRE(dst != nullptr && internal::Aligned(dst, 4), "dst is null or misaligned");
  return Dispatch<DequantF32Op>(type, src, n_elems, dst, AsStream(stream));
}

absl::Status DequantizeRowsAt(TensorType type, const void* src, const int32_t* rows, int n_rows,
                              int64_t n_elems, float* dst, CudaStream stream) {
  if (absl::Status s = CheckWeights(__func__, type, src, n_rows, n_elems); !s.ok()) return s;
  MOETIER_CUDA_REQUIRE(rows != nullptr && dst != nullptr && internal::Aligned(rows, 4) &&
                           internal::Aligned(dst, 4),
                       "rows or dst is null or misaligned");
  MOETIER_CUDA_REQUIRE(n_rows <= 65535, absl::StrCat(n_rows, " rows is more than 65535"));
  if (n_rows == 0) return absl::OkStatus();
  return Dispatch<DequantRowsAtOp>(type, src, rows, n_rows, n_elems, dst, AsStream(stream));
}

absl::Status DequantizeToF16(TensorType type, const void* src, int64_t n_elems, uint16_t* dst,
                             CudaStream stream) {
  if (absl::Status s = CheckWeights(__func__, type, src, 1, n_elems); !s.ok()) return s;
  MOETIER_CUDA_REQUIRE(dst != nullptr && internal::Aligned(dst, 2), "dst is null or misaligned");
  return Dispatch<DequantF16Op>(type, src, n_elems, reinterpret_cast<__half*>(dst),
                                AsStream(stream));
}

absl::Status GemvQuant(TensorType type, const void* w, const float* x, int64_t rows, int64_t cols,
                       int batch, float* y, CudaStream stream) {
  if (absl::Status s = CheckWeights(__func__, type, w, rows, cols); !s.ok()) return s;
  MOETIER_CUDA_REQUIRE(batch >= 1 && batch <= kCudaGemvMaxBatch,
                       absl::StrCat("batch ", batch, " is outside 1..", kCudaGemvMaxBatch));
  MOETIER_CUDA_REQUIRE(x != nullptr && y != nullptr && internal::Aligned(x, 4) &&
                           internal::Aligned(y, 4),
                       "x or y is null or misaligned");
  if (rows == 0) return absl::OkStatus();
  return Dispatch<GemvOp>(type, w, TensorRowBytes(type, cols), x, rows, cols, batch, y,
                          AsStream(stream));
}

absl::Status GemvQuantGroup(TensorType type, const GemvJob* jobs, int n_jobs, int64_t rows,
                           int64_t cols, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(n_jobs >= 0 && (n_jobs == 0 || jobs != nullptr),
                       absl::StrCat("n_jobs ", n_jobs, " with jobs ", jobs == nullptr ? "null" : "given"));
  for (int i = 0; i < n_jobs; ++i) {
    const GemvJob& job = jobs[i];
    const std::string fn = absl::StrCat("GemvQuantGroup job ", i);
    if (absl::Status s = CheckWeights(fn.c_str(), type, job.w, rows, cols); !s.ok()) return s;
    MOETIER_CUDA_REQUIRE(job.n_rows >= 1 && job.n_rows <= kCudaGemvMaxBatch,
                         absl::StrCat(fn, ": n_rows ", job.n_rows, " is outside 1..",
                                      kCudaGemvMaxBatch));
    MOETIER_CUDA_REQUIRE(job.x != nullptr && job.y != nullptr && internal::Aligned(job.x, 4) &&
                             internal::Aligned(job.y, 4),
                         absl::StrCat(fn, ": x or y is null or misaligned"));
  }
  if (rows == 0) return absl::OkStatus();
  for (int j0 = 0; j0 < n_jobs; j0 += kCudaGemvMaxGroupJobs) {
    const int n = n_jobs - j0 < kCudaGemvMaxGroupJobs ? n_jobs - j0 : kCudaGemvMaxGroupJobs;
    GemvJobTable table{};
    for (int i = 0; i < n; ++i) table.job[i] = jobs[j0 + i];
    if (absl::Status s = Dispatch<GemvGroupOp>(type, table, n, rows, cols, AsStream(stream));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status GemvQuantJobTables(TensorType type, const GemvJob* jobs, const int32_t* n_jobs,
                                int max_jobs, int n_tables, int64_t rows, int64_t cols,
                                CudaStream stream) {
  // The weight pointers are in device memory; only the type and shape are
  // checked here (a dummy aligned pointer stands in for them).
  static const float kAligned = 0.0f;
  if (absl::Status s = CheckWeights(__func__, type, &kAligned, rows, cols); !s.ok()) return s;
  MOETIER_CUDA_REQUIRE(jobs != nullptr && n_jobs != nullptr && internal::Aligned(jobs, 8) &&
                           internal::Aligned(n_jobs, 4),
                       "jobs or n_jobs is null or misaligned");
  MOETIER_CUDA_REQUIRE(max_jobs >= 1 && n_tables >= 1 &&
                           static_cast<int64_t>(max_jobs) * n_tables <= 65535,
                       absl::StrCat(n_tables, " tables of ", max_jobs,
                                    " jobs: each must be at least 1, the product at most 65535"));
  if (rows == 0) return absl::OkStatus();
  return Dispatch<GemvJobTablesOp>(type, jobs, n_jobs, max_jobs, n_tables, rows, cols,
                                   AsStream(stream));
}

// ---------------------------------------------------------------------------
// cuBLAS

#if MOETIER_CUDA_HAVE_CUBLAS
bool CudaBlasAvailable() { return true; }

absl::StatusOr<std::unique_ptr<CudaBlas>> CudaBlas::Create() {
  cublasHandle_t handle = nullptr;
  const cublasStatus_t st = cublasCreate(&handle);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("cublasCreate failed: ", cublasGetStatusString(st),
                     " (is there a CUDA device and a driver for this runtime?)"));
  }
  return std::unique_ptr<CudaBlas>(new CudaBlas(handle));
}

CudaBlas::~CudaBlas() {
  if (handle_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}
#else
bool CudaBlasAvailable() { return false; }

absl::StatusOr<std::unique_ptr<CudaBlas>> CudaBlas::Create() {
  return absl::UnimplementedError("this build of moetier has no cuBLAS; GemmQuant uses its own kernel");
}

CudaBlas::~CudaBlas() = default;
#endif

absl::Status GemmQuant(CudaBlas* blas, TensorType type, const void* w, const float* x,
                       int64_t rows, int64_t cols, int64_t n_tokens, uint16_t* w_scratch,
                       uint16_t* x_scratch, float* y, CudaStream stream) {
  if (absl::Status s = CheckWeights(__func__, type, w, rows, cols); !s.ok()) return s;
  MOETIER_CUDA_REQUIRE(n_tokens >= 0, "n_tokens is negative");
  MOETIER_CUDA_REQUIRE(x != nullptr && y != nullptr && w_scratch != nullptr &&
                           x_scratch != nullptr && internal::Aligned(x, 4) &&
                           internal::Aligned(y, 4) && internal::Aligned(w_scratch, 2) &&
                           internal::Aligned(x_scratch, 2),
                       "a buffer is null or misaligned");
  // cuBLAS takes int dimensions.
  MOETIER_CUDA_REQUIRE(rows <= INT32_MAX && cols <= INT32_MAX && n_tokens <= INT32_MAX,
                       "dimensions exceed 2^31 - 1");
  if (rows == 0 || n_tokens == 0) return absl::OkStatus();
  const cudaStream_t s = AsStream(stream);
  auto* w16 = reinterpret_cast<__half*>(w_scratch);
  auto* x16 = reinterpret_cast<__half*>(x_scratch);
  if (absl::Status st = Dispatch<DequantF16Op>(type, w, rows * cols, w16, s); !st.ok()) return st;
  F32ToF16Kernel<<<ElementwiseBlocks(n_tokens * cols), kElementwiseThreads, 0, s>>>(
      x, n_tokens * cols, x16);
  if (absl::Status st = LaunchStatus("F32ToF16"); !st.ok()) return st;

  if (blas == nullptr) {
    const dim3 block(kTile, kTile);
    const dim3 grid(static_cast<unsigned>((rows + kTile - 1) / kTile),
                    static_cast<unsigned>((n_tokens + kTile - 1) / kTile));
    MOETIER_CUDA_REQUIRE(grid.y <= 65535, "n_tokens too large for the tiled GEMM");
    GemmF16TiledKernel<<<grid, block, 0, s>>>(w16, x16, rows, cols, n_tokens, y);
    return LaunchStatus("GemmF16Tiled");
  }
#if MOETIER_CUDA_HAVE_CUBLAS
  // Row-major W [rows][cols] is the column-major cols x rows matrix A, so
  // y^T (column-major rows x n_tokens, i.e. row-major [n_tokens][rows]) is
  // A^T B with B the column-major cols x n_tokens view of x.
  auto handle = static_cast<cublasHandle_t>(blas->handle());
  cublasStatus_t st = cublasSetStream(handle, s);
  if (st == CUBLAS_STATUS_SUCCESS) {
    const float alpha = 1.0f;
    const float beta = 0.0f;
    const int m = static_cast<int>(rows);
    const int n = static_cast<int>(n_tokens);
    const int k = static_cast<int>(cols);
    st = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w16, CUDA_R_16F, k, x16,
                      CUDA_R_16F, k, &beta, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cublasGemmEx (", rows, " x ", cols, " by ",
                                            n_tokens, " tokens) failed: ",
                                            cublasGetStatusString(st)));
  }
  return absl::OkStatus();
#else
  return absl::InternalError("GemmQuant: a CudaBlas handle exists in a build without cuBLAS");
#endif
}

}  // namespace moetier::cuda
