// Causal GQA softmax attention on one GPU, for every architecture whose
// layers mix with MixerKind::kAttention or kGatedAttention: the q/k/v
// projections, the q/k norm the model asks for (none, per head, over the
// whole projection), rope (NEOX or NORM pairs over the first n_rot dims,
// some pairs held at position 0 for multi-section rope), the sequence's KV
// cache (keys and values each f32, f16, q8_0 or q4_0, head-major like the
// CPU engine's), attention, the sigmoid output gate of a gated layer (q
// and gate interleaved per head in W_q's rows) and the output projection
// added into the residual stream.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "blocks/cuda/cuda_context.h"
#include "model/kv_cache_types.h"
#include "model/model.h"

namespace moetier {

// A batch's rows of one sequence: rows row0 .. row0 + n - 1 are its tokens
// at positions pos0 .. pos0 + n - 1. A batch may hold several sequences'
// rows (ForwardMany); the blocks that keep per-sequence state (attention's
// KV cache, DeltaNet's recurrent state) run each span against its own
// sequence's state, and everything else runs over all rows at once.
struct CudaRowSpan {
  int row0 = 0;
  int n = 0;
  int pos0 = 0;
};

// The batch's residual stream and sublayer buffers on the device, shared by
// the blocks ([max_batch][n_embd] floats each).
struct CudaBatch {
  float* x = nullptr;        // residual stream
  float* xn = nullptr;       // normed sublayer input
  float* sub_out = nullptr;  // a block's output before the residual add
};

// One attention layer's weights on the device (norms decoded to fp32).
struct CudaAttentionWeights {
  float* attn_norm = nullptr;
  float* q_norm = nullptr;  // null without a q/k norm
  float* k_norm = nullptr;
  // Added to the q (gated: q and gate), k and v projections; null: none.
  float* q_bias = nullptr;
  float* k_bias = nullptr;
  float* v_bias = nullptr;
  // q: {n_embd, n_head * head_dim}, or for a gated layer {n_embd, 2 *
  // n_head * head_dim}, each head's q rows followed by its gate rows.
  DeviceMatrix q, k, v, output;
  bool gated = false;  // MixerKind::kGatedAttention
};

// One layer of one sequence's KV cache: [n_head_kv][capacity] rows of
// head_dim values each, keys and values in the block's cache types.
struct CudaKvLayer {
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  int64_t k_head_stride = 0;  // bytes: capacity * the key row's bytes
  int64_t v_head_stride = 0;  // bytes: capacity * the value row's bytes
};

class CudaAttentionBlock {
 public:
  // `hp`, `ctx` and `batch` must outlive the block. The key and value
  // types are among cuda::kCudaKvCacheTypes.
  CudaAttentionBlock(const ModelHparams& hp, KvCacheTypes kv_types, CudaContext& ctx,
                     const CudaBatch& batch);

  // Its activations for batches of up to max_batch tokens and the rope
  // positions 0 .. max_ctx - 1; after every layer's SetWeights.
  absl::Status Allocate(int max_batch, int max_ctx);
  // A KV cache layer of `capacity` positions, zeroed.
  absl::StatusOr<CudaKvLayer> NewKvLayer(int capacity, int layer);
  uint64_t kv_bytes_per_token_per_layer() const;
  void SetWeights(int layer, const CudaAttentionWeights& weights);

  // x += Attention(RMSNorm(x; attn_norm)) for the batch's rows, which
  // `spans` cover from row 0 in order: span i's keys and values go into
  // kv[i], and its tokens attend to that sequence only. With
  // `pos0_on_device` (one span of one token: a captured decode step) the
  // token's position is the int32 there, read when the kernels run, and the
  // span's pos0 is not used.
  absl::Status Forward(int layer, std::span<const CudaRowSpan> spans,
                       std::span<const CudaKvLayer* const> kv,
                       const int32_t* pos0_on_device = nullptr);

 private:
  const ModelHparams& hp_;
  const KvCacheTypes kv_types_;
  CudaContext& ctx_;
  const CudaBatch& batch_;
  std::vector<CudaAttentionWeights> layers_;
  int32_t* positions_ = nullptr;  // [max_ctx]: 0, 1, 2, ... (rope positions)
  // [n_rot / 2] flags, multi-section rope only: which pairs rotate by the
  // position (null: all).
  uint8_t* pair_uses_position_ = nullptr;
  // [n_rot / 2] divisors of the rope angles (llama's rope_freqs; null: none).
  float* rope_freq_factors_ = nullptr;
  float* q_ = nullptr;            // [B][n_head * head_dim]
  float* q_and_gate_ = nullptr;   // [B][2 * n_head * head_dim], gated layers
  float* gate_ = nullptr;         // [B][n_head * head_dim], gated layers
  float* k_ = nullptr;            // [B][n_head_kv * head_dim]
  float* v_ = nullptr;            // [B][n_head_kv * head_dim]
  float* attn_out_ = nullptr;     // [B][n_head * head_dim]
};

}  // namespace moetier
