#include "blocks/cuda/deltanet_block.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_format.h"
#include "backend/cuda/cuda_kernels.h"
#include "blocks/cuda/cuda_check.h"

namespace moetier {
namespace {

// The chunked recurrence takes a long batch in pieces of at most this many
// tokens (16 chunks), so that its scratch stays small whatever max_batch
// is; the state carries from piece to piece as from batch to batch.
constexpr int kMaxChunkedTokens = 1024;

}  // namespace

CudaDeltaNetBlock::CudaDeltaNetBlock(const ModelHparams& hp, CudaContext& ctx,
                                     const CudaBatch& batch, int chunk_min_tokens)
    : hp_(hp),
      dn_(hp.deltanet),
      ctx_(ctx),
      batch_(batch),
      chunk_min_tokens_(chunk_min_tokens),
      layers_(static_cast<size_t>(hp.n_layer)) {}

absl::Status CudaDeltaNetBlock::Allocate(int max_batch) {
  if (dn_.n_v_heads == 0) return absl::OkStatus();  // no Gated DeltaNet layer
  const uint64_t b = static_cast<uint64_t>(max_batch);
  const uint64_t conv_dim = static_cast<uint64_t>(dn_.conv_dim());
  const uint64_t value_dim = static_cast<uint64_t>(dn_.value_dim());
  const uint64_t h_v = static_cast<uint64_t>(dn_.n_v_heads);
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(m_, b * conv_dim, "activations (DeltaNet qkv)"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(u_, b * conv_dim, "activations (DeltaNet conv)"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(z_, b * value_dim, "activations (DeltaNet z)"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(beta_, b * h_v, "activations (DeltaNet beta)"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(g_, b * h_v, "activations (DeltaNet decay)"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(o_, b * value_dim, "activations (DeltaNet output)"));
  if (max_batch >= chunk_min_tokens_) {
    scratch_floats_ = cuda::GatedDeltaRuleChunkedScratchFloats(
        std::min(max_batch, kMaxChunkedTokens), dn_.n_v_heads, dn_.d_k, dn_.d_v);
    MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(scratch_, static_cast<uint64_t>(scratch_floats_),
                                             "the chunked delta rule's scratch"));
  }
  return absl::OkStatus();
}

void CudaDeltaNetBlock::SetWeights(int layer, const CudaDeltaNetWeights& weights) {
  layers_[static_cast<size_t>(layer)] = weights;
}

uint64_t CudaDeltaNetBlock::conv_state_floats() const {
  return static_cast<uint64_t>(dn_.conv_kernel - 1) * static_cast<uint64_t>(dn_.conv_dim());
}

uint64_t CudaDeltaNetBlock::delta_state_floats() const {
  return static_cast<uint64_t>(dn_.n_v_heads) * dn_.d_k * dn_.d_v;
}

absl::StatusOr<CudaRecurrentLayer> CudaDeltaNetBlock::NewStateLayer(const std::string& what) {
  CudaRecurrentLayer state;
  // A kernel of 1 tap keeps no conv state; one float keeps the pointer valid.
  const uint64_t conv = std::max<uint64_t>(conv_state_floats(), 1);
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(state.conv, conv, what + " (conv)"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(state.delta, delta_state_floats(), what + " (delta)"));
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaMemset(state.conv, 0, conv * sizeof(float)), "cudaMemset of a recurrent state"));
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaMemset(state.delta, 0, delta_state_floats() * sizeof(float)),
                                   "cudaMemset of a recurrent state"));
  return state;
}

absl::Status CudaDeltaNetBlock::CopyState(const CudaRecurrentLayer& src,
                                          const CudaRecurrentLayer& dst) {
  auto* stream = static_cast<cudaStream_t>(ctx_.stream());
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaMemcpyAsync(dst.conv, src.conv, conv_state_floats() * sizeof(float),
                               cudaMemcpyDeviceToDevice, stream),
               "copying a conv state"));
  return CudaCall(cudaMemcpyAsync(dst.delta, src.delta, delta_state_floats() * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream),
                  "copying a delta rule state");
}

absl::Status CudaDeltaNetBlock::ClearState(const CudaRecurrentLayer& state) {
  auto* stream = static_cast<cudaStream_t>(ctx_.stream());
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaMemsetAsync(state.conv, 0, conv_state_floats() * sizeof(float), stream),
               "clearing a conv state"));
  return CudaCall(cudaMemsetAsync(state.delta, 0, delta_state_floats() * sizeof(float), stream),
                  "clearing a delta rule state");
}

