// Hooks into an engine's expert routing, called once per MoE layer and batch
// right after the router's top-k choice: an observer sees the choice (the
// worker records routing traces with it, engine/routing_trace_hooks.h), an
// override replaces it (benchmarks replay a recorded trace in place of the
// router, so that random-weight models route like real ones).
//
// Both are optional; an engine without them pays one pointer test per layer.
// Within a batch the engine calls layers 0, 1, ..., n_layer - 1 in order,
// each with all of the batch's tokens; a batch that fails part-way (an
// expert source error) stops early, and the next batch starts again at
// layer 0.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "model/model.h"

namespace moetier {

// One layer's routing of one batch: tokens at positions pos0 .. pos0+n-1,
// top_k choices each, token-major ([n][top_k]), highest router score first.
struct RoutingBatch {
  int layer = 0;
  int n_layer = 0;   // the model's MoE layers
  int n_expert = 0;  // routed experts per layer
  int top_k = 0;
  int pos0 = 0;
  int n_tokens = 0;
  std::span<const int32_t> experts;  // n_tokens * top_k ids
  std::span<const float> weights;    // n_tokens * top_k mixing weights
};

// `n_tokens` tokens from position pos0 at `layer` of a model with `hp`,
// before their choice is known (experts and weights empty).
inline RoutingBatch RoutingBatchAt(const ModelHparams& hp, int layer, int n_tokens, int pos0) {
  return RoutingBatch{.layer = layer,
                      .n_layer = hp.n_layer,
                      .n_expert = hp.n_expert,
                      .top_k = hp.n_expert_used,
                      .pos0 = pos0,
                      .n_tokens = n_tokens,
                      .experts = {},
                      .weights = {}};
}

class RoutingObserver {
 public:
  virtual ~RoutingObserver() = default;
  // Sees the experts a layer's tokens go to and the weights their outputs
  // are mixed with (after any override). An error fails the engine's
  // Forward with it.
  virtual absl::Status OnRouting(const RoutingBatch& batch) = 0;
};

class RoutingOverride {
 public:
  virtual ~RoutingOverride() = default;
  // Writes the experts of each of the batch's tokens into `experts`
  // ([n_tokens][top_k], holding the router's choice on entry; batch.experts
  // and batch.weights are empty here): top_k distinct ids below n_expert per
  // token, in the order their outputs are summed. The engine then mixes
  // them with the router's softmax probabilities of those experts,
  // renormalized to sum 1 exactly as for its own choice, so a choice equal
  // to the router's gives bit-identical results. An error fails the
  // engine's Forward with it.
  virtual absl::Status Override(const RoutingBatch& batch, std::span<int32_t> experts) = 0;

  // The prefetch's guess of `batch.layer`'s experts for the batch's tokens,
  // asked for after the layer before it has run (batch.experts and
  // batch.weights are empty): writes [n_tokens][top_k] ids into `experts`
  // and returns true, or returns false to let the engine apply that layer's
  // router to the current hidden state as it does without an override. A
  // replayed trace knows the answer; without this, the engine would guess
  // from random weights what the trace is about to choose.
  virtual bool PredictNext(const RoutingBatch& batch, std::span<int32_t> experts) {
    (void)batch;
    (void)experts;
    return false;
  }

  // True when the choice for a batch's row does not depend on its position
  // (a benchmark that gives each row a replayed stream of its own): an
  // engine may then call the override with the rows of several sequences
  // at once (ForwardMany), whose pos0 means nothing. False (the trace
  // replay of engine/routing_trace_hooks.h, which follows one sequence's
  // positions): ForwardMany refuses more than one sequence.
  virtual bool routes_rows_alone() const { return false; }
};

// OK when every id an override wrote (`experts`, [n_tokens][top_k]) names
// one of the model's experts; otherwise Internal, naming the layer, the
// position and the id.
inline absl::Status CheckOverriddenExperts(const RoutingBatch& batch,
                                           std::span<const int32_t> experts) {
  for (size_t i = 0; i < experts.size(); ++i) {
    if (experts[i] < 0 || experts[i] >= batch.n_expert) {
      return absl::InternalError(absl::StrFormat(
          "routing override chose expert %d for layer %d at position %d; the model has "
          "experts 0..%d",
          experts[i], batch.layer, batch.pos0 + static_cast<int>(i) / batch.top_k,
          batch.n_expert - 1));
    }
  }
  return absl::OkStatus();
}

}  // namespace moetier
