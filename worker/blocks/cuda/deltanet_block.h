// The Gated DeltaNet mixer on one GPU (MixerKind::kGatedDeltaNet; SPEC.md
// §3.3–3.4), the counterpart of blocks/cpu/deltanet_block.h with the same
// arithmetic:
//
//   m = W_qkv x, z = W_z x, beta = sigmoid(W_beta x),
//   g = a * softplus(W_alpha x + dt_bias)                     (per value head)
//   u = silu(causal depthwise conv of m over the last K inputs)
//   q, k = L2-normed heads of u (q scaled by 1/sqrt(d_k)), v = the rest
//   per value head j (reading key head k_head_of(j)), token by token:
//     S <- exp(g) S;  S <- S + k (beta (v - S^T k))^T;  o = S^T q
//   x += W_out (RMSNorm(o_j) * ssm_norm * silu(z_j))_j
//
// Batches of at least `chunk_min_tokens` tokens run the recurrence in
// chunks of 64 (GatedDeltaRuleChunked), shorter ones token by token
// (GatedDeltaRule); the two agree within fp32 rounding.
//
// A sequence's state is the last K - 1 conv inputs and one d_k x d_v
// matrix per value head (CudaRecurrentLayer), fp32 in device memory; the
// matrix is stored transposed ([n_v_heads][d_v][d_k]), as the kernels read
// it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "blocks/cuda/attention_block.h"
#include "blocks/cuda/cuda_context.h"
#include "model/model.h"

namespace moetier {

// One Gated DeltaNet layer's weights on the device (small tensors decoded
// to fp32).
struct CudaDeltaNetWeights {
  float* attn_norm = nullptr;  // [n_embd]
  float* conv = nullptr;       // [conv_dim][conv_kernel], taps oldest first
  float* dt_bias = nullptr;    // [n_v_heads]
  float* a = nullptr;          // [n_v_heads]
  float* norm = nullptr;       // [d_v]
  DeviceMatrix qkv, z, beta, alpha, out;
};

// One Gated DeltaNet layer's state for one sequence.
struct CudaRecurrentLayer {
  float* conv = nullptr;   // [conv_kernel - 1][conv_dim], oldest first
  float* delta = nullptr;  // [n_v_heads][d_v][d_k]
};

class CudaDeltaNetBlock {
 public:
  // `hp`, `ctx` and `batch` must outlive the block.
  CudaDeltaNetBlock(const ModelHparams& hp, CudaContext& ctx, const CudaBatch& batch,
                    int chunk_min_tokens);

  // Its activations for batches of up to max_batch tokens (nothing when
  // no layer is a Gated DeltaNet layer).
  absl::Status Allocate(int max_batch);
  void SetWeights(int layer, const CudaDeltaNetWeights& weights);
  // A zeroed state for one sequence and layer; `what` names it in errors.
  absl::StatusOr<CudaRecurrentLayer> NewStateLayer(const std::string& what);
  uint64_t conv_state_floats() const;
  uint64_t delta_state_floats() const;
  // dst = src, enqueued on the compute stream (checkpoints).
  absl::Status CopyState(const CudaRecurrentLayer& src, const CudaRecurrentLayer& dst);
  // The state of a sequence that has seen nothing, enqueued likewise.
  absl::Status ClearState(const CudaRecurrentLayer& state);

  // x += DeltaNet(RMSNorm(x; attn_norm)) for the batch's rows, which
  // `spans` cover from row 0 in order (attention_block.h): span i's tokens
  // follow what state[i] has seen (nothing when its pos0 is 0: the state
  // is cleared first), and state[i] then holds what follows them. Each
  // span runs by chunks or token by token on its own length, as it would
  // alone.
  absl::Status Forward(int layer, std::span<const CudaRowSpan> spans,
                       std::span<const CudaRecurrentLayer* const> state);

 private:
  const ModelHparams& hp_;
  const DeltaNetParams& dn_;
  CudaContext& ctx_;
  const CudaBatch& batch_;
  const int chunk_min_tokens_;
  std::vector<CudaDeltaNetWeights> layers_;
  float* m_ = nullptr;        // [B][conv_dim] projection before the conv
  float* u_ = nullptr;        // [B][conv_dim] after conv and SiLU: q | k | v
  float* z_ = nullptr;        // [B][value_dim]
  float* beta_ = nullptr;     // [B][n_v_heads], becomes sigmoid(beta)
  float* g_ = nullptr;        // [B][n_v_heads], alpha, becomes the log decay
  float* o_ = nullptr;        // [B][value_dim] the heads' outputs, then the gated norm
  float* scratch_ = nullptr;  // the chunked recurrence's, for kMaxChunkedTokens tokens
  int64_t scratch_floats_ = 0;
};

}  // namespace moetier
