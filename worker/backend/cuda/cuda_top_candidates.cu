// The best m logits of a row, exactly as the host sampler ranks them
// (candidate_keys.h), for sampling with a top-k filter without copying the
// row: each block sorts a tile of keys in shared memory (bitonic) and keeps
// its first m; passes repeat over the survivors until one tile holds them
// all, and its first m are the answer.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/candidate_keys.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace moetier::cuda {
namespace {

using internal::AsStream;
using internal::LaunchStatus;

constexpr int kTile = 2048;  // keys a block sorts (16 KiB of shared memory)
constexpr int kTileThreads = 1024;
static_assert(kMaxTopCandidates * 2 <= kTile, "every pass must at least halve the keys");

// Sorts tile[0, kTile) ascending; every thread of the block takes part.
__device__ void BitonicSortTile(uint64_t* tile) {
  for (int k = 2; k <= kTile; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
        const int partner = i ^ j;
        if (partner > i) {
          const bool ascending = (i & k) == 0;
          const uint64_t a = tile[i];
          const uint64_t b = tile[partner];
          if ((a > b) == ascending) {
            tile[i] = b;
            tile[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

// Block b sorts input elements [b * kTile, (b + 1) * kTile) and writes its
// first `keep` keys to out[b * keep ...]. The input is the row's logits
// (`logits` set: element i is token i) or keys of an earlier pass.
__global__ void SelectTileKernel(const float* logits, const uint64_t* keys, int64_t n, int keep,
                                 uint64_t* out) {
  __shared__ uint64_t tile[kTile];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
    const int64_t e = base + i;
    uint64_t key = ~uint64_t{0};  // after every real key
    if (e < n) {
      key = logits != nullptr ? CandidateKey(logits[e], static_cast<int32_t>(e)) : keys[e];
    }
    tile[i] = key;
  }
  __syncthreads();
  BitonicSortTile(tile);
  for (int i = threadIdx.x; i < keep; i += blockDim.x) {
    out[static_cast<int64_t>(blockIdx.x) * keep + i] = tile[i];
  }
}

// The ids of the first m keys, and the row's own logits of those ids (not
// the keys' canonical -0 -> +0).
__global__ void CandidateIdsKernel(const uint64_t* keys, const float* logits, int m, int32_t* ids,
                                   float* values) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const int32_t id = CandidateId(keys[i]);
  ids[i] = id;
  values[i] = logits[id];
}

__global__ void GatherLogitsKernel(const float* logits, const int32_t* ids, int n, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = logits[ids[i]];
}

int64_t Tiles(int64_t n) { return (n + kTile - 1) / kTile; }

}  // namespace

int64_t TopCandidatesScratchKeys(int n_vocab) {
  // The first pass writes the most: a tile's worth of survivors per tile.
  return 2 * Tiles(n_vocab) * kMaxTopCandidates;
}

absl::Status TopCandidates(const float* logits, int n_vocab, int m, uint64_t* scratch,
                           int64_t scratch_keys, int32_t* ids, float* values, CudaStream stream) {
  MOETIER_CUDA_REQUIRE(logits != nullptr && scratch != nullptr && ids != nullptr &&
                           values != nullptr,
                       "null pointer");
  MOETIER_CUDA_REQUIRE(n_vocab > 0 && m > 0 && m <= kMaxTopCandidates && m <= n_vocab,
                       absl::StrCat("m ", m, " must be in 1..min(", kMaxTopCandidates,
                                    ", n_vocab ", n_vocab, ")"));
  MOETIER_CUDA_REQUIRE(scratch_keys >= TopCandidatesScratchKeys(n_vocab),
                       absl::StrCat("scratch of ", scratch_keys, " keys is below the ",
                                    TopCandidatesScratchKeys(n_vocab), " needed"));
  // Ping-pong halves of the scratch: survivors of one pass are the next
  // pass's input.
  uint64_t* half[2] = {scratch, scratch + scratch_keys / 2};
  const float* row = logits;
  const uint64_t* in = nullptr;
  int64_t n = n_vocab;
  int which = 0;
  // Each pass keeps m of every tile; the last, over a single tile, keeps
  // the answer.
  while (true) {
    const int64_t tiles = Tiles(n);
    SelectTileKernel<<<static_cast<unsigned>(tiles), kTileThreads, 0, AsStream(stream)>>>(
        row, in, n, m, half[which]);
    if (absl::Status s = LaunchStatus("TopCandidates (select)"); !s.ok()) return s;
    if (tiles == 1) break;
    in = half[which];
    row = nullptr;
    n = tiles * m;
    which ^= 1;
  }
  CandidateIdsKernel<<<static_cast<unsigned>((m + 255) / 256), 256, 0, AsStream(stream)>>>(
      half[which], logits, m, ids, values);
  return LaunchStatus("TopCandidates (ids)");
}

absl::Status GatherLogits(const float* logits, const int32_t* ids, int n, float* out,
                          CudaStream stream) {
  MOETIER_CUDA_REQUIRE(logits != nullptr && ids != nullptr && out != nullptr, "null pointer");
  MOETIER_CUDA_REQUIRE(n >= 0, "negative count");
  if (n == 0) return absl::OkStatus();
  GatherLogitsKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, AsStream(stream)>>>(
      logits, ids, n, out);
  return LaunchStatus("GatherLogits");
}

}  // namespace moetier::cuda
