#include "synth/synth_arch.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moetier {

bool SynthArchitecture::SupportsQuant(SynthQuant quant) const {
  return quant == SynthQuant::kF32 || quant == SynthQuant::kQ8_0 || quant == SynthQuant::kQ4_K_M;
}

const SynthArchitecture& SynthArchitectureFor(SynthArch arch) {
  switch (arch) {
    case SynthArch::kQwen3Moe:
      return Qwen3MoeArchitecture();
    case SynthArch::kOlmoe:
      return OlmoeArchitecture();
    case SynthArch::kLlama:
      return LlamaArchitecture();
    case SynthArch::kQwen35Moe:
      return Qwen35MoeArchitecture();
    case SynthArch::kQwen3Next:
      return Qwen3NextArchitecture();
    case SynthArch::kQwen2Moe:
      return Qwen2MoeArchitecture();
    case SynthArch::kQwen3VlMoe:
      return Qwen3VlMoeArchitecture();
    case SynthArch::kGlm4Moe:
      return Glm4MoeArchitecture();
    case SynthArch::kErnie45Moe:
      return Ernie45MoeArchitecture();
    case SynthArch::kGptOss:
      return GptOssArchitecture();
  }
  std::abort();
}

std::string SynthBlockName(int64_t layer, std::string_view suffix) {
  return absl::StrCat("blk.", layer, ".", std::string(suffix), ".weight");
}

std::string SynthBlockRawName(int64_t layer, std::string_view name) {
  return absl::StrCat("blk.", layer, ".", std::string(name));
}

