// A MoE layer's grouping by expert on the device (BuildExpertJobs): the row
// maps and the GEMV job tables, so that a decode step with every expert in
// device memory needs no host round trip per layer.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/expert_rows.h"

namespace moetier::cuda {
namespace {

using internal::AsStream;
using internal::LaunchStatus;

// One block, a thread per choice. Shared memory: the ids, then per grouped
// row whether a job starts there.
__global__ void BuildExpertJobsKernel(ExpertJobsArgs a) {
  extern __shared__ int32_t shared[];
  const int n_choices = a.n_tokens * a.top_k;
  int32_t* ids = shared;
  int32_t* starts = shared + n_choices;
  const int i = static_cast<int>(threadIdx.x);
  if (i < n_choices) ids[i] = a.topk_ids[i];
  __syncthreads();
  ExpertRow r;
  if (i < n_choices) {
    r = ExpertRowOf(ids, n_choices, a.n_expert, i);
    a.slot_rows[r.row] = i / a.top_k;
    a.slot_rows[n_choices + i] = r.row;
    starts[r.row] = r.valid && r.rank % kCudaGemvMaxBatch == 0 ? 1 : 0;
  }
  __syncthreads();
  if (i < n_choices && r.valid && r.rank % kCudaGemvMaxBatch == 0) {
    int job = 0;
    for (int row = 0; row < r.row; ++row) job += starts[row];
    const int32_t n_rows = min(kCudaGemvMaxBatch, r.expert_rows - r.rank);
    const void* const* w = a.expert_weights + 3 * static_cast<int64_t>(ids[i]);
    const int64_t row = r.row;
    const float* in = a.token_rows != nullptr && n_rows == 1
                          ? a.token_rows + static_cast<int64_t>(i / a.top_k) * a.n_embd
                          : a.expert_in + row * a.n_embd;
    float* gate = a.gate_out + row * a.n_ff;
    a.jobs[job] = GemvJob{w[0], in, gate, n_rows};
    a.jobs[n_choices + job] = GemvJob{w[1], in, a.up_out + row * a.n_ff, n_rows};
    a.jobs[2 * n_choices + job] = GemvJob{w[2], gate, a.down_out + row * a.n_embd, n_rows};
  }
  if (i == 0) {
    int n = 0;
    for (int row = 0; row < n_choices; ++row) n += starts[row];
    *a.n_jobs = n;
    int bad = 0;
    for (int c = 0; c < n_choices && bad == 0; ++c) {
      if (ids[c] < 0 || ids[c] >= a.n_expert) bad = c + 1;
    }
    *a.bad_choice = bad;
  }
}

}  // namespace

absl::Status BuildExpertJobs(const ExpertJobsArgs& a, CudaStream stream) {
  const int64_t n_choices = static_cast<int64_t>(a.n_tokens) * a.top_k;
  MOETIER_CUDA_REQUIRE(a.n_tokens >= 1 && a.top_k >= 1 && a.n_expert >= 1 &&
                           n_choices <= kCudaExpertJobsMaxChoices,
                       absl::StrCat(a.n_tokens, " tokens x ", a.top_k, " choices of ", a.n_expert,
                                    " experts: each must be at least 1, the choices at most ",
                                    kCudaExpertJobsMaxChoices));
  MOETIER_CUDA_REQUIRE(a.n_embd >= 1 && a.n_ff >= 1,
                       absl::StrCat("n_embd ", a.n_embd, " and n_ff ", a.n_ff, " must be positive"));
  MOETIER_CUDA_REQUIRE(a.topk_ids != nullptr && a.expert_weights != nullptr &&
                           a.expert_in != nullptr && a.gate_out != nullptr &&
                           a.up_out != nullptr && a.down_out != nullptr &&
                           a.slot_rows != nullptr && a.jobs != nullptr && a.n_jobs != nullptr &&
                           a.bad_choice != nullptr,
                       "a pointer argument is null");
  const unsigned threads = static_cast<unsigned>((n_choices + 31) / 32 * 32);
  const size_t shared = 2 * static_cast<size_t>(n_choices) * sizeof(int32_t);
  BuildExpertJobsKernel<<<1, threads, shared, AsStream(stream)>>>(a);
  return LaunchStatus("BuildExpertJobs");
}

}  // namespace moetier::cuda
