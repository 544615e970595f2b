// qwen35moe (Qwen3.6-35B-A3B, SPEC.md §3.3-3.4): a hybrid stack where layer
// i is gated full attention when (i + 1) % full_attention_interval == 0 and a
// Gated DeltaNet layer otherwise, every layer with a routed-expert FFN plus a
// sigmoid-gated shared expert, and the Qwen3.5 tokenizer.
//
// Tensors and keys as the llama.cpp converter (Qwen3NextModel /
// Qwen3_5MoeTextModel) writes them, in the order of the qwen35moe test
// vectors. Norm weights the converter stores as 1 + w (attn_norm,
// post_attention_norm, output_norm, attn_q_norm, attn_k_norm) and ssm_norm,
// stored raw but initialised to ones in HF, are all drawn near 1; ssm_a is
// stored negated, -exp(A_log), and is drawn as -exp(U(0, ln 16)), the range
// of HF's A initialisation.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "synth/synth_arch.h"
#include "synth/synth_tokenizer.h"

namespace moetier {
namespace {

constexpr int64_t kMaxConvKernel = 64;

bool IsFullAttention(const SynthShape& s, int64_t layer) {
  return (layer + 1) % s.full_attention_interval == 0;
}

// The type of one tensor. q4_k_m follows llama-quantize (SynthLlamaQ4KMType):
// attn_qkv and attn_v are attention-v-like, one per layer, ffn_down_exps and
// ffn_down_shexp are ffn_down. q8_0-f32 reproduces the tensor-type shares of
// a dynamic ("UD") 4-bit file of this model: F32 for everything llama-quantize
// leaves alone plus ssm_alpha and ssm_beta; Q8_0 for token_embd, output and
// every non-expert matrix; experts Q4_K (gate/up) and Q5_K (down), with layer
// 0's three expert tensors and the last layer's ffn_down_exps at Q6_K. At
// the full shape that is 361 F32, 252 Q8_0, 78 Q4_K, 38 Q5_K and 4 Q6_K of
// 733 tensors (49.2 / 34.4 / 10.6 / 5.2 / 0.5 %).
TensorType Qwen35MoeType(const SynthShape& s, SynthQuant quant, const SynthTensor& t) {
  using K = SynthTensorKind;
  using R = SynthQuantRole;
  R role = R::kOther;
  switch (t.kind) {
    case K::kTokenEmbd: role = R::kTokenEmbd; break;
    case K::kOutput: role = R::kOutput; break;
    case K::kAttnQkv:
    case K::kAttnV: role = R::kAttnV; break;
    case K::kAttnK: role = R::kAttnK; break;
    case K::kAttnQ: role = R::kAttnQ; break;
    case K::kAttnOutput: role = R::kAttnOutput; break;
    case K::kFfnDownExps:
    case K::kFfnDownShexp: role = R::kFfnDown; break;
    case K::kAttnGate:
    case K::kSsmBeta:
    case K::kSsmAlpha:
    case K::kSsmOut:
    case K::kFfnGateExps:
    case K::kFfnUpExps:
    case K::kFfnGateShexp:
    case K::kFfnUpShexp: role = R::kOther; break;
    default: role = R::kUnquantized; break;
  }
  const int64_t ne0 = t.ne[0];
  switch (quant) {
    case SynthQuant::kF32:
    case SynthQuant::kQ8_0:
      return SynthUniformType(quant, role, ne0);
    case SynthQuant::kQ4_K_M:
      return SynthLlamaQ4KMType({role, t.layer, s.n_layer, t.layer, s.n_layer, s.n_expert, ne0,
                                 s.tied_output});
    case SynthQuant::kQ8_0F32:
      break;
  }
  if (role == R::kUnquantized || t.kind == K::kSsmAlpha || t.kind == K::kSsmBeta) {
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

class Qwen35Moe final : public SynthArchitecture {
 public:
  SynthArch arch() const override { return SynthArch::kQwen35Moe; }

  bool SupportsQuant(SynthQuant) const override { return true; }

  absl::StatusOr<SynthShape> Preset(std::string_view name) const override {
    SynthShape s;
    s.rope_base = 1e7f;
    s.rms_eps = 1e-6f;
    s.full_attention_interval = 4;
    s.ssm_conv_kernel = 4;
    if (name == "tiny") {
      // The qwen35moe-tiny test vector: layers 0-2 DeltaNet, 3 attention.
      s.n_layer = 4;
      s.n_embd = 64;
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_ff_exp = 32;
      s.n_ff_shexp = 32;
      s.n_head = 4;
      s.n_head_kv = 2;
      s.head_dim = 32;
      s.n_rot = 8;
      s.rope_sections = {2, 1, 1, 0};
      s.ssm_state_size = 16;
      s.ssm_group_count = 2;
      s.ssm_time_step_rank = 4;
      s.ssm_inner_size = 64;
      s.n_vocab = 512;
      s.n_ctx = 4096;
      return s;
    }
    if (name == "small") {
      // The qwen35moe-small test vector: rows of 256 (or 64, 128, 512).
      s.n_layer = 4;
      s.n_embd = 256;
      s.n_expert = 16;
      s.n_expert_used = 4;
      s.n_ff_exp = 256;
      s.n_ff_shexp = 256;
      s.n_head = 4;
      s.n_head_kv = 2;
      s.head_dim = 64;
      s.n_rot = 16;
      s.rope_sections = {3, 3, 2, 0};
      s.ssm_state_size = 64;
      s.ssm_group_count = 2;
      s.ssm_time_step_rank = 4;
      s.ssm_inner_size = 256;
      s.n_vocab = 1024;
      s.n_ctx = 4096;
      return s;
    }
    if (name == "full") {
      // Qwen3.6-35B-A3B, SPEC.md §3.9: 30 DeltaNet and 10 attention layers.
      s.n_layer = 40;
      s.n_embd = 2048;
      s.n_expert = 256;
      s.n_expert_used = 8;
      s.n_ff_exp = 512;
      s.n_ff_shexp = 512;
      s.n_head = 16;
      s.n_head_kv = 2;
      s.head_dim = 256;
      s.n_rot = 64;
      s.rope_sections = {11, 11, 10, 0};
      s.ssm_state_size = 128;
      s.ssm_group_count = 16;
      s.ssm_time_step_rank = 32;
      s.ssm_inner_size = 4096;
      s.n_vocab = kQwen35Vocab;
      s.n_ctx = 262144;
      return s;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown qwen35moe preset '", std::string(name), "' (expected tiny, small or full)"));
  }

  absl::Status Validate(const SynthShape& s) const override {
    for (absl::Status status : {
             CheckSynthRange("full-attention-interval", s.full_attention_interval, 1, kSynthMaxLayers),
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
    int64_t section_sum = 0;
    for (const int32_t section : s.rope_sections) {
      if (section < 0) {
        return absl::InvalidArgumentError("--rope-sections must not be negative");
      }
      section_sum += section;
    }
    if (2 * section_sum != s.n_rot) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--rope-sections sum to ", section_sum, " pairs but --rope-dims ", s.n_rot, " rotates ",
          s.n_rot / 2));
    }
    if (s.ssm_time_step_rank % s.ssm_group_count != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ssm-time-step-rank ", s.ssm_time_step_rank,
                       " (value heads) must be a multiple of --ssm-group-count ", s.ssm_group_count,
                       " (key heads)"));
    }
    if (s.ssm_inner_size % s.ssm_time_step_rank != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ssm-inner-size ", s.ssm_inner_size,
                       " must be a multiple of --ssm-time-step-rank ", s.ssm_time_step_rank));
    }
    return absl::OkStatus();
  }

