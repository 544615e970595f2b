#include "engine/weight_checks.h"

#include <string>
#include <utility>

#include "absl/strings/str_format.h"

namespace moetier {
namespace {

absl::Status CheckMatrix(const WeightRef& ref, int64_t cols, int64_t rows, int64_t experts,
                         const BackendWeightSupport& support) {
  if (ref.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("tensor %s has no data", ref.name));
  }
  if (!support.matrix_type(ref.type)) {
    return absl::UnimplementedError(absl::StrFormat(
        "tensor %s is %s, which the %s backend cannot compute with; it supports %s (%s)", ref.name,
        std::string(TensorTypeName(ref.type)), support.backend, support.type_list,
        support.alternative));
  }
  if (ref.ne[0] != cols || ref.ne[1] != rows || ref.ne[2] != experts) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s has shape {%d, %d, %d}, expected {%d, %d, %d}", ref.name,
                        ref.ne[0], ref.ne[1], ref.ne[2], cols, rows, experts));
  }
  if (cols % GetTensorTypeInfo(ref.type).block_elems != 0 ||
      ref.row_bytes != static_cast<uint64_t>(TensorRowBytes(ref.type, cols))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s: rows of %d %s values are not whole blocks of %d bytes",
                        ref.name, cols, std::string(TensorTypeName(ref.type)), ref.row_bytes));
  }
  if (experts > 1 && ref.expert_stride_bytes < static_cast<uint64_t>(rows) * ref.row_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s: experts %d bytes apart overlap their %d rows", ref.name,
                        ref.expert_stride_bytes, rows));
  }
  return absl::OkStatus();
}

