// What every architecture file (model/<arch>.cc) uses to read its part of a
// GGUF file: typed metadata keys under the architecture's prefix, tensors
// checked for shape and codec, and the tensor groups most architectures
// share by name (SPEC.md §3.0: embedding and output, the attention
// projections, the routed experts). Every error names the file, the key or
// tensor, and what was expected.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"

namespace moetier {

// Upper bounds that keep every derived size (rows × cols, cache lengths) far
// from integer overflow; real models are orders of magnitude below them.
inline constexpr uint64_t kMaxModelDim = 1u << 24;
inline constexpr uint64_t kMaxModelLayers = 4096;
inline constexpr uint64_t kMaxModelExperts = 1u << 16;

// What an architecture's attention layers may hold beyond the usual
// (ModelLoader::ReadAttention).
struct AttentionOptions {
  // attn_q also holds each head's output gate (2 * n_head * head_dim rows).
  bool gated_q = false;
  // attn_q.bias, attn_k.bias and attn_v.bias, each optional (qwen2moe);
  // without this they are refused. attn_qkv.bias is always refused.
  bool qkv_biases = false;
  // attn_output.bias, optional (gpt-oss); without this it is refused.
  bool output_bias = false;
};

class ModelLoader {
 public:
  // `arch` is the key prefix (general.architecture). `gguf` must outlive the
  // loader and the model it fills.
  ModelLoader(const GgufModel& gguf, absl::string_view arch);

  const std::string& path() const { return path_; }
  const std::string& arch() const { return arch_; }
  const GgufMetadata& metadata() const { return meta_; }
  // "<arch>.<suffix>".
  std::string Key(absl::string_view suffix) const;

  // InvalidArgument / Unimplemented with "<path>: " in front.
  absl::Status Error(absl::string_view what) const;
  absl::Status Unsupported(absl::string_view what) const;

  // Keys under the architecture's prefix.
  bool Has(absl::string_view suffix) const;
  // Present with a value other than 0, which llama.cpp reads as absent for
  // the widths it has fallbacks for.
  bool HasNonZero(absl::string_view suffix) const;
  // A positive integer no larger than `max`.
  absl::StatusOr<int> RequiredDim(absl::string_view suffix, uint64_t max) const;
  absl::StatusOr<int> OptionalDim(absl::string_view suffix, uint64_t max, int fallback) const;
  // An unsigned integer in 0..max, `fallback` only when the key is absent: a
  // key of another type, negative or too large is an error naming it.
  absl::StatusOr<uint64_t> OptionalUint(absl::string_view suffix, uint64_t max,
                                        uint64_t fallback) const;
  // A finite float, `fallback` only when the key is absent.
  absl::StatusOr<double> OptionalFloat(absl::string_view suffix, double fallback) const;
  // Fills hp.rope_scaling and hp.rope_scaling_keys (needs n_rot,
  // rope_freq_base and n_ctx_train).
  absl::Status ReadRopeScaling(ModelHparams& hp) const;
  // A scalar or one value per layer; moetier needs the same value on every
  // layer. Empty when the key is absent.
  absl::StatusOr<std::optional<int>> UniformPerLayer(absl::string_view suffix, int n_layer,
                                                     uint64_t max) const;
  // UniformPerLayer for a key the file must have.
  absl::StatusOr<int> RequiredUniformPerLayer(absl::string_view suffix, int n_layer,
                                              uint64_t max) const;

  // The keys of SPEC.md §3.0 that every architecture here shares:
  // block_count (less nextn_predict_layers), context_length,
  // embedding_length, attention.head_count(_kv), key/value_length (equal),
  // rope.dimension_count (even, at most head_dim; default head_dim),
  // rope.freq_base and rope.scaling.* (ReadRopeScaling), layer_norm_rms_epsilon, and the
  // vocabulary size from token_embd. Leaves the architecture's own fields
  // (rope style, q/k norm, experts) alone.
  absl::Status ReadCommonHparams(ModelHparams& hp) const;
  // Unimplemented unless rope.dimension_count is the head size, which the
  // llama.cpp graphs of qwen3moe and qwen2moe assert.
  absl::Status RequireRopeOverWholeHead(const ModelHparams& hp) const;
  // expert_count and expert_used_count (1 <= used <= count); refuses
  // expert_group_count above 1 (group-limited routing).
  absl::Status ReadExpertCounts(ModelHparams& hp) const;
  // hp.n_ff_exp: expert_feed_forward_length, else (absent or 0) llama.cpp's
  // fallback feed_forward_length / top-k (needs ReadExpertCounts first).
  absl::Status ReadExpertWidth(ModelHparams& hp) const;

