// The lab measures the worker's cache, not a model of it: for every policy,
// replaying a trace through the lab's driver (policy_lab/replay.h) and
// through the worker's ExpertSlotCache (Route, Place, Release, Prefetch, as
// the CPU and CUDA MoE blocks call them) gives the same hits, the same
// copies and the same residents after every token and layer.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cache/expert_cache_policy.h"
#include "cache/expert_slot_cache.h"
#include "cache/routing_trace.h"
#include "policy_lab/replay.h"
#include "tracegen/trace_model.h"

namespace moetier {
namespace {

constexpr uint64_t kSlotBytes = 4096;

RoutingTrace GraniteDecode() {
  absl::StatusOr<RoutingTrace> t = ReadRoutingTrace(
      std::string(MOETIER_TEST_DATA_DIR) + "/traces/granite-3.0-1b-a400m/code.decode.txt");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : RoutingTrace{};
}

RoutingTrace Generated() {
  GenerateOptions opt;
  opt.n_layer = 6;
  opt.n_expert = 64;
  opt.top_k = 4;
  opt.n_token = 300;
  opt.seed = 7;
  absl::StatusOr<RoutingTrace> t = GenerateTrace(DefaultRoutingModel(), opt);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : RoutingTrace{};
}

// Replays `trace` through a worker cache of `slots` per layer, comparing
// with a lab-driven policy of the same kind step by step.
void ExpectSameDecisions(const RoutingTrace& trace, ExpertPolicyKind kind, uint32_t slots,
                         const PrefetchModel& prefetch) {
  SCOPED_TRACE(std::string(ExpertPolicyName(kind)) + " on " + trace.name + ", " +
               std::to_string(slots) + " slots per layer" +
               (prefetch.enabled ? ", prefetch" : ""));
  ExpertSlotCacheOptions o;
  o.n_layer = trace.n_layer;
  o.n_expert = trace.n_expert;
  o.top_k = trace.top_k;
  o.expert_bytes.assign(trace.n_layer, kSlotBytes);
  o.slot_bytes = kSlotBytes;
  o.pool_bytes = static_cast<uint64_t>(slots) * trace.n_layer * kSlotBytes;
  o.policy = kind;
  o.prefetch = prefetch.enabled;
  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> made = ExpertSlotCache::Create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  ExpertSlotCache& cache = **made;
  ASSERT_EQ(cache.slot_budget(0), slots);

  absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> lab_made = MakeExpertCachePolicy(
      kind, ExpertCacheShape::Uniform(trace.n_layer, trace.n_expert, trace.top_k, slots));
  ASSERT_TRUE(lab_made.ok()) << lab_made.status();
  ExpertCachePolicy& lab = **lab_made;

  std::vector<int32_t> ids;
  std::vector<uint32_t> rows(trace.top_k, 1);
  std::vector<ExpertPlacement> placements(trace.top_k);
  std::vector<uint32_t> predicted;
  std::vector<int32_t> predicted_ids;
  std::vector<SlotFill> fills(trace.top_k);
  uint64_t lab_hits = 0, lab_copies = 0;
  for (size_t t = 0; t < trace.n_token(); ++t) {
    for (uint32_t l = 0; l < trace.n_layer; ++l) {
      // The lab's protocol (ReplayTrace): Route, Admit each miss, Prefetch.
      const absl::Span<const uint32_t> experts = trace.Experts(t, l);
      lab_hits += lab.Route(l, experts);
      for (const uint32_t e : experts) {
        if (lab.Resident(l, e)) continue;
        ASSERT_NE(lab.Admit(l, e).slot, kNoSlot);
        ++lab_copies;
      }
      // The worker's: one token's experts in one group.
      ids.assign(experts.begin(), experts.end());
      cache.Route(l, ids);
      cache.Place(l, ids, std::span(rows).first(ids.size()),
                  std::span(placements).first(ids.size()));
      cache.Release(l);
      if (prefetch.enabled && l + 1 < trace.n_layer) {
        PredictExperts(trace, t, l + 1, prefetch, predicted);
        for (const uint32_t e : predicted) {
          if (lab.Prefetch(l + 1, e).slot != kNoSlot) ++lab_copies;
        }
        predicted_ids.assign(predicted.begin(), predicted.end());
        cache.Prefetch(l + 1, predicted_ids, fills);
      }
      for (uint32_t e = 0; e < trace.n_expert; ++e) {
        ASSERT_EQ(cache.Resident(l, e), lab.Resident(l, e))
            << "token " << t << ", layer " << l << ", expert " << e;
        if (l + 1 < trace.n_layer) {
          ASSERT_EQ(cache.Resident(l + 1, e), lab.Resident(l + 1, e))
              << "token " << t << ", prefetch into layer " << l + 1 << ", expert " << e;
        }
      }
    }
  }
  const ExpertSlotCacheStats& s = cache.stats();
  EXPECT_EQ(s.hits, lab_hits);
  EXPECT_EQ(s.demand_fills + s.prefetch_issued, lab_copies);
  // The lab's own driver counts the same.
  absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> fresh = MakeExpertCachePolicy(
      kind, ExpertCacheShape::Uniform(trace.n_layer, trace.n_expert, trace.top_k, slots));
  ASSERT_TRUE(fresh.ok());
  const LayerTally replayed = ReplayTrace(trace, **fresh, prefetch).Total();
  EXPECT_EQ(replayed.hits, lab_hits);
  EXPECT_EQ(replayed.copies, lab_copies);
  // A trace too easy for the comparison to mean anything would hit always.
  EXPECT_LT(lab_hits, replayed.requests);
}

TEST(LabMatchesWorkerCache, EveryPolicyOnTheGraniteTraceWithAndWithoutPrefetch) {
  const RoutingTrace trace = GraniteDecode();
  ASSERT_GT(trace.n_token(), 0u);
  for (const ExpertPolicyKind kind : AllExpertPolicyKinds()) {
    for (const bool prefetch : {false, true}) {
      PrefetchModel model;
      model.enabled = prefetch;
      model.accuracy = 0.8;
      ExpectSameDecisions(trace, kind, 2 * trace.top_k, model);
    }
  }
}

TEST(LabMatchesWorkerCache, EveryPolicyOnAGeneratedManyExpertTrace) {
  const RoutingTrace trace = Generated();
  ASSERT_GT(trace.n_token(), 0u);
  for (const ExpertPolicyKind kind : AllExpertPolicyKinds()) {
    for (const uint32_t slots : {trace.top_k * 2, trace.top_k * 4}) {
      PrefetchModel model;
      model.enabled = slots == trace.top_k * 4;
      model.accuracy = 0.5;
      ExpectSameDecisions(trace, kind, slots, model);
    }
  }
}

}  // namespace
}  // namespace moetier
