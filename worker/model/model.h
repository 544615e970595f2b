// A model as every engine sees it, whatever its architecture: the
// hyperparameters read from GGUF, the weight table, and the layer plan (per
// layer, which mixer and which feed-forward block run, with the weights
// each needs). One file per architecture (model/<arch>.cc) fills it in;
// model/architectures.h picks the file by general.architecture.
//
// The weights stay in the file's own encoding; WeightRef points into the
// read-only mapping (or, in a worker fed by the daemon, the routed experts
// come from the shared expert store instead). Tensors whose file layout
// interleaves what the engines read as separate matrices (qwen3next) are
// regrouped by the loader into buffers the model owns (ModelWeights::regrouped).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/expert_activation.h"
#include "base/rope_angles.h"
#include "base/router_params.h"
#include "gguf/tensor/tensor_type.h"
#include "model/kv_cache_types.h"
#include "model/rope_scaling.h"

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

// Every value of a small tensor (a norm's weights, a bias, conv taps) as
// fp32, its ne[1] rows one after another; empty when the tensor is absent.
std::vector<float> DecodedValues(const WeightRef& ref);

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

// Per layer: what mixes the positions.
enum class MixerKind : uint8_t {
  kAttention,       // causal GQA softmax attention with a KV cache
  kGatedAttention,  // the same, its output gated by sigmoid(W_q's second half) (qwen35moe)
  kGatedDeltaNet,   // linear attention with a recurrent state: conv + gated delta rule (qwen35moe)
};

// Per layer: the feed-forward block.
enum class FfnKind : uint8_t {
  kMoe,                  // routed experts only
  kMoeWithSharedExpert,  // routed experts + a dense expert, gated by a sigmoid (qwen35moe) or not
                         // (glm4moe)
  kDense,                // one dense SwiGLU FFN, no router (glm4moe's leading layers)
};

// The Gated DeltaNet layers' sizes (SPEC.md §3.3): H_k key heads and H_v
// value heads of d_k and d_v values; the depthwise conv has conv_kernel taps.
struct DeltaNetParams {
  int conv_kernel = 0;  // ssm.conv_kernel
  int d_k = 0;          // ssm.state_size
  int n_k_heads = 0;    // ssm.group_count
  int n_v_heads = 0;    // ssm.time_step_rank
  int d_v = 0;          // ssm.inner_size / n_v_heads
  // v-head j reads k-head j % n_k_heads (qwen35moe's tiled order); false:
  // j / (n_v_heads / n_k_heads) (qwen3next's grouped order).
  bool v_heads_tiled = true;

  int key_dim() const { return n_k_heads * d_k; }
  int value_dim() const { return n_v_heads * d_v; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }
  int k_head_of(int v_head) const {
    return v_heads_tiled ? v_head % n_k_heads : v_head / (n_v_heads / n_k_heads);
  }
};

inline bool IsAttention(MixerKind kind) {
  return kind == MixerKind::kAttention || kind == MixerKind::kGatedAttention;
}
inline bool HasSharedExpert(FfnKind kind) { return kind == FfnKind::kMoeWithSharedExpert; }
inline bool HasRoutedExperts(FfnKind kind) { return kind != FfnKind::kDense; }

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
  RopeScaling rope_scaling;  // linear or YaRN stretching of the angles
  RopeScalingKeys rope_scaling_keys;  // the rope.scaling.* keys it comes from
  // llama: rope_freqs.weight, n_rot / 2 factors that divide each pair's
  // angle (Llama 3's long-context rope, stored by the converter); empty:
  // none.
  std::vector<float> rope_freq_factors;
  QkNorm qk_norm = QkNorm::kNone;
  // The softmax scale; 0: 1 / sqrt(head_dim) (attention.scale when a file sets it).
  float attention_scale = 0.0f;
  // Multi-section rope (IMROPE, qwen35moe): which of the n_rot / 2 pairs
  // rotate by the token's position; the others rotate by 0 (text tokens have
  // position ids (p, p, p, 0)). Empty: every pair rotates by the position.
  std::vector<uint8_t> rope_pair_uses_position;

  // Gated DeltaNet layers.
  DeltaNetParams deltanet;

  // MoE layers.
  int n_expert = 0;
  int n_expert_used = 0;  // top-k
  int n_ff_exp = 0;       // each expert's FFN width
  ExpertActivation expert_activation = ExpertActivation::kSwiglu;
  RouterParams router;
  int n_ff_shared = 0;  // FfnKind::kMoeWithSharedExpert: the shared expert's width
  int n_ff_dense = 0;   // FfnKind::kDense: the dense FFN's width
};

