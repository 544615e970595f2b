#include "model/model.h"

#include <algorithm>
#include <vector>

#include "gguf/tensor/quant_codec.h"

namespace moetier {

std::vector<float> DecodedValues(const WeightRef& ref) {
  if (!ref.present()) return {};
  std::vector<float> values(static_cast<size_t>(ref.ne[0] * ref.ne[1]));
  for (int64_t r = 0; r < ref.ne[1]; ++r) {
    DequantizeRow(ref.type, ref.row(r), values.data() + r * ref.ne[0], ref.ne[0]);
  }
  return values;
}

std::string_view MixerKindName(MixerKind kind) {
  switch (kind) {
    case MixerKind::kAttention:
      return "attention";
    case MixerKind::kGatedAttention:
      return "gated attention";
    case MixerKind::kGatedDeltaNet:
      return "Gated DeltaNet";
  }
  return "unknown mixer";
}

std::string_view FfnKindName(FfnKind kind) {
  switch (kind) {
    case FfnKind::kMoe:
      return "routed experts";
    case FfnKind::kMoeWithSharedExpert:
      return "routed experts with a shared expert";
    case FfnKind::kDense:
      return "dense feed-forward";
  }
  return "unknown feed-forward";
}

namespace {

template <typename Weights, typename Ref>
std::vector<Ref*> RefsOf(Weights& w, bool include_experts) {
  std::vector<Ref*> refs = {&w.token_embd, &w.output_norm, &w.output};
  for (auto& l : w.layers) {
    for (Ref* r : {&l.attn_norm,
                   &l.attn.q,
                   &l.attn.k,
                   &l.attn.v,
                   &l.attn.output,
                   &l.attn.q_norm,
                   &l.attn.k_norm,
                   &l.attn.q_bias,
                   &l.attn.k_bias,
                   &l.attn.v_bias,
                   &l.attn.output_bias,
                   &l.attn.sinks,
                   &l.deltanet.qkv,
                   &l.deltanet.z,
                   &l.deltanet.conv,
                   &l.deltanet.dt_bias,
                   &l.deltanet.a,
                   &l.deltanet.beta,
                   &l.deltanet.alpha,
                   &l.deltanet.norm,
                   &l.deltanet.out,
                   &l.ffn_norm,
                   &l.moe.router,
                   &l.moe.router_bias,
                   &l.moe.gate_exps_bias,
                   &l.moe.up_exps_bias,
                   &l.moe.down_exps_bias,
                   &l.moe.shared_gate_inp,
                   &l.moe.shared_gate,
                   &l.moe.shared_up,
                   &l.moe.shared_down,
                   &l.moe.selection_bias,
                   &l.dense.gate,
                   &l.dense.up,
                   &l.dense.down}) {
      refs.push_back(r);
    }
    if (include_experts) {
      for (Ref* r : {&l.moe.gate_exps, &l.moe.up_exps, &l.moe.down_exps}) refs.push_back(r);
    }
  }
  std::erase_if(refs, [](Ref* r) { return !r->present(); });
  return refs;
}

}  // namespace

std::vector<bool> RoutedLayers(const ModelWeights& w) {
  std::vector<bool> routed;
  for (const LayerWeights& l : w.layers) routed.push_back(HasRoutedExperts(l.ffn));
  return routed;
}

SequenceStateSize SequenceStateSizeOf(const Model& model, const KvCacheTypes& kv_types) {
  const ModelHparams& hp = model.hparams;
  const DeltaNetParams& dn = hp.deltanet;
  SequenceStateSize size;
  for (const LayerWeights& l : model.weights.layers) {
    if (IsAttention(l.mixer)) {
      size.kv_bytes_per_token +=
          static_cast<uint64_t>(hp.n_head_kv) *
          (KvRowBytes(kv_types.k, hp.head_dim) + KvRowBytes(kv_types.v, hp.head_dim));
    } else if (l.mixer == MixerKind::kGatedDeltaNet) {
      size.recurrent_bytes += (static_cast<uint64_t>(dn.conv_kernel - 1) * dn.conv_dim() +
                               static_cast<uint64_t>(dn.n_v_heads) * dn.d_k * dn.d_v) *
                              sizeof(float);
    }
  }
  return size;
}

std::vector<const WeightRef*> WeightRefs(const ModelWeights& w, bool include_experts) {
  return RefsOf<const ModelWeights, const WeightRef>(w, include_experts);
}

std::vector<WeightRef*> WeightRefs(ModelWeights& w, bool include_experts) {
  return RefsOf<ModelWeights, WeightRef>(w, include_experts);
}

uint64_t KvBytesReadAt(const Model& model, const KvCacheTypes& kv_types, int64_t position) {
  const ModelHparams& hp = model.hparams;
  const uint64_t row_bytes =
      static_cast<uint64_t>(hp.n_head_kv) *
      (KvRowBytes(kv_types.k, hp.head_dim) + KvRowBytes(kv_types.v, hp.head_dim));
  uint64_t bytes = 0;
  for (const LayerWeights& l : model.weights.layers) {
    if (!IsAttention(l.mixer)) continue;
    const int64_t seen =
        l.attention_window > 0 ? std::min<int64_t>(l.attention_window, position + 1) : position + 1;
    bytes += row_bytes * static_cast<uint64_t>(seen);
  }
  return bytes;
}

namespace {

uint64_t TensorBytes(const WeightRef& ref) {
  return ref.row_bytes * static_cast<uint64_t>(ref.ne[1]) * static_cast<uint64_t>(ref.ne[2]);
}

}  // namespace

uint64_t DenseWeightBytesPerStep(const Model& model) {
  const ModelWeights& w = model.weights;
  uint64_t bytes = w.token_embd.row_bytes;
  for (const WeightRef* ref : WeightRefs(w, /*include_experts=*/false)) {
    if (ref != &w.token_embd) bytes += TensorBytes(*ref);
  }
  // An expert's bias rows are read with the expert, per routed expert
  // (DecodeWeightBytesPerToken), not all of them every step.
  for (const LayerWeights& l : w.layers) {
    bytes -= TensorBytes(l.moe.gate_exps_bias) + TensorBytes(l.moe.up_exps_bias) +
             TensorBytes(l.moe.down_exps_bias);
  }
  return bytes;
}

uint64_t DecodeWeightBytesPerToken(const Model& model) {
  uint64_t bytes = DenseWeightBytesPerStep(model);
  for (const LayerWeights& l : model.weights.layers) {
    bytes += static_cast<uint64_t>(model.hparams.n_expert_used) *
             (l.moe.gate_exps.row_bytes * static_cast<uint64_t>(l.moe.gate_exps.ne[1]) +
              l.moe.up_exps.row_bytes * static_cast<uint64_t>(l.moe.up_exps.ne[1]) +
              l.moe.down_exps.row_bytes * static_cast<uint64_t>(l.moe.down_exps.ne[1]) +
              l.moe.gate_exps_bias.row_bytes + l.moe.up_exps_bias.row_bytes +
              l.moe.down_exps_bias.row_bytes);
  }
  return bytes;
}

}  // namespace moetier
