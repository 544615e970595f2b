// The fp32 reference's blocks: plain loops over dequantized weights, one
// token at a time, dot products and norms accumulated in double. They share
// no code with the backends, so that the reference stays an independent
// oracle for every one of them (SPEC.md §3.0 for the math).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/model.h"

namespace moetier::reference {

// A dequantized matrix: rows × cols floats, row r holding output r's weights.
struct DenseMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> values;

  const float* row(int64_t r) const { return values.data() + r * cols; }
};

// Matrix `expert` of `ref` (0 for 2-D tensors) in fp32.
DenseMatrix DequantizeMatrix(const WeightRef& ref, int64_t expert = 0);
// A 1-D tensor in fp32; empty when the tensor is absent.
std::vector<float> DequantizeVector(const WeightRef& ref);

// y = W·x, accumulated in double.
void MatVec(const DenseMatrix& w, const float* x, float* y);
// y = x / sqrt(mean(x²) + eps) · w (ggml_rms_norm then the weight); y may be x.
void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y);
// In-place softmax of n values; the sum runs in double.
void Softmax(float* v, int64_t n);

// One attention layer: its weights in fp32 and its KV cache. A gated layer
// (MixerKind::kGatedAttention) multiplies each head's output by the sigmoid
// of the gate half of its q projection.
class Attention {
 public:
  Attention(const ModelHparams& hp, const LayerWeights& layer, int max_ctx);
  // out = W_o · attention of the token at `pos` (its normed input `xn`)
  // over positions 0..pos, whose keys and values are cached.
  void Forward(const float* xn, int pos, float* out);
  uint64_t weight_bytes() const;

 private:
  const ModelHparams& hp_;
  const bool gated_;
  const int window_;  // LayerWeights::attention_window
  DenseMatrix wq_, wk_, wv_, wo_;
  std::vector<float> q_norm_, k_norm_;
  std::vector<float> q_bias_, k_bias_, v_bias_, output_bias_;  // empty: none
  std::vector<float> sinks_;                                   // empty: none
  std::vector<float> k_cache_, v_cache_;  // [max_ctx][n_head_kv*head_dim]
  std::vector<float> q_, gate_, k_, v_, attn_out_, scores_, projected_;
};

// One Gated DeltaNet layer (SPEC.md §3.3) and its recurrent state: the last
// conv_kernel - 1 inputs of the conv, and one d_k × d_v matrix per value
// head, kept in double. Run one token at a time; position 0 starts from a
// zero state.
class GatedDeltaNet {
 public:
  GatedDeltaNet(const ModelHparams& hp, const LayerWeights& layer);
  void Forward(const float* xn, int pos, float* out);
  uint64_t weight_bytes() const;
  uint64_t state_bytes() const;
  // The state as it is now, kept aside; and back.
  void SaveState();
  void RestoreState();

 private:
  const ModelHparams& hp_;
  const DeltaNetParams& dn_;
  DenseMatrix qkv_, z_, beta_, alpha_, out_;
  DenseMatrix conv_;  // [conv_dim][conv_kernel]
  std::vector<float> dt_bias_, a_, norm_;
  std::vector<float> conv_state_;  // [conv_kernel - 1][conv_dim], oldest first
  std::vector<double> state_;      // [n_v_heads][d_k][d_v]
  std::vector<float> saved_conv_state_;
  std::vector<double> saved_state_;
  std::vector<float> m_, z_act_, b_act_, a_act_, u_, o_, n_;
};

// One SwiGLU FFN in fp32, out = down(silu(gate·x) ⊙ up·x): a dense layer's
// FFN (FfnKind::kDense) and the shared expert.
class SwigluFfn {
 public:
  SwigluFfn(const WeightRef& gate, const WeightRef& up, const WeightRef& down);
  void Forward(const float* x, float* out);
  uint64_t weight_bytes() const;

 private:
  DenseMatrix gate_, up_, down_;
  std::vector<float> gate_act_, up_act_;
};

// One MoE layer: the router and every expert in fp32, and the shared
// expert where the layer has one.
class Moe {
 public:
  Moe(const ModelHparams& hp, const LayerWeights& layer);
  // out = Σ_k w_k · expert_k(xn) over the router's top k (base/router_params.h),
  // plus the shared expert.
  void Forward(const float* xn, float* out);
  uint64_t weight_bytes() const;

 private:
  const ModelHparams& hp_;
  DenseMatrix router_;
  std::vector<float> selection_bias_;          // empty: none
  std::vector<float> router_bias_;             // empty: none
  // Per expert, its gate, up and down biases; empty: none.
  std::vector<std::vector<float>> gate_bias_, up_bias_, down_bias_;
  std::vector<DenseMatrix> gate_, up_, down_;  // one per expert
  std::unique_ptr<SwigluFfn> shared_;          // null: no shared expert
  std::vector<float> shared_gate_inp_;         // empty: the shared expert is not gated
  std::vector<float> probs_, selection_, weights_, gate_act_, up_act_, expert_out_;
  std::vector<int> order_;
};

}  // namespace moetier::reference
