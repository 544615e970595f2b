// A model as every engine sees it, whatever its architecture: the
// hyperparameters read from GGUF, the weight table, and the layer plan (per
// layer, which mixer and which feed-forward block run, with the weights
// each needs). One file per architecture (model/<arch>.cc) fills it in;
// model/architectures.h picks the file by general.architecture.
//
// The weights stay in the file's own encoding; WeightRef points into the
// read-only mapping (or, in a worker fed by the daemon, the routed experts
// come from the shared expert store instead).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/tensor/tensor_type.h"

namespace moetier {

// One weight tensor as stored: ne[0] is the input dimension (contiguous),
// ne[1] the output rows, ne[2] the expert index for 3-D expert tensors.
// An absent optional tensor has data == nullptr.
struct WeightRef {
  std::string name;
  TensorType type = TensorType::kF32;
  std::array<int64_t, 4> ne = {1, 1, 1, 1};
  const uint8_t* data = nullptr;
  uint64_t row_bytes = 0;            // bytes of one ne[0] row
  uint64_t expert_stride_bytes = 0;  // bytes from expert e to e+1 (3-D tensors)

  bool present() const { return data != nullptr; }
  int64_t rows() const { return ne[1]; }
  int64_t cols() const { return ne[0]; }
  // Start of expert e's [rows x cols] matrix.
  const uint8_t* expert(int64_t e) const { return data + e * expert_stride_bytes; }
  const uint8_t* row(int64_t r) const { return data + r * row_bytes; }
};

// Which elements a rotary embedding turns together (SPEC.md §3.0).
enum class RopeStyle : uint8_t {
  kNeox,  // (x[i], x[i + n_rot/2]): qwen3moe, olmoe, (text) qwen35moe
  kNorm,  // (x[2i], x[2i+1]): llama/Mixtral, whose converter permuted q and k
};

// Where the RMS norm of q and k (before rope) runs, if anywhere.
enum class QkNorm : uint8_t {
  kNone,     // llama/Mixtral
  kPerHead,  // over each head's head_dim values, one weight for all heads (qwen3moe)
  kWhole,    // over the whole projection, n_head * head_dim values (olmoe)
};

// How the router turns its logits into the mixing weights of the top-k.
struct RouterParams {
  // Softmax over all experts, then the top k (the only gating so far).
  bool renormalize = true;  // divide the k weights by their sum (qwen3moe, Mixtral; not olmoe)
};

// Per layer: what mixes the positions.
enum class MixerKind : uint8_t {
  kAttention,  // causal GQA softmax attention with a KV cache
};

// Per layer: the feed-forward block.
enum class FfnKind : uint8_t {
  kMoe,  // routed experts only
};

std::string_view MixerKindName(MixerKind kind);
std::string_view FfnKindName(FfnKind kind);

// The hyperparameters every engine reads. Attention and expert settings are
// the same for every layer that has them.
struct ModelHparams {
  std::string architecture;  // general.architecture
  int n_layer = 0;           // layers run in the main pass (MTP blocks excluded)
  int n_embd = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-6f;

  // Attention layers.
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;  // attention.key_length (== value_length)
  int n_rot = 0;     // rotated dims of each head (rope.dimension_count); <= head_dim
  RopeStyle rope_style = RopeStyle::kNeox;
  float rope_freq_base = 10000.0f;
  QkNorm qk_norm = QkNorm::kNone;

  // MoE layers.
  int n_expert = 0;
  int n_expert_used = 0;  // top-k
  int n_ff_exp = 0;       // each expert's FFN width
  RouterParams router;
};

struct AttentionWeights {
  WeightRef q;       // {n_embd, n_head*head_dim}
  WeightRef k;       // {n_embd, n_head_kv*head_dim}
  WeightRef v;       // {n_embd, n_head_kv*head_dim}
  WeightRef output;  // {n_head*head_dim, n_embd}
  // QkNorm::kPerHead: {head_dim}; kWhole: {n_head*head_dim} and
  // {n_head_kv*head_dim}; kNone: absent.
  WeightRef q_norm;
  WeightRef k_norm;
};

struct MoeWeights {
  WeightRef router;  // ffn_gate_inp {n_embd, n_expert}
  // Expert matrices; for a fused ffn_gate_up_exps tensor, gate and up refer
  // to the two halves of each expert's rows (same data, offset rows).
  WeightRef gate_exps;  // {n_embd, n_ff_exp, n_expert}
  WeightRef up_exps;    // {n_embd, n_ff_exp, n_expert}
  WeightRef down_exps;  // {n_ff_exp, n_embd, n_expert}
};

// One layer of the plan: x += Mixer(RMSNorm(x; attn_norm)), then
// x += Ffn(RMSNorm(x; ffn_norm)).
struct LayerWeights {
  MixerKind mixer = MixerKind::kAttention;
  FfnKind ffn = FfnKind::kMoe;
  WeightRef attn_norm;  // {n_embd}
  AttentionWeights attn;
  WeightRef ffn_norm;  // {n_embd} (post_attention_norm in some files)
  MoeWeights moe;
};

struct ModelWeights {
  WeightRef token_embd;   // {n_embd, n_vocab}
  WeightRef output_norm;  // {n_embd}
  WeightRef output;       // {n_embd, n_vocab}; == token_embd when tied
  bool output_tied = false;
  std::vector<LayerWeights> layers;
};

struct Model {
  ModelHparams hparams;
  ModelWeights weights;
};

// Every tensor of the weight table (absent optional ones skipped; the routed
// experts' only with include_experts), for visiting them all.
std::vector<const WeightRef*> WeightRefs(const ModelWeights& w, bool include_experts);
std::vector<WeightRef*> WeightRefs(ModelWeights& w, bool include_experts);

// Weight bytes one decode step reads: every dense tensor, k experts per
// MoE layer and one embedding row (the numerator of a memory roofline).
uint64_t DecodeWeightBytesPerToken(const Model& model);

}  // namespace moetier
