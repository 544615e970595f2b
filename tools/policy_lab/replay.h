// Replays routing traces through expert cache policies, as the worker would
// drive them: per token and layer, Route, then one Admit per miss; with
// prefetch, after layer l the predicted experts of layer l + 1 are offered
// through Prefetch.
//
// What "with lookahead prefetch" means here: the worker applies layer
// l + 1's router to the hidden state after layer l (the residual stream
// changes little from one layer to the next) and starts copying the
// predicted experts while layer l + 1's attention runs. The lab models the
// prediction as the true top-k of layer l + 1 in which each expert is, with
// probability 1 - accuracy, replaced by a wrong one (uniform among the
// experts not selected); the same predictions, a pure function of (seed,
// token, layer), are offered to every policy. A prefetched expert that is
// then routed counts as a hit: the copy is assumed to finish in time
// (transfer of k experts within one layer's compute). Layer 0 is not
// prefetched: the next token is not known before sampling.
// Counted: hits (no stall), and copies (demand + prefetch) as traffic.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/expert_cache_policy.h"
#include "cache/routing_trace.h"

namespace moetier {

struct PrefetchModel {
  bool enabled = false;
  double accuracy = 0.8;  // fraction of the true top-k the prediction holds
  uint64_t seed = 1;
};

struct LayerTally {
  uint64_t requests = 0;
  uint64_t hits = 0;
  uint64_t copies = 0;  // demand copies + prefetch copies
  uint64_t prefetch_copies = 0;
  void Add(const LayerTally& o) {
    requests += o.requests;
    hits += o.hits;
    copies += o.copies;
    prefetch_copies += o.prefetch_copies;
  }
  double hit_rate() const { return requests == 0 ? 0 : static_cast<double>(hits) / requests; }
};

struct ReplayTally {
  std::vector<LayerTally> layer;
  LayerTally Total() const;
  void Add(const ReplayTally& o);  // layer by layer; sizes may differ
};

// Replays `trace` from a cold cache through `policy` (built for the trace's
// shape).
ReplayTally ReplayTrace(const RoutingTrace& trace, ExpertCachePolicy& policy,
                        const PrefetchModel& prefetch);

// The predicted experts of (token, layer): top_k distinct ids, written to
// `out` (size top_k).
void PredictExperts(const RoutingTrace& trace, size_t token, uint32_t layer,
                    const PrefetchModel& prefetch, std::vector<uint32_t>& out);

// Per-layer budgets, for layers that differ in locality. `hits[l][i]`:
// layer l's hits with top_k + i slots. Hands out `total` slots (at least
// top_k per layer, at most hits[l].size() - 1 + top_k) one step at a time to
// the layer with the largest gain per slot, looking up to 8 slots ahead so
// that a flat stretch before a steep one does not hide it (Qureshi and
// Patt's lookahead, "Utility-Based Cache Partitioning", MICRO 2006).
std::vector<uint32_t> AllocateBudgets(const std::vector<std::vector<uint64_t>>& hits,
                                      uint32_t top_k, uint32_t total);

using PolicyFactory = std::function<absl::StatusOr<std::unique_ptr<ExpertCachePolicy>>(
    const ExpertCacheShape&, const RoutingTrace&)>;

// Each layer's hits for every size from top_k to n_expert slots, summed over
// `traces` (one shape): the input of AllocateBudgets.
absl::StatusOr<std::vector<std::vector<uint64_t>>> LayerHitCurves(
    const std::vector<const RoutingTrace*>& traces, const PolicyFactory& make);

}  // namespace moetier
