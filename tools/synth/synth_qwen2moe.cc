// qwen2moe (Qwen2-57B-A14B, Qwen1.5-MoE-A2.7B; SPEC.md §3.2): attention with
// q/k/v biases and no q/k norm, routed experts plus a sigmoid-gated shared
// expert in every layer, an untied output, and the Qwen tokenizer.
#include "absl/strings/str_cat.h"
#include "synth/synth_arch.h"
#include "synth/synth_tokenizer.h"

namespace moetier {
namespace {

// Qwen2's biases are large next to the unit-RMS projections they are added
// to; this spread makes every bias visible in the logits.
constexpr float kBiasStd = 0.5f;

class Qwen2Moe final : public SynthArchitecture {
 public:
  SynthArch arch() const override { return SynthArch::kQwen2Moe; }

  absl::StatusOr<SynthShape> Preset(std::string_view name) const override {
    SynthShape s;
    s.rope_base = 1e6f;
    s.rms_eps = 1e-6f;
    if (name == "tiny") {
      // Reference-forward unit tests. llama.cpp reads attn_q as {n_embd,
      // n_embd}, so n_head * head_dim is n_embd.
      s.n_layer = 2;
      s.n_embd = 128;
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_ff_exp = 256;
      s.n_ff_shexp = 256;
      s.n_head = 4;
      s.n_head_kv = 2;
      s.head_dim = 32;
      s.n_vocab = 512;
      s.n_ctx = 4096;
      return s;
    }
    if (name == "small") {
      // End-to-end tests: every matrix row a multiple of 256, as for qwen3moe.
      s.n_layer = 4;
      s.n_embd = 256;
      s.n_expert = 16;
      s.n_expert_used = 4;
      s.n_ff_exp = 256;
      s.n_ff_shexp = 512;
      s.n_head = 4;
      s.n_head_kv = 2;
      s.head_dim = 64;
      s.n_vocab = 4096;
      s.n_ctx = 8192;
      return s;
    }
    if (name == "full") {
      // Qwen2-57B-A14B as its HF config gives it.
      s.n_layer = 28;
      s.n_embd = 3584;
      s.n_expert = 64;
      s.n_expert_used = 8;
      s.n_ff_exp = 2560;
      s.n_ff_shexp = 20480;
      s.n_head = 28;
      s.n_head_kv = 4;
      s.head_dim = 128;
      s.n_vocab = kQwenVocab;
      s.n_ctx = 32768;
      return s;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown preset '", std::string(name), "' (expected tiny, small or full)"));
  }

  absl::Status Validate(const SynthShape& s) const override {
    if (absl::Status status = CheckSynthRange("shared-ffn", s.n_ff_shexp, 1, kSynthMaxFf);
        !status.ok()) {
      return status;
    }
    if (s.n_head * s.head_dim != s.n_embd) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--heads x --head-dim (", s.n_head, " x ", s.head_dim, ") must equal --embd ", s.n_embd,
          " for qwen2moe: llama.cpp reads its attn_q as a square matrix"));
    }
    if (s.tied_output) {
      return absl::InvalidArgumentError(
          "--tied-output is not supported by qwen2moe: llama.cpp requires its output.weight");
    }
    return absl::OkStatus();
  }

  std::vector<SynthTensor> PlanTensors(const SynthShape& s, SynthQuant quant) const override {
    const SynthScales scale(s);
    const int64_t q_dim = s.n_head * s.head_dim;
    using K = SynthTensorKind;
    SynthTensorTable table(
        [&](const SynthTensor& t) { return SynthAttentionMoeType(s, quant, t); });
    table.AddVocabularyEnds(s, scale);  // never tied (Validate)
    for (int64_t l = 0; l < s.n_layer; ++l) {
      table.AddNorm(SynthBlockName(l, "attn_norm"), K::kAttnNorm, l, s.n_embd);
      table.AddAttentionProjections(s, scale, l, q_dim);
      table.AddAttentionBiases(s, l, kBiasStd);
      table.AddNorm(SynthBlockName(l, "ffn_norm"), K::kFfnNorm, l, s.n_embd);
      table.AddRoutedExperts(s, scale, l);
      table.AddSharedExpert(s, scale, l);
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
    // HF intermediate_size, unused by the graph; expert ffn * experts used
    // is the relation llama.cpp falls back on without the expert keys.
    md.ArchU32("feed_forward_length", s.n_ff_exp * s.n_expert_used);
    md.ArchU32("attention.head_count", s.n_head);
    md.ArchU32("attention.head_count_kv", s.n_head_kv);
    md.ArchF32("rope.freq_base", s.rope_base);
    md.ArchF32("attention.layer_norm_rms_epsilon", s.rms_eps);
    md.ArchU32("expert_count", s.n_expert);
    md.ArchU32("expert_used_count", s.n_expert_used);
    md.ArchU32("expert_feed_forward_length", s.n_ff_exp);
    md.ArchU32("expert_shared_feed_forward_length", s.n_ff_shexp);
    md.FileType(quant);
    if (absl::Status status = AddSynthQwen3Tokenizer(s.n_vocab, md); !status.ok()) return status;
    return md.Take();
  }
};

}  // namespace

const SynthArchitecture& Qwen2MoeArchitecture() {
  static const Qwen2Moe* arch = new Qwen2Moe;
  return *arch;
}

}  // namespace moetier
