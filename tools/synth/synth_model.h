// What a synthetic qwen3moe model is made of (SPEC.md §3.0–3.1, §3.9): the
// shape presets, the quantization mixes, the tensor table with each tensor's
// type and initial distribution, and the GGUF metadata a real Qwen3-MoE file
// carries (§4.1–4.2 for the tokenizer part).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gguf/gguf_value.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {

// The hyperparameters of a qwen3moe model, in the units of its GGUF keys.
struct SynthShape {
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;   // expert_feed_forward_length
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;   // key_length = value_length
  int64_t n_vocab = 0;
  int64_t n_ctx = 0;
  float rope_base = 0.0f;
  float rms_eps = 0.0f;
  bool tied_output = false;  // no output.weight; token_embd doubles as output

  bool operator==(const SynthShape&) const = default;
};

// Upper bounds on every dimension, so a typo cannot ask for an exabyte file.
inline constexpr int64_t kSynthMaxLayers = 1024;
inline constexpr int64_t kSynthMaxEmbd = 65536;
inline constexpr int64_t kSynthMaxExperts = 4096;
inline constexpr int64_t kSynthMaxFf = 262144;
inline constexpr int64_t kSynthMaxHeads = 1024;
inline constexpr int64_t kSynthMaxHeadDim = 4096;
inline constexpr int64_t kSynthMaxVocab = 1 << 22;
inline constexpr int64_t kSynthMaxCtx = 1 << 24;

// "tiny", "small" or "full"; see the .cc for the numbers.
absl::StatusOr<SynthShape> SynthPreset(std::string_view name);

enum class SynthQuant {
  kF32,     // everything F32; general.file_type 0
  kQ8_0,    // matrices Q8_0; norms and router F32; general.file_type 7
  kQ4_K_M,  // Q4_K_M-like mix (SynthTensorType); general.file_type 15
};

absl::StatusOr<SynthQuant> ParseSynthQuant(std::string_view name);
std::string_view SynthQuantName(SynthQuant quant);
uint32_t SynthFileType(SynthQuant quant);

// Checks every field against its bound and the relations between fields;
// the message names the offending command-line flag.
absl::Status ValidateSynthShape(const SynthShape& shape);

enum class SynthTensorKind {
  kTokenEmbd,
  kOutputNorm,
  kOutput,
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOutput,
  kAttnQNorm,
  kAttnKNorm,
  kFfnNorm,
  kFfnGateInp,
  kFfnGateExps,
  kFfnUpExps,
  kFfnDownExps,
};

// llama.cpp's use_more_bits(): the layers whose ffn_down Q4_K_M bumps to Q6_K
// (the first and last eighth, and every third layer in between).
bool SynthUseMoreBits(int64_t layer, int64_t n_layer);

// The type of one tensor under a quant mix. Norms (1-D) and the router stay
// F32 in every mix. q8_0: every other matrix Q8_0. q4_k_m: token_embd Q4_K
// (Q6_K when tied, since it is then also the output), output Q6_K,
// attn_q/attn_k/attn_output Q4_K, attn_v Q6_K, ffn_gate_exps/ffn_up_exps
// Q4_K, ffn_down_exps Q6_K in SynthUseMoreBits layers and Q4_K elsewhere.
// When ne0 is not a multiple of the chosen type's block, the fallback is
// Q4_K -> Q4_0, Q6_K -> Q8_0, and F16 when ne0 is not a multiple of 32.
TensorType SynthTensorType(SynthQuant quant, SynthTensorKind kind, int64_t layer, int64_t n_layer,
                           int64_t ne0, bool tied_output);

// One tensor of the model with its initial distribution: elements are
// mean + stddev * N(0, 1) (SynthNormal), drawn from the stream of its name.
struct SynthTensor {
  std::string name;
  SynthTensorKind kind = SynthTensorKind::kTokenEmbd;
  int64_t layer = -1;  // -1 for tensors outside the blocks
  TensorType type = TensorType::kF32;
  std::vector<int64_t> ne;  // ne[0] first
  float mean = 0.0f;
  float stddev = 0.0f;

  int64_t rows() const;          // product of ne[1..]
  int64_t element_count() const;
  uint64_t size_bytes() const;   // exact, without alignment padding
};

// The tensor table in file order: token_embd, output_norm, output (unless
// tied), then per block attn_norm, attn_q, attn_k, attn_v, attn_output,
// attn_q_norm, attn_k_norm, ffn_norm, ffn_gate_inp, ffn_gate_exps,
// ffn_up_exps, ffn_down_exps. Precondition: ValidateSynthShape(shape) is ok.
std::vector<SynthTensor> PlanSynthTensors(const SynthShape& shape, SynthQuant quant);

// Every metadata key of the model, in file order, tokenizer included.
// Precondition: ValidateSynthShape(shape) is ok. Fails only if the tokenizer
// cannot be built.
absl::StatusOr<std::vector<GgufKeyValue>> BuildSynthMetadata(const SynthShape& shape,
                                                             SynthQuant quant,
                                                             std::string_view model_name);

}  // namespace moetier
