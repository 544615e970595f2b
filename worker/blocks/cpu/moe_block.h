// The feed-forward block on the CPU, for every FfnKind: the router
// (base/router_params.h: softmax, sigmoid or a softmax of the chosen, a
// bias on the logits, a selection bias, renormalized and scaled as the
// model says), the routing hooks (trace
// recording and replay), grouping the batch's tokens by expert, acquiring
// the used experts from the expert source (the mapping, the daemon's
// store, or an expert cache in front of either) in groups it can hold,
// their SwiGLU (with biases and the model's activation) over exactly their
// rows, the weighted sum into the residual
// stream, the shared expert (gated by a sigmoid where it has a gate) where
// the layer has one (FfnKind::kMoeWithSharedExpert), the dense SwiGLU of a
// layer without experts (FfnKind::kDense), and the next layer's predicted
// experts offered for prefetch.
//
// Each selected expert's weights are streamed once per layer per batch.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "blocks/cpu/cpu_batch.h"
#include "blocks/cpu/expert_ffn.h"
#include "blocks/cpu/mat_runner.h"
#include "engine/expert_source.h"
#include "engine/routing_hook.h"
#include "model/model.h"

namespace moetier {

struct CpuMoeConfig {
  // Null: the experts come from the model's weight table (the mapping).
  ExpertWeightSource* expert_source = nullptr;
  RoutingObserver* routing_observer = nullptr;
  RoutingOverride* routing_override = nullptr;
};

class CpuMoeBlock {
 public:
  // `layers` (the engine's weight table), `batch` and the config's pointers
  // must outlive the block.
  CpuMoeBlock(const ModelHparams& hp, const std::vector<LayerWeights>& layers,
              const CpuMoeConfig& config, CpuBatch& batch);

  // x += FFN(RMSNorm(x; ffn_norm)) for the batch's n tokens at positions
  // pos0..; errors come from the expert source or a routing hook.
  absl::Status Forward(int layer, int n, int pos0);

  uint64_t allocated_bytes() const;

 private:
  // `layer`'s router on the residual stream: its ffn-normed input in xn,
  // probabilities (for RouterGating::kSoftmaxOfChosen the biased logits) in
  // router_probs_, the top-k in topk_ids_ / topk_weights_.
  void RouteTokens(int layer, int n);
  absl::Status ApplyRoutingHooks(int layer, int n, int pos0);
  // The matrices of used_experts_[first, first + count) into expert_rows_.
  absl::Status AcquireExperts(int layer, int first, int count);
  // Offers the expert source the experts `layer`'s router picks for the
  // current hidden state.
  absl::Status PrefetchNextLayer(int layer, int n, int pos0);
  // PrefetchNextLayer when the source wants it and the next layer has
  // experts.
  absl::Status MaybePrefetchNextLayer(int layer, int n, int pos0);
  // x += g * down(silu(gate . xn) * up . xn) over the normed rows xn, with
  // g = sigmoid(gate_inp . xn) where gate_inp is present, else 1: the shared
  // expert and a dense layer's FFN.
  void SwigluIntoResidual(const WeightRef* gate_inp, const WeightRef& gate, const WeightRef& up,
                          const WeightRef& down, int64_t n_ff, int n, CpuPhase phase);

  const ModelHparams& hp_;
  const std::vector<LayerWeights>& layers_;
  const CpuMoeConfig config_;
  CpuBatch& batch_;
  CpuMatRunner& runner_;
  std::vector<std::vector<float>> ffn_norm_;  // decoded to f32 once, per layer
  std::vector<std::vector<float>> selection_bias_;  // per layer; empty: none
  // Per layer, decoded once (gpt-oss; empty: none): the router's bias, and
  // every expert's gate, up and down biases, expert after expert.
  struct LayerBiases {
    std::vector<float> router, gate, up, down;
  };
  std::vector<LayerBiases> biases_;
  std::vector<ExpertLayerShape> shapes_;      // per layer

  // B = max_batch, K = n_expert_used.
  AlignedBytes router_logits_;            // [B][n_expert]
  AlignedBytes router_probs_;             // [B][n_expert]
  std::vector<int32_t> topk_ids_;         // [B * K]
  std::vector<float> topk_weights_;       // [B * K]
  std::vector<int32_t> expert_count_;     // [n_expert]
  std::vector<int32_t> expert_offset_;    // [n_expert + 1]
  std::vector<int32_t> slot_token_;       // [B * K] token of each expert-grouped row
  std::vector<int32_t> token_slot_;       // [B * K] grouped row of (token, j)
  std::vector<int32_t> used_experts_;     // [n_expert] experts with rows, ascending
  std::vector<int32_t> predicted_;        // [n_expert] next layer's predicted experts
  std::vector<ExpertMatrices> expert_mats_;  // [n_expert] per used_experts_ entry
  std::vector<ExpertRows> expert_rows_;   // [n_expert] one group's experts
  AlignedBytes gate_out_;                 // [B * K][n_ff_exp]
  AlignedBytes up_out_;                   // [B * K][n_ff_exp]
  AlignedBytes down_out_;                 // [B * K][n_embd]
  AlignedBytes act_gather_gate_, act_gather_up_;  // [B * K] prepared rows of n_embd
  AlignedBytes act_ff_;                   // [B * K] prepared rows of n_ff_exp
  // The shared expert and the dense FFN (layers that have one); F = the
  // wider of n_ff_shared and n_ff_dense.
  AlignedBytes shared_logit_;             // [B]
  AlignedBytes shared_gate_out_;          // [B][F]
  AlignedBytes shared_up_out_;            // [B][F]
  AlignedBytes shared_down_out_;          // [B][n_embd]
  AlignedBytes act_shared_;               // [B] prepared rows of F
};

}  // namespace moetier