struct AttentionWeights {
  // {n_embd, n_head*head_dim}; kGatedAttention: {n_embd, 2*n_head*head_dim},
  // each head's head_dim q rows followed by its head_dim gate rows.
  WeightRef q;
  WeightRef k;       // {n_embd, n_head_kv*head_dim}
  WeightRef v;       // {n_embd, n_head_kv*head_dim}
  WeightRef output;  // {n_head*head_dim, n_embd}
  // QkNorm::kPerHead: {head_dim}; kWhole: {n_head*head_dim} and
  // {n_head_kv*head_dim}; kNone: absent.
  WeightRef q_norm;
  WeightRef k_norm;
  // Added to the q, k and v projections before any norm or rope (qwen2moe),
  // one value per output row; absent: no bias.
  WeightRef q_bias;
  WeightRef k_bias;
  WeightRef v_bias;
  WeightRef output_bias;  // attn_output.bias {n_embd} (gpt-oss); absent: none
  // attn_sinks {n_head}, fp32 (gpt-oss): one more logit per query head in
  // the softmax's denominator, with no value; absent: none.
  WeightRef sinks;
};

// One Gated DeltaNet layer (SPEC.md §3.3–3.4; qwen35moe tensor names).
struct DeltaNetWeights {
  WeightRef qkv;      // attn_qkv {n_embd, conv_dim}: q heads, k heads, v heads
  WeightRef z;        // attn_gate {n_embd, value_dim}
  WeightRef conv;     // ssm_conv1d {conv_kernel, conv_dim}: channel c's taps, oldest first
  WeightRef dt_bias;  // ssm_dt.bias {n_v_heads}
  WeightRef a;        // ssm_a {n_v_heads}, already -exp(A_log)
  WeightRef beta;     // ssm_beta {n_embd, n_v_heads}
  WeightRef alpha;    // ssm_alpha {n_embd, n_v_heads}
  WeightRef norm;     // ssm_norm {d_v}, shared by the value heads
  WeightRef out;      // ssm_out {value_dim, n_embd}
};

struct MoeWeights {
  WeightRef router;  // ffn_gate_inp {n_embd, n_expert}
  WeightRef router_bias;  // ffn_gate_inp.bias {n_expert}, added to the logits (gpt-oss)
  // exp_probs_b.bias {n_expert}, fp32: added to the router's probabilities
  // to choose the top k, never to weigh them (glm4moe); absent: none.
  WeightRef selection_bias;
  // Expert matrices; for a fused ffn_gate_up_exps tensor, gate and up refer
  // to the two halves of each expert's rows (same data, offset rows).
  WeightRef gate_exps;  // {n_embd, n_ff_exp, n_expert}
  WeightRef up_exps;    // {n_embd, n_ff_exp, n_expert}
  WeightRef down_exps;  // {n_ff_exp, n_embd, n_expert}
  // Per-expert biases (gpt-oss), fp32 or decodable, one row per expert:
  // added to the gate and up products before the activation and to the
  // down product before the router's weight; absent: none. They stay with
  // the dense weights: small, and every expert's is needed wherever it runs.
  WeightRef gate_exps_bias;  // {n_ff_exp, n_expert}
  WeightRef up_exps_bias;    // {n_ff_exp, n_expert}
  WeightRef down_exps_bias;  // {n_embd, n_expert}
  // FfnKind::kMoeWithSharedExpert: out += sigmoid(shared_gate_inp . x) *
  // SwiGLU_shared(x), or out += SwiGLU_shared(x) where shared_gate_inp is
  // absent (glm4moe).
  WeightRef shared_gate_inp;  // ffn_gate_inp_shexp {n_embd}
  WeightRef shared_gate;      // ffn_gate_shexp {n_embd, n_ff_shared}
  WeightRef shared_up;        // ffn_up_shexp {n_embd, n_ff_shared}
  WeightRef shared_down;      // ffn_down_shexp {n_ff_shared, n_embd}
};