  // `name` resolved, with shape `ne`, a decodable type and whole blocks.
  absl::StatusOr<WeightRef> Tensor(const std::string& name, std::array<int64_t, 4> ne) const;
  bool HasTensor(const std::string& name) const { return gguf_.FindTensor(name) != nullptr; }
  // Rows [first, first+count) of a checked tensor, as a tensor of their own.
  static WeightRef RowSlice(const WeightRef& whole, int64_t first, int64_t count);
  // Rows `rows` of a checked 2-D tensor, in that order, copied into a buffer
  // `w` keeps (ModelWeights::regrouped): for a file that interleaves what
  // the engines read as separate matrices. `name` says where they came from.
  static absl::StatusOr<WeightRef> GatherRows(const WeightRef& whole, std::span<const int64_t> rows,
                                              std::string name, ModelWeights& w);

  // token_embd, output_norm and output (tied to token_embd when absent and
  // `output_may_be_tied`, else required).
  absl::Status ReadEmbeddingAndOutput(const ModelHparams& hp, bool output_may_be_tied,
                                      ModelWeights& w) const;
  // blk.<il>.attn_q/k/v (or a fused attn_qkv) and attn_output for the
  // hyperparameters' head shape, and q/k norms as hp.qk_norm says.
  absl::Status ReadAttention(int il, const ModelHparams& hp, AttentionWeights& out,
                             AttentionOptions options = {}) const;
  // blk.<il>.ffn_gate_inp and the routed experts: ffn_gate_exps +
  // ffn_up_exps (or a fused ffn_gate_up_exps) and ffn_down_exps.
  absl::Status ReadRoutedExperts(int il, const ModelHparams& hp, MoeWeights& out) const;
  // blk.<il>'s attention layer: attn_norm, the attention (ReadAttention)
  // and the FFN's norm (`ffn_norm`: "ffn_norm.weight", or
  // "post_attention_norm.weight" in some files).
  absl::Status ReadAttentionLayer(int il, const ModelHparams& hp, absl::string_view ffn_norm,
                                  AttentionOptions attention, LayerWeights& l) const;
  // Every layer of an architecture whose layers are all the same pre-norm
  // attention block and routed-expert FFN (qwen3moe, qwen3vlmoe, qwen2moe,
  // olmoe, llama): per
  // blk.<il>, attn_norm, the attention (ReadAttention), ffn_norm and the
  // experts (ReadRoutedExperts).
  absl::Status ReadAttentionMoeLayers(const ModelHparams& hp, ModelWeights& w,
                                      AttentionOptions attention = {}) const;
  // The shared expert of blk.<il>: ffn_{gate,up,down}_shexp for
  // hp.n_ff_shared and, when `gated`, its gate ffn_gate_inp_shexp {n_embd}.
  absl::Status ReadSharedExpert(int il, const ModelHparams& hp, MoeWeights& out,
                                bool gated = true) const;
  // The FFN of a layer whose router chooses with a selection bias
  // (glm4moe, ernie4_5-moe): the routed experts, blk.<il>.exp_probs_b.bias
  // (required, or read where present) and an ungated shared expert of
  // hp.n_ff_shared (0: none); sets l.ffn.
  absl::Status ReadSelectionBiasedMoe(int il, const ModelHparams& hp, bool bias_required,
                                      LayerWeights& l) const;
  // leading_dense_block_count (absent: 0), at most hp.n_layer.
  absl::StatusOr<int> ReadLeadingDenseCount(const ModelHparams& hp) const;
  // hp.n_ff_dense from feed_forward_length (required: the file has dense
  // layers).
  absl::Status ReadDenseFfnWidth(ModelHparams& hp) const;
  // A dense layer's SwiGLU: blk.<il>.ffn_{gate,up,down} for hp.n_ff_dense.
  absl::Status ReadDenseFfn(int il, const ModelHparams& hp, DenseFfnWeights& out) const;
  // hp.router.weights_scale from expert_weights_scale: llama.cpp scales only
  // by a value other than 0 and 1, and reads an absent key as 0.
  absl::Status ReadRouterWeightsScale(ModelHparams& hp) const;
  // An optional architecture key holding integers (a scalar or an array);
  // empty when absent.
  absl::StatusOr<std::vector<int64_t>> IntArray(absl::string_view suffix) const;
  // blk.<il>.<suffix> with shape ne.
  absl::StatusOr<WeightRef> LayerTensor(int il, absl::string_view suffix,
                                        std::array<int64_t, 4> ne) const;
  // Several required tensors of one layer, in order; the first that is
  // missing or wrong is the error.
  struct LayerTensorSpec {
    const char* suffix;
    std::array<int64_t, 4> ne;
    WeightRef* out;
  };
  absl::Status ReadLayerTensors(int il, std::initializer_list<LayerTensorSpec> specs) const;

 private:
  absl::StatusOr<WeightRef> Check(const GgufTensorInfo& info, std::array<int64_t, 4> ne) const;

  const GgufModel& gguf_;
  const std::string path_;
  const std::string arch_;
  const GgufMetadata& meta_;
};

}  // namespace moetier
