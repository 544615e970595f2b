// qwen35moe (Qwen3.6-35B-A3B, SPEC.md §3.3-3.4): the hybrid stack of
// synth_deltanet_hybrid.h with separate ssm_beta and ssm_alpha, IMROPE's
// rope.dimension_sections, and the Qwen3.5 tokenizer. Tensors and keys as
// the llama.cpp converter (Qwen3_5MoeTextModel) writes them, in the order of
// the qwen35moe test vectors.
#include "absl/strings/str_cat.h"
#include "synth/synth_arch.h"
#include "synth/synth_deltanet_hybrid.h"
#include "synth/synth_tokenizer.h"

namespace moetier {
namespace {

class Qwen35Moe final : public SynthArchitecture {
 public:
  SynthArch arch() const override { return SynthArch::kQwen35Moe; }

  // Every mix but gpt-oss's mxfp4.
  bool SupportsQuant(SynthQuant quant) const override { return quant != SynthQuant::kMxfp4; }

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
    if (absl::Status status = ValidateSynthDeltaNetHybrid(s); !status.ok()) return status;
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
    return absl::OkStatus();
  }

  std::vector<SynthTensor> PlanTensors(const SynthShape& s, SynthQuant quant) const override {
    return PlanSynthDeltaNetHybrid(s, quant, SynthDeltaNetProjections::kSeparate);
  }

  absl::StatusOr<std::vector<GgufKeyValue>> BuildMetadata(const SynthShape& s, SynthQuant quant,
                                                          std::string_view model_name) const override {
    absl::StatusOr<SynthVocabulary> vocab = BuildSynthBpeVocabulary(Qwen35BpeLayout(), s.n_vocab);
    if (!vocab.ok()) return vocab.status();
    const int64_t eos = SynthTokenId(*vocab, "<|im_end|>");
    const int64_t pad = SynthTokenId(*vocab, "<|endoftext|>");

    SynthMetadata md(name());
    md.General(model_name);
    AddSynthDeltaNetHybridKeys(s, /*rope_sections=*/true, md);
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
