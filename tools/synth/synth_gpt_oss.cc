// gpt-oss (gpt-oss-20b, gpt-oss-120b): attention with q/k/v and output
// biases, NEOX rope with YaRN over the whole head, a learned sink per head
// that takes part in every softmax, and on every second layer (0, 2, ...)
// a window of the last sliding_window positions; a router with a bias whose
// top-k raw logits are softmaxed into the weights; experts with biases and
// OpenAI's clamped SwiGLU (llama.cpp's swiglu_oai).
//
// Keys and tensors as llama.cpp's converter writes them (GptOssModel):
// feed_forward_length and expert_feed_forward_length are both the experts'
// width, key_length and value_length are always there (the heads are not
// embd / heads wide), the YaRN keys carry the betas of the HF config, and
// there is no sliding_window_pattern (llama.cpp's default, period 2, is the
// models'). output.weight is always present: llama.cpp requires it. The
// vocabulary is byte-level BPE under the "gpt-4o" pre-tokenizer with
// harmony's special tokens at their real ids.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "synth/synth_arch.h"
#include "synth/synth_tokenizer.h"

namespace moetier {
namespace {

// q/k/v biases this large next to the unit-RMS projections make every one of
// them visible in the logits, as for qwen2moe and glm4moe.
constexpr float kQkvBiasStd = 0.5f;
// Sink logits compete with the scaled q.k scores: at this spread a sink
// takes about 12% of the attention in the tiny preset's windows of 8 keys,
// and 1% on its full-attention layers past position 64.
constexpr float kSinkStd = 1.0f;
// Reorders some of the router's top-k choices (router logits spread about 2).
constexpr float kRouterBiasStd = 0.5f;
// attn_output.bias and ffn_down_exps.bias add the same vector to every
// token's residual stream; at a block output's size that shared direction
// would steer most tokens to the same few experts. A quarter of it leaves
// the small preset's routers using some 10 of 16 experts' worth of choices.
constexpr float kResidualBiasFraction = 0.25f;
// swiglu_oai clamps the gate above 7 and the up projection outside +-7.
// Gate and up rows of spread 3 (with biases of spread 1) put about 1.3% of
// the gates and 2.5% of the ups past the clamp, so an engine without it
// disagrees.
constexpr float kExpertInputGain = 3.0f;
constexpr float kExpertInputBiasStd = 1.0f;
// The RMS of swiglu_oai's output for such gates and ups (measured on normal
// inputs of spread 3.16): ffn_down divides by it to keep the residual O(1).
constexpr float kExpertActivationRms = 7.0f;
// YaRN's betas as gpt-oss's config gives them (llama.cpp's defaults too).
constexpr float kYarnBetaFast = 32.0f;
constexpr float kYarnBetaSlow = 1.0f;

class GptOss final : public SynthArchitecture {
 public:
  SynthArch arch() const override { return SynthArch::kGptOss; }

  absl::StatusOr<SynthShape> Preset(std::string_view name) const override {
    SynthShape s;
    s.rope_base = 150000.0f;
    s.rms_eps = 1e-5f;
    s.rope_scaling_type = "yarn";
    if (name == "tiny") {
      // Reference-forward tests and the F32 test vector: heads wider in
      // total than embd (128 vs 64) as in the real model, a window and an
      // original context that a few hundred positions pass many times.
      s.n_layer = 4;
      s.n_embd = 64;
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_ff_exp = 32;
      s.n_head = 4;
      s.n_head_kv = 2;
      s.head_dim = 32;
      s.n_vocab = 512;
      s.n_ctx = 4096;
      s.sliding_window = 8;
      s.rope_scaling_factor = 4.0f;
      s.rope_scaling_original_ctx = 64;
      return s;
    }
    if (name == "small") {
      // End-to-end tests: every expert row a whole number of MXFP4 blocks and
      // every other matrix row of Q8_0 blocks; the real rope scaling factor.
      s.n_layer = 4;
      s.n_embd = 256;
      s.n_expert = 16;
      s.n_expert_used = 4;
      s.n_ff_exp = 256;
      s.n_head = 8;
      s.n_head_kv = 2;
      s.head_dim = 64;
      s.n_vocab = 4096;
      s.n_ctx = 8192;
      s.sliding_window = 16;
      s.rope_scaling_factor = 32.0f;
      s.rope_scaling_original_ctx = 64;
      return s;
    }
    if (name == "full" || name == "full-120b") {
      // gpt-oss-20b and gpt-oss-120b as their HF configs give them.
      const bool large = name == "full-120b";
      s.n_layer = large ? 36 : 24;
      s.n_embd = 2880;
      s.n_expert = large ? 128 : 32;
      s.n_expert_used = 4;
      s.n_ff_exp = 2880;
      s.n_head = 64;
      s.n_head_kv = 8;
      s.head_dim = 64;
      s.n_vocab = kGptOssVocab;
      s.n_ctx = 131072;
      s.sliding_window = 128;
      s.rope_scaling_factor = 32.0f;
      s.rope_scaling_original_ctx = 4096;
      return s;
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown preset '", std::string(name),
                                                   "' (expected tiny, small, full or full-120b)"));
  }

