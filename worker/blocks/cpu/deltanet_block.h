// The Gated DeltaNet mixer on the CPU (MixerKind::kGatedDeltaNet; SPEC.md
// §3.3–3.4): linear attention whose memory is a recurrent state instead of
// a KV cache.
//
//   m = W_qkv x, z = W_z x, beta = sigmoid(W_beta x),
//   g = a * softplus(W_alpha x + dt_bias)                     (per value head)
//   u = silu(causal depthwise conv of m over the last K inputs)
//   q, k = L2-normed heads of u (q scaled by 1/sqrt(d_k)), v = the rest
//   per value head j (reading key head k_head_of(j)), token by token:
//     S <- exp(g) S;  S <- S + k (beta (v - S^T k))^T;  o = S^T q
//   x += W_out (RMSNorm(o_j) * ssm_norm * silu(z_j))_j
//
// The state of a sequence is the last K - 1 conv inputs and one d_k × d_v
// matrix per value head (CpuRecurrentLayer), fp32.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "blocks/cpu/cpu_batch.h"
#include "blocks/cpu/mat_runner.h"
#include "model/model.h"

namespace moetier {

// One Gated DeltaNet layer's state for one sequence.
struct CpuRecurrentLayer {
  AlignedBytes conv;   // [conv_kernel - 1][conv_dim], oldest first
  AlignedBytes delta;  // [n_v_heads][d_k][d_v]
};

class CpuDeltaNetBlock {
 public:
  // `layers` (the engine's weight table) and `batch` must outlive the block.
  CpuDeltaNetBlock(const ModelHparams& hp, const std::vector<LayerWeights>& layers,
                   CpuBatch& batch);

  // A zeroed state for one sequence and layer.
  CpuRecurrentLayer NewStateLayer() const;
  uint64_t state_bytes_per_layer() const;

  // x += DeltaNet(RMSNorm(x; attn_norm)) for the batch's rows, span i
  // (cpu_batch.h; the spans cover the rows in order from row 0) following
  // what its sequence's state[i] has seen (nothing when its pos0 is 0: the
  // state is cleared first); state[i] then holds what follows them.
  void Forward(int layer, std::span<const CpuRowSpan> spans,
               std::span<CpuRecurrentLayer* const> state);

  uint64_t allocated_bytes() const;

 private:
  struct Decoded {  // a layer's small tensors in fp32
    std::vector<float> attn_norm, conv, dt_bias, a, norm;
  };
  // u = silu(conv(m)) for the span's rows, and its conv state advanced.
  void Convolve(const Decoded& d, CpuRecurrentLayer& state, const CpuRowSpan& span);
  // The delta rule for value heads [j0, j1) over the span's rows, on pool
  // thread `thread` (whose chunk scratch it uses).
  void Recur(CpuRecurrentLayer& state, const CpuRowSpan& span, int j0, int j1, int thread);

  // Batches of at least this many tokens run the chunked delta rule, whose
  // per-chunk matrices beat two passes over the state per token.
  static constexpr int kChunkedMinTokens = 8;
  static constexpr int kChunkTokens = 64;

  const ModelHparams& hp_;
  const DeltaNetParams& dn_;
  const std::vector<LayerWeights>& layers_;
  CpuBatch& batch_;
  CpuMatRunner& runner_;
  std::vector<Decoded> decoded_;  // per layer (empty for other mixers)

  AlignedBytes m_;        // [B][conv_dim] projection before the conv
  AlignedBytes u_;        // [B][conv_dim] after conv and SiLU: q | k | v
  AlignedBytes z_;        // [B][value_dim]
  AlignedBytes beta_;     // [B][n_v_heads], becomes sigmoid(beta)
  AlignedBytes alpha_;    // [B][n_v_heads], becomes g, the log of the decay
  AlignedBytes o_;        // [B][value_dim] the heads' outputs, then the gated norm
  AlignedBytes act_out_;  // prepared o rows for the output projection
  AlignedBytes chunk_scratch_;  // per pool thread, for the chunked delta rule
  int64_t chunk_scratch_floats_ = 0;
};

}  // namespace moetier
