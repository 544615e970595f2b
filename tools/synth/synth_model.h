// What a synthetic model is made of (SPEC.md §3): the architecture, its shape
// presets, the quantization mixes, the tensor table with each tensor's type
// and initial distribution, and the GGUF metadata a real file of that
// architecture carries (§4 for the tokenizer part). Each architecture lives
// in its own file (synth_<arch>.cc, see synth_arch.h); the functions here
// dispatch on SynthShape::arch.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gguf/gguf_value.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {

// The architectures moetier-synth writes, by general.architecture.
enum class SynthArch {
  kQwen3Moe,    // "qwen3moe": Qwen3-30B-A3B (SPEC.md §3.1)
  kOlmoe,       // "olmoe": OLMoE-1B-7B (§3.6)
  kLlama,       // "llama" with experts: Mixtral-8x7B (§3.5)
  kQwen35Moe,   // "qwen35moe": Qwen3.6-35B-A3B, Gated DeltaNet + gated attention (§3.3-3.4)
  kQwen3Next,   // "qwen3next": Qwen3-Next-80B-A3B, the same hybrid with fused projections (§3.3)
  kQwen2Moe,    // "qwen2moe": Qwen2-57B-A14B, q/k/v biases and a shared expert (§3.2)
  kQwen3VlMoe,  // "qwen3vlmoe": Qwen3-VL-30B-A3B's language model, qwen3moe with IMROPE
  kGlm4Moe,     // "glm4moe": GLM-4.5-Air, GLM-4.5, GLM-4.6/4.7: sigmoid router, dense lead layers
  kErnie45Moe,  // "ernie4_5-moe": ERNIE-4.5-21B-A3B, ERNIE-4.5-300B-A47B
  kGptOss,      // "gpt-oss": gpt-oss-20b, gpt-oss-120b: attention sinks, sliding window (§3.7)
};

inline constexpr SynthArch kAllSynthArchs[] = {
    SynthArch::kQwen3Moe,   SynthArch::kOlmoe,    SynthArch::kLlama,      SynthArch::kQwen35Moe,
    SynthArch::kQwen3Next,  SynthArch::kQwen2Moe, SynthArch::kQwen3VlMoe, SynthArch::kGlm4Moe,
    SynthArch::kErnie45Moe, SynthArch::kGptOss};

// qwen35moe and qwen3next: Gated DeltaNet layers and gated attention.
inline bool IsSynthDeltaNetHybrid(SynthArch arch) {
  return arch == SynthArch::kQwen35Moe || arch == SynthArch::kQwen3Next;
}

absl::StatusOr<SynthArch> ParseSynthArch(std::string_view name);
std::string_view SynthArchName(SynthArch arch);  // general.architecture

// The hyperparameters of a model, in the units of its GGUF keys. The fields
// after rms_eps are used only by the architectures named; the others leave
// them 0.
struct SynthShape {
  SynthArch arch = SynthArch::kQwen3Moe;
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;   // expert FFN width (feed_forward_length for olmoe and llama)
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;   // key_length = value_length
  int64_t n_vocab = 0;
  int64_t n_ctx = 0;
  float rope_base = 0.0f;
  float rms_eps = 0.0f;
  bool tied_output = false;  // no output.weight; token_embd doubles as output
  // rope.scaling.*: the type ("none", "linear" or "yarn"; empty: no keys),
  // the factor and the original context length (each written when > 0).
  std::string rope_scaling_type;
  float rope_scaling_factor = 0.0f;
  int64_t rope_scaling_original_ctx = 0;
  // llama: rope_freqs.weight, head_dim / 2 divisors of the rope angles
  // between 1 and 8 (as a converted Llama 3 carries).
  bool rope_freq_factors = false;

