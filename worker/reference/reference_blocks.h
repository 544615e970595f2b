// The fp32 reference's blocks: plain loops over dequantized weights, one
// token at a time, dot products and norms accumulated in double. They share
// no code with the backends, so that the reference stays an independent
// oracle for every one of them (SPEC.md §3.0 for the math).
#pragma once

#include <cstdint>
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

// One attention layer: its weights in fp32 and its KV cache.
class Attention {
 public:
  Attention(const ModelHparams& hp, const LayerWeights& layer, int max_ctx);
  // out = W_o · attention of the token at `pos` (its normed input `xn`)
  // over positions 0..pos, whose keys and values are cached.
  void Forward(const float* xn, int pos, float* out);
  uint64_t weight_bytes() const;

 private:
  const ModelHparams& hp_;
  DenseMatrix wq_, wk_, wv_, wo_;
  std::vector<float> q_norm_, k_norm_;
  std::vector<float> k_cache_, v_cache_;  // [max_ctx][n_head_kv*head_dim]
  std::vector<float> q_, k_, v_, attn_out_, scores_;
};

// One MoE layer: the router and every expert in fp32.
class Moe {
 public:
  Moe(const ModelHparams& hp, const LayerWeights& layer);
  // out = Σ_k w_k · expert_k(xn) over the router's top k.
  void Forward(const float* xn, float* out);
  uint64_t weight_bytes() const;

 private:
  const ModelHparams& hp_;
  DenseMatrix router_;
  std::vector<DenseMatrix> gate_, up_, down_;  // one per expert
  std::vector<float> logits_, gate_act_, up_act_, expert_out_;
  std::vector<int> order_;
};

}  // namespace moetier::reference