// `rows` vectors of n values (one per expert for the experts' biases).
absl::Status CheckVector(const WeightRef& ref, int64_t n, int64_t rows = 1) {
  if (ref.data == nullptr || ref.ne[0] != n || ref.ne[1] != rows || ref.ne[2] != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s has shape {%d, %d, %d}, expected {%d, %d}", ref.name, ref.ne[0],
                        ref.ne[1], ref.ne[2], n, rows));
  }
  if (!GetTensorTypeInfo(ref.type).has_codec || n % GetTensorTypeInfo(ref.type).block_elems != 0) {
    return absl::UnimplementedError(absl::StrFormat("tensor %s has type %s, which cannot be decoded",
                                                    ref.name, std::string(TensorTypeName(ref.type))));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckModelForBackend(const Model& model, const BackendWeightSupport& support) {
  const ModelHparams& hp = model.hparams;
  if (hp.n_layer < 1 || hp.n_embd < 1 || hp.n_head < 1 || hp.n_head_kv < 1 || hp.head_dim < 2 ||
      hp.n_rot < 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0 ||
      hp.n_head % hp.n_head_kv != 0 || hp.n_expert < 1 || hp.n_expert_used < 1 ||
      hp.n_expert_used > hp.n_expert || hp.n_ff_exp < 1 || hp.n_vocab < 1 ||
      static_cast<int>(model.weights.layers.size()) != hp.n_layer) {
    return absl::InvalidArgumentError(
        absl::StrFormat("inconsistent %s hyperparameters", hp.architecture));
  }
  const ModelWeights& w = model.weights;
  const int64_t q_dim = static_cast<int64_t>(hp.n_head) * hp.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(hp.n_head_kv) * hp.head_dim;
  absl::Status status;
  auto check = [&](absl::Status s) {
    if (status.ok() && !s.ok()) status = std::move(s);
  };
  check(CheckMatrix(w.token_embd, hp.n_embd, hp.n_vocab, 1, support));
  check(CheckMatrix(w.output, hp.n_embd, hp.n_vocab, 1, support));
  check(CheckVector(w.output_norm, hp.n_embd));
  for (size_t il = 0; il < w.layers.size() && status.ok(); ++il) {
    const LayerWeights& l = w.layers[il];
    if (!support.mixer(l.mixer) || !support.ffn(l.ffn)) {
      return absl::UnimplementedError(absl::StrFormat(
          "layer %d of this %s model is %s + %s, which the %s backend does not compute (%s)", il,
          hp.architecture, std::string(MixerKindName(l.mixer)), std::string(FfnKindName(l.ffn)),
          support.backend, support.alternative));
    }
    check(CheckVector(l.attn_norm, hp.n_embd));
    check(CheckVector(l.ffn_norm, hp.n_embd));
    if (IsAttention(l.mixer)) {
      switch (hp.qk_norm) {
        case QkNorm::kNone:
          break;
        case QkNorm::kPerHead:
          check(CheckVector(l.attn.q_norm, hp.head_dim));
          check(CheckVector(l.attn.k_norm, hp.head_dim));
          break;
        case QkNorm::kWhole:
          check(CheckVector(l.attn.q_norm, q_dim));
          check(CheckVector(l.attn.k_norm, kv_dim));
          break;
      }
      const int64_t q_rows = l.mixer == MixerKind::kGatedAttention ? 2 * q_dim : q_dim;
      check(CheckMatrix(l.attn.q, hp.n_embd, q_rows, 1, support));
      check(CheckMatrix(l.attn.k, hp.n_embd, kv_dim, 1, support));
      check(CheckMatrix(l.attn.v, hp.n_embd, kv_dim, 1, support));
      check(CheckMatrix(l.attn.output, q_dim, hp.n_embd, 1, support));
      if (l.attention_window < 0) {
        check(absl::InvalidArgumentError(
            absl::StrFormat("layer %d has an attention window of %d", il, l.attention_window)));
      }
      const std::pair<const WeightRef*, int64_t> biases[] = {{&l.attn.q_bias, q_rows},
                                                             {&l.attn.k_bias, kv_dim},
                                                             {&l.attn.v_bias, kv_dim},
                                                             {&l.attn.output_bias, hp.n_embd},
                                                             {&l.attn.sinks, hp.n_head}};
      for (const auto& [bias, n] : biases) {
        if (bias->present()) check(CheckVector(*bias, n));
      }
    } else {
      const DeltaNetParams& dn = hp.deltanet;
      const DeltaNetWeights& d = l.deltanet;
      check(CheckMatrix(d.qkv, hp.n_embd, dn.conv_dim(), 1, support));
      check(CheckMatrix(d.z, hp.n_embd, dn.value_dim(), 1, support));
      check(CheckMatrix(d.beta, hp.n_embd, dn.n_v_heads, 1, support));
      check(CheckMatrix(d.alpha, hp.n_embd, dn.n_v_heads, 1, support));
      check(CheckMatrix(d.out, dn.value_dim(), hp.n_embd, 1, support));
      if (d.conv.ne[0] != dn.conv_kernel || d.conv.ne[1] != dn.conv_dim() ||
          !GetTensorTypeInfo(d.conv.type).has_codec) {
        check(absl::InvalidArgumentError(absl::StrFormat(
            "tensor %s has shape {%d, %d}, expected {%d, %d}", d.conv.name, d.conv.ne[0],
            d.conv.ne[1], dn.conv_kernel, dn.conv_dim())));
      }
      check(CheckVector(d.dt_bias, dn.n_v_heads));
      check(CheckVector(d.a, dn.n_v_heads));
      check(CheckVector(d.norm, dn.d_v));
    }
    if (!HasRoutedExperts(l.ffn)) {
      check(CheckMatrix(l.dense.gate, hp.n_embd, hp.n_ff_dense, 1, support));
      check(CheckMatrix(l.dense.up, hp.n_embd, hp.n_ff_dense, 1, support));
      check(CheckMatrix(l.dense.down, hp.n_ff_dense, hp.n_embd, 1, support));
      continue;
    }
    check(CheckMatrix(l.moe.router, hp.n_embd, hp.n_expert, 1, support));
    if (l.moe.selection_bias.present()) check(CheckVector(l.moe.selection_bias, hp.n_expert));
    if (l.moe.router_bias.present()) check(CheckVector(l.moe.router_bias, hp.n_expert));
    const std::pair<const WeightRef*, int64_t> expert_biases[] = {
        {&l.moe.gate_exps_bias, hp.n_ff_exp},
        {&l.moe.up_exps_bias, hp.n_ff_exp},
        {&l.moe.down_exps_bias, hp.n_embd}};
    for (const auto& [bias, n] : expert_biases) {
      if (bias->present()) check(CheckVector(*bias, n, hp.n_expert));
    }
    // With an external expert source only the types and shapes matter: the
    // engine never reads these tensors' bytes.
    check(CheckMatrix(l.moe.gate_exps, hp.n_embd, hp.n_ff_exp, hp.n_expert, support));
    check(CheckMatrix(l.moe.up_exps, hp.n_embd, hp.n_ff_exp, hp.n_expert, support));
    check(CheckMatrix(l.moe.down_exps, hp.n_ff_exp, hp.n_embd, hp.n_expert, support));
    if (HasSharedExpert(l.ffn)) {
      if (l.moe.shared_gate_inp.present()) check(CheckVector(l.moe.shared_gate_inp, hp.n_embd));
      check(CheckMatrix(l.moe.shared_gate, hp.n_embd, hp.n_ff_shared, 1, support));
      check(CheckMatrix(l.moe.shared_up, hp.n_embd, hp.n_ff_shared, 1, support));
      check(CheckMatrix(l.moe.shared_down, hp.n_ff_shared, hp.n_embd, 1, support));
    }
  }
  return status;
}

absl::Status CheckEngineSizes(const ModelHparams& hp, int max_ctx, int max_sequences, int max_batch,
                              int batch_limit) {
  if (max_ctx < 1 || max_ctx > hp.n_ctx_train) {
    return absl::InvalidArgumentError(
        absl::StrFormat("context length %d is outside 1..%d (the model's training context)",
                        max_ctx, hp.n_ctx_train));
  }
  if (max_sequences < 1 || max_sequences > 1024) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sequence count %d is outside 1..1024", max_sequences));
  }
  if (max_batch < 1 || max_batch > batch_limit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch size %d is outside 1..%d", max_batch, batch_limit));
  }
  return absl::OkStatus();
}

}  // namespace moetier
