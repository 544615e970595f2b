#include "blocks/cuda/attention_block.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "backend/cuda/cuda_kernels.h"
#include "base/check.h"
#include "blocks/cuda/cuda_check.h"

namespace moetier {

CudaAttentionBlock::CudaAttentionBlock(const ModelHparams& hp, KvCacheTypes kv_types,
                                       CudaContext& ctx, const CudaBatch& batch)
    : hp_(hp),
      kv_types_(kv_types),
      ctx_(ctx),
      batch_(batch),
      layers_(static_cast<size_t>(hp.n_layer)) {}

absl::Status CudaAttentionBlock::Allocate(int max_batch, int max_ctx) {
  const uint64_t b = static_cast<uint64_t>(max_batch);
  const uint64_t q_dim = static_cast<uint64_t>(hp_.n_head) * hp_.head_dim;
  const uint64_t kv_dim = static_cast<uint64_t>(hp_.n_head_kv) * hp_.head_dim;
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(q_, b * q_dim, "activations (q)"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(k_, b * kv_dim, "activations (k)"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(v_, b * kv_dim, "activations (v)"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(attn_out_, b * q_dim, "activations (attention)"));
  if (std::any_of(layers_.begin(), layers_.end(), [](const CudaAttentionWeights& l) {
        return l.gated;
      })) {
    MOETIER_RETURN_IF_ERROR(
        ctx_.AllocBuffer(q_and_gate_, 2 * b * q_dim, "activations (q and output gate)"));
    MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(gate_, b * q_dim, "activations (output gate)"));
  }
  const std::vector<uint8_t>& sections = hp_.rope_pair_uses_position;
  if (!sections.empty()) {
    MOETIER_RETURN_IF_ERROR(
        ctx_.AllocBuffer(pair_uses_position_, sections.size(), "rope sections"));
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaMemcpy(pair_uses_position_, sections.data(),
                                                sections.size(), cudaMemcpyHostToDevice),
                                     "copying the rope sections to the device"));
  }
  const std::vector<float>& factors = hp_.rope_freq_factors;
  if (!factors.empty()) {
    MOETIER_RETURN_IF_ERROR(
        ctx_.AllocBuffer(rope_freq_factors_, factors.size(), "rope frequency factors"));
    MOETIER_RETURN_IF_ERROR(
        CudaCall(cudaMemcpy(rope_freq_factors_, factors.data(), factors.size() * sizeof(float),
                            cudaMemcpyHostToDevice),
                 "copying the rope frequency factors to the device"));
  }
  MOETIER_RETURN_IF_ERROR(
      ctx_.AllocBuffer(positions_, static_cast<uint64_t>(max_ctx), "rope positions"));
  std::vector<int32_t> positions(static_cast<size_t>(max_ctx));
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  return CudaCall(cudaMemcpy(positions_, positions.data(), positions.size() * sizeof(int32_t),
                             cudaMemcpyHostToDevice),
                  "copying rope positions to the device");
}

uint64_t CudaAttentionBlock::kv_bytes_per_token_per_layer() const {
  return static_cast<uint64_t>(hp_.n_head_kv) *
         (KvRowBytes(kv_types_.k, hp_.head_dim) + KvRowBytes(kv_types_.v, hp_.head_dim));
}

absl::StatusOr<CudaKvLayer> CudaAttentionBlock::NewKvLayer(int capacity, int layer) {
  CudaKvLayer kv;
  kv.k_head_stride = static_cast<int64_t>(capacity) *
                     static_cast<int64_t>(KvRowBytes(kv_types_.k, hp_.head_dim));
  kv.v_head_stride = static_cast<int64_t>(capacity) *
                     static_cast<int64_t>(KvRowBytes(kv_types_.v, hp_.head_dim));
  const uint64_t k_bytes = static_cast<uint64_t>(kv.k_head_stride) * hp_.n_head_kv;
  const uint64_t v_bytes = static_cast<uint64_t>(kv.v_head_stride) * hp_.n_head_kv;
  const std::string what =
      absl::StrFormat("the KV cache of layer %d (%d tokens)", layer, capacity);
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(kv.k, k_bytes, what));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(kv.v, v_bytes, what));
  // Never read before written, but zeros keep a stray read finite.
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaMemset(kv.k, 0, k_bytes), "cudaMemset of the KV cache"));
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaMemset(kv.v, 0, v_bytes), "cudaMemset of the KV cache"));
  return kv;
}

void CudaAttentionBlock::SetWeights(int layer, const CudaAttentionWeights& weights) {
  layers_[static_cast<size_t>(layer)] = weights;
}