absl::Status CheckSynthRange(std::string_view flag, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", std::string(flag), " ", value, " is out of range [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

TensorType SynthFitToRow(TensorType desired, int64_t ne0) {
  if (ne0 % GetTensorTypeInfo(desired).block_elems == 0) return desired;
  TensorType fallback = TensorType::kF16;
  if (desired == TensorType::kQ4_K) fallback = TensorType::kQ4_0;
  if (desired == TensorType::kQ5_K || desired == TensorType::kQ6_K) fallback = TensorType::kQ8_0;
  if (ne0 % GetTensorTypeInfo(fallback).block_elems != 0) fallback = TensorType::kF16;
  return fallback;
}

bool SynthUseMoreBits(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

TensorType SynthLlamaQ4KMType(const SynthLlamaQuantInput& in) {
  const bool eight_experts = in.n_expert == 8;
  TensorType t = TensorType::kQ4_K;
  switch (in.role) {
    case SynthQuantRole::kUnquantized:
      return TensorType::kF32;
    case SynthQuantRole::kOutput:
      return in.ne0 % kQK_K == 0 ? TensorType::kQ6_K : SynthFitToRow(TensorType::kQ8_0, in.ne0);
    case SynthQuantRole::kTokenEmbd:
      if (in.tied_output) {
        return in.ne0 % kQK_K == 0 ? TensorType::kQ6_K : SynthFitToRow(TensorType::kQ8_0, in.ne0);
      }
      break;
    case SynthQuantRole::kAttnV:
      if (eight_experts) {
        t = TensorType::kQ8_0;
      } else if (SynthUseMoreBits(in.attn_v_index, in.n_attn_v)) {
        t = TensorType::kQ6_K;
      }
      break;
    case SynthQuantRole::kAttnK:
      if (eight_experts) t = TensorType::kQ8_0;
      break;
    case SynthQuantRole::kAttnOutput:
      if (eight_experts) t = TensorType::kQ5_K;
      break;
    case SynthQuantRole::kFfnDown:
      if (SynthUseMoreBits(in.layer, in.n_layer)) t = TensorType::kQ6_K;
      break;
    case SynthQuantRole::kAttnQ:
    case SynthQuantRole::kOther:
      break;
  }
  return SynthFitToRow(t, in.ne0);
}

TensorType SynthUniformType(SynthQuant quant, SynthQuantRole role, int64_t ne0) {
  if (role == SynthQuantRole::kUnquantized || quant == SynthQuant::kF32) return TensorType::kF32;
  return SynthFitToRow(TensorType::kQ8_0, ne0);
}

SynthScales::SynthScales(const SynthShape& s)
    : inv_sqrt_embd(1.0f / std::sqrt(static_cast<float>(s.n_embd))),
      residual_out(1.0f / std::sqrt(2.0f * static_cast<float>(s.n_layer))),
      vocab(2.0f * inv_sqrt_embd),
      router(2.0f * inv_sqrt_embd) {}

float SynthScales::FanIn(int64_t fan_in) const { return 1.0f / std::sqrt(static_cast<float>(fan_in)); }

float SynthScales::ResidualOut(int64_t fan_in) const {
  return residual_out / std::sqrt(static_cast<float>(fan_in));
}

SynthTensor& SynthTensorTable::Add(std::string name, SynthTensorKind kind, int64_t layer,
                                   std::vector<int64_t> ne, float mean, float stddev) {
  SynthTensor t;
  t.name = std::move(name);
  t.kind = kind;
  t.layer = layer;
  t.ne = std::move(ne);
  t.mean = mean;
  t.stddev = stddev;
  t.type = type_of_(t);
  tensors_.push_back(std::move(t));
  return tensors_.back();
}

SynthTensor& SynthTensorTable::AddNorm(std::string name, SynthTensorKind kind, int64_t layer, int64_t n) {
  return Add(std::move(name), kind, layer, {n}, SynthScales::kNormMean, SynthScales::kNormStd);
}

void SynthTensorTable::AddVocabularyEnds(const SynthShape& s, const SynthScales& scale) {
  using K = SynthTensorKind;
  Add("token_embd.weight", K::kTokenEmbd, -1, {s.n_embd, s.n_vocab}, 0.0f, scale.vocab);
  AddNorm("output_norm.weight", K::kOutputNorm, -1, s.n_embd);
  if (!s.tied_output) {
    Add("output.weight", K::kOutput, -1, {s.n_embd, s.n_vocab}, 0.0f, scale.vocab);
  }
}

void SynthTensorTable::AddAttentionProjections(const SynthShape& s, const SynthScales& scale,
                                               int64_t l, int64_t q_rows) {
  using K = SynthTensorKind;
  const int64_t q_dim = s.n_head * s.head_dim;
  const int64_t kv_dim = s.n_head_kv * s.head_dim;
  Add(SynthBlockName(l, "attn_q"), K::kAttnQ, l, {s.n_embd, q_rows}, 0.0f, scale.inv_sqrt_embd);
  Add(SynthBlockName(l, "attn_k"), K::kAttnK, l, {s.n_embd, kv_dim}, 0.0f, scale.inv_sqrt_embd);
  Add(SynthBlockName(l, "attn_v"), K::kAttnV, l, {s.n_embd, kv_dim}, 0.0f, scale.inv_sqrt_embd);
  Add(SynthBlockName(l, "attn_output"), K::kAttnOutput, l, {q_dim, s.n_embd}, 0.0f,
      scale.ResidualOut(q_dim));
}

void SynthTensorTable::AddAttentionBiases(const SynthShape& s, int64_t l, float stddev) {
  using K = SynthTensorKind;
  const int64_t q_dim = s.n_head * s.head_dim;
  const int64_t kv_dim = s.n_head_kv * s.head_dim;
  Add(SynthBlockRawName(l, "attn_q.bias"), K::kAttnQBias, l, {q_dim}, 0.0f, stddev);
  Add(SynthBlockRawName(l, "attn_k.bias"), K::kAttnKBias, l, {kv_dim}, 0.0f, stddev);
  Add(SynthBlockRawName(l, "attn_v.bias"), K::kAttnVBias, l, {kv_dim}, 0.0f, stddev);
}

void SynthTensorTable::AddDenseFfn(const SynthShape& s, const SynthScales& scale, int64_t l) {
  using K = SynthTensorKind;
  Add(SynthBlockName(l, "ffn_gate"), K::kFfnGate, l, {s.n_embd, s.n_ff}, 0.0f, scale.inv_sqrt_embd);
  Add(SynthBlockName(l, "ffn_up"), K::kFfnUp, l, {s.n_embd, s.n_ff}, 0.0f, scale.inv_sqrt_embd);
  Add(SynthBlockName(l, "ffn_down"), K::kFfnDown, l, {s.n_ff, s.n_embd}, 0.0f,
      scale.ResidualOut(s.n_ff));
}

void SynthTensorTable::AddRoutedExperts(const SynthShape& s, const SynthScales& scale, int64_t l) {
  using K = SynthTensorKind;
  Add(SynthBlockName(l, "ffn_gate_inp"), K::kFfnGateInp, l, {s.n_embd, s.n_expert}, 0.0f,
      scale.router);
  Add(SynthBlockName(l, "ffn_gate_exps"), K::kFfnGateExps, l, {s.n_embd, s.n_ff_exp, s.n_expert},
      0.0f, scale.inv_sqrt_embd);
  Add(SynthBlockName(l, "ffn_up_exps"), K::kFfnUpExps, l, {s.n_embd, s.n_ff_exp, s.n_expert}, 0.0f,
      scale.inv_sqrt_embd);
  Add(SynthBlockName(l, "ffn_down_exps"), K::kFfnDownExps, l, {s.n_ff_exp, s.n_embd, s.n_expert},
      0.0f, scale.ResidualOut(s.n_ff_exp));
}

SynthQuantRole SynthAttentionMoeRole(SynthTensorKind kind) {
  using K = SynthTensorKind;
  using R = SynthQuantRole;
  switch (kind) {
    case K::kTokenEmbd:
      return R::kTokenEmbd;
    case K::kOutput:
      return R::kOutput;
    case K::kAttnQ:
      return R::kAttnQ;
    case K::kAttnK:
      return R::kAttnK;
    case K::kAttnV:
      return R::kAttnV;
    case K::kAttnOutput:
      return R::kAttnOutput;
    case K::kFfnDownExps:
    case K::kFfnDownShexp:
    case K::kFfnDown:
      return R::kFfnDown;
    case K::kFfnGateExps:
    case K::kFfnUpExps:
    case K::kFfnGateShexp:
    case K::kFfnUpShexp:
    case K::kFfnGate:
    case K::kFfnUp:
    case K::kNextnEhProj:
      return R::kOther;
    default:
      return R::kUnquantized;
  }
}

void SynthTensorTable::AddSharedExpert(const SynthShape& s, const SynthScales& scale, int64_t l) {
  using K = SynthTensorKind;
  // The shared expert's gate logit dot(w, x) has unit spread.
  Add(SynthBlockName(l, "ffn_gate_inp_shexp"), K::kFfnGateInpShexp, l, {s.n_embd}, 0.0f,
      scale.inv_sqrt_embd);
  AddSharedExpertProjections(s, scale, l, s.n_ff_shexp);
}

void SynthTensorTable::AddSharedExpertProjections(const SynthShape& s, const SynthScales& scale,
                                                  int64_t l, int64_t width) {
  using K = SynthTensorKind;
  Add(SynthBlockName(l, "ffn_gate_shexp"), K::kFfnGateShexp, l, {s.n_embd, width}, 0.0f,
      scale.inv_sqrt_embd);
  Add(SynthBlockName(l, "ffn_up_shexp"), K::kFfnUpShexp, l, {s.n_embd, width}, 0.0f,
      scale.inv_sqrt_embd);
  Add(SynthBlockName(l, "ffn_down_shexp"), K::kFfnDownShexp, l, {width, s.n_embd}, 0.0f,
      scale.ResidualOut(width));
}

TensorType SynthAttentionMoeType(const SynthShape& s, SynthQuant quant, const SynthTensor& t) {
  const SynthQuantRole role = SynthAttentionMoeRole(t.kind);
  if (quant != SynthQuant::kQ4_K_M) return SynthUniformType(quant, role, t.ne[0]);
  return SynthLlamaQ4KMType(
      {role, t.layer, s.n_layer, t.layer, s.n_layer, s.n_expert, t.ne[0], s.tied_output});
}

std::string SynthMetadata::ArchKey(std::string_view suffix) const { return absl::StrCat(arch_, ".", std::string(suffix)); }

void SynthMetadata::General(std::string_view model_name) {
  Add("general.architecture", GgufValue::String(arch_));
  Add("general.type", GgufValue::String("model"));
  Add("general.name", GgufValue::String(std::string(model_name)));
}

void SynthMetadata::FileType(SynthQuant quant) {
  Add("general.file_type", GgufValue::Uint32(SynthFileType(quant)));
  Add("general.quantization_version", GgufValue::Uint32(2));
}

void SynthMetadata::ArchU32(std::string_view suffix, int64_t value) {
  Add(ArchKey(suffix), GgufValue::Uint32(static_cast<uint32_t>(value)));
}

void SynthMetadata::ArchF32(std::string_view suffix, float value) {
  Add(ArchKey(suffix), GgufValue::Float32(value));
}

void SynthMetadata::ArchI32Array(std::string_view suffix, std::vector<int32_t> values) {
  Add(ArchKey(suffix), GgufValue::Int32Array(std::move(values)));
}

void SynthMetadata::Add(std::string key, GgufValue value) { kv_.push_back({std::move(key), std::move(value)}); }

void SynthMetadata::Vocabulary(std::string_view model, std::string_view pre, SynthVocabulary vocab) {
  Add("tokenizer.ggml.model", GgufValue::String(std::string(model)));
  Add("tokenizer.ggml.pre", GgufValue::String(std::string(pre)));
  Add("tokenizer.ggml.tokens", GgufValue::StringArray(std::move(vocab.tokens)));
  if (!vocab.scores.empty()) Add("tokenizer.ggml.scores", GgufValue::Float32Array(std::move(vocab.scores)));
  Add("tokenizer.ggml.token_type", GgufValue::Int32Array(std::move(vocab.token_types)));
  if (!vocab.merges.empty()) Add("tokenizer.ggml.merges", GgufValue::StringArray(std::move(vocab.merges)));
}

void SynthMetadata::TokenId(std::string_view name, int64_t id) {
  Add(absl::StrCat("tokenizer.ggml.", std::string(name), "_token_id"), GgufValue::Uint32(static_cast<uint32_t>(id)));
}

void SynthMetadata::Bool(std::string key, bool value) { Add(std::move(key), GgufValue::Bool(value)); }

absl::Status AddSynthSpmTokenizer(int64_t n_vocab, SynthMetadata& md) {
  absl::StatusOr<SynthVocabulary> vocab = BuildSynthSpmVocabulary(n_vocab);
  if (!vocab.ok()) return vocab.status();
  md.Vocabulary("llama", "default", *std::move(vocab));
  md.TokenId("bos", kSpmBosId);
  md.TokenId("eos", kSpmEosId);
  md.TokenId("unknown", kSpmUnknownId);
  md.Bool("tokenizer.ggml.add_bos_token", true);
  md.Bool("tokenizer.ggml.add_eos_token", false);
  md.Add("tokenizer.chat_template", GgufValue::String(std::string(SynthMixtralChatTemplate())));
  return absl::OkStatus();
}

absl::Status AddSynthQwen3Tokenizer(int64_t n_vocab, SynthMetadata& md) {
  absl::StatusOr<SynthVocabulary> vocab = BuildSynthVocabulary(n_vocab);
  if (!vocab.ok()) return vocab.status();
  const uint32_t eos = vocab->eos_id;
  const uint32_t pad = vocab->pad_id;
  const uint32_t bos = vocab->bos_id;
  md.Vocabulary("gpt2", "qwen2", *std::move(vocab));
  md.TokenId("eos", eos);
  md.TokenId("padding", pad);
  md.TokenId("bos", bos);
  md.Bool("tokenizer.ggml.add_bos_token", false);
  md.Add("tokenizer.chat_template", GgufValue::String(std::string(SynthChatTemplate())));
  return absl::OkStatus();
}

}  // namespace moetier
