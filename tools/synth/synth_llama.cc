// llama with experts (Mixtral-8x7B, SPEC.md §3.5): plain GQA attention (no
// q/k norm, NORM rope over the whole head), 8 experts top-2, and a
// SentencePiece vocabulary.
//
// Keys as llama.cpp's converter writes them (LlamaModel): the generic ones,
// feed_forward_length = the expert width, vocab_size, and
// rope.dimension_count = head_dim (llama.cpp requires the two to agree).
// The converter permutes the q/k rows of the HF checkpoint so that NORM
// (adjacent-pair) rope is right; for random weights that permutation changes
// nothing, and the rope mode follows from the architecture.
//
// Tokenizer as _set_vocab_sentencepiece writes it: model "llama", pre
// "default", tokens, scores and token types (BuildSynthSpmVocabulary), then
// from tokenizer_config.json bos <s> 1, eos </s> 2, unknown <unk> 0,
// add_bos_token true, add_eos_token false and the Instruct chat template.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "synth/synth_arch.h"
#include "synth/synth_tokenizer.h"

namespace moetier {
namespace {

class Llama final : public SynthArchitecture {
 public:
  SynthArch arch() const override { return SynthArch::kLlama; }

  absl::StatusOr<SynthShape> Preset(std::string_view name) const override {
    SynthShape s;
    s.rope_base = 1e6f;
    s.rms_eps = 1e-5f;
    if (name == "tiny") {
      // The shape of the mixtral-tiny test vector: 3 layers, hidden 64, 8
      // experts top-2 of width 32, 4/2 heads x 16, vocab 512.
      s.n_layer = 3;
      s.n_embd = 64;
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_ff_exp = 32;
      s.n_head = 4;
      s.n_head_kv = 2;
      s.head_dim = 16;
      s.n_vocab = 512;
      s.n_ctx = 4096;
      return s;
    }
    if (name == "small") {
      // The mixtral-small test vector's shape: rows of 256 everywhere.
      s.n_layer = 3;
      s.n_embd = 256;
      s.n_expert = 16;
      s.n_expert_used = 4;
      s.n_ff_exp = 256;
      s.n_head = 4;
      s.n_head_kv = 4;
      s.head_dim = 64;
      s.n_vocab = 1024;
      s.n_ctx = 4096;
      return s;
    }
    if (name == "full") {
      // Mixtral-8x7B, SPEC.md §3.9.
      s.n_layer = 32;
      s.n_embd = 4096;
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_ff_exp = 14336;
      s.n_head = 32;
      s.n_head_kv = 8;
      s.head_dim = 128;
      s.n_vocab = kMixtralVocab;
      s.n_ctx = 32768;
      return s;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown llama preset '", std::string(name), "' (expected tiny, small or full)"));
  }

  absl::Status Validate(const SynthShape& s) const override {
    if (s.n_vocab <= kSpmFixedTokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--vocab ", s.n_vocab, " is too small for a SentencePiece vocabulary: it needs more than ",
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
    if (s.rope_freq_factors) {
      SynthTensor& factors =
          table.Add("rope_freqs.weight", K::kRopeFreqs, -1, {s.head_dim / 2}, 0.0f, std::log(8.0f));
      factors.distribution = SynthDistribution::kExpUniform;
    }
    for (int64_t l = 0; l < s.n_layer; ++l) {
      table.AddNorm(SynthBlockName(l, "attn_norm"), K::kAttnNorm, l, s.n_embd);
      table.AddAttentionProjections(s, scale, l, q_dim);
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
    md.ArchU32("vocab_size", s.n_vocab);
    md.ArchU32("rope.dimension_count", s.head_dim);
    md.FileType(quant);
    if (absl::Status status = AddSynthSpmTokenizer(s.n_vocab, md); !status.ok()) return status;
    return md.Take();
  }
};

}  // namespace

const SynthArchitecture& LlamaArchitecture() {
  static const Llama* arch = new Llama;
  return *arch;
}

}  // namespace moetier
