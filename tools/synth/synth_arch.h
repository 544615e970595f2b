// The interface one architecture implements, and the building blocks the
// architectures share. To add an architecture: a SynthArch value
// (synth_model.h), one file synth_<arch>.cc defining a SynthArchitecture,
// its line in SynthArchitectureFor (synth_arch.cc), and the file in
// CMakeLists.txt.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gguf/gguf_value.h"
#include "gguf/tensor/tensor_type.h"
#include "synth/synth_model.h"
#include "synth/synth_tokenizer.h"

namespace moetier {

class SynthArchitecture {
 public:
  virtual ~SynthArchitecture() = default;

  virtual SynthArch arch() const = 0;
  // general.architecture, also the prefix of the model's own keys.
  std::string_view name() const { return SynthArchName(arch()); }
  // "tiny", "small" or "full" (gpt-oss also "full-120b").
  virtual absl::StatusOr<SynthShape> Preset(std::string_view preset) const = 0;
  // Checks beyond the common ones of ValidateSynthShape.
  virtual absl::Status Validate(const SynthShape& shape) const = 0;
  // f32, q8_0 and q4_k_m unless overridden.
  virtual bool SupportsQuant(SynthQuant quant) const;
  virtual std::vector<SynthTensor> PlanTensors(const SynthShape& shape, SynthQuant quant) const = 0;
  virtual absl::StatusOr<std::vector<GgufKeyValue>> BuildMetadata(const SynthShape& shape,
                                                                  SynthQuant quant,
                                                                  std::string_view model_name) const = 0;
};

const SynthArchitecture& SynthArchitectureFor(SynthArch arch);

// The architectures, one per file.
const SynthArchitecture& Qwen3MoeArchitecture();
const SynthArchitecture& OlmoeArchitecture();
const SynthArchitecture& LlamaArchitecture();
const SynthArchitecture& Qwen35MoeArchitecture();
const SynthArchitecture& Qwen3NextArchitecture();
const SynthArchitecture& Qwen2MoeArchitecture();
const SynthArchitecture& Qwen3VlMoeArchitecture();
const SynthArchitecture& Glm4MoeArchitecture();
const SynthArchitecture& Ernie45MoeArchitecture();
const SynthArchitecture& GptOssArchitecture();

// ---------------------------------------------------------------- shared parts

// "blk.<layer>.<suffix>.weight", and "blk.<layer>.<name>" for the few tensors
// whose name does not end in ".weight" (ssm_a, ssm_dt.bias).
std::string SynthBlockName(int64_t layer, std::string_view suffix);
std::string SynthBlockRawName(int64_t layer, std::string_view name);

// The InvalidArgument of a flag outside [lo, hi].
absl::Status CheckSynthRange(std::string_view flag, int64_t value, int64_t lo, int64_t hi);

// `desired` if ne0 is a whole number of its blocks, else the fallback moetier
// can encode: Q4_K -> Q4_0, Q5_K and Q6_K -> Q8_0, and F16 when ne0 is not a
// multiple of 32 either. (llama-quantize falls back to Q5_0 and Q5_1 for
// Q4_K and Q5_K; these fallbacks keep to types every backend computes.)
TensorType SynthFitToRow(TensorType desired, int64_t ne0);

// What llama-quantize's type choice (llama_tensor_get_type) needs to know of
// a tensor. Everything it leaves alone (1-D tensors, norms, routers,
// ssm_conv1d) is kUnquantized and stays F32.
enum class SynthQuantRole {
  kUnquantized,
  kTokenEmbd,
  kOutput,
  kAttnV,       // attn_v and attn_qkv: llama.cpp's "attention-v-like" tensors
  kAttnK,
  kAttnQ,
  kAttnOutput,
  kFfnDown,     // every ffn_down*: experts and shared expert
  kOther,       // the remaining matrices: the ftype's default
};

// llama.cpp's choice for LLAMA_FTYPE_MOSTLY_Q4_K_M (src/llama-quant.cpp),
// for the roles above: default Q4_K; output Q6_K (Q8_0 if ne0 is not a
// multiple of 256), and token_embd too when tied; attn_v Q6_K in
// SynthUseMoreBits(attn_v_index, n_attn_v) layers; ffn_down Q6_K in
// SynthUseMoreBits(layer, n_layer) layers; and for 8-expert models (Mixtral)
// attn_v and attn_k Q8_0 and attn_output Q5_K. Then SynthFitToRow.
// attn_v_index counts the attention-v-like tensors in file order.
struct SynthLlamaQuantInput {
  SynthQuantRole role = SynthQuantRole::kOther;
  int64_t layer = -1;
  int64_t n_layer = 0;
  int64_t attn_v_index = 0;
  int64_t n_attn_v = 0;
  int64_t n_expert = 0;
  int64_t ne0 = 0;
  bool tied_output = false;
};
TensorType SynthLlamaQ4KMType(const SynthLlamaQuantInput& in);

// The f32 and q8_0 mixes, which every architecture shares: unquantized roles
// F32, everything else F32 or Q8_0 (SynthFitToRow).
TensorType SynthUniformType(SynthQuant quant, SynthQuantRole role, int64_t ne0);

// The role of a tensor of the attention + routed-expert layouts (llama,
// olmoe, qwen2moe, glm4moe, ernie4_5-moe): ffn_gate_exps, ffn_up_exps, the shared
// expert's and the dense FFN's gate and up, and nextn.eh_proj take the
// ftype's default; ffn_down_shexp and a dense ffn_down are ffn_downs.
SynthQuantRole SynthAttentionMoeRole(SynthTensorKind kind);

// The type of a tensor of those layouts: SynthUniformType for f32 and q8_0,
// SynthLlamaQ4KMType for q4_k_m with one attn_v per layer (so its index in
// file order is the layer).
TensorType SynthAttentionMoeType(const SynthShape& s, SynthQuant quant, const SynthTensor& t);

// The scales of the initial distributions (all elements mean + stddev *
// N(0,1) unless noted):
// - matrices that read the residual stream or the expert activations:
//   stddev 1/sqrt(fan_in), so every projection keeps unit RMS;
// - matrices that write back into the residual stream (attn_output,
//   ffn_down, ssm_out): additionally / sqrt(2 n_layer), so the residual RMS
//   stays O(1) after all 2 n_layer additions, whatever the depth;
// - token_embd and output: 2/sqrt(n_embd), so logits of the normalized
//   final state have a spread of about 2 (tied or not) and the embedding
//   is about as large as one block's contribution;
// - router: 2/sqrt(n_embd), router logits with spread ~2, so softmax
//   prefers different experts for different tokens without collapsing;
// - norm weights: 1 +- 0.05.
struct SynthScales {
  explicit SynthScales(const SynthShape& s);
  float FanIn(int64_t fan_in) const;          // 1/sqrt(fan_in)
  float ResidualOut(int64_t fan_in) const;    // 1/sqrt(fan_in * 2 * n_layer)
  float inv_sqrt_embd;
  float residual_out;
  float vocab;
  float router;
  static constexpr float kNormMean = 1.0f;
  static constexpr float kNormStd = 0.05f;
};

// Builds a tensor table: `add` appends a tensor whose type `type_of` picks.
class SynthTensorTable {
 public:
  using TypeFn = std::function<TensorType(const SynthTensor&)>;
  explicit SynthTensorTable(TypeFn type_of) : type_of_(std::move(type_of)) {}