  absl::Status Validate(const SynthShape& s) const override {
    if (absl::Status status = CheckSynthRange("sliding-window", s.sliding_window, 1, kSynthMaxCtx);
        !status.ok()) {
      return status;
    }
    if (s.tied_output) {
      return absl::InvalidArgumentError(
          "--tied-output: gpt-oss files always carry output.weight (llama.cpp requires it)");
    }
    return absl::OkStatus();
  }

  bool SupportsQuant(SynthQuant quant) const override {
    return quant == SynthQuant::kF32 || quant == SynthQuant::kQ8_0 || quant == SynthQuant::kMxfp4;
  }

  std::vector<SynthTensor> PlanTensors(const SynthShape& s, SynthQuant quant) const override {
    const SynthScales scale(s);
    const int64_t q_dim = s.n_head * s.head_dim;
    using K = SynthTensorKind;
    SynthTensorTable table([&](const SynthTensor& t) { return TypeOf(quant, t); });
    table.AddVocabularyEnds(s, scale);
    for (int64_t l = 0; l < s.n_layer; ++l) {
      table.AddNorm(SynthBlockName(l, "attn_norm"), K::kAttnNorm, l, s.n_embd);
      table.AddAttentionProjections(s, scale, l, q_dim);
      table.AddAttentionBiases(s, l, kQkvBiasStd);
      table.Add(SynthBlockRawName(l, "attn_output.bias"), K::kAttnOutputBias, l, {s.n_embd}, 0.0f,
                kResidualBiasFraction * scale.residual_out);
      table.Add(SynthBlockName(l, "attn_sinks"), K::kAttnSinks, l, {s.n_head}, 0.0f, kSinkStd);
      table.AddNorm(SynthBlockName(l, "post_attention_norm"), K::kPostAttentionNorm, l, s.n_embd);
      AddExperts(s, scale, l, table);
    }
    return table.Take();
  }

