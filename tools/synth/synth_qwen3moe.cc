// qwen3moe (Qwen3-30B-A3B, SPEC.md §3.1): attention with per-head q/k norms,
// a routed-expert FFN without a shared expert, and the Qwen3 tokenizer; and
// qwen3vlmoe (the language model of Qwen3-VL-30B-A3B), the same tensors with
// multi-section rope (rope.dimension_sections) and n_deepstack_layers.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "synth/synth_arch.h"
#include "synth/synth_tokenizer.h"

namespace moetier {
namespace {

// The vision tower's layers whose features Qwen3-VL adds to the language
// model's first layers (deepstack_visual_indexes); text has none.
constexpr int64_t kQwen3VlDeepstackLayers = 3;

class Qwen3Moe final : public SynthArchitecture {
 public:
  explicit Qwen3Moe(SynthArch arch) : arch_(arch) {}
  SynthArch arch() const override { return arch_; }

  absl::StatusOr<SynthShape> Preset(std::string_view name) const override {
    absl::StatusOr<SynthShape> s = TextPreset(name);
    if (!s.ok() || arch_ != SynthArch::kQwen3VlMoe) return s;
    // Qwen3-VL's mrope_section, for rope over the whole head: 3/8, 5/16
    // and 5/16 of the pairs (24, 20, 20 of Qwen3-VL-30B-A3B's 64).
    const int32_t pairs = static_cast<int32_t>(s->head_dim / 2);
    const int32_t t = pairs * 3 / 8;
    const int32_t h = (pairs - t) / 2;
    s->rope_sections = {t, h, pairs - t - h, 0};
    if (name == "full") {
      // Qwen3-VL-30B-A3B's text model.
      s->rope_base = 5e6f;
      s->n_ctx = 262144;
    }
    return s;
  }

