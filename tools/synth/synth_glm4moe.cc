// glm4moe (GLM-4.5-Air, GLM-4.5, GLM-4.6 and GLM-4.7): attention with q/k/v
// biases, optional per-head q/k norms and NEOX rope over part of each head;
// dense SwiGLU FFNs in the leading layers, then a sigmoid router whose
// selection bias (exp_probs_b) picks the experts while the unbiased
// probabilities weigh them, plus an ungated shared expert; and after the
// layers that run, the multi-token-prediction (nextn) blocks, which
// llama.cpp loads but never runs.
//
// Keys and tensors as llama.cpp's converter writes them (Glm4MoeModel):
// block_count includes the nextn blocks, feed_forward_length is the dense
// layers' width, the shared expert's width is expert_feed_forward_length x
// expert_shared_count. The Qwen3 tokenizer stands in for GLM's.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "synth/synth_arch.h"
#include "synth/synth_tokenizer.h"

namespace moetier {
namespace {

// GLM's attention biases are large next to the unit-RMS projections they
// are added to; this spread makes every bias visible in the logits.
constexpr float kBiasStd = 0.5f;
// The sigmoid probabilities of router logits with a spread of about 2
// differ by about 0.1 between neighbouring experts; a selection bias of
// this spread reorders many choices without fixing them per layer.
constexpr float kSelectionBiasStd = 0.25f;
// GLM-4.5-Air's vocabulary rows (151365 tokens padded); the Qwen3
// specials' ids lie below it.
constexpr int64_t kGlmVocab = 151552;
constexpr int64_t kMaxNextnLayers = 8;
constexpr float kMaxWeightsScale = 1000.0f;
// llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID.
constexpr int64_t kGatingSigmoid = 2;

class Glm4Moe final : public SynthArchitecture {
 public:
  SynthArch arch() const override { return SynthArch::kGlm4Moe; }

