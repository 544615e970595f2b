// ernie4_5-moe (ERNIE-4.5-21B-A3B, ERNIE-4.5-300B-A47B): plain GQA attention
// with optional q/k/v biases and NORM rope over the whole head; dense SwiGLU
// FFNs in the leading layers, then a softmax router whose optional selection
// bias (exp_probs_b) picks the experts while the unbiased probabilities,
// renormalized, weigh them, plus an ungated shared expert when
// expert_shared_feed_forward_length is not 0; a SentencePiece vocabulary.
//
// Keys as llama.cpp's converter writes them (Ernie4_5MoeModel):
// feed_forward_length is the dense layers' width, interleave_moe_layer_step
// and leading_dense_block_count always, expert_shared_count, and the shared
// width only with a shared expert. No rope.dimension_count: llama.cpp rotates
// the whole head and asserts it.
//
// llama.cpp's loader gives every layer from leading_dense_block_count on the
// expert tensors, whatever the step, and its graph runs them only in layers
// i with (i + 1) % step == 0; with a step above 1 the others run build_ffn
// with no tensors at all, which returns silu of the normalized input. The
// file is what that loader reads (a converted step-2 model, with dense
// tensors in those layers, would not load).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "synth/synth_arch.h"
#include "synth/synth_tokenizer.h"

namespace moetier {
namespace {

// Biases this large next to the unit-RMS projections make every one of them
// visible in the logits (ERNIE-4.5's own checkpoints have none).
constexpr float kBiasStd = 0.5f;
// Softmax probabilities of router logits with a spread of about 2 are some
// 1/experts each and differ by about that between neighbouring choices; a
// selection bias of this many 1/experts reorders many top-k choices without
// fixing them per layer.
constexpr float kSelectionBiasExperts = 0.5f;
// ERNIE-4.5-21B-A3B's vocabulary: 103424 rows of SentencePiece pieces.
constexpr int64_t kErnieVocab = 103424;

class Ernie45Moe final : public SynthArchitecture {
 public:
  SynthArch arch() const override { return SynthArch::kErnie45Moe; }

  absl::StatusOr<SynthShape> Preset(std::string_view name) const override {
    SynthShape s;
    s.rope_base = 5e5f;
    s.rms_eps = 1e-5f;
    s.n_layer_dense_lead = 1;
    s.moe_layer_step = 1;
    s.selection_bias = true;
    if (name == "tiny") {
      // Reference-forward unit tests: one dense and three MoE layers, every
      // optional tensor present.
      s.n_layer = 4;
      s.n_embd = 128;
      s.n_ff = 256;
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_ff_exp = 128;
      s.n_ff_shexp = 256;
      s.n_head = 4;
      s.n_head_kv = 2;
      s.head_dim = 32;
      s.n_vocab = 512;
      s.n_ctx = 4096;
      s.qkv_bias = true;
      return s;
    }
    if (name == "small") {
      // End-to-end tests: every matrix row a multiple of 256, so q4_k_m has
      // no fallback types; no q/k/v biases and a tied output, as
      // ERNIE-4.5-21B-A3B.
      s.n_layer = 4;
      s.n_embd = 256;
      s.n_ff = 512;
      s.n_expert = 16;
      s.n_expert_used = 4;
      s.n_ff_exp = 256;
      s.n_ff_shexp = 512;
      s.n_head = 4;
      s.n_head_kv = 2;
      s.head_dim = 64;
      s.n_vocab = 4096;
      s.n_ctx = 8192;
      s.tied_output = true;
      return s;
    }
    if (name == "full") {
      // ERNIE-4.5-21B-A3B as its HF config gives it: two shared experts of
      // the experts' width, a tied output, no biases.
      s.n_layer = 28;
      s.n_embd = 2560;
      s.n_ff = 12288;
      s.n_expert = 64;
      s.n_expert_used = 6;
      s.n_ff_exp = 1536;
      s.n_ff_shexp = 3072;
      s.n_head = 20;
      s.n_head_kv = 4;
      s.head_dim = 128;
      s.n_vocab = kErnieVocab;
      s.n_ctx = 131072;
      s.tied_output = true;
      return s;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown preset '", std::string(name), "' (expected tiny, small or full)"));
  }

  absl::Status Validate(const SynthShape& s) const override {
    for (absl::Status status : {
             CheckSynthRange("dense-ffn", s.n_ff, 1, kSynthMaxFf),
             CheckSynthRange("leading-dense-layers", s.n_layer_dense_lead, 0, s.n_layer),
             CheckSynthRange("moe-layer-step", s.moe_layer_step, 1, kSynthMaxLayers),
             CheckSynthRange("shared-ffn", s.n_ff_shexp, 0, kSynthMaxFf),
         }) {
      if (!status.ok()) return status;
    }
    if (s.n_vocab <= kSpmFixedTokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("--vocab ", s.n_vocab,
                       " is too small for a SentencePiece vocabulary: it needs more than ",
                       kSpmFixedTokens, " tokens (<unk>, <s>, </s> and 256 byte tokens)"));
    }
    return absl::OkStatus();
  }