  absl::Status Validate(const SynthShape& s) const override {
    if (arch_ != SynthArch::kQwen3VlMoe) return absl::OkStatus();
    // Pair i lies in sector i mod the sections' sum, which ggml allows up to
    // the head size.
    int64_t sum = 0;
    for (int32_t v : s.rope_sections) {
      if (v < 0) return absl::InvalidArgumentError("--rope-sections must not be negative");
      sum += v;
    }
    if (s.rope_sections[0] + s.rope_sections[1] + s.rope_sections[2] == 0 || sum > s.head_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rope-sections must sum to at most head-dim (", s.head_dim, "), not ", sum,
                       ", with one of the first three positive"));
    }
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<SynthShape> TextPreset(std::string_view name) const {
    SynthShape s;
    s.rope_base = 1e6f;
    s.rms_eps = 1e-6f;
    if (name == "tiny") {
      // Small enough for reference-forward unit tests. head_dim * n_head (128)
      // differs from n_embd (64) as in the real model; the expert FFN width of
      // 256 gives ffn_down_exps rows that K-quants can encode, so the q4_k_m
      // mix has Q4_K and Q6_K tensors even at this size.
      s.n_layer = 2;
      s.n_embd = 64;
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_ff_exp = 256;
      s.n_head = 4;
      s.n_head_kv = 2;
      s.head_dim = 32;
      s.n_vocab = 512;
      s.n_ctx = 4096;
      return s;
    }
    if (name == "small") {
      // End-to-end tests and CPU benchmarks: every matrix row is a multiple of
      // 256, so the q4_k_m mix is the real one with no fallback types.
      s.n_layer = 4;
      s.n_embd = 256;
      s.n_expert = 32;
      s.n_expert_used = 4;
      s.n_ff_exp = 256;
      s.n_head = 8;
      s.n_head_kv = 2;
      s.head_dim = 64;
      s.n_vocab = 4096;
      s.n_ctx = 8192;
      return s;
    }
    if (name == "full") {
      // Qwen3-30B-A3B, SPEC.md §3.9.
      s.n_layer = 48;
      s.n_embd = 2048;
      s.n_expert = 128;
      s.n_expert_used = 8;
      s.n_ff_exp = 768;
      s.n_head = 32;
      s.n_head_kv = 4;
      s.head_dim = 128;
      s.n_vocab = kQwenVocab;
      s.n_ctx = 40960;
      return s;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown preset '", std::string(name), "' (expected tiny, small or full)"));
  }

 public:
  std::vector<SynthTensor> PlanTensors(const SynthShape& s, SynthQuant quant) const override {
    const SynthScales scale(s);
    const int64_t q_dim = s.n_head * s.head_dim;
    SynthTensorTable table([&](const SynthTensor& t) {
      return SynthTensorType(quant, t.kind, t.layer, s.n_layer, t.ne[0], s.tied_output);
    });
    using K = SynthTensorKind;
    table.AddVocabularyEnds(s, scale);
    for (int64_t l = 0; l < s.n_layer; ++l) {
      table.AddNorm(SynthBlockName(l, "attn_norm"), K::kAttnNorm, l, s.n_embd);
      table.AddAttentionProjections(s, scale, l, q_dim);
      table.AddNorm(SynthBlockName(l, "attn_q_norm"), K::kAttnQNorm, l, s.head_dim);
      table.AddNorm(SynthBlockName(l, "attn_k_norm"), K::kAttnKNorm, l, s.head_dim);
      table.AddNorm(SynthBlockName(l, "ffn_norm"), K::kFfnNorm, l, s.n_embd);
      table.AddRoutedExperts(s, scale, l);
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
    // HF intermediate_size, unused by the qwen3moe graph; Qwen3-30B-A3B's 6144
    // equals expert ffn * experts used, the relation llama.cpp falls back on.
    md.ArchU32("feed_forward_length", s.n_ff_exp * s.n_expert_used);
    md.ArchU32("attention.head_count", s.n_head);
    md.ArchU32("attention.head_count_kv", s.n_head_kv);
    md.ArchF32("rope.freq_base", s.rope_base);
    md.ArchF32("attention.layer_norm_rms_epsilon", s.rms_eps);
    md.ArchU32("expert_used_count", s.n_expert_used);
    md.ArchU32("attention.key_length", s.head_dim);
    md.ArchU32("attention.value_length", s.head_dim);
    md.ArchU32("expert_count", s.n_expert);
    md.ArchU32("expert_feed_forward_length", s.n_ff_exp);
    if (arch_ == SynthArch::kQwen3VlMoe) {
      md.ArchI32Array("rope.dimension_sections", {s.rope_sections.begin(), s.rope_sections.end()});
      md.ArchU32("n_deepstack_layers", std::min(kQwen3VlDeepstackLayers, s.n_layer));
    }
    md.FileType(quant);
    if (absl::Status status = AddSynthQwen3Tokenizer(s.n_vocab, md); !status.ok()) return status;
    return md.Take();
  }

 private:
  const SynthArch arch_;
};

}  // namespace

TensorType SynthTensorType(SynthQuant quant, SynthTensorKind kind, int64_t layer, int64_t n_layer,
                           int64_t ne0, bool tied_output) {
  switch (kind) {
    case SynthTensorKind::kOutputNorm:
    case SynthTensorKind::kAttnNorm:
    case SynthTensorKind::kAttnQNorm:
    case SynthTensorKind::kAttnKNorm:
    case SynthTensorKind::kFfnNorm:
    case SynthTensorKind::kFfnGateInp:
      return TensorType::kF32;
    default:
      break;
  }
  if (quant == SynthQuant::kF32) return TensorType::kF32;
  if (quant != SynthQuant::kQ4_K_M) return SynthFitToRow(TensorType::kQ8_0, ne0);

  TensorType desired = TensorType::kQ4_K;
  switch (kind) {
    case SynthTensorKind::kTokenEmbd:
      desired = tied_output ? TensorType::kQ6_K : TensorType::kQ4_K;
      break;
    case SynthTensorKind::kOutput:
    case SynthTensorKind::kAttnV:
      desired = TensorType::kQ6_K;
      break;
    case SynthTensorKind::kFfnDownExps:
      desired = SynthUseMoreBits(layer, n_layer) ? TensorType::kQ6_K : TensorType::kQ4_K;
      break;
    default:
      desired = TensorType::kQ4_K;
      break;
  }
  return SynthFitToRow(desired, ne0);
}

const SynthArchitecture& Qwen3MoeArchitecture() {
  static const Qwen3Moe* arch = new Qwen3Moe(SynthArch::kQwen3Moe);
  return *arch;
}

const SynthArchitecture& Qwen3VlMoeArchitecture() {
  static const Qwen3Moe* arch = new Qwen3Moe(SynthArch::kQwen3VlMoe);
  return *arch;
}

}  // namespace moetier
