#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "cache/expert_cache_policy.h"
#include "cache/routing_trace.h"
#include "policy_lab/belady_policy.h"
#include "policy_lab/replay.h"
#include "tracegen/trace_model.h"

namespace moetier {
namespace {

std::unique_ptr<ExpertCachePolicy> Make(ExpertPolicyKind kind, const ExpertCacheShape& shape) {
  absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> p = MakeExpertCachePolicy(kind, shape);
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(p).value();
}

// One layer; each inner vector is one token's experts.
RoutingTrace OneLayerTrace(uint32_t n_expert, uint32_t top_k,
                           const std::vector<std::vector<uint32_t>>& tokens) {
  RoutingTrace t;
  t.name = "hand-made";
  t.n_layer = 1;
  t.n_expert = n_expert;
  t.top_k = top_k;
  for (const auto& tok : tokens) t.experts.insert(t.experts.end(), tok.begin(), tok.end());
  EXPECT_TRUE(t.Validate().ok());
  return t;
}

// Drives the protocol for one layer-0 token; returns hits and records the
// experts evicted, in order.
uint32_t Step(ExpertCachePolicy& p, const std::vector<uint32_t>& experts,
              std::vector<uint32_t>* evicted = nullptr) {
  const uint32_t hits = p.Route(0, experts);
  for (const uint32_t e : experts) {
    if (p.Resident(0, e)) continue;
    const SlotGrant g = p.Admit(0, e);
    EXPECT_NE(g.slot, kNoSlot);
    if (evicted != nullptr && g.evicted_expert != kNoExpert) evicted->push_back(g.evicted_expert);
  }
  return hits;
}

TEST(ExpertCachePolicy, LruExactSequence) {
  auto p = Make(ExpertPolicyKind::kLru, ExpertCacheShape::Uniform(1, 6, 2, 3));
  std::vector<uint32_t> evicted;
  const std::vector<std::vector<uint32_t>> seq = {{0, 1}, {2, 0}, {3, 1}, {0, 2}, {1, 3}, {2, 0}};
  const std::vector<uint32_t> want_hits = {0, 1, 1, 1, 1, 1};
  for (size_t t = 0; t < seq.size(); ++t) {
    EXPECT_EQ(Step(*p, seq[t], &evicted), want_hits[t]) << "token " << t;
  }
  // Worked by hand: the least recent expert not used by the current token.
  EXPECT_EQ(evicted, (std::vector<uint32_t>{0, 1, 2, 3}));
  const ExpertCacheCounters& c = p->counters(0);
  EXPECT_EQ(c.requests, 12u);
  EXPECT_EQ(c.hits, 5u);
  EXPECT_EQ(c.admissions, 7u);
  EXPECT_EQ(c.evictions, 4u);
}

TEST(ExpertCachePolicy, BudgetOfTopKHitsExactlyTheOverlapWithThePreviousToken) {
  const std::vector<std::vector<uint32_t>> seq = {
      {0, 1, 2}, {2, 3, 4}, {2, 4, 5}, {5, 6, 7}, {7, 5, 2}};
  for (const ExpertPolicyKind kind : AllExpertPolicyKinds()) {
    auto p = Make(kind, ExpertCacheShape::Uniform(1, 8, 3, 3));
    uint32_t hits = 0;
    for (const auto& tok : seq) hits += Step(*p, tok);
    EXPECT_EQ(hits, 1u + 2u + 1u + 2u) << ExpertPolicyName(kind);
  }
}

TEST(ExpertCachePolicy, FrequencyAwarePoliciesKeepThePopularExpert) {
  // k = 1, two slots: 0 0 0 1 2 0. LRU evicts 0 for 2 (0 is older than 1)
  // and misses it again; LFU and LRFU keep it.
  const std::vector<std::vector<uint32_t>> seq = {{0}, {0}, {0}, {1}, {2}, {0}};
  auto run = [&](ExpertPolicyKind kind) {
    auto p = Make(kind, ExpertCacheShape::Uniform(1, 4, 1, 2));
    std::vector<uint32_t> evicted;
    uint32_t hits = 0;
    for (const auto& tok : seq) hits += Step(*p, tok, &evicted);
    return std::make_pair(hits, evicted);
  };
  EXPECT_EQ(run(ExpertPolicyKind::kLru), std::make_pair(2u, std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(run(ExpertPolicyKind::kLfu), std::make_pair(3u, std::vector<uint32_t>{1}));
  EXPECT_EQ(run(ExpertPolicyKind::kLrfu), std::make_pair(3u, std::vector<uint32_t>{1}));
}

TEST(BeladyPolicy, BeatsLruOnACyclicPattern) {
  // Classic: 4 experts in a cycle through 3 slots. LRU always evicts the
  // next one needed (0 hits); MIN, worked by hand, hits at t = 4, 5, 7, 8,
  // 10, 11.
  std::vector<std::vector<uint32_t>> seq;
  for (int i = 0; i < 12; ++i) seq.push_back({static_cast<uint32_t>(i % 4)});
  const RoutingTrace trace = OneLayerTrace(4, 1, seq);
  const ExpertCacheShape shape = ExpertCacheShape::Uniform(1, 4, 1, 3);
  auto lru = Make(ExpertPolicyKind::kLru, shape);
  auto min = MakeBeladyPolicy(shape, trace);
  std::vector<uint32_t> min_hits;
  uint32_t lru_total = 0;
  for (size_t t = 0; t < seq.size(); ++t) {
    lru_total += Step(*lru, seq[t]);
    if (Step(*min, seq[t]) == 1) min_hits.push_back(static_cast<uint32_t>(t));
  }
  EXPECT_EQ(lru_total, 0u);
  EXPECT_EQ(min_hits, (std::vector<uint32_t>{4, 5, 7, 8, 10, 11}));
}

TEST(BeladyPolicy, EvictsTheFurthestNextUseNotRoutedNow) {
  // k = 2, 3 slots. After {0,1},{2,0}: cache {0,1,2}. Token {3,1} must evict
  // 0 or 2 (1 is routed): 0 comes back at t = 3, 2 never; MIN evicts 2.
  const std::vector<std::vector<uint32_t>> seq = {{0, 1}, {2, 0}, {3, 1}, {0, 3}};
  const RoutingTrace trace = OneLayerTrace(4, 2, seq);
  auto min = MakeBeladyPolicy(ExpertCacheShape::Uniform(1, 4, 2, 3), trace);
  std::vector<uint32_t> evicted;
  uint32_t hits = 0;
  for (const auto& tok : seq) hits += Step(*min, tok, &evicted);
  EXPECT_EQ(evicted, std::vector<uint32_t>{2});
  EXPECT_EQ(hits, 1u + 1u + 2u);
}

TEST(BeladyPolicy, IsNeverBeatenOnRandomTraces) {
  RoutingModel model;
  model.layer = {
      LayerRoutingModel{},
      LayerRoutingModel{.zipf_exponent = 1.0, .reuse_prob = 0.3, .reuse_tail = 0.5},
      LayerRoutingModel{
          .zipf_exponent = 0.5, .zipf_shift = 0.1, .reuse_prob = 0.7, .reuse_tail = 0.2}};
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    GenerateOptions opt;
    opt.n_layer = 3;
    opt.n_expert = 12;
    opt.top_k = 3;
    opt.n_token = 150;
    opt.seed = seed;
    absl::StatusOr<RoutingTrace> trace = GenerateTrace(model, opt);
    ASSERT_TRUE(trace.ok()) << trace.status();
    for (uint32_t slots : {3u, 4u, 6u, 9u, 12u}) {
      const ExpertCacheShape shape = ExpertCacheShape::Uniform(3, 12, 3, slots);
      auto min = MakeBeladyPolicy(shape, *trace);
      const ReplayTally best = ReplayTrace(*trace, *min, PrefetchModel{});
      for (const ExpertPolicyKind kind : AllExpertPolicyKinds()) {
        auto p = Make(kind, shape);
        const ReplayTally got = ReplayTrace(*trace, *p, PrefetchModel{});
        for (uint32_t l = 0; l < 3; ++l) {
          EXPECT_LE(got.layer[l].hits, best.layer[l].hits)
              << ExpertPolicyName(kind) << " seed " << seed << " slots " << slots << " layer " << l;
          // Every miss is one copy; MIN makes the fewest.
          EXPECT_GE(got.layer[l].copies, best.layer[l].copies);
        }
      }
    }
  }
}

TEST(ExpertCachePolicy, AdaptiveFollowsTheBetterOfRecencyAndFrequency) {
  // Popularity only (LFU's regime) and strong reuse of recent tokens (LRU's
  // regime): the adaptive policy must be close to the better one in both.
  struct Case {
    double zipf, reuse_prob, reuse_tail;
  };
  for (const Case c : {Case{0.9, 0.0, 0.0}, Case{0.5, 0.6, 0.5}}) {
    RoutingModel model;
    model.layer = {LayerRoutingModel{
        .zipf_exponent = c.zipf, .reuse_prob = c.reuse_prob, .reuse_tail = c.reuse_tail}};
    GenerateOptions opt;
    opt.n_layer = 4;
    opt.n_expert = 64;
    opt.top_k = 4;
    opt.n_token = 1200;
    absl::StatusOr<RoutingTrace> trace = GenerateTrace(model, opt);
    ASSERT_TRUE(trace.ok());
    const ExpertCacheShape shape = ExpertCacheShape::Uniform(4, 64, 4, 8);
    auto rate = [&](ExpertPolicyKind kind) {
      auto p = Make(kind, shape);
      return ReplayTrace(*trace, *p, PrefetchModel{}).Total().hit_rate();
    };
    const double lru = rate(ExpertPolicyKind::kLru);
    const double lfu = rate(ExpertPolicyKind::kLfu);
    EXPECT_GE(rate(ExpertPolicyKind::kAdaptive), 0.98 * std::max(lru, lfu))
        << "zipf " << c.zipf << " reuse " << c.reuse_prob << ": lru " << lru << " lfu " << lfu;
  }
}

TEST(ExpertCachePolicy, RoutedPinnedAndPrefetchedExpertsAreNotEvicted) {
  for (const ExpertPolicyKind kind : AllExpertPolicyKinds()) {
    auto p = Make(kind, ExpertCacheShape::Uniform(1, 10, 2, 4));
    Step(*p, {0, 1});
    Step(*p, {2, 3});  // full: {0,1,2,3}
    p->Pin(0, 0);
    p->Pin(0, 1);
    // Routed now: 2 and 4; 0 and 1 pinned; only 3 may go.
    EXPECT_EQ(p->Route(0, std::vector<uint32_t>{2, 4}), 1u);
    EXPECT_EQ(p->ChooseVictim(0), 3u) << ExpertPolicyName(kind);
    SlotGrant g = p->Admit(0, 4);
    EXPECT_EQ(g.evicted_expert, 3u);
    // Full and everything protected or pinned: no slot.
    EXPECT_EQ(p->ChooseVictim(0), kNoExpert);
    p->Unpin(0, 0);
    p->Unpin(0, 1);
    // Prefetch for the next step ends the protection of this step's
    // experts; 5 and 6 each take some slot, but the second never the
    // first's, which is protected until the next Route.
    g = p->Prefetch(0, 5);
    ASSERT_NE(g.slot, kNoSlot) << ExpertPolicyName(kind);
    const uint32_t first_victim = g.evicted_expert;
    g = p->Prefetch(0, 6);
    ASSERT_NE(g.slot, kNoSlot);
    EXPECT_NE(g.evicted_expert, 5u);
    EXPECT_NE(g.evicted_expert, first_victim);
    EXPECT_TRUE(p->Resident(0, 5));
    EXPECT_TRUE(p->Resident(0, 6));
    // Routed: the prefetched hits count as such.
    EXPECT_EQ(p->Route(0, std::vector<uint32_t>{5, 6}), 2u);
    EXPECT_EQ(p->counters(0).prefetch_hits, 2u);
    EXPECT_EQ(p->counters(0).prefetches, 2u);
    EXPECT_LE(p->resident_count(0), 4u);
  }
}

TEST(ExpertCachePolicy, SlotsAreUniqueAndBudgetsMove) {
  auto p = Make(ExpertPolicyKind::kAdaptive, ExpertCacheShape::Uniform(2, 8, 2, 4));
  std::vector<int32_t> seen;
  for (uint32_t l = 0; l < 2; ++l) {
    for (uint32_t t = 0; t < 2; ++t) {
      const std::vector<uint32_t> tok = {2 * t, 2 * t + 1};
      p->Route(l, tok);
      for (const uint32_t e : tok) seen.push_back(p->Admit(l, e).slot);
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Layer 0 gives two slots to layer 1: layer 1's next misses take layer
  // 0's experts' slots, not its own.
  ASSERT_TRUE(p->SetSlotBudgets(std::vector<uint32_t>{2, 6}).ok());
  p->Route(1, std::vector<uint32_t>{4, 5});
  const SlotGrant a = p->Admit(1, 4);
  const SlotGrant b = p->Admit(1, 5);
  EXPECT_EQ(a.evicted_layer, 0u);
  EXPECT_EQ(b.evicted_layer, 0u);
  EXPECT_EQ(p->resident_count(0), 2u);
  EXPECT_EQ(p->resident_count(1), 6u);
  // Bad budgets are refused with a reason.
  EXPECT_FALSE(p->SetSlotBudgets(std::vector<uint32_t>{4, 5}).ok());  // pool size
  EXPECT_FALSE(p->SetSlotBudgets(std::vector<uint32_t>{1, 7}).ok());  // below top_k
  EXPECT_FALSE(p->SetSlotBudgets(std::vector<uint32_t>{8}).ok());     // layer count
}

TEST(ExpertCachePolicy, ShapeValidation) {
  EXPECT_TRUE(ExpertCacheShape::Uniform(48, 128, 8, 16).Validate().ok());
  EXPECT_FALSE(ExpertCacheShape::Uniform(0, 128, 8, 16).Validate().ok());
  EXPECT_FALSE(ExpertCacheShape::Uniform(4, 8, 9, 8).Validate().ok());
  const absl::Status s = ExpertCacheShape::Uniform(4, 128, 8, 4).Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("budget of 4 slots"), absl::string_view::npos) << s;
  EXPECT_FALSE(
      MakeExpertCachePolicy(ExpertPolicyKind::kLru, ExpertCacheShape::Uniform(4, 128, 8, 4)).ok());
  EXPECT_FALSE(ParseExpertPolicyKind("fifo").ok());
  for (const ExpertPolicyKind kind : AllExpertPolicyKinds()) {
    EXPECT_EQ(*ParseExpertPolicyKind(ExpertPolicyName(kind)), kind);
  }
  EXPECT_FALSE(MakeLrfuPolicy(ExpertCacheShape::Uniform(1, 8, 2, 4), 0).ok());
}

TEST(ExpertCachePolicy, DeterministicAcrossRuns) {
  RoutingModel model;
  model.layer = {LayerRoutingModel{.zipf_exponent = 0.7, .reuse_prob = 0.4, .reuse_tail = 0.5}};
  GenerateOptions opt;
  opt.n_layer = 2;
  opt.n_expert = 32;
  opt.top_k = 4;
  opt.n_token = 300;
  absl::StatusOr<RoutingTrace> trace = GenerateTrace(model, opt);
  ASSERT_TRUE(trace.ok());
  for (const ExpertPolicyKind kind : AllExpertPolicyKinds()) {
    const ExpertCacheShape shape = ExpertCacheShape::Uniform(2, 32, 4, 8);
    auto a = Make(kind, shape);
    auto b = Make(kind, shape);
    PrefetchModel pf;
    pf.enabled = true;
    const ReplayTally ta = ReplayTrace(*trace, *a, pf);
    const ReplayTally tb = ReplayTrace(*trace, *b, pf);
    EXPECT_EQ(ta.Total().hits, tb.Total().hits);
    EXPECT_EQ(ta.Total().copies, tb.Total().copies);
    for (uint32_t e = 0; e < 32; ++e) EXPECT_EQ(a->Lookup(1, e), b->Lookup(1, e));
  }
}

}  // namespace
}  // namespace moetier