  absl::StatusOr<std::vector<GgufKeyValue>> BuildMetadata(
      const SynthShape& s, SynthQuant quant, std::string_view model_name) const override {
    SynthMetadata md(name());
    md.General(model_name);
    md.ArchU32("block_count", s.n_layer);
    md.ArchU32("context_length", s.n_ctx);
    md.ArchU32("embedding_length", s.n_embd);
    md.ArchU32("feed_forward_length", s.n_ff_exp);
    md.ArchU32("attention.head_count", s.n_head);
    md.ArchU32("attention.head_count_kv", s.n_head_kv);
    md.ArchF32("rope.freq_base", s.rope_base);
    md.ArchF32("attention.layer_norm_rms_epsilon", s.rms_eps);
    md.ArchU32("expert_count", s.n_expert);
    md.ArchU32("expert_used_count", s.n_expert_used);
    md.ArchU32("attention.key_length", s.head_dim);
    md.ArchU32("attention.value_length", s.head_dim);
    md.FileType(quant);
    md.ArchU32("attention.sliding_window", s.sliding_window);
    md.ArchU32("expert_feed_forward_length", s.n_ff_exp);
    if (s.rope_scaling_type == "yarn") {
      md.ArchF32("rope.scaling.yarn_beta_fast", kYarnBetaFast);
      md.ArchF32("rope.scaling.yarn_beta_slow", kYarnBetaSlow);
    }
    absl::StatusOr<SynthVocabulary> vocab = BuildSynthBpeVocabulary(GptOssBpeLayout(), s.n_vocab);
    if (!vocab.ok()) return vocab.status();
    const int64_t bos = SynthTokenId(*vocab, "<|startoftext|>");
    const int64_t eos = SynthTokenId(*vocab, "<|return|>");
    const int64_t pad = SynthTokenId(*vocab, "<|endoftext|>");
    md.Vocabulary("gpt2", "gpt-4o", *std::move(vocab));
    md.TokenId("bos", bos);
    md.TokenId("eos", eos);
    md.TokenId("padding", pad);
    return md.Take();
  }

 private:
  // The f32 and q8_0 mixes as every architecture has them; mxfp4 is q8_0
  // with the experts in MXFP4, as OpenAI released the models.
  static TensorType TypeOf(SynthQuant quant, const SynthTensor& t) {
    const bool expert = t.kind == SynthTensorKind::kFfnGateExps ||
                        t.kind == SynthTensorKind::kFfnUpExps ||
                        t.kind == SynthTensorKind::kFfnDownExps;
    if (quant == SynthQuant::kMxfp4 && expert) return SynthFitToRow(TensorType::kMXFP4, t.ne[0]);
    const SynthQuant uniform = quant == SynthQuant::kMxfp4 ? SynthQuant::kQ8_0 : quant;
    return SynthUniformType(uniform, SynthAttentionMoeRole(t.kind), t.ne[0]);
  }

  // The router and the experts with their biases.
  static void AddExperts(const SynthShape& s, const SynthScales& scale, int64_t l,
                         SynthTensorTable& table) {
    using K = SynthTensorKind;
    const float input = kExpertInputGain * scale.inv_sqrt_embd;
    table.Add(SynthBlockName(l, "ffn_gate_inp"), K::kFfnGateInp, l, {s.n_embd, s.n_expert}, 0.0f,
              scale.router);
    table.Add(SynthBlockRawName(l, "ffn_gate_inp.bias"), K::kFfnGateInpBias, l, {s.n_expert}, 0.0f,
              kRouterBiasStd);
    table.Add(SynthBlockName(l, "ffn_gate_exps"), K::kFfnGateExps, l,
              {s.n_embd, s.n_ff_exp, s.n_expert}, 0.0f, input);
    table.Add(SynthBlockRawName(l, "ffn_gate_exps.bias"), K::kFfnGateExpsBias, l,
              {s.n_ff_exp, s.n_expert}, 0.0f, kExpertInputBiasStd);
    table.Add(SynthBlockName(l, "ffn_up_exps"), K::kFfnUpExps, l,
              {s.n_embd, s.n_ff_exp, s.n_expert}, 0.0f, input);
    table.Add(SynthBlockRawName(l, "ffn_up_exps.bias"), K::kFfnUpExpsBias, l,
              {s.n_ff_exp, s.n_expert}, 0.0f, kExpertInputBiasStd);
    table.Add(SynthBlockName(l, "ffn_down_exps"), K::kFfnDownExps, l,
              {s.n_ff_exp, s.n_embd, s.n_expert}, 0.0f,
              scale.ResidualOut(s.n_ff_exp) / kExpertActivationRms);
    table.Add(SynthBlockRawName(l, "ffn_down_exps.bias"), K::kFfnDownExpsBias, l,
              {s.n_embd, s.n_expert}, 0.0f, kResidualBiasFraction * scale.residual_out);
  }
};

}  // namespace

const SynthArchitecture& GptOssArchitecture() {
  static const GptOss* arch = new GptOss;
  return *arch;
}

}  // namespace moetier
