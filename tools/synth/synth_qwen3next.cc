// qwen3next (Qwen3-Next-80B-A3B, SPEC.md §3.3): the hybrid stack of
// synth_deltanet_hybrid.h with beta and alpha in one ssm_ba (or, with
// --legacy-ssm-in, q, k, v and z in one ssm_in, as files converted before
// attn_qkv existed have), plain NEOX rope over rope.dimension_count dims,
// and the Qwen3 tokenizer. The grouping of value heads by key head inside
// ssm_ba and ssm_in is a reading convention: the elements are drawn alike.
#include "absl/strings/str_cat.h"
#include "synth/synth_arch.h"
#include "synth/synth_deltanet_hybrid.h"
#include "synth/synth_tokenizer.h"

namespace moetier {
namespace {

class Qwen3Next final : public SynthArchitecture {
 public:
  SynthArch arch() const override { return SynthArch::kQwen3Next; }

  // Every mix but gpt-oss's mxfp4.
  bool SupportsQuant(SynthQuant quant) const override { return quant != SynthQuant::kMxfp4; }

  absl::StatusOr<SynthShape> Preset(std::string_view name) const override {
    if (name == "tiny" || name == "small") {
      // qwen35moe's, whose value heads are as wide as their key heads, as
      // llama.cpp needs of a qwen3next file (it sizes the DeltaNet tensors
      // with d_v = ssm.state_size); qwen3next has no rope sections.
      absl::StatusOr<SynthShape> s = Qwen35MoeArchitecture().Preset(name);
      if (s.ok()) s->rope_sections = {};
      return s;
    }
    if (name == "full") {
      // Qwen3-Next-80B-A3B, SPEC.md §3.9: 36 DeltaNet and 12 attention layers.
      SynthShape s;
      s.rope_base = 1e7f;
      s.rms_eps = 1e-6f;
      s.full_attention_interval = 4;
      s.ssm_conv_kernel = 4;
      s.n_layer = 48;
      s.n_embd = 2048;
      s.n_expert = 512;
      s.n_expert_used = 10;
      s.n_ff_exp = 512;
      s.n_ff_shexp = 512;
      s.n_head = 16;
      s.n_head_kv = 2;
      s.head_dim = 256;
      s.n_rot = 64;
      s.ssm_state_size = 128;
      s.ssm_group_count = 16;
      s.ssm_time_step_rank = 32;
      s.ssm_inner_size = 4096;
      s.n_vocab = kQwenVocab;
      s.n_ctx = 262144;
      return s;
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown qwen3next preset '", std::string(name),
                                                   "' (expected tiny, small or full)"));
  }

  absl::Status Validate(const SynthShape& s) const override {
    return ValidateSynthDeltaNetHybrid(s);
  }

  std::vector<SynthTensor> PlanTensors(const SynthShape& s, SynthQuant quant) const override {
    return PlanSynthDeltaNetHybrid(s, quant,
                                   s.legacy_ssm_in ? SynthDeltaNetProjections::kLegacySsmIn
                                                   : SynthDeltaNetProjections::kFusedBetaAlpha);
  }

  absl::StatusOr<std::vector<GgufKeyValue>> BuildMetadata(
      const SynthShape& s, SynthQuant quant, std::string_view model_name) const override {
    SynthMetadata md(name());
    md.General(model_name);
    AddSynthDeltaNetHybridKeys(s, /*rope_sections=*/false, md);
    md.FileType(quant);
    if (absl::Status status = AddSynthQwen3Tokenizer(s.n_vocab, md); !status.ok()) return status;
    return md.Take();
  }
};

}  // namespace

const SynthArchitecture& Qwen3NextArchitecture() {
  static const Qwen3Next* arch = new Qwen3Next;
  return *arch;
}

}  // namespace moetier
