// Causal GQA softmax attention on the CPU, for every architecture whose
// layers mix with MixerKind::kAttention or kGatedAttention: q/k/v
// projections from one prepared input, the q/k norm the model asks for
// (none, per head, over the whole projection), rope (NEOX or NORM pairs,
// over the first n_rot dims, some pairs held at position 0 for
// multi-section rope), the KV cache of the sequence, attention (over a
// sliding window where the layer has one, with attention sinks where it has
// them), the sigmoid output gate of a gated layer, and the output
// projection (and its bias) added into the residual stream.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "blocks/cpu/cpu_batch.h"
#include "blocks/cpu/mat_runner.h"
#include "model/kv_cache_types.h"
#include "model/model.h"

namespace moetier {

// One attention layer's KV cache for one sequence: [n_head_kv][capacity]
// rows of head_dim values each, in the block's KV cache types (head-major,
// so that attention streams each KV head's rows contiguously).
struct CpuKvLayer {
  AlignedBytes k, v;
};

class CpuAttentionBlock {
 public:
  // `layers` (the engine's weight table) and `batch` must outlive the
  // block. Sized for sequences of up to max_ctx positions, whose keys and
  // values are stored as `kv_types` says (checked by the engine with
  // CheckKvCacheTypes).
  CpuAttentionBlock(const ModelHparams& hp, const std::vector<LayerWeights>& layers, int max_ctx,
                    const KvCacheTypes& kv_types, CpuBatch& batch);

  // A KV cache for one sequence of `capacity` positions, for one layer.
  CpuKvLayer NewKvLayer(int capacity) const;
  uint64_t kv_bytes_per_token() const;  // every attention layer, K and V

  // The rotary angles of the batch's rows, which `spans` cover in order
  // from row 0 (cpu_batch.h); once per batch, before its first Forward.
  void BeginBatch(std::span<const CpuRowSpan> spans);
  // x += Attention(RMSNorm(x; attn_norm)) for the batch's rows, span i
  // against its sequence's KV cache kv[i]: its keys and values go there at
  // its positions, and each of its tokens attends to positions 0..its own.
  void Forward(int layer, std::span<const CpuRowSpan> spans,
               std::span<const CpuKvLayer* const> kv);

  uint64_t allocated_bytes() const;

 private:
  // A layer's norm weights and projection biases, decoded to f32 once
  // (empty where the layer has none).
  struct LayerVectors {
    std::vector<float> attn_norm, q_norm, k_norm;
    std::vector<float> q_bias, k_bias, v_bias, output_bias;
    std::vector<float> sinks;
  };

  const ModelHparams& hp_;
  const std::vector<LayerWeights>& layers_;
  const int max_ctx_;
  const KvCacheTypes kv_types_;
  // F32 keys and values run AttentionHeads; any other type
  // AttentionHeadsStored.
  const bool stored_kv_;
  CpuBatch& batch_;
  CpuMatRunner& runner_;
  std::vector<LayerVectors> vectors_;  // per layer

  // Per batch row, from BeginBatch: its position and its span.
  std::vector<int> row_pos_, row_span_;
  int rows_ = 0;
  AlignedBytes q_;                    // [B][n_head * head_dim]
  AlignedBytes gate_;                 // [B][n_head * head_dim] (gated layers)
  AlignedBytes q_and_gate_;           // [B][2 * n_head * head_dim] (gated layers)
  AlignedBytes k_;                    // [B][n_head_kv * head_dim]
  AlignedBytes v_;                    // [B][n_head_kv * head_dim]
  AlignedBytes attn_out_;             // [B][n_head * head_dim]
  AlignedBytes rope_cos_, rope_sin_;  // [B][n_rot / 2]
  AlignedBytes scores_;               // [n_threads][n_head / n_head_kv][max_ctx + 1]
  AlignedBytes kv_queries_;           // [n_threads][n_head / n_head_kv] query rows (stored KV)
  AlignedBytes act_attn_;             // prepared attn_out rows for the output projection
};

}  // namespace moetier
