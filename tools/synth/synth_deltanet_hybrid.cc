#include "synth/synth_deltanet_hybrid.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace moetier {
namespace {

constexpr int64_t kMaxConvKernel = 64;

void AddDeltaNetLayer(const SynthShape& s, const SynthScales& scale, int64_t l,
                      SynthDeltaNetProjections projections, SynthTensorTable& table) {
  using K = SynthTensorKind;
  const int64_t h_v = s.ssm_time_step_rank;
  const int64_t d_v = s.ssm_inner_size / h_v;
  const int64_t key_dim = s.ssm_group_count * s.ssm_state_size;
  const int64_t value_dim = s.ssm_inner_size;
  const int64_t conv_dim = 2 * key_dim + value_dim;
  if (projections == SynthDeltaNetProjections::kLegacySsmIn) {
    table.Add(SynthBlockName(l, "ssm_in"), K::kSsmIn, l, {s.n_embd, conv_dim + value_dim}, 0.0f,
              scale.inv_sqrt_embd);
  } else {
    table.Add(SynthBlockName(l, "attn_qkv"), K::kAttnQkv, l, {s.n_embd, conv_dim}, 0.0f,
              scale.inv_sqrt_embd);
    table.Add(SynthBlockName(l, "attn_gate"), K::kAttnGate, l, {s.n_embd, value_dim}, 0.0f,
              scale.inv_sqrt_embd);
  }
  table.Add(SynthBlockName(l, "ssm_conv1d"), K::kSsmConv1d, l, {s.ssm_conv_kernel, conv_dim}, 0.0f,
            scale.FanIn(s.ssm_conv_kernel));
  table.Add(SynthBlockRawName(l, "ssm_dt.bias"), K::kSsmDtBias, l, {h_v}, 1.0f, 0.25f);
  SynthTensor& a =
      table.Add(SynthBlockRawName(l, "ssm_a"), K::kSsmA, l, {h_v}, 0.0f, std::log(16.0f));
  a.distribution = SynthDistribution::kNegativeExpUniform;
  if (projections == SynthDeltaNetProjections::kSeparate) {
    table.Add(SynthBlockName(l, "ssm_beta"), K::kSsmBeta, l, {s.n_embd, h_v}, 0.0f,
              scale.inv_sqrt_embd);
    table.Add(SynthBlockName(l, "ssm_alpha"), K::kSsmAlpha, l, {s.n_embd, h_v}, 0.0f,
              scale.inv_sqrt_embd);
  } else {
    table.Add(SynthBlockName(l, "ssm_ba"), K::kSsmBa, l, {s.n_embd, 2 * h_v}, 0.0f,
              scale.inv_sqrt_embd);
  }
  table.AddNorm(SynthBlockName(l, "ssm_norm"), K::kSsmNorm, l, d_v);
  table.Add(SynthBlockName(l, "ssm_out"), K::kSsmOut, l, {value_dim, s.n_embd}, 0.0f,
            scale.ResidualOut(value_dim));
}

}  // namespace

bool SynthIsFullAttentionLayer(const SynthShape& s, int64_t layer) {
  return (layer + 1) % s.full_attention_interval == 0;
}

absl::Status ValidateSynthDeltaNetHybrid(const SynthShape& s) {
  for (absl::Status status : {
           CheckSynthRange("full-attention-interval", s.full_attention_interval, 1,
                           kSynthMaxLayers),
           CheckSynthRange("shared-ffn", s.n_ff_shexp, 1, kSynthMaxFf),
           CheckSynthRange("rope-dims", s.n_rot, 2, s.head_dim),
           CheckSynthRange("ssm-conv-kernel", s.ssm_conv_kernel, 1, kMaxConvKernel),
           CheckSynthRange("ssm-state-size", s.ssm_state_size, 1, kSynthMaxSsmDim),
           CheckSynthRange("ssm-group-count", s.ssm_group_count, 1, kSynthMaxHeads),
           CheckSynthRange("ssm-time-step-rank", s.ssm_time_step_rank, 1, kSynthMaxHeads),
           CheckSynthRange("ssm-inner-size", s.ssm_inner_size, 1, kSynthMaxSsmDim),
       }) {
    if (!status.ok()) return status;
  }
  if (s.n_rot % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--rope-dims ", s.n_rot, " must be even"));
  }
  if (s.ssm_time_step_rank % s.ssm_group_count != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ssm-time-step-rank ", s.ssm_time_step_rank,
                     " (value heads) must be a multiple of --ssm-group-count ", s.ssm_group_count,
                     " (key heads)"));
  }
  if (s.ssm_inner_size % s.ssm_time_step_rank != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--ssm-inner-size ", s.ssm_inner_size,
                                                   " must be a multiple of --ssm-time-step-rank ",
                                                   s.ssm_time_step_rank));
  }
  return absl::OkStatus();
}

