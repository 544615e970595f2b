// The gated delta rule (delta_rule.h): token by token for decoding and
// short batches, and in chunks of 64 tokens for prefill.
//
// Token by token, each value column of each value head is a recurrence of
// its own (column c of S_j only ever meets k, q, beta, the decay and v[c]),
// so one warp owns one column, its d_k state entries spread over the lanes
// in registers for the whole batch; two warp sums per token.
//
// Chunked: Prepare runs one block per (chunk, value head), all chunks at
// once, and writes G, W, U and P (delta_rule.h) to the scratch buffer;
// Scan runs one block per (value head, tile of kScanTile columns) and walks
// the chunks in order with the state tile in shared memory. Both evaluate
// delta_rule.h's per-element formulas, each phase's elements spread over
// the block's threads, one barrier between phases.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/delta_rule.h"

namespace moetier::cuda {
namespace {

using internal::AsStream;
using internal::LaunchStatus;
namespace dc = delta_chunk;

constexpr int kTokenWarps = 4;    // warps (value columns) per block, token by token
constexpr int kChunkThreads = 256;

template <int kRowsPerLane>
__global__ void DeltaRuleTokensKernel(DeltaRuleArgs a) {
  const int lane = threadIdx.x % 32;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kTokenWarps + threadIdx.x / 32;
  if (w >= static_cast<int64_t>(a.n_v_heads) * a.d_v) return;  // the whole warp
  const int j = static_cast<int>(w / a.d_v);
  const int c = static_cast<int>(w % a.d_v);
  const int kh = KeyHeadOf(j, a.n_k_heads, a.n_v_heads, a.v_heads_tiled);
  float* column = a.state + w * a.d_k;  // [j][c][0 .. d_k)
  float s[kRowsPerLane];
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i) {
    const int r = lane + 32 * i;
    s[i] = r < a.d_k ? column[r] : 0.0f;
  }
  for (int t = 0; t < a.n_tokens; ++t) {
    const float* q = a.q + t * a.qk_stride + static_cast<int64_t>(kh) * a.d_k;
    const float* k = a.k + t * a.qk_stride + static_cast<int64_t>(kh) * a.d_k;
    const int64_t gate = static_cast<int64_t>(t) * a.n_v_heads + j;
    const float decay = expf(a.g[gate]);
    const float beta = a.beta[gate];
    // S <- decay S and kv = S^T k, then delta, then S <- S + k delta^T and
    // o = S^T q: the CPU block's order per column.
    float kv = 0.0f;
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i) {
      const int r = lane + 32 * i;
      if (r < a.d_k) {
        s[i] *= decay;
        kv += s[i] * k[r];
      }
    }
    kv = internal::WarpSum(kv);
    const float delta = beta * (a.v[t * a.v_stride + static_cast<int64_t>(j) * a.d_v + c] - kv);
    float o = 0.0f;
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i) {
      const int r = lane + 32 * i;
      if (r < a.d_k) {
        s[i] += k[r] * delta;
        o += s[i] * q[r];
      }
    }
    o = internal::WarpSum(o);
    if (lane == 0) a.out[t * a.out_stride + static_cast<int64_t>(j) * a.d_v + c] = o;
  }
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i) {
    const int r = lane + 32 * i;
    if (r < a.d_k) column[r] = s[i];
  }
}

