// CudaEngine::Sample, SampleStep and LastLogitsRow: tokens drawn from a
// logits row that stays on the device. Greedy is an argmax there; with a
// top-k filter the device selects the row's best candidates and only those
// come to the host (Sampler::SampleFromBest); other samplers read the whole
// row.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <span>

#include "absl/strings/str_format.h"
#include "blocks/cuda/cuda_check.h"
#include "engine/cuda_engine.h"

namespace moetier {

absl::StatusOr<int32_t> CudaEngine::Sample(Sampler& sampler) {
  if (last_row_ == nullptr) {
    return absl::FailedPreconditionError("no logits to sample from: run Forward first");
  }
  MOETIER_RETURN_IF_ERROR(ctx_->MakeCurrent());
  auto* stream = static_cast<cudaStream_t>(ctx_->stream());
  const SamplingParams& p = sampler.params();
  const bool penalty = p.repeat_penalty != 1.0f && p.repeat_last_n > 0;
  if (const int m = sampler.CandidatesNeeded(); m > 0 && m <= cuda::kMaxTopCandidates &&
                                                (p.temperature > 0.0f || penalty)) {
    return SampleFromCandidates(sampler, m);
  }
  if (p.temperature <= 0.0f && !penalty) {
    // Greedy: the argmax on the device, ties to the lower id as on the host.
    MOETIER_RETURN_IF_ERROR(cuda::ArgmaxRows(last_row_, 1, hp_.n_vocab, sampled_, stream));
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(host_sampled_, sampled_, sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
        "copying the sampled token to the host"));
    MOETIER_RETURN_IF_ERROR(ctx_->Sync("sampling"));
    return *host_sampled_;
  }
  // No top-k (or too many candidates): the host sampler reads the whole row.
  MOETIER_RETURN_IF_ERROR(CudaCall(
      cudaMemcpyAsync(host_row_.data(), last_row_, host_row_.size() * sizeof(float),
                      cudaMemcpyDeviceToHost, stream),
      "copying the logits row to the host"));
  MOETIER_RETURN_IF_ERROR(ctx_->Sync("sampling"));
  return sampler.Sample(host_row_);
}

absl::StatusOr<int32_t> CudaEngine::SampleStep(size_t step, Sampler& sampler) {
  if (step >= step_row_of_.size() || step_row_of_[step] == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "step %d of the last ForwardMany kept no logits row (it needs sample_in_engine, and "
        "no Forward since)",
        step));
  }
  // Sample draws from last_row_; ForwardMany leaves nothing for Sample itself.
  last_row_ = step_row_of_[step];
  absl::StatusOr<int32_t> token = Sample(sampler);
  last_row_ = nullptr;
  return token;
}

absl::StatusOr<int32_t> CudaEngine::SampleFromCandidates(Sampler& sampler, int m) {
  auto* stream = static_cast<cudaStream_t>(ctx_->stream());
  const std::span<const int32_t> penalized = sampler.PenalizedTokens();
  const int n_penalized = static_cast<int>(penalized.size());
  MOETIER_RETURN_IF_ERROR(cuda::TopCandidates(last_row_, hp_.n_vocab, m, candidate_scratch_,
                                              candidate_scratch_keys_, candidate_ids_,
                                              candidate_logits_, stream));
  if (n_penalized > 0) {
    // m = top_k + n_penalized, so both halves fit their kMaxTopCandidates.
    int32_t* host_ids = host_candidate_ids_ + cuda::kMaxTopCandidates;
    std::copy(penalized.begin(), penalized.end(), host_ids);
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(candidate_ids_ + cuda::kMaxTopCandidates, host_ids,
                        static_cast<size_t>(n_penalized) * sizeof(int32_t),
                        cudaMemcpyHostToDevice, stream),
        "copying the penalized tokens to the device"));
    MOETIER_RETURN_IF_ERROR(cuda::GatherLogits(last_row_, candidate_ids_ + cuda::kMaxTopCandidates,
                                               n_penalized, candidate_logits_ + m, stream));
  }
  MOETIER_RETURN_IF_ERROR(CudaCall(
      cudaMemcpyAsync(host_candidate_ids_, candidate_ids_, static_cast<size_t>(m) * sizeof(int32_t),
                      cudaMemcpyDeviceToHost, stream),
      "copying the sampler's candidates to the host"));
  MOETIER_RETURN_IF_ERROR(CudaCall(
      cudaMemcpyAsync(host_candidate_logits_, candidate_logits_,
                      static_cast<size_t>(m + n_penalized) * sizeof(float),
                      cudaMemcpyDeviceToHost, stream),
      "copying the sampler's candidate logits to the host"));
  MOETIER_RETURN_IF_ERROR(ctx_->Sync("sampling"));
  return sampler.SampleFromBest(
      std::span<const int32_t>(host_candidate_ids_, static_cast<size_t>(m)),
      std::span<const float>(host_candidate_logits_, static_cast<size_t>(m)),
      std::span<const float>(host_candidate_logits_ + m, static_cast<size_t>(n_penalized)));
}

absl::StatusOr<std::span<const float>> CudaEngine::LastLogitsRow() {
  if (last_row_ == nullptr) {
    return absl::FailedPreconditionError("no logits kept: run Forward first");
  }
  MOETIER_RETURN_IF_ERROR(ctx_->MakeCurrent());
  auto* stream = static_cast<cudaStream_t>(ctx_->stream());
  MOETIER_RETURN_IF_ERROR(CudaCall(
      cudaMemcpyAsync(host_row_.data(), last_row_, host_row_.size() * sizeof(float),
                      cudaMemcpyDeviceToHost, stream),
      "copying the logits row to the host"));
  MOETIER_RETURN_IF_ERROR(ctx_->Sync("reading the logits row"));
  return std::span<const float>(host_row_);
}

}  // namespace moetier