  SynthTensor& Add(std::string name, SynthTensorKind kind, int64_t layer, std::vector<int64_t> ne,
                   float mean, float stddev);
  // A norm weight: {n}, 1 +- 0.05.
  SynthTensor& AddNorm(std::string name, SynthTensorKind kind, int64_t layer, int64_t n);

  // The blocks every architecture spells the same way, in llama.cpp's file
  // order. token_embd, output_norm and, unless tied, output:
  void AddVocabularyEnds(const SynthShape& s, const SynthScales& scale);
  // attn_q, attn_k, attn_v and attn_output of layer l. attn_q has `q_rows`
  // rows (a gated attention's q holds its output gate too).
  void AddAttentionProjections(const SynthShape& s, const SynthScales& scale, int64_t l,
                               int64_t q_rows);
  // attn_q.bias, attn_k.bias and attn_v.bias of layer l, 0 +- stddev.
  void AddAttentionBiases(const SynthShape& s, int64_t l, float stddev);
  // ffn_gate, ffn_up and ffn_down of a dense SwiGLU layer l, s.n_ff wide.
  void AddDenseFfn(const SynthShape& s, const SynthScales& scale, int64_t l);
  // ffn_gate_inp (the router) and the stacked ffn_gate/up/down_exps of layer l.
  void AddRoutedExperts(const SynthShape& s, const SynthScales& scale, int64_t l);
  // The sigmoid-gated shared expert of layer l: ffn_gate_inp_shexp {n_embd}
  // and ffn_gate/up/down_shexp of width s.n_ff_shexp.
  void AddSharedExpert(const SynthShape& s, const SynthScales& scale, int64_t l);
  // ffn_gate/up/down_shexp of layer l alone, `width` wide: a shared expert
  // without a gate (glm4moe), or the projections of the gated one.
  void AddSharedExpertProjections(const SynthShape& s, const SynthScales& scale, int64_t l,
                                  int64_t width);
  std::vector<SynthTensor> Take() { return std::move(tensors_); }

