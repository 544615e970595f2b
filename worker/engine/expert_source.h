// Where an engine gets the routed experts' matrices when they do not come
// from the model file's mapping: in daemon mode, from the daemon's expert
// store (serve/store_expert_source.h), where RAM may be a cache and a miss
// waits for a read from disk.
//
// The engine asks once per layer (and batch) for exactly the experts its
// tokens routed to, computes with the returned pointers, and releases them
// after the layer's down projection. Between Acquire and Release the bytes
// must not move or change.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "gguf/tensor/tensor_type.h"
#include "model/model.h"

namespace moetier {

// One expert's matrices, each in the model file's encoding and layout:
// `rows` rows of `row_bytes` bytes, back to back, exactly as the model's
// WeightRef for that tensor describes them (for a fused ffn_gate_up_exps
// tensor, gate is the first half of the expert's rows and up the second).
struct ExpertMatrices {
  const uint8_t* gate = nullptr;
  const uint8_t* up = nullptr;
  const uint8_t* down = nullptr;
};

// The shape of one routed-expert matrix in the file's encoding: `rows` rows
// of `row_bytes` bytes, each holding `cols` weights.
struct ExpertMatrixShape {
  TensorType type = TensorType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t row_bytes = 0;

  uint64_t bytes() const { return static_cast<uint64_t>(rows) * row_bytes; }
};

// One layer's routed experts as the expert cache, the store source and the
// host-side expert FFN know them: shapes only, no architecture.
struct ExpertLayerShape {
  ExpertMatrixShape gate, up, down;
  uint64_t expert_bytes() const { return gate.bytes() + up.bytes() + down.bytes(); }
};

struct RoutedExpertShapes {
  int n_expert = 0;
  int top_k = 0;
  int n_embd = 0;
  int n_ff = 0;
  std::vector<ExpertLayerShape> layers;  // one per layer; all-zero where a layer has no experts
};

// The shapes of `model`'s routed experts, layer by layer.
RoutedExpertShapes RoutedExpertShapesOf(const Model& model);

class ExpertWeightSource {
 public:
  virtual ~ExpertWeightSource() = default;

  // Makes the matrices of `experts` (distinct ids of layer `layer`, at most
  // max_experts_held() of them) readable until Release(layer) and writes
  // them to out[i] for experts[i]. Called by one thread at a time; nothing
  // may be held from an earlier Acquire. On error nothing stays held and
  // the message says which expert failed and why (daemon gone, read failed,
  // timed out).
  virtual absl::Status Acquire(int layer, std::span<const int32_t> experts,
                               std::span<ExpertMatrices> out) = 0;

  // Ends the use of everything the last Acquire(layer) returned.
  virtual void Release(int layer) = 0;

  // The most experts one Acquire may ask for (a cache cannot hold more at
  // once than it has slots); the engine splits a layer's experts into
  // groups of at most this many. At least 1.
  virtual int max_experts_held() const = 0;

  // The batch's choice at `layer`, token-major (top_k ids per token, the
  // order the router ranked them), before the layer's first Acquire. A
  // cache learns from it and counts each expert's token rows; the store
  // counts them for the heat profile. A source in front of another passes
  // it on.
  virtual void Route(int layer, std::span<const int32_t> topk_ids) {
    (void)layer;
    (void)topk_ids;
  }

  // Where `expert` of `layer` stood among its layer's experts in the
  // daemon's heat profile at start (1: the hottest), 0 when unknown. A cache
  // in front of this source fills itself in that order before the first
  // request, so a restart does not begin cold.
  virtual uint32_t WarmRank(int layer, int expert) const {
    (void)layer;
    (void)expert;
    return 0;
  }

  // Whether the engine should predict the next layer's experts (that
  // layer's router applied to the current hidden state) and offer them to
  // Prefetch. Predicting costs a router product per layer.
  virtual bool wants_prefetch() const { return false; }

  // Experts of `layer` the engine expects to Acquire next; called with
  // nothing held. Only an optimization: an error here is a failure of the
  // source (as in Acquire), not of the prediction.
  virtual absl::Status Prefetch(int layer, std::span<const int32_t> experts) {
    (void)layer;
    (void)experts;
    return absl::OkStatus();
  }
};

// Every expert's WarmRank, [layer * n_expert + expert]; empty when the
// source ranks none (no heat profile), so a cache skips its warm start.
std::vector<uint32_t> WarmRanksOf(const ExpertWeightSource& source, uint32_t n_layer,
                                  uint32_t n_expert);

}  // namespace moetier
