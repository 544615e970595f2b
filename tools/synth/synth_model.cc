#include "synth/synth_model.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "synth/synth_tokenizer.h"

namespace moetier {
namespace {

constexpr std::string_view kArch = "qwen3moe";

// A numbered tensor name: "blk.<layer>.<suffix>.weight".
std::string BlockName(int64_t layer, std::string_view suffix) {
  return absl::StrCat("blk.", layer, ".", std::string(suffix), ".weight");
}

std::string ArchKey(std::string_view suffix) { return absl::StrCat(std::string(kArch), ".", std::string(suffix)); }

TensorType FitToRow(TensorType desired, int64_t ne0) {
  if (ne0 % GetTensorTypeInfo(desired).block_elems == 0) return desired;
  TensorType fallback = TensorType::kF16;
  if (desired == TensorType::kQ4_K) fallback = TensorType::kQ4_0;
  if (desired == TensorType::kQ6_K) fallback = TensorType::kQ8_0;
  if (ne0 % GetTensorTypeInfo(fallback).block_elems != 0) fallback = TensorType::kF16;
  return fallback;
}

absl::Status CheckRange(std::string_view flag, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", std::string(flag), " ", value, " is out of range [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SynthShape> SynthPreset(std::string_view name) {
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

absl::StatusOr<SynthQuant> ParseSynthQuant(std::string_view name) {
  if (name == "f32") return SynthQuant::kF32;
  if (name == "q8_0") return SynthQuant::kQ8_0;
  if (name == "q4_k_m") return SynthQuant::kQ4_K_M;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown quant mix '", std::string(name), "' (expected f32, q8_0 or q4_k_m)"));
}

std::string_view SynthQuantName(SynthQuant quant) {
  switch (quant) {
    case SynthQuant::kF32:
      return "f32";
    case SynthQuant::kQ8_0:
      return "q8_0";
    case SynthQuant::kQ4_K_M:
      return "q4_k_m";
  }
  std::abort();
}

uint32_t SynthFileType(SynthQuant quant) {
  switch (quant) {
    case SynthQuant::kF32:
      return 0;
    case SynthQuant::kQ8_0:
      return 7;
    case SynthQuant::kQ4_K_M:
      return 15;
  }
  std::abort();
}

absl::Status ValidateSynthShape(const SynthShape& s) {
  for (absl::Status status : {
           CheckRange("layers", s.n_layer, 1, kSynthMaxLayers),
           CheckRange("embd", s.n_embd, 1, kSynthMaxEmbd),
           CheckRange("experts", s.n_expert, 1, kSynthMaxExperts),
           CheckRange("experts-used", s.n_expert_used, 1, s.n_expert),
           CheckRange("expert-ffn", s.n_ff_exp, 1, kSynthMaxFf),
           CheckRange("heads", s.n_head, 1, kSynthMaxHeads),
           CheckRange("heads-kv", s.n_head_kv, 1, s.n_head),
           CheckRange("head-dim", s.head_dim, 2, kSynthMaxHeadDim),
           CheckRange("vocab", s.n_vocab, kSynthMinVocab, kSynthMaxVocab),
           CheckRange("ctx", s.n_ctx, 1, kSynthMaxCtx),
       }) {
    if (!status.ok()) return status;
  }
  if (s.n_head % s.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--heads ", s.n_head,
                                                   " must be a multiple of --heads-kv ", s.n_head_kv));
  }
  if (s.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--head-dim ", s.head_dim, " must be even (NEOX RoPE rotates pairs)"));
  }
  if (!(std::isfinite(s.rope_base) && s.rope_base > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rope-base ", s.rope_base, " must be a finite positive number"));
  }
  if (!(std::isfinite(s.rms_eps) && s.rms_eps > 0.0f && s.rms_eps < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rms-eps ", s.rms_eps, " must be in (0, 1)"));
  }
  return absl::OkStatus();
}

bool SynthUseMoreBits(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

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
  if (quant == SynthQuant::kQ8_0) return FitToRow(TensorType::kQ8_0, ne0);

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
  return FitToRow(desired, ne0);
}

int64_t SynthTensor::rows() const {
  int64_t r = 1;
  for (size_t i = 1; i < ne.size(); ++i) r *= ne[i];
  return r;
}

int64_t SynthTensor::element_count() const { return ne[0] * rows(); }

uint64_t SynthTensor::size_bytes() const {
  return static_cast<uint64_t>(TensorRowBytes(type, ne[0])) * static_cast<uint64_t>(rows());
}

std::vector<SynthTensor> PlanSynthTensors(const SynthShape& s, SynthQuant quant) {
  // Scales (all elements mean + stddev * N(0,1)):
  // - matrices that read the residual stream or the expert activations:
  //   stddev 1/sqrt(fan_in), so every projection keeps unit RMS;
  // - matrices that write back into the residual stream (attn_output,
  //   ffn_down_exps): additionally / sqrt(2 n_layer), so the residual RMS
  //   stays O(1) after all 2 n_layer additions, whatever the depth;
  // - token_embd and output: 2/sqrt(n_embd), so logits of the normalized
  //   final state have a spread of about 2 (tied or not) and the embedding
  //   is about as large as one block's contribution;
  // - router: 2/sqrt(n_embd), router logits with spread ~2, so softmax
  //   prefers different experts for different tokens without collapsing;
  // - norm weights: 1 +- 0.05.
  const float inv_sqrt_embd = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  const float residual_out = 1.0f / std::sqrt(2.0f * static_cast<float>(s.n_layer));
  const float vocab_scale = 2.0f * inv_sqrt_embd;
  const float router_scale = 2.0f * inv_sqrt_embd;
  constexpr float kNormMean = 1.0f;
  constexpr float kNormStd = 0.05f;
  const int64_t q_dim = s.n_head * s.head_dim;
  const int64_t kv_dim = s.n_head_kv * s.head_dim;

  std::vector<SynthTensor> tensors;
  auto add = [&](std::string name, SynthTensorKind kind, int64_t layer, std::vector<int64_t> ne,
                 float mean, float stddev) {
    SynthTensor t;
    t.name = std::move(name);
    t.kind = kind;
    t.layer = layer;
    t.type = SynthTensorType(quant, kind, layer, s.n_layer, ne[0], s.tied_output);
    t.ne = std::move(ne);
    t.mean = mean;
    t.stddev = stddev;
    tensors.push_back(std::move(t));
  };

  add("token_embd.weight", SynthTensorKind::kTokenEmbd, -1, {s.n_embd, s.n_vocab}, 0.0f, vocab_scale);
  add("output_norm.weight", SynthTensorKind::kOutputNorm, -1, {s.n_embd}, kNormMean, kNormStd);
  if (!s.tied_output) {
    add("output.weight", SynthTensorKind::kOutput, -1, {s.n_embd, s.n_vocab}, 0.0f, vocab_scale);
  }
  for (int64_t l = 0; l < s.n_layer; ++l) {
    add(BlockName(l, "attn_norm"), SynthTensorKind::kAttnNorm, l, {s.n_embd}, kNormMean, kNormStd);
    add(BlockName(l, "attn_q"), SynthTensorKind::kAttnQ, l, {s.n_embd, q_dim}, 0.0f, inv_sqrt_embd);
    add(BlockName(l, "attn_k"), SynthTensorKind::kAttnK, l, {s.n_embd, kv_dim}, 0.0f, inv_sqrt_embd);
    add(BlockName(l, "attn_v"), SynthTensorKind::kAttnV, l, {s.n_embd, kv_dim}, 0.0f, inv_sqrt_embd);
    add(BlockName(l, "attn_output"), SynthTensorKind::kAttnOutput, l, {q_dim, s.n_embd}, 0.0f,
        residual_out / std::sqrt(static_cast<float>(q_dim)));
    add(BlockName(l, "attn_q_norm"), SynthTensorKind::kAttnQNorm, l, {s.head_dim}, kNormMean, kNormStd);
    add(BlockName(l, "attn_k_norm"), SynthTensorKind::kAttnKNorm, l, {s.head_dim}, kNormMean, kNormStd);
    add(BlockName(l, "ffn_norm"), SynthTensorKind::kFfnNorm, l, {s.n_embd}, kNormMean, kNormStd);
    add(BlockName(l, "ffn_gate_inp"), SynthTensorKind::kFfnGateInp, l, {s.n_embd, s.n_expert}, 0.0f,
        router_scale);
    add(BlockName(l, "ffn_gate_exps"), SynthTensorKind::kFfnGateExps, l,
        {s.n_embd, s.n_ff_exp, s.n_expert}, 0.0f, inv_sqrt_embd);
    add(BlockName(l, "ffn_up_exps"), SynthTensorKind::kFfnUpExps, l,
        {s.n_embd, s.n_ff_exp, s.n_expert}, 0.0f, inv_sqrt_embd);
    add(BlockName(l, "ffn_down_exps"), SynthTensorKind::kFfnDownExps, l,
        {s.n_ff_exp, s.n_embd, s.n_expert}, 0.0f,
        residual_out / std::sqrt(static_cast<float>(s.n_ff_exp)));
  }
  return tensors;
}

absl::StatusOr<std::vector<GgufKeyValue>> BuildSynthMetadata(const SynthShape& s, SynthQuant quant,
                                                             std::string_view model_name) {
  absl::StatusOr<SynthVocabulary> vocab = BuildSynthVocabulary(s.n_vocab);
  if (!vocab.ok()) return vocab.status();

  auto u32 = [](int64_t v) { return GgufValue::Uint32(static_cast<uint32_t>(v)); };
  std::vector<GgufKeyValue> kv;
  kv.push_back({"general.architecture", GgufValue::String(std::string(kArch))});
  kv.push_back({"general.type", GgufValue::String("model")});
  kv.push_back({"general.name", GgufValue::String(std::string(model_name))});
  kv.push_back({ArchKey("block_count"), u32(s.n_layer)});
  kv.push_back({ArchKey("context_length"), u32(s.n_ctx)});
  kv.push_back({ArchKey("embedding_length"), u32(s.n_embd)});
  // HF intermediate_size, unused by the qwen3moe graph; Qwen3-30B-A3B's 6144
  // equals expert ffn * experts used, the relation llama.cpp falls back on.
  kv.push_back({ArchKey("feed_forward_length"), u32(s.n_ff_exp * s.n_expert_used)});
  kv.push_back({ArchKey("attention.head_count"), u32(s.n_head)});
  kv.push_back({ArchKey("attention.head_count_kv"), u32(s.n_head_kv)});
  kv.push_back({ArchKey("rope.freq_base"), GgufValue::Float32(s.rope_base)});
  kv.push_back({ArchKey("attention.layer_norm_rms_epsilon"), GgufValue::Float32(s.rms_eps)});
  kv.push_back({ArchKey("expert_used_count"), u32(s.n_expert_used)});
  kv.push_back({ArchKey("attention.key_length"), u32(s.head_dim)});
  kv.push_back({ArchKey("attention.value_length"), u32(s.head_dim)});
  kv.push_back({ArchKey("expert_count"), u32(s.n_expert)});
  kv.push_back({ArchKey("expert_feed_forward_length"), u32(s.n_ff_exp)});
  kv.push_back({"general.file_type", GgufValue::Uint32(SynthFileType(quant))});
  kv.push_back({"general.quantization_version", GgufValue::Uint32(2)});
  kv.push_back({"tokenizer.ggml.model", GgufValue::String("gpt2")});
  kv.push_back({"tokenizer.ggml.pre", GgufValue::String("qwen2")});
  kv.push_back({"tokenizer.ggml.tokens", GgufValue::StringArray(std::move(vocab->tokens))});
  kv.push_back({"tokenizer.ggml.token_type", GgufValue::Int32Array(std::move(vocab->token_types))});
  kv.push_back({"tokenizer.ggml.merges", GgufValue::StringArray(std::move(vocab->merges))});
  kv.push_back({"tokenizer.ggml.eos_token_id", GgufValue::Uint32(vocab->eos_id)});
  kv.push_back({"tokenizer.ggml.padding_token_id", GgufValue::Uint32(vocab->pad_id)});
  kv.push_back({"tokenizer.ggml.bos_token_id", GgufValue::Uint32(vocab->bos_id)});
  kv.push_back({"tokenizer.ggml.add_bos_token", GgufValue::Bool(false)});
  kv.push_back({"tokenizer.chat_template", GgufValue::String(std::string(SynthChatTemplate()))});
  return kv;
}

}  // namespace moetier