  std::vector<SynthTensor> PlanTensors(const SynthShape& s, SynthQuant quant) const override {
    const SynthScales scale(s);
    const int64_t q_dim = s.n_head * s.head_dim;
    const int64_t h_v = s.ssm_time_step_rank;
    const int64_t d_v = s.ssm_inner_size / h_v;
    const int64_t key_dim = s.ssm_group_count * s.ssm_state_size;
    const int64_t value_dim = s.ssm_inner_size;
    const int64_t conv_dim = 2 * key_dim + value_dim;
    const float a_log_hi = std::log(16.0f);

    using K = SynthTensorKind;
    SynthTensorTable table([&](const SynthTensor& t) { return Qwen35MoeType(s, quant, t); });
    table.AddVocabularyEnds(s, scale);
    for (int64_t l = 0; l < s.n_layer; ++l) {
      table.AddNorm(SynthBlockName(l, "attn_norm"), K::kAttnNorm, l, s.n_embd);
      table.AddNorm(SynthBlockName(l, "post_attention_norm"), K::kPostAttentionNorm, l, s.n_embd);
      if (IsFullAttention(s, l)) {
        // attn_q holds q and its output gate, interleaved per head.
        table.AddAttentionProjections(s, scale, l, 2 * q_dim);
        table.AddNorm(SynthBlockName(l, "attn_q_norm"), K::kAttnQNorm, l, s.head_dim);
        table.AddNorm(SynthBlockName(l, "attn_k_norm"), K::kAttnKNorm, l, s.head_dim);
      } else {
        table.Add(SynthBlockName(l, "attn_qkv"), K::kAttnQkv, l, {s.n_embd, conv_dim}, 0.0f,
                  scale.inv_sqrt_embd);
        table.Add(SynthBlockName(l, "attn_gate"), K::kAttnGate, l, {s.n_embd, value_dim}, 0.0f,
                  scale.inv_sqrt_embd);
        table.Add(SynthBlockName(l, "ssm_conv1d"), K::kSsmConv1d, l, {s.ssm_conv_kernel, conv_dim}, 0.0f,
                  scale.FanIn(s.ssm_conv_kernel));
        table.Add(SynthBlockRawName(l, "ssm_dt.bias"), K::kSsmDtBias, l, {h_v}, 1.0f, 0.25f);
        SynthTensor& a = table.Add(SynthBlockRawName(l, "ssm_a"), K::kSsmA, l, {h_v}, 0.0f, a_log_hi);
        a.distribution = SynthDistribution::kNegativeExpUniform;
        table.Add(SynthBlockName(l, "ssm_beta"), K::kSsmBeta, l, {s.n_embd, h_v}, 0.0f, scale.inv_sqrt_embd);
        table.Add(SynthBlockName(l, "ssm_alpha"), K::kSsmAlpha, l, {s.n_embd, h_v}, 0.0f,
                  scale.inv_sqrt_embd);
        table.AddNorm(SynthBlockName(l, "ssm_norm"), K::kSsmNorm, l, d_v);
        table.Add(SynthBlockName(l, "ssm_out"), K::kSsmOut, l, {value_dim, s.n_embd}, 0.0f,
                  scale.ResidualOut(value_dim));
      }
      table.AddRoutedExperts(s, scale, l);
      // The shared expert's gate logit dot(w, x) has unit spread.
      table.Add(SynthBlockName(l, "ffn_gate_inp_shexp"), K::kFfnGateInpShexp, l, {s.n_embd}, 0.0f,
                scale.inv_sqrt_embd);
      table.Add(SynthBlockName(l, "ffn_gate_shexp"), K::kFfnGateShexp, l, {s.n_embd, s.n_ff_shexp}, 0.0f,
                scale.inv_sqrt_embd);
      table.Add(SynthBlockName(l, "ffn_up_shexp"), K::kFfnUpShexp, l, {s.n_embd, s.n_ff_shexp}, 0.0f,
                scale.inv_sqrt_embd);
      table.Add(SynthBlockName(l, "ffn_down_shexp"), K::kFfnDownShexp, l, {s.n_ff_shexp, s.n_embd}, 0.0f,
                scale.ResidualOut(s.n_ff_shexp));
    }
    return table.Take();
  }