  // qwen35moe, qwen3next, qwen2moe and ernie4_5-moe (where 0 is no shared
  // expert).
  int64_t n_ff_shexp = 0;  // expert_shared_feed_forward_length
  // qwen35moe and qwen3next (n_rot: glm4moe too; rope_sections: qwen35moe
  // and qwen3vlmoe; legacy_ssm_in: qwen3next).
  int64_t n_rot = 0;                           // rope.dimension_count
  std::array<int32_t, 4> rope_sections = {};   // rope.dimension_sections
  int64_t full_attention_interval = 0;         // layer i is full attention when (i+1) % it == 0
  int64_t ssm_conv_kernel = 0;                 // ssm.conv_kernel, K
  int64_t ssm_state_size = 0;                  // ssm.state_size, d_k
  int64_t ssm_group_count = 0;                 // ssm.group_count, H_k
  int64_t ssm_time_step_rank = 0;              // ssm.time_step_rank, H_v
  int64_t ssm_inner_size = 0;                  // ssm.inner_size, H_v * d_v
  bool legacy_ssm_in = false;                  // ssm_in, not attn_qkv + attn_gate

  // glm4moe (n_ff and n_layer_dense_lead: ernie4_5-moe too). n_layer
  // counts the layers that run; the n_nextn_layer multi-token-prediction
  // blocks follow them (block_count is the sum), in the file as converted
  // GLM files have them, never run.
  int64_t n_ff = 0;                   // feed_forward_length, the dense layers' FFN width
  int64_t n_layer_dense_lead = 0;     // leading_dense_block_count
  int64_t n_expert_shared = 0;        // expert_shared_count; shared width n_ff_exp * it
  float expert_weights_scale = 0.0f;  // expert_weights_scale (0 and 1: unscaled)
  bool expert_weights_norm = false;   // expert_weights_norm
  bool qk_norm = false;               // per-head attn_q_norm / attn_k_norm
  int64_t n_nextn_layer = 0;          // nextn_predict_layers

  // ernie4_5-moe. llama.cpp's graph runs the experts of layer i when i >=
  // n_layer_dense_lead and (i + 1) % moe_layer_step == 0, but its loader
  // wants expert tensors in every layer from n_layer_dense_lead on.
  int64_t moe_layer_step = 0;   // interleave_moe_layer_step
  bool qkv_bias = false;        // attn_q.bias, attn_k.bias, attn_v.bias
  bool selection_bias = false;  // exp_probs_b.bias

  // gpt-oss: every second layer, from layer 0, attends to the last
  // sliding_window positions only.
  int64_t sliding_window = 0;  // attention.sliding_window

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
inline constexpr int64_t kSynthMaxSsmDim = 65536;

// "tiny", "small" or "full" of qwen3moe; see synth_qwen3moe.cc.
absl::StatusOr<SynthShape> SynthPreset(std::string_view name);
// "tiny", "small" or "full" of `arch` (gpt-oss also "full-120b"); see
// synth_<arch>.cc.
absl::StatusOr<SynthShape> SynthPreset(SynthArch arch, std::string_view name);

enum class SynthQuant {
  kF32,      // everything F32; general.file_type 0
  kQ8_0,     // matrices Q8_0; norms and routers F32; general.file_type 7
  kQ4_K_M,   // Q4_K_M-like mix (per architecture); general.file_type 15
  kQ8_0F32,  // "q8_0-f32", qwen35moe only: the mix of Unsloth-style dynamic
             // files: experts Q4_K/Q5_K/Q6_K, other matrices Q8_0, small
             // tensors F32 (synth_qwen35moe.cc); general.file_type 15
  kMxfp4,    // "mxfp4", gpt-oss only: the mix of OpenAI's released files:
             // experts MXFP4, other matrices Q8_0, router and 1-D tensors
             // F32; general.file_type 38 (llama.cpp's MOSTLY_MXFP4_MOE)
};

absl::StatusOr<SynthQuant> ParseSynthQuant(std::string_view name);
std::string_view SynthQuantName(SynthQuant quant);
uint32_t SynthFileType(SynthQuant quant);

// Checks every field against its bound and the relations between fields,
// the common ones and those of shape.arch; the message names the offending
// command-line flag.
absl::Status ValidateSynthShape(const SynthShape& shape);
// Fails when `arch` has no such mix.
absl::Status ValidateSynthQuant(SynthArch arch, SynthQuant quant);

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
  // qwen35moe and qwen3next.
  kPostAttentionNorm,
  kAttnQkv,
  kAttnGate,
  kSsmConv1d,
  kSsmDtBias,
  kSsmA,
  kSsmBeta,
  kSsmAlpha,
  kSsmBa,  // qwen3next: beta and alpha in one matrix
  kSsmIn,  // early qwen3next files: q, k, v and z in one matrix
  kSsmNorm,
  kSsmOut,
  kFfnGateInpShexp,
  kFfnGateShexp,
  kFfnUpShexp,
  kFfnDownShexp,
  // llama.
  kRopeFreqs,
  // qwen2moe (and glm4moe, ernie4_5-moe).
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  // glm4moe (the first four: ernie4_5-moe too): the dense leading layers'
  // FFN, the router's selection bias and the multi-token-prediction block's
  // own tensors.
  kFfnGate,
  kFfnUp,
  kFfnDown,
  kExpProbsB,
  kNextnEhProj,
  kNextnEnorm,
  kNextnHnorm,
  kNextnSharedHeadNorm,
  // gpt-oss: the attention output's bias, the per-head attention sinks and
  // the router's and experts' biases.
  kAttnOutputBias,
  kAttnSinks,
  kFfnGateInpBias,
  kFfnGateExpsBias,
  kFfnUpExpsBias,
  kFfnDownExpsBias,
};

