#include "policy_lab/replay.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/check.h"
#include "cache/prefetch_prediction.h"

namespace moetier {

LayerTally ReplayTally::Total() const {
  LayerTally t;
  for (const LayerTally& l : layer) t.Add(l);
  return t;
}

void ReplayTally::Add(const ReplayTally& o) {
  if (layer.size() < o.layer.size()) layer.resize(o.layer.size());
  for (size_t l = 0; l < o.layer.size(); ++l) layer[l].Add(o.layer[l]);
}

void PredictExperts(const RoutingTrace& trace, size_t token, uint32_t layer,
                    const PrefetchModel& prefetch, std::vector<uint32_t>& out) {
  DegradedPrediction(trace.Experts(token, layer), trace.n_expert, prefetch.accuracy, prefetch.seed,
                     token, layer, out);
}

ReplayTally ReplayTrace(const RoutingTrace& trace, ExpertCachePolicy& policy,
                        const PrefetchModel& prefetch) {
  MOETIER_CHECK(policy.shape().n_layer == trace.n_layer &&
                policy.shape().n_expert == trace.n_expert && policy.shape().top_k == trace.top_k);
  ReplayTally tally;
  tally.layer.resize(trace.n_layer);
  std::vector<uint32_t> predicted;
  predicted.reserve(trace.top_k);
  for (size_t t = 0; t < trace.n_token(); ++t) {
    for (uint32_t l = 0; l < trace.n_layer; ++l) {
      const absl::Span<const uint32_t> experts = trace.Experts(t, l);
      LayerTally& lt = tally.layer[l];
      lt.requests += experts.size();
      lt.hits += policy.Route(l, experts, trace.Weights(t, l));
      for (const uint32_t e : experts) {
        if (policy.Resident(l, e)) continue;
        const SlotGrant g = policy.Admit(l, e);
        // Budgets are >= top_k and nothing is pinned: a slot is always found.
        MOETIER_CHECK(g.slot != kNoSlot);
        ++lt.copies;
      }
      if (prefetch.enabled && l + 1 < trace.n_layer) {
        PredictExperts(trace, t, l + 1, prefetch, predicted);
        for (const uint32_t e : predicted) {
          if (policy.Prefetch(l + 1, e).slot != kNoSlot) {
            ++tally.layer[l + 1].copies;
            ++tally.layer[l + 1].prefetch_copies;
          }
        }
      }
    }
  }
  return tally;
}

std::vector<uint32_t> AllocateBudgets(const std::vector<std::vector<uint64_t>>& hits,
                                      uint32_t top_k, uint32_t total) {
  constexpr uint32_t kLookahead = 8;
  const size_t n_layer = hits.size();
  std::vector<uint32_t> budget(n_layer, top_k);
  uint64_t given = static_cast<uint64_t>(top_k) * n_layer;
  MOETIER_CHECK(given <= total);
  while (given < total) {
    size_t best_layer = n_layer;
    uint32_t best_step = 0;
    double best_gain = -1;
    for (size_t l = 0; l < n_layer; ++l) {
      const size_t at = budget[l] - top_k;
      for (uint32_t step = 1; step <= kLookahead && at + step < hits[l].size(); ++step) {
        if (given + step > total) break;
        const double gain = static_cast<double>(hits[l][at + step] - hits[l][at]) / step;
        // Strictly better only: ties go to the lower layer and shorter step.
        if (gain > best_gain) {
          best_gain = gain;
          best_layer = l;
          best_step = step;
        }
      }
    }
    if (best_layer == n_layer) break;  // every layer holds all its experts
    budget[best_layer] += best_step;
    given += best_step;
  }
  return budget;
}

absl::StatusOr<std::vector<std::vector<uint64_t>>> LayerHitCurves(
    const std::vector<const RoutingTrace*>& traces, const PolicyFactory& make) {
  MOETIER_CHECK(!traces.empty());
  const RoutingTrace& first = *traces[0];
  std::vector<std::vector<uint64_t>> hits(first.n_layer);
  for (uint32_t slots = first.top_k; slots <= first.n_expert; ++slots) {
    ReplayTally sum;
    for (const RoutingTrace* t : traces) {
      if (t->n_layer != first.n_layer || t->n_expert != first.n_expert || t->top_k != first.top_k) {
        return absl::InvalidArgumentError(
            absl::StrFormat("budget profile: %s and %s differ in shape", t->name, first.name));
      }
      const ExpertCacheShape shape =
          ExpertCacheShape::Uniform(t->n_layer, t->n_expert, t->top_k, slots);
      absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> policy = make(shape, *t);
      if (!policy.ok()) return policy.status();
      sum.Add(ReplayTrace(*t, **policy, PrefetchModel{}));
    }
    for (uint32_t l = 0; l < first.n_layer; ++l) hits[l].push_back(sum.layer[l].hits);
  }
  return hits;
}

}  // namespace moetier
