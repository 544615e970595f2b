// The fp32 reference forward pass for qwen3moe (SPEC.md §3.0–3.1): every
// weight dequantized to fp32 once at creation, then plain loops, one token
// at a time, dot products accumulated in double. It is the oracle every other
// backend is checked against, so it favours being obviously right over speed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/forward_engine.h"
#include "model/qwen3moe_model.h"

namespace moetier {

// A dequantized matrix: rows × cols floats, row r holding output r's weights.
struct DenseMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> values;

  const float* row(int64_t r) const { return values.data() + r * cols; }
};

// Dequantizes matrix `expert` of `ref` (0 for 2-D tensors) to fp32.
DenseMatrix DequantizeMatrix(const WeightRef& ref, int64_t expert = 0);

// Bytes of fp32 weights a ReferenceQwen3Moe for `model` holds.
uint64_t ReferenceWeightBytes(const Qwen3MoeModel& model);

class ReferenceQwen3Moe final : public ForwardEngine {
 public:
  // Fails when max_ctx is outside 1..n_ctx_train or the fp32 copy of the
  // weights would not fit in this machine's memory.
  static absl::StatusOr<std::unique_ptr<ReferenceQwen3Moe>> Create(const Qwen3MoeModel& model,
                                                                   int max_ctx);

  absl::Status Forward(std::span<const int32_t> tokens, int pos0, LogitRows rows,
                       float* logits) override;
  // Every row: `logits` holds tokens.size() × n_vocab floats.
  absl::Status Forward(std::span<const int32_t> tokens, int pos0, float* logits) {
    return Forward(tokens, pos0, LogitRows::kAll, logits);
  }
  void Reset() override { cached_tokens_ = 0; }
  void ResetCache() { Reset(); }

  int n_vocab() const override { return hp_.n_vocab; }
  int max_ctx() const override { return max_ctx_; }
  int cached_tokens() const override { return cached_tokens_; }
  const Qwen3MoeHparams& hparams() const { return hp_; }

 private:
  struct Layer {
    std::vector<float> attn_norm;
    DenseMatrix wq, wk, wv, wo;
    std::vector<float> q_norm, k_norm;
    std::vector<float> ffn_norm;
    DenseMatrix router;
    std::vector<DenseMatrix> gate, up, down;  // one per expert
    std::vector<float> k_cache, v_cache;      // [max_ctx][n_head_kv*head_dim]
  };

  ReferenceQwen3Moe(const Qwen3MoeModel& model, int max_ctx);
  // One token through every layer; writes its logits when `logits` is set.
  void ForwardToken(int32_t token, int pos, float* logits);
  void Attention(Layer& layer, int pos);
  void MoeFfn(const Layer& layer);

  Qwen3MoeHparams hp_;
  int max_ctx_ = 0;
  int cached_tokens_ = 0;

  DenseMatrix token_embd_;
  std::vector<float> output_norm_;
  DenseMatrix output_;
  std::vector<Layer> layers_;

  // Activations, sized once.
  std::vector<float> x_;              // residual stream [n_embd]
  std::vector<float> xn_;             // normed input of a sublayer [n_embd]
  std::vector<float> q_;              // [n_head*head_dim]
  std::vector<float> k_;              // [n_head_kv*head_dim]
  std::vector<float> v_;              // [n_head_kv*head_dim]
  std::vector<float> attn_out_;       // [n_head*head_dim]
  std::vector<float> scores_;         // [max_ctx]
  std::vector<float> sub_out_;        // [n_embd]
  std::vector<float> router_logits_;  // [n_expert]
  std::vector<float> gate_act_;       // [n_ff_exp]
  std::vector<float> up_act_;         // [n_ff_exp]
  std::vector<float> expert_out_;     // [n_embd]
  std::vector<int> expert_order_;     // [n_expert]
};

}  // namespace moetier