// FfnKind::kDense: out = down(silu(gate . x) * up . x).
struct DenseFfnWeights {
  WeightRef gate;  // ffn_gate {n_embd, n_ff_dense}
  WeightRef up;    // ffn_up {n_embd, n_ff_dense}
  WeightRef down;  // ffn_down {n_ff_dense, n_embd}
};

// One layer of the plan: x += Mixer(RMSNorm(x; attn_norm)), then
// x += Ffn(RMSNorm(x; ffn_norm)).
struct LayerWeights {
  MixerKind mixer = MixerKind::kAttention;
  FfnKind ffn = FfnKind::kMoe;
  // Attention layers: 0, every earlier position; n > 0, only the last n
  // positions up to the query's own (a key at p0 is hidden from a query at
  // p1 when p1 - p0 >= n: gpt-oss's sliding-window layers).
  int attention_window = 0;
  WeightRef attn_norm;  // {n_embd}
  AttentionWeights attn;        // kAttention, kGatedAttention
  DeltaNetWeights deltanet;     // kGatedDeltaNet
  WeightRef ffn_norm;  // {n_embd} (post_attention_norm in some files)
  MoeWeights moe;      // kMoe, kMoeWithSharedExpert
  DenseFfnWeights dense;  // kDense
};

struct ModelWeights {
  WeightRef token_embd;   // {n_embd, n_vocab}
  WeightRef output_norm;  // {n_embd}
  WeightRef output;       // {n_embd, n_vocab}; == token_embd when tied
  bool output_tied = false;
  std::vector<LayerWeights> layers;
  // Rows the loader copied out of the file in another order (qwen3next's
  // ssm_ba, a legacy ssm_in), still in the file's encoding; shared, so a
  // copied Model's WeightRefs stay valid. Private memory of the process:
  // ssm_ba is small (2 H_v rows a layer), but a legacy ssm_in is a layer's
  // largest dense matrix (about 0.5 GB over Qwen3-Next-80B-A3B at Q4_K_M).
  std::vector<std::shared_ptr<const uint8_t[]>> regrouped;
};

struct Model {
  ModelHparams hparams;
  ModelWeights weights;
};

// Every tensor of the weight table (absent optional ones skipped; the routed
// experts' only with include_experts), for visiting them all.
std::vector<const WeightRef*> WeightRefs(const ModelWeights& w, bool include_experts);
std::vector<WeightRef*> WeightRefs(ModelWeights& w, bool include_experts);

// Per layer, whether it has routed experts (its router reports a choice).
std::vector<bool> RoutedLayers(const ModelWeights& w);

// What one sequence's state takes in every engine: K and V of every
// attention layer per position of context (stored as `kv_types` says), and
// the conv and delta-rule state (fp32) of every Gated DeltaNet layer,
// whatever the length.
struct SequenceStateSize {
  uint64_t kv_bytes_per_token = 0;
  uint64_t recurrent_bytes = 0;
  uint64_t BytesAt(uint64_t n_tokens) const { return kv_bytes_per_token * n_tokens + recurrent_bytes; }
};
SequenceStateSize SequenceStateSizeOf(const Model& model, const KvCacheTypes& kv_types = {});

// KV cache bytes attention reads for a token at `position` (0-based): each
// attention layer's rows of the positions it sees, every earlier one or
// only its window's.
uint64_t KvBytesReadAt(const Model& model, const KvCacheTypes& kv_types, int64_t position);

// Weight bytes one decode step reads: every dense tensor, k experts per
// MoE layer and one embedding row (the numerator of a memory roofline).
uint64_t DecodeWeightBytesPerToken(const Model& model);
// Its part that does not depend on the routing: every dense tensor (the
// shared expert and the output matrix included, the experts' biases not:
// they are read per routed expert) and one embedding row, which a step of
// several sequences reads once for all of them.
uint64_t DenseWeightBytesPerStep(const Model& model);

}  // namespace moetier