// llama.cpp's use_more_bits(): the layers whose ffn_down Q4_K_M bumps to Q6_K
// (the first and last eighth, and every third layer in between).
bool SynthUseMoreBits(int64_t layer, int64_t n_layer);

// The type of one qwen3moe tensor under a quant mix. Norms (1-D) and the
// router stay F32 in every mix. q8_0: every other matrix Q8_0. q4_k_m:
// token_embd Q4_K (Q6_K when tied, since it is then also the output), output
// Q6_K, attn_q/attn_k/attn_output Q4_K, attn_v Q6_K, ffn_gate_exps/ffn_up_exps
// Q4_K, ffn_down_exps Q6_K in SynthUseMoreBits layers and Q4_K elsewhere.
// When ne0 is not a multiple of the chosen type's block, the fallback is
// Q4_K -> Q4_0, Q6_K -> Q8_0, and F16 when ne0 is not a multiple of 32.
TensorType SynthTensorType(SynthQuant quant, SynthTensorKind kind, int64_t layer, int64_t n_layer,
                           int64_t ne0, bool tied_output);

// How a tensor's elements are drawn, from the stream of its name.
enum class SynthDistribution {
  kNormal,              // mean + stddev * SynthNormal
  kNegativeExpUniform,  // -exp(lo + (hi - lo) * SynthUniform), lo = mean, hi = stddev
  kExpUniform,          // exp(lo + (hi - lo) * SynthUniform), lo = mean, hi = stddev
};

// One tensor of the model with its initial distribution.
struct SynthTensor {
  std::string name;
  SynthTensorKind kind = SynthTensorKind::kTokenEmbd;
  int64_t layer = -1;  // -1 for tensors outside the blocks
  TensorType type = TensorType::kF32;
  std::vector<int64_t> ne;  // ne[0] first
  SynthDistribution distribution = SynthDistribution::kNormal;
  float mean = 0.0f;
  float stddev = 0.0f;

  int64_t rows() const;          // product of ne[1..]
  int64_t element_count() const;
  uint64_t size_bytes() const;   // exact, without alignment padding
};

// The tensor table in file order (see the architecture's file; for
// qwen3moe: token_embd, output_norm, output (unless tied), then per block
// attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm,
// ffn_norm, ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps).
// Preconditions: ValidateSynthShape(shape) and
// ValidateSynthQuant(shape.arch, quant) are ok.
std::vector<SynthTensor> PlanSynthTensors(const SynthShape& shape, SynthQuant quant);

// Every metadata key of the model, in file order, tokenizer included.
// Preconditions as for PlanSynthTensors. Fails only if the tokenizer cannot
// be built.
absl::StatusOr<std::vector<GgufKeyValue>> BuildSynthMetadata(const SynthShape& shape,
                                                             SynthQuant quant,
                                                             std::string_view model_name);

}  // namespace moetier