// One block per (chunk, value head).
__global__ void DeltaChunkPrepareKernel(DeltaRuleArgs a, float* scratch) {
  __shared__ float G[dc::kChunk];
  __shared__ float BG[dc::kChunk];
  __shared__ float A[dc::kChunk * dc::kChunk];
  __shared__ float T[dc::kChunk * dc::kChunk];
  const int chunk = blockIdx.x;
  const int j = blockIdx.y;
  const dc::ChunkIn in = dc::ChunkInputsOf(a, chunk, j);
  const dc::ChunkScratch p = dc::ScratchOf(scratch, chunk, j, a.n_v_heads, a.d_k, a.d_v);
  const int len = in.len;
  if (threadIdx.x == 0) dc::CumulativeLogDecay(in, G);
  __syncthreads();
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    p.G[i] = G[i];
    BG[i] = dc::ScaledBeta(in, G, i);
  }
  for (int e = threadIdx.x; e < len * len; e += blockDim.x) {
    const int t = e / len;
    const int s = e % len;
    if (s < t) A[t * dc::kChunk + s] = dc::KktEntry(in, G, t, s);
  }
  __syncthreads();
  // T row by row: row t reads rows s+1 .. t-1.
  for (int t = 1; t < len; ++t) {
    for (int s = threadIdx.x; s < t; s += blockDim.x) {
      T[t * dc::kChunk + s] = dc::InverseEntry(A, T, t, s);
    }
    __syncthreads();
  }
  for (int e = threadIdx.x; e < len * a.d_k; e += blockDim.x) {
    const int t = e / a.d_k;
    const int r = e % a.d_k;
    p.W[t * a.d_k + r] = dc::WEntry(in, BG, T, t, r);
  }
  for (int e = threadIdx.x; e < len * a.d_v; e += blockDim.x) {
    const int t = e / a.d_v;
    const int c = e % a.d_v;
    p.U[t * a.d_v + c] = dc::UEntry(in, T, t, c);
  }
  for (int e = threadIdx.x; e < dc::kChunk * dc::kChunk; e += blockDim.x) {
    const int t = e / dc::kChunk;
    const int s = e % dc::kChunk;
    p.P[e] = t < len && s < len ? dc::PEntry(in, G, t, s) : 0.0f;
  }
}

// One block per (value head, tile of value columns); chunks in order.
__global__ void DeltaChunkScanKernel(DeltaRuleArgs a, float* scratch) {
  __shared__ float S[dc::kScanTile * dc::kMaxDk];  // column c's d_k entries at S + c * d_k
  __shared__ float D[dc::kChunk * dc::kScanTile];
  __shared__ float G[dc::kChunk];
  __shared__ float E[dc::kChunk];
  const int j = blockIdx.x;
  const int c0 = blockIdx.y * dc::kScanTile;
  const int tile = min(dc::kScanTile, a.d_v - c0);
  const int d_k = a.d_k;
  float* state = a.state + (static_cast<int64_t>(j) * a.d_v + c0) * d_k;  // tile columns, contiguous
  for (int e = threadIdx.x; e < tile * d_k; e += blockDim.x) S[e] = state[e];
  const int n_chunks = (a.n_tokens + dc::kChunk - 1) / dc::kChunk;
  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    const dc::ChunkIn in = dc::ChunkInputsOf(a, chunk, j);
    const dc::ChunkScratch p = dc::ScratchOf(scratch, chunk, j, a.n_v_heads, d_k, a.d_v);
    const int len = in.len;
    for (int i = threadIdx.x; i < len; i += blockDim.x) G[i] = p.G[i];
    __syncthreads();  // G, and S (loaded or updated) for every thread
    for (int i = threadIdx.x; i < len; i += blockDim.x) E[i] = dc::DecayToEnd(G, len, i);
    for (int e = threadIdx.x; e < len * tile; e += blockDim.x) {
      D[e] = dc::NewValueEntry(p, S, d_k, a.d_v, c0, e / tile, e % tile);
    }
    __syncthreads();
    const int64_t t0 = static_cast<int64_t>(chunk) * dc::kChunk;
    for (int e = threadIdx.x; e < len * tile; e += blockDim.x) {
      const int t = e / tile;
      const int c = e % tile;
      a.out[(t0 + t) * a.out_stride + static_cast<int64_t>(j) * a.d_v + c0 + c] =
          dc::OutputEntry(in, G, p.P, S, D, tile, t, c);
    }
    __syncthreads();  // every read of the old S is done
    for (int e = threadIdx.x; e < tile * d_k; e += blockDim.x) {
      // Each element reads only its own old value: in place.
      S[e] = dc::NextStateEntry(in, G, E, S, D, tile, e % d_k, e / d_k);
    }
    __syncthreads();  // S complete; G, E and D free for the next chunk
  }
  for (int e = threadIdx.x; e < tile * d_k; e += blockDim.x) state[e] = S[e];
}