TensorType SynthDeltaNetHybridType(const SynthShape& s, SynthQuant quant, const SynthTensor& t) {
  using K = SynthTensorKind;
  using R = SynthQuantRole;
  R role = R::kOther;
  switch (t.kind) {
    case K::kTokenEmbd:
      role = R::kTokenEmbd;
      break;
    case K::kOutput:
      role = R::kOutput;
      break;
    case K::kAttnQkv:
    case K::kSsmIn:
    case K::kAttnV:
      role = R::kAttnV;
      break;
    case K::kAttnK:
      role = R::kAttnK;
      break;
    case K::kAttnQ:
      role = R::kAttnQ;
      break;
    case K::kAttnOutput:
      role = R::kAttnOutput;
      break;
    case K::kFfnDownExps:
    case K::kFfnDownShexp:
      role = R::kFfnDown;
      break;
    case K::kAttnGate:
    case K::kSsmBeta:
    case K::kSsmAlpha:
    case K::kSsmBa:
    case K::kSsmOut:
    case K::kFfnGateExps:
    case K::kFfnUpExps:
    case K::kFfnGateShexp:
    case K::kFfnUpShexp:
      role = R::kOther;
      break;
    default:
      role = R::kUnquantized;
      break;
  }
  const int64_t ne0 = t.ne[0];
  switch (quant) {
    case SynthQuant::kF32:
    case SynthQuant::kQ8_0:
      return SynthUniformType(quant, role, ne0);
    case SynthQuant::kQ4_K_M:
      return SynthLlamaQ4KMType(
          {role, t.layer, s.n_layer, t.layer, s.n_layer, s.n_expert, ne0, s.tied_output});
    case SynthQuant::kQ8_0F32:
      break;
    case SynthQuant::kMxfp4:  // gpt-oss's alone: SupportsQuant refuses it here
      std::abort();
  }
  if (role == R::kUnquantized || t.kind == K::kSsmAlpha || t.kind == K::kSsmBeta ||
      t.kind == K::kSsmBa) {
    return TensorType::kF32;
  }
  const bool first = t.layer == 0;
  const bool last = t.layer == s.n_layer - 1;
  switch (t.kind) {
    case K::kFfnGateExps:
    case K::kFfnUpExps:
      return SynthFitToRow(first ? TensorType::kQ6_K : TensorType::kQ4_K, ne0);
    case K::kFfnDownExps:
      return SynthFitToRow(first || last ? TensorType::kQ6_K : TensorType::kQ5_K, ne0);
    default:
      return SynthFitToRow(TensorType::kQ8_0, ne0);
  }
}

std::vector<SynthTensor> PlanSynthDeltaNetHybrid(const SynthShape& s, SynthQuant quant,
                                                 SynthDeltaNetProjections projections) {
  const SynthScales scale(s);
  const int64_t q_dim = s.n_head * s.head_dim;
  using K = SynthTensorKind;
  SynthTensorTable table(
      [&](const SynthTensor& t) { return SynthDeltaNetHybridType(s, quant, t); });
  table.AddVocabularyEnds(s, scale);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    table.AddNorm(SynthBlockName(l, "attn_norm"), K::kAttnNorm, l, s.n_embd);
    table.AddNorm(SynthBlockName(l, "post_attention_norm"), K::kPostAttentionNorm, l, s.n_embd);
    if (SynthIsFullAttentionLayer(s, l)) {
      // attn_q holds q and its output gate, interleaved per head.
      table.AddAttentionProjections(s, scale, l, 2 * q_dim);
      table.AddNorm(SynthBlockName(l, "attn_q_norm"), K::kAttnQNorm, l, s.head_dim);
      table.AddNorm(SynthBlockName(l, "attn_k_norm"), K::kAttnKNorm, l, s.head_dim);
    } else {
      AddDeltaNetLayer(s, scale, l, projections, table);
    }
    table.AddRoutedExperts(s, scale, l);
    table.AddSharedExpert(s, scale, l);
  }
  return table.Take();
}

void AddSynthDeltaNetHybridKeys(const SynthShape& s, bool rope_sections, SynthMetadata& md) {
  md.ArchU32("block_count", s.n_layer);
  md.ArchU32("context_length", s.n_ctx);
  md.ArchU32("embedding_length", s.n_embd);
  // Unused by the graph; the qwen35moe test vectors carry the expert width here.
  md.ArchU32("feed_forward_length", s.n_ff_exp);
  md.ArchU32("attention.head_count", s.n_head);
  md.ArchU32("attention.head_count_kv", s.n_head_kv);
  md.ArchU32("attention.key_length", s.head_dim);
  md.ArchU32("attention.value_length", s.head_dim);
  md.ArchF32("rope.freq_base", s.rope_base);
  md.ArchF32("attention.layer_norm_rms_epsilon", s.rms_eps);
  md.ArchU32("rope.dimension_count", s.n_rot);
  if (rope_sections) {
    md.ArchI32Array("rope.dimension_sections",
                    std::vector<int32_t>(s.rope_sections.begin(), s.rope_sections.end()));
  }
  md.ArchU32("expert_count", s.n_expert);
  md.ArchU32("expert_used_count", s.n_expert_used);
  md.ArchU32("expert_feed_forward_length", s.n_ff_exp);
  md.ArchU32("expert_shared_feed_forward_length", s.n_ff_shexp);
  md.ArchU32("ssm.conv_kernel", s.ssm_conv_kernel);
  md.ArchU32("ssm.state_size", s.ssm_state_size);
  md.ArchU32("ssm.group_count", s.ssm_group_count);
  md.ArchU32("ssm.time_step_rank", s.ssm_time_step_rank);
  md.ArchU32("ssm.inner_size", s.ssm_inner_size);
  md.ArchU32("full_attention_interval", s.full_attention_interval);
}

}  // namespace moetier