  absl::StatusOr<SynthShape> Preset(std::string_view name) const override {
    SynthShape s;
    s.rope_base = 1e6f;
    s.rms_eps = 1e-5f;
    s.n_layer_dense_lead = 1;
    s.n_expert_shared = 1;
    s.expert_weights_norm = true;
    s.n_nextn_layer = 1;
    if (name == "tiny") {
      // Reference-forward unit tests: one dense and two MoE layers, a
      // routing scale that is neither 0 nor 1, rope over half of each head.
      s.n_layer = 3;
      s.n_embd = 128;
      s.n_ff = 384;
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_ff_exp = 128;
      s.n_head = 4;
      s.n_head_kv = 2;
      s.head_dim = 32;
      s.n_rot = 16;
      s.n_vocab = 512;
      s.n_ctx = 4096;
      s.expert_weights_scale = 1.8f;
      return s;
    }
    if (name == "small") {
      // End-to-end tests: every matrix row a multiple of 256 (eh_proj's 512
      // included), so q4_k_m has no fallback types; q/k norms as GLM-4.5.
      s.n_layer = 4;
      s.n_embd = 256;
      s.n_ff = 512;
      s.n_expert = 16;
      s.n_expert_used = 4;
      s.n_ff_exp = 256;
      s.n_head = 4;
      s.n_head_kv = 2;
      s.head_dim = 64;
      s.n_rot = 32;
      s.n_vocab = 4096;
      s.n_ctx = 8192;
      s.expert_weights_scale = 2.5f;
      s.qk_norm = true;
      return s;
    }
    if (name == "full") {
      // GLM-4.5-Air as its HF config gives it.
      s.n_layer = 46;
      s.n_embd = 4096;
      s.n_ff = 10944;
      s.n_expert = 128;
      s.n_expert_used = 8;
      s.n_ff_exp = 1408;
      s.n_head = 96;
      s.n_head_kv = 8;
      s.head_dim = 128;
      s.n_rot = 64;
      s.n_vocab = kGlmVocab;
      s.n_ctx = 131072;
      s.expert_weights_scale = 1.0f;
      return s;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown preset '", std::string(name), "' (expected tiny, small or full)"));
  }

  absl::Status Validate(const SynthShape& s) const override {
    for (absl::Status status : {
             CheckSynthRange("dense-ffn", s.n_ff, 1, kSynthMaxFf),
             CheckSynthRange("rope-dims", s.n_rot, 2, s.head_dim),
             CheckSynthRange("leading-dense-layers", s.n_layer_dense_lead, 0, s.n_layer),
             CheckSynthRange("shared-experts", s.n_expert_shared, 0, kSynthMaxFf / s.n_ff_exp),
             CheckSynthRange("nextn-layers", s.n_nextn_layer, 0, kMaxNextnLayers),
         }) {
      if (!status.ok()) return status;
    }
    if (s.n_rot % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--rope-dims ", s.n_rot, " must be even"));
    }
    if (!(std::isfinite(s.expert_weights_scale) && s.expert_weights_scale >= 0.0f &&
          s.expert_weights_scale <= kMaxWeightsScale)) {
      return absl::InvalidArgumentError(absl::StrCat("--expert-weights-scale ",
                                                     s.expert_weights_scale, " must be in [0, ",
                                                     kMaxWeightsScale, "] (0 and 1: unscaled)"));
    }
    return absl::OkStatus();
  }

  std::vector<SynthTensor> PlanTensors(const SynthShape& s, SynthQuant quant) const override {
    const SynthScales scale(s);
    const int64_t q_dim = s.n_head * s.head_dim;
    const int64_t n_block = s.n_layer + s.n_nextn_layer;
    using K = SynthTensorKind;
    // llama-quantize counts every block, the nextn ones too, in its
    // use_more_bits choice; one attn_v per block.
    SynthTensorTable table([&](const SynthTensor& t) {
      const SynthQuantRole role = SynthAttentionMoeRole(t.kind);
      if (quant != SynthQuant::kQ4_K_M) return SynthUniformType(quant, role, t.ne[0]);
      return SynthLlamaQ4KMType(
          {role, t.layer, n_block, t.layer, n_block, s.n_expert, t.ne[0], s.tied_output});
    });
    table.AddVocabularyEnds(s, scale);
    for (int64_t l = 0; l < n_block; ++l) {
      table.AddNorm(SynthBlockName(l, "attn_norm"), K::kAttnNorm, l, s.n_embd);
      table.AddAttentionProjections(s, scale, l, q_dim);
      table.AddAttentionBiases(s, l, kBiasStd);
      if (s.qk_norm) {
        table.AddNorm(SynthBlockName(l, "attn_q_norm"), K::kAttnQNorm, l, s.head_dim);
        table.AddNorm(SynthBlockName(l, "attn_k_norm"), K::kAttnKNorm, l, s.head_dim);
      }
      table.AddNorm(SynthBlockName(l, "post_attention_norm"), K::kPostAttentionNorm, l, s.n_embd);
      // Validate keeps the nextn blocks past the dense ones: llama.cpp's
      // prediction graph needs their router.
      if (l < s.n_layer_dense_lead) {
        table.AddDenseFfn(s, scale, l);
      } else {
        table.AddRoutedExperts(s, scale, l);
        table.Add(SynthBlockRawName(l, "exp_probs_b.bias"), K::kExpProbsB, l, {s.n_expert}, 0.0f,
                  kSelectionBiasStd);
        if (s.n_expert_shared > 0) {
          table.AddSharedExpertProjections(s, scale, l, s.n_ff_exp * s.n_expert_shared);
        }
      }
      if (l >= s.n_layer) AddNextnTensors(s, scale, l, table);
    }
    return table.Take();
  }

  absl::StatusOr<std::vector<GgufKeyValue>> BuildMetadata(
      const SynthShape& s, SynthQuant quant, std::string_view model_name) const override {
    SynthMetadata md(name());
    md.General(model_name);
    md.ArchU32("block_count", s.n_layer + s.n_nextn_layer);
    md.ArchU32("context_length", s.n_ctx);
    md.ArchU32("embedding_length", s.n_embd);
    md.ArchU32("feed_forward_length", s.n_ff);
    md.ArchU32("attention.head_count", s.n_head);
    md.ArchU32("attention.head_count_kv", s.n_head_kv);
    md.ArchF32("rope.freq_base", s.rope_base);
    md.ArchF32("attention.layer_norm_rms_epsilon", s.rms_eps);
    md.ArchU32("expert_used_count", s.n_expert_used);
    md.ArchU32("attention.key_length", s.head_dim);
    md.ArchU32("attention.value_length", s.head_dim);
    md.ArchU32("rope.dimension_count", s.n_rot);
    md.ArchU32("expert_count", s.n_expert);
    md.ArchU32("expert_feed_forward_length", s.n_ff_exp);
    md.ArchU32("expert_shared_count", s.n_expert_shared);
    md.ArchU32("leading_dense_block_count", s.n_layer_dense_lead);
    md.ArchU32("expert_gating_func", kGatingSigmoid);
    md.ArchF32("expert_weights_scale", s.expert_weights_scale);
    md.Bool(absl::StrCat(std::string(name()), ".expert_weights_norm"), s.expert_weights_norm);
    md.ArchU32("nextn_predict_layers", s.n_nextn_layer);
    md.FileType(quant);
    if (absl::Status status = AddSynthQwen3Tokenizer(s.n_vocab, md); !status.ok()) return status;
    return md.Take();
  }

 private:
  // eh_proj reads the normalized embedding and hidden state side by side.
  static void AddNextnTensors(const SynthShape& s, const SynthScales& scale, int64_t l,
                              SynthTensorTable& table) {
    using K = SynthTensorKind;
    table.Add(SynthBlockName(l, "nextn.eh_proj"), K::kNextnEhProj, l, {2 * s.n_embd, s.n_embd},
              0.0f, scale.FanIn(2 * s.n_embd));
    table.AddNorm(SynthBlockName(l, "nextn.enorm"), K::kNextnEnorm, l, s.n_embd);
    table.AddNorm(SynthBlockName(l, "nextn.hnorm"), K::kNextnHnorm, l, s.n_embd);
    table.AddNorm(SynthBlockName(l, "nextn.shared_head_norm"), K::kNextnSharedHeadNorm, l,
                  s.n_embd);
  }
};

}  // namespace

const SynthArchitecture& Glm4MoeArchitecture() {
  static const Glm4Moe* arch = new Glm4Moe;
  return *arch;
}

}  // namespace moetier