// The checks of both entry points; messages start with `who`.
absl::Status CheckArgs(const char* who, const DeltaRuleArgs& a) {
  auto bad = [who](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", what));
  };
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.beta == nullptr ||
      a.g == nullptr || a.state == nullptr || a.out == nullptr) {
    return bad("null pointer");
  }
  if (a.n_tokens < 0 || a.n_k_heads <= 0 || a.n_v_heads <= 0 || a.n_v_heads % a.n_k_heads != 0) {
    return bad(absl::StrCat("n_v_heads ", a.n_v_heads, " is not a multiple of n_k_heads ",
                            a.n_k_heads, " (or n_tokens ", a.n_tokens, " is negative)"));
  }
  if (a.d_k <= 0 || a.d_k > dc::kMaxDk) {
    return bad(absl::StrCat("d_k ", a.d_k, " is outside 1..", dc::kMaxDk));
  }
  if (a.d_v <= 0) return bad("d_v must be positive");
  if (a.qk_stride < 0 || a.v_stride < 0 || a.out_stride < 0) return bad("negative stride");
  return absl::OkStatus();
}

}  // namespace

int64_t GatedDeltaRuleChunkedScratchFloats(int n_tokens, int n_v_heads, int d_k, int d_v) {
  return dc::ScratchFloats(n_tokens, n_v_heads, d_k, d_v);
}

absl::Status GatedDeltaRule(const DeltaRuleArgs& a, CudaStream stream) {
  if (absl::Status st = CheckArgs(__func__, a); !st.ok()) return st;
  if (a.n_tokens == 0) return absl::OkStatus();
  const int64_t warps = static_cast<int64_t>(a.n_v_heads) * a.d_v;
  const int64_t blocks = (warps + kTokenWarps - 1) / kTokenWarps;
  MOETIER_CUDA_REQUIRE(blocks <= INT32_MAX, "too many value columns");
  const dim3 grid(static_cast<unsigned>(blocks));
  const cudaStream_t s = AsStream(stream);
  if (a.d_k <= 32) {
    DeltaRuleTokensKernel<1><<<grid, kTokenWarps * 32, 0, s>>>(a);
  } else if (a.d_k <= 64) {
    DeltaRuleTokensKernel<2><<<grid, kTokenWarps * 32, 0, s>>>(a);
  } else if (a.d_k <= 128) {
    DeltaRuleTokensKernel<4><<<grid, kTokenWarps * 32, 0, s>>>(a);
  } else {
    DeltaRuleTokensKernel<8><<<grid, kTokenWarps * 32, 0, s>>>(a);
  }
  return LaunchStatus("GatedDeltaRule");
}

absl::Status GatedDeltaRuleChunked(const DeltaRuleArgs& a, float* scratch, int64_t scratch_floats,
                                   CudaStream stream) {
  if (absl::Status st = CheckArgs(__func__, a); !st.ok()) return st;
  MOETIER_CUDA_REQUIRE(scratch != nullptr, "null scratch");
  const int64_t need = dc::ScratchFloats(a.n_tokens, a.n_v_heads, a.d_k, a.d_v);
  MOETIER_CUDA_REQUIRE(scratch_floats >= need,
                       absl::StrCat("scratch of ", scratch_floats, " floats; ", a.n_tokens,
                                    " tokens need ", need));
  MOETIER_CUDA_REQUIRE(a.n_v_heads <= 65535, "too many value heads");
  if (a.n_tokens == 0) return absl::OkStatus();
  const int n_chunks = (a.n_tokens + dc::kChunk - 1) / dc::kChunk;
  const int n_tiles = (a.d_v + dc::kScanTile - 1) / dc::kScanTile;
  MOETIER_CUDA_REQUIRE(n_tiles <= 65535, "too many value columns");
  const cudaStream_t s = AsStream(stream);
  DeltaChunkPrepareKernel<<<dim3(static_cast<unsigned>(n_chunks),
                                 static_cast<unsigned>(a.n_v_heads)),
                            kChunkThreads, 0, s>>>(a, scratch);
  if (absl::Status st = LaunchStatus("GatedDeltaRuleChunked (prepare)"); !st.ok()) return st;
  DeltaChunkScanKernel<<<dim3(static_cast<unsigned>(a.n_v_heads), static_cast<unsigned>(n_tiles)),
                         kChunkThreads, 0, s>>>(a, scratch);
  return LaunchStatus("GatedDeltaRuleChunked (scan)");
}

}  // namespace moetier::cuda