absl::Status CudaDeltaNetBlock::Forward(int layer, std::span<const CudaRowSpan> spans,
                                        std::span<const CudaRecurrentLayer* const> state) {
  const CudaDeltaNetWeights& l = layers_[static_cast<size_t>(layer)];
  const cuda::CudaStream stream = ctx_.stream();
  const int n_embd = hp_.n_embd;
  const int conv_dim = dn_.conv_dim();
  const int key_dim = dn_.key_dim();
  const int value_dim = dn_.value_dim();
  const int h_v = dn_.n_v_heads;
  const int n = spans.back().row0 + spans.back().n;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].pos0 == 0) MOETIER_RETURN_IF_ERROR(ClearState(*state[i]));
  }
  MOETIER_RETURN_IF_ERROR(
      cuda::RmsNorm(batch_.x, l.attn_norm, n, n_embd, hp_.rms_eps, batch_.xn, stream));
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(l.qkv, batch_.xn, n, m_));
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(l.z, batch_.xn, n, z_));
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(l.beta, batch_.xn, n, beta_));
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(l.alpha, batch_.xn, n, g_));
  MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kDeltaNetProjections));

  // The conv runs along each sequence's own inputs and state.
  for (size_t i = 0; i < spans.size(); ++i) {
    const int64_t row0 = spans[i].row0;
    MOETIER_RETURN_IF_ERROR(cuda::CausalConv1dSilu(m_ + row0 * conv_dim, l.conv, state[i]->conv,
                                                   spans[i].n, conv_dim, dn_.conv_kernel,
                                                   u_ + row0 * conv_dim, stream));
  }
  // q and k L2-normed per key head (q also scaled), the gates per value head.
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dn_.d_k));
  MOETIER_RETURN_IF_ERROR(cuda::L2NormHeads(u_, n, dn_.n_k_heads, dn_.d_k, conv_dim, hp_.rms_eps,
                                            q_scale, stream));
  MOETIER_RETURN_IF_ERROR(cuda::L2NormHeads(u_ + key_dim, n, dn_.n_k_heads, dn_.d_k, conv_dim,
                                            hp_.rms_eps, 1.0f, stream));
  MOETIER_RETURN_IF_ERROR(
      cuda::DeltaRuleGates(beta_, g_, l.a, l.dt_bias, n, h_v, beta_, g_, stream));

  cuda::DeltaRuleArgs args{};
  args.qk_stride = conv_dim;
  args.v_stride = conv_dim;
  args.out_stride = value_dim;
  args.n_k_heads = dn_.n_k_heads;
  args.n_v_heads = h_v;
  args.d_k = dn_.d_k;
  args.d_v = dn_.d_v;
  args.v_heads_tiled = dn_.v_heads_tiled;
  for (size_t i = 0; i < spans.size(); ++i) {
    const CudaRowSpan& span = spans[i];
    args.state = state[i]->delta;
    const bool chunked = span.n >= chunk_min_tokens_;
    const int piece = chunked ? kMaxChunkedTokens : span.n;
    for (int t0 = 0; t0 < span.n; t0 += piece) {
      const int64_t row = span.row0 + t0;
      args.q = u_ + row * conv_dim;
      args.k = u_ + row * conv_dim + key_dim;
      args.v = u_ + row * conv_dim + 2 * key_dim;
      args.beta = beta_ + row * h_v;
      args.g = g_ + row * h_v;
      args.out = o_ + row * value_dim;
      args.n_tokens = std::min(piece, span.n - t0);
      MOETIER_RETURN_IF_ERROR(chunked ? cuda::GatedDeltaRuleChunked(args, scratch_,
                                                                    scratch_floats_, stream)
                                      : cuda::GatedDeltaRule(args, stream));
    }
  }
  // Gated RMSNorm of each head's output with silu(z), in place.
  MOETIER_RETURN_IF_ERROR(cuda::RmsNormGated(o_, l.norm, z_, static_cast<int64_t>(n) * h_v,
                                             dn_.d_v, hp_.rms_eps, o_, stream));
  MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kDeltaNet));
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(l.out, o_, n, batch_.sub_out));
  MOETIER_RETURN_IF_ERROR(
      cuda::AddInPlace(batch_.x, batch_.sub_out, static_cast<int64_t>(n) * n_embd, stream));
  return ctx_.MarkPhase(CudaPhase::kDeltaNetProjections);
}

}  // namespace moetier