 private:
  TypeFn type_of_;
  std::vector<SynthTensor> tensors_;
};

// Appends metadata in file order, "<arch>." prefixed where asked.
class SynthMetadata {
 public:
  explicit SynthMetadata(std::string_view arch) : arch_(arch) {}

  // general.architecture, general.type, general.name.
  void General(std::string_view model_name);
  // general.file_type and general.quantization_version.
  void FileType(SynthQuant quant);
  void ArchU32(std::string_view suffix, int64_t value);
  void ArchF32(std::string_view suffix, float value);
  void ArchI32Array(std::string_view suffix, std::vector<int32_t> values);
  void Add(std::string key, GgufValue value);
  // tokenizer.ggml.model, pre, tokens, (scores), token_type, (merges): the
  // vocabulary's arrays, moved out of it.
  void Vocabulary(std::string_view model, std::string_view pre, SynthVocabulary vocab);
  void TokenId(std::string_view name, int64_t id);  // tokenizer.ggml.<name>_token_id
  void Bool(std::string key, bool value);

  std::vector<GgufKeyValue> Take() { return std::move(kv_); }

 private:
  std::string ArchKey(std::string_view suffix) const;
  std::string arch_;
  std::vector<GgufKeyValue> kv_;
};

// The SentencePiece tokenizer keys as _set_vocab_sentencepiece and
// Mixtral's tokenizer_config.json give them (llama, and ernie4_5-moe, whose
// real vocabulary is SentencePiece too): model "llama", pre "default",
// BuildSynthSpmVocabulary's tokens, scores and types, bos <s> 1, eos </s> 2,
// unknown <unk> 0, add_bos_token true, add_eos_token false, Mixtral-Instruct's
// chat template. Fails only if the vocabulary cannot be built.
absl::Status AddSynthSpmTokenizer(int64_t n_vocab, SynthMetadata& md);

// The Qwen3 tokenizer keys as qwen3moe, qwen3vlmoe and qwen3next files carry
// them (and synthetic qwen2moe files, whose real models have the same
// vocabulary):
// gpt2/qwen2 byte-level BPE over an n_vocab vocabulary laid out like
// Qwen3's, eos <|im_end|>, pad and bos <|endoftext|>, add_bos_token false,
// and the Qwen3 chat template. Fails only if the vocabulary cannot be built.
absl::Status AddSynthQwen3Tokenizer(int64_t n_vocab, SynthMetadata& md);

}  // namespace moetier