  std::vector<SynthTensor> PlanTensors(const SynthShape& s, SynthQuant quant) const override {
    const SynthScales scale(s);
    const int64_t q_dim = s.n_head * s.head_dim;
    using K = SynthTensorKind;
    SynthTensorTable table(
        [&](const SynthTensor& t) { return SynthAttentionMoeType(s, quant, t); });
    table.AddVocabularyEnds(s, scale);
    for (int64_t l = 0; l < s.n_layer; ++l) {
      table.AddNorm(SynthBlockName(l, "attn_norm"), K::kAttnNorm, l, s.n_embd);
      table.AddAttentionProjections(s, scale, l, q_dim);
      if (s.qkv_bias) table.AddAttentionBiases(s, l, kBiasStd);
      table.AddNorm(SynthBlockName(l, "ffn_norm"), K::kFfnNorm, l, s.n_embd);
      if (l < s.n_layer_dense_lead) {
        table.AddDenseFfn(s, scale, l);
        continue;
      }
      table.AddRoutedExperts(s, scale, l);
      if (s.selection_bias) {
        table.Add(SynthBlockRawName(l, "exp_probs_b.bias"), K::kExpProbsB, l, {s.n_expert}, 0.0f,
                  kSelectionBiasExperts / static_cast<float>(s.n_expert));
      }
      if (s.n_ff_shexp > 0) table.AddSharedExpertProjections(s, scale, l, s.n_ff_shexp);
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
    md.ArchU32("feed_forward_length", s.n_ff);
    md.ArchU32("attention.head_count", s.n_head);
    md.ArchU32("attention.head_count_kv", s.n_head_kv);
    md.ArchF32("rope.freq_base", s.rope_base);
    md.ArchF32("attention.layer_norm_rms_epsilon", s.rms_eps);
    if (s.head_dim * s.n_head != s.n_embd) {
      md.ArchU32("attention.key_length", s.head_dim);
      md.ArchU32("attention.value_length", s.head_dim);
    }
    md.FileType(quant);
    md.ArchU32("expert_count", s.n_expert);
    md.ArchU32("expert_used_count", s.n_expert_used);
    md.ArchU32("interleave_moe_layer_step", s.moe_layer_step);
    md.ArchU32("leading_dense_block_count", s.n_layer_dense_lead);
    md.ArchU32("expert_feed_forward_length", s.n_ff_exp);
    // The converter's count of shared experts, which llama.cpp does not
    // read; only a width of whole experts has one.
    if (s.n_ff_shexp % s.n_ff_exp == 0) {
      md.ArchU32("expert_shared_count", s.n_ff_shexp / s.n_ff_exp);
    }
    if (s.n_ff_shexp > 0) md.ArchU32("expert_shared_feed_forward_length", s.n_ff_shexp);
    if (absl::Status status = AddSynthSpmTokenizer(s.n_vocab, md); !status.ok()) return status;
    return md.Take();
  }
};

}  // namespace

const SynthArchitecture& Ernie45MoeArchitecture() {
  static const Ernie45Moe* arch = new Ernie45Moe;
  return *arch;
}

}  // namespace moetier