  absl::StatusOr<std::vector<GgufKeyValue>> BuildMetadata(const SynthShape& s, SynthQuant quant,
                                                          std::string_view model_name) const override {
    absl::StatusOr<SynthVocabulary> vocab = BuildSynthBpeVocabulary(Qwen35BpeLayout(), s.n_vocab);
    if (!vocab.ok()) return vocab.status();
    const int64_t eos = SynthTokenId(*vocab, "<|im_end|>");
    const int64_t pad = SynthTokenId(*vocab, "<|endoftext|>");

    SynthMetadata md(name());
    md.General(model_name);
    md.ArchU32("block_count", s.n_layer);
    md.ArchU32("context_length", s.n_ctx);
    md.ArchU32("embedding_length", s.n_embd);
    // Unused by the graph; the test vectors carry the expert width here.
    md.ArchU32("feed_forward_length", s.n_ff_exp);
    md.ArchU32("attention.head_count", s.n_head);
    md.ArchU32("attention.head_count_kv", s.n_head_kv);
    md.ArchU32("attention.key_length", s.head_dim);
    md.ArchU32("attention.value_length", s.head_dim);
    md.ArchF32("rope.freq_base", s.rope_base);
    md.ArchF32("attention.layer_norm_rms_epsilon", s.rms_eps);
    md.ArchU32("rope.dimension_count", s.n_rot);
    md.ArchI32Array("rope.dimension_sections",
                    std::vector<int32_t>(s.rope_sections.begin(), s.rope_sections.end()));
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
    md.FileType(quant);
    md.Vocabulary("gpt2", "qwen35", *std::move(vocab));
    // Qwen3.5: eos <|im_end|>, pad <|endoftext|>, no bos key.
    md.TokenId("eos", eos);
    md.TokenId("padding", pad);
    md.Bool("tokenizer.ggml.add_bos_token", false);
    md.Add("tokenizer.chat_template", GgufValue::String(std::string(SynthQwen35ChatTemplate())));
    return md.Take();
  }
};

}  // namespace

const SynthArchitecture& Qwen35MoeArchitecture() {
  static const Qwen35Moe* arch = new Qwen35Moe;
  return *arch;
}

}  // namespace moetier
