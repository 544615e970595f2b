// ServedMin is Belady's MIN with bypass over served passes: equal to an
// exhaustive search over every set a cache could keep after each pass on
// small random cases (batches larger than a layer's slots too), never below
// LRU, and the tally counts only the measured passes.
#include "served_min.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace moetier {
namespace {

// The most counted hits of any cache: after each pass, any subset of at
// most `budget` of the layer's residents and the pass's experts.
uint64_t ExhaustiveBest(const std::vector<ServedPass>& passes, const std::vector<uint32_t>& budgets,
                        size_t i, std::vector<std::set<uint32_t>>& cache,
                        std::map<std::string, uint64_t>& memo) {
  if (i == passes.size()) return 0;
  std::string state = std::to_string(i);
  for (const std::set<uint32_t>& c : cache) {
    state += '|';
    for (const uint32_t e : c) state += std::to_string(e) + ',';
  }
  if (const auto it = memo.find(state); it != memo.end()) return it->second;
  const ServedPass& p = passes[i];
  const std::set<uint32_t> before = cache[p.layer];
  uint64_t hits = 0;
  for (const uint32_t e : p.experts) hits += p.counted && before.count(e) > 0;
  std::set<uint32_t> pool = before;
  pool.insert(p.experts.begin(), p.experts.end());
  const std::vector<uint32_t> items(pool.begin(), pool.end());
  uint64_t best = 0;
  for (uint32_t mask = 0; mask < (1u << items.size()); ++mask) {
    if (static_cast<uint32_t>(__builtin_popcount(mask)) > budgets[p.layer]) continue;
    std::set<uint32_t> kept;
    for (size_t b = 0; b < items.size(); ++b) {
      if (mask & (1u << b)) kept.insert(items[b]);
    }
    cache[p.layer] = kept;
    best = std::max(best, ExhaustiveBest(passes, budgets, i + 1, cache, memo));
  }
  cache[p.layer] = before;
  memo[state] = hits + best;
  return hits + best;
}

uint64_t LruHits(const std::vector<ServedPass>& passes, const std::vector<uint32_t>& budgets) {
  std::vector<std::map<uint32_t, size_t>> last(budgets.size());  // expert -> last use
  uint64_t hits = 0;
  for (size_t i = 0; i < passes.size(); ++i) {
    const ServedPass& p = passes[i];
    auto& c = last[p.layer];
    for (const uint32_t e : p.experts) {
      if (c.count(e)) {
        hits += p.counted;
        c[e] = i;  // used now: no victim for this pass's misses
      }
    }
    for (const uint32_t e : p.experts) {
      if (!c.count(e) && c.size() >= budgets[p.layer]) {
        auto victim = c.end();
        for (auto it = c.begin(); it != c.end(); ++it) {
          if (it->second == i) continue;
          if (victim == c.end() || it->second < victim->second) victim = it;
        }
        if (victim == c.end()) continue;
        c.erase(victim);
      }
      c[e] = i;
    }
  }
  return hits;
}

TEST(ServedMinTest, EqualsAnExhaustiveSearchOnSmallCases) {
  std::mt19937 rng(7);
  for (int round = 0; round < 1000; ++round) {
    const uint32_t n_layer = 1 + rng() % 2;
    const uint32_t n_expert = 3 + rng() % 4;
    std::vector<uint32_t> budgets;
    for (uint32_t l = 0; l < n_layer; ++l) budgets.push_back(1 + rng() % 3);
    std::vector<ServedPass> passes;
    const int n = 5 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      ServedPass p;
      p.layer = rng() % n_layer;
      p.counted = true;
      std::set<uint32_t> s;
      const uint32_t k = 1 + rng() % std::min<uint32_t>(4, n_expert);
      while (s.size() < k) s.insert(rng() % n_expert);
      p.experts.assign(s.begin(), s.end());
      passes.push_back(p);
    }
    std::vector<std::set<uint32_t>> cache(n_layer);
    std::map<std::string, uint64_t> memo;
    const uint64_t best = ExhaustiveBest(passes, budgets, 0, cache, memo);
    const MinTally min = ServedMin(passes, budgets);
    std::string text;
    for (const ServedPass& p : passes) {
      text += "L" + std::to_string(p.layer) + (p.counted ? "*" : "") + "{";
      for (const uint32_t e : p.experts) text += std::to_string(e) + ",";
      text += "} ";
    }
    for (const uint32_t b : budgets) text += " b" + std::to_string(b);
    ASSERT_EQ(min.hits, best) << "round " << round << ": " << text;
    EXPECT_GE(min.hits, LruHits(passes, budgets));
  }
}

TEST(ServedMinTest, CountsOnlyTheMeasuredPasses) {
  // Budget 2 over A B C A B C A B C: MIN keeps the two used soonest; the
  // tally starts at the fourth pass.
  std::vector<ServedPass> passes;
  for (int i = 0; i < 9; ++i) passes.push_back({0, i >= 3, {static_cast<uint32_t>(i % 3)}});
  const MinTally all = ServedMin(passes, std::vector<uint32_t>{2});
  for (ServedPass& p : passes) p.counted = true;
  const MinTally whole = ServedMin(passes, std::vector<uint32_t>{2});
  // A and B are kept and C never is: every A and B after the first hits.
  EXPECT_EQ(whole.requests, 9u);
  EXPECT_EQ(whole.hits, 4u);
  EXPECT_EQ(all.requests, 6u);
  EXPECT_EQ(all.hits, 4u);
  EXPECT_DOUBLE_EQ(all.hit_rate(), 4.0 / 6);
}

TEST(ServedMinTest, TheRecorderKeepsDistinctExpertsOfArmedPasses) {
  ServedPassRecorder recorder;
  const std::vector<int32_t> ids = {3, 1, 1, 3, 2, 1};
  RoutingBatch batch{.layer = 2, .n_layer = 4, .n_expert = 8, .top_k = 2, .pos0 = 0,
                     .n_tokens = 3, .experts = ids, .weights = {}};
  ASSERT_TRUE(recorder.OnRouting(batch).ok());
  EXPECT_TRUE(recorder.passes().empty()) << "not armed yet";
  recorder.Record(true);
  ASSERT_TRUE(recorder.OnRouting(batch).ok());
  recorder.Stop();
  ASSERT_TRUE(recorder.OnRouting(batch).ok());
  ASSERT_EQ(recorder.passes().size(), 1u);
  EXPECT_EQ(recorder.passes()[0].layer, 2u);
  EXPECT_TRUE(recorder.passes()[0].counted);
  EXPECT_EQ(recorder.passes()[0].experts, (std::vector<uint32_t>{1, 2, 3}));
}

}  // namespace
}  // namespace moetier
