// olmoe (OLMoE-1B-7B-0924, SPEC.md §3.6): attention with q/k RMS norms over
// the whole projection ({n_head * head_dim}, {n_head_kv * head_dim}), 64
// experts top-8 without renormalisation, a required output matrix, and the
// OLMo GPT-NeoX byte-level BPE vocabulary (pre-tokenizer "olmo").
//
// Keys as llama.cpp's converter writes them (OlmoeModel: the generic
// TextModel keys, rms eps forced to 1e-5 there): feed_forward_length is the
// expert width, there is no expert_feed_forward_length, and no
// rope.dimension_count (llama.cpp defaults it to the head size).
// attention.key_length / value_length appear only when head_dim differs
// from embd / heads, as they would for a config with an explicit head_dim.
#include "absl/strings/str_cat.h"
#include "synth/synth_arch.h"
#include "synth/synth_tokenizer.h"

namespace moetier {
namespace {

class Olmoe final : public SynthArchitecture {
 public:
  SynthArch arch() const override { return SynthArch::kOlmoe; }

  absl::StatusOr<SynthShape> Preset(std::string_view name) const override {
    SynthShape s;
    s.rope_base = 10000.0f;
    s.rms_eps = 1e-5f;
    s.n_ctx = 4096;
    if (name == "tiny") {
      // The shape of the olmoe-tiny test vector: 3 layers, hidden 64, 8
      // experts top-2 of width 32, 4/4 heads x 16, vocab 512.
      s.n_layer = 3;
      s.n_embd = 64;
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_ff_exp = 32;
      s.n_head = 4;
      s.n_head_kv = 4;
      s.head_dim = 16;
      s.n_vocab = 512;
      return s;
    }
    if (name == "small") {
      // Rows of 256 everywhere, so q4_k_m is the real mix without fallbacks.
      s.n_layer = 3;
      s.n_embd = 256;
      s.n_expert = 16;
      s.n_expert_used = 4;
      s.n_ff_exp = 256;
      s.n_head = 4;
      s.n_head_kv = 4;
      s.head_dim = 64;
      s.n_vocab = 1024;
      return s;
    }
    if (name == "full") {
      // OLMoE-1B-7B-0924, SPEC.md §3.9.
      s.n_layer = 16;
      s.n_embd = 2048;
      s.n_expert = 64;
      s.n_expert_used = 8;
      s.n_ff_exp = 1024;
      s.n_head = 16;
      s.n_head_kv = 16;
      s.head_dim = 128;
      s.n_vocab = kOlmoeVocab;
      return s;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown olmoe preset '", std::string(name), "' (expected tiny, small or full)"));
  }

  absl::Status Validate(const SynthShape& s) const override {
    if (s.tied_output) {
      return absl::InvalidArgumentError(
          "--tied-output is not supported by olmoe: llama.cpp requires its output.weight");
    }
    return absl::OkStatus();
  }

  std::vector<SynthTensor> PlanTensors(const SynthShape& s, SynthQuant quant) const override {
    const SynthScales scale(s);
    const int64_t q_dim = s.n_head * s.head_dim;
    const int64_t kv_dim = s.n_head_kv * s.head_dim;
    using K = SynthTensorKind;
    SynthTensorTable table(
        [&](const SynthTensor& t) { return SynthAttentionMoeType(s, quant, t); });
    table.AddVocabularyEnds(s, scale);  // never tied (Validate)
    for (int64_t l = 0; l < s.n_layer; ++l) {
      table.AddNorm(SynthBlockName(l, "attn_norm"), K::kAttnNorm, l, s.n_embd);
      table.AddAttentionProjections(s, scale, l, q_dim);
      table.AddNorm(SynthBlockName(l, "attn_q_norm"), K::kAttnQNorm, l, q_dim);
      table.AddNorm(SynthBlockName(l, "attn_k_norm"), K::kAttnKNorm, l, kv_dim);
      table.AddNorm(SynthBlockName(l, "ffn_norm"), K::kFfnNorm, l, s.n_embd);
      table.AddRoutedExperts(s, scale, l);
    }
    return table.Take();
  }

  absl::StatusOr<std::vector<GgufKeyValue>> BuildMetadata(const SynthShape& s, SynthQuant quant,
                                                          std::string_view model_name) const override {
    absl::StatusOr<SynthVocabulary> vocab = BuildSynthBpeVocabulary(OlmoeBpeLayout(), s.n_vocab);
    if (!vocab.ok()) return vocab.status();
    const int64_t eos = SynthTokenId(*vocab, "<|endoftext|>");
    const int64_t pad = SynthTokenId(*vocab, "<|padding|>");

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
    if (s.head_dim * s.n_head != s.n_embd) {
      md.ArchU32("attention.key_length", s.head_dim);
      md.ArchU32("attention.value_length", s.head_dim);
    }
    md.FileType(quant);
    md.Vocabulary("gpt2", "olmo", *std::move(vocab));
    // OLMoE's config: eos 50279, pad 1, no bos (bos_token_id null).
    md.TokenId("eos", eos);
    md.TokenId("padding", pad);
    md.Bool("tokenizer.ggml.add_bos_token", false);
    md.Bool("tokenizer.ggml.add_eos_token", false);
    md.Add("tokenizer.chat_template", GgufValue::String(std::string(SynthOlmoeChatTemplate())));
    return md.Take();
  }
};

}  // namespace

const SynthArchitecture& OlmoeArchitecture() {
  static const Olmoe* arch = new Olmoe;
  return *arch;
}

}  // namespace moetier