absl::Status CudaAttentionBlock::Forward(int layer, std::span<const CudaRowSpan> spans,
                                         std::span<const CudaKvLayer* const> kv,
                                         const int32_t* pos0_on_device) {
  MOETIER_CHECK(pos0_on_device == nullptr || (spans.size() == 1 && spans[0].n == 1));
  const CudaAttentionWeights& l = layers_[static_cast<size_t>(layer)];
  const cuda::CudaStream stream = ctx_.stream();
  const int n_embd = hp_.n_embd;
  const int head_dim = hp_.head_dim;
  const int q_dim = hp_.n_head * head_dim;
  const int kv_dim = hp_.n_head_kv * head_dim;
  const int n = spans.back().row0 + spans.back().n;
  MOETIER_RETURN_IF_ERROR(
      cuda::RmsNorm(batch_.x, l.attn_norm, n, n_embd, hp_.rms_eps, batch_.xn, stream));
  // A gated layer's q rows hold each head's head_dim q values, then its
  // head_dim gate values; its bias covers both.
  struct Projection {
    const DeviceMatrix& weights;
    const float* bias;
    float* out;
    int rows;
  };
  for (const Projection& p :
       {Projection{l.q, l.q_bias, l.gated ? q_and_gate_ : q_, l.gated ? 2 * q_dim : q_dim},
        Projection{l.k, l.k_bias, k_, kv_dim}, Projection{l.v, l.v_bias, v_, kv_dim}}) {
    MOETIER_RETURN_IF_ERROR(ctx_.MatMul(p.weights, batch_.xn, n, p.out));
    if (p.bias != nullptr) {
      MOETIER_RETURN_IF_ERROR(cuda::AddRowBias(p.out, p.bias, n, p.rows, stream));
    }
  }
  if (l.gated) {
    MOETIER_RETURN_IF_ERROR(cuda::SplitRowHalves(q_and_gate_, static_cast<int64_t>(n) * hp_.n_head,
                                                 head_dim, q_, gate_, stream));
  }
  // A norm over the whole projection runs here; a per-head norm runs with
  // the rope below (QkNormRope: one launch for both heads' norm and rope).
  if (hp_.qk_norm == QkNorm::kWhole) {
    MOETIER_RETURN_IF_ERROR(cuda::RmsNorm(q_, l.q_norm, n, q_dim, hp_.rms_eps, q_, stream));
    MOETIER_RETURN_IF_ERROR(cuda::RmsNorm(k_, l.k_norm, n, kv_dim, hp_.rms_eps, k_, stream));
  }
  MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kAttentionProjections));
  const bool per_head_norm = hp_.qk_norm == QkNorm::kPerHead;
  const bool adjacent = hp_.rope_style == RopeStyle::kNorm;
  const float scale = hp_.attention_scale > 0.0f
                          ? hp_.attention_scale
                          : 1.0f / std::sqrt(static_cast<float>(head_dim));
  // Per sequence: rope at its positions, its keys and values into its
  // cache, and attention over that cache.
  for (size_t i = 0; i < spans.size(); ++i) {
    const CudaRowSpan& span = spans[i];
    const CudaKvLayer& cache = *kv[i];
    const int64_t row0 = span.row0;
    float* q = q_ + row0 * q_dim;
    float* k = k_ + row0 * kv_dim;
    float* v = v_ + row0 * kv_dim;
    // A device-held position is the one token's positions array.
    const int64_t pos0 = pos0_on_device != nullptr ? 0 : span.pos0;
    const int32_t* positions = pos0_on_device != nullptr ? pos0_on_device : positions_ + span.pos0;
    MOETIER_RETURN_IF_ERROR(cuda::QkNormRope(
        q, k, per_head_norm ? l.q_norm : nullptr, per_head_norm ? l.k_norm : nullptr, positions,
        span.n, hp_.n_head, hp_.n_head_kv, head_dim, hp_.n_rot, hp_.rope_freq_base,
        hp_.rope_scaling, rope_freq_factors_, adjacent, pair_uses_position_, hp_.rms_eps, stream));
    // Head-major cache: KV head g's rows, one per position, are contiguous.
    const cuda::KvCacheView keys{cache.k, kv_types_.k, cache.k_head_stride,
                                 static_cast<int64_t>(KvRowBytes(kv_types_.k, head_dim))};
    const cuda::KvCacheView values{cache.v, kv_types_.v, cache.v_head_stride,
                                   static_cast<int64_t>(KvRowBytes(kv_types_.v, head_dim))};
    MOETIER_RETURN_IF_ERROR(cuda::StoreKv(k, span.n, hp_.n_head_kv, head_dim, cache.k,
                                          keys.type, keys.head_stride, keys.row_stride,
                                          pos0, stream, pos0_on_device));
    MOETIER_RETURN_IF_ERROR(cuda::StoreKv(v, span.n, hp_.n_head_kv, head_dim, cache.v,
                                          values.type, values.head_stride, values.row_stride,
                                          pos0, stream, pos0_on_device));
    MOETIER_RETURN_IF_ERROR(cuda::Attention(q, keys, values, span.n, pos0, hp_.n_head,
                                            hp_.n_head_kv, head_dim, scale,
                                            attn_out_ + row0 * q_dim, stream, pos0_on_device));
  }
  if (l.gated) {
    MOETIER_RETURN_IF_ERROR(
        cuda::MulSigmoid(attn_out_, gate_, static_cast<int64_t>(n) * q_dim, stream));
  }
  MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kAttention));
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(l.output, attn_out_, n, batch_.sub_out));
  MOETIER_RETURN_IF_ERROR(
      cuda::AddInPlace(batch_.x, batch_.sub_out, static_cast<int64_t>(n) * n_embd, stream));
  return ctx_.MarkPhase(CudaPhase::kAttentionProjections);
}

}  // namespace moetier
