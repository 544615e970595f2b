// ServedMin is Belady's MIN over served passes: equal to an exhaustive
// search over every choice of victim on small random cases (batches larger
// than a layer's slots too) and never below what LRU gets; the tally
// counts only the measured passes.
#include "served_min.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace moetier {
namespace {

// The most counted hits any choice of admissions and victims achieves.
uint64_t ExhaustiveBest(const std::vector<ServedPass>& passes, const std::vector<uint32_t>& budgets,
                        size_t i, std::vector<std::set<uint32_t>>& cache) {
  if (i == passes.size()) return 0;
  const ServedPass& p = passes[i];
  std::set<uint32_t>& c = cache[p.layer];
  uint64_t hits = 0;
  std::vector<uint32_t> misses;
  for (const uint32_t e : p.experts) {
    if (c.count(e)) {
      hits += p.counted;
    } else {
      misses.push_back(e);
    }
  }
  // Every way to admit the misses in order (demand paging): a free slot, or
  // any resident this pass does not use; without either, none.
  uint64_t best = 0;
  const std::set<uint32_t> used(p.experts.begin(), p.experts.end());
  auto place = [&](auto&& self, size_t m) -> void {
    if (m == misses.size()) {
      best = std::max(best, ExhaustiveBest(passes, budgets, i + 1, cache));
      return;
    }
    const uint32_t e = misses[m];
    if (c.size() >= budgets[p.layer] &&
        std::all_of(c.begin(), c.end(), [&](uint32_t v) { return used.count(v) > 0; })) {
      self(self, m + 1);
      return;
    }
    if (c.size() < budgets[p.layer]) {
      c.insert(e);
      self(self, m + 1);
      c.erase(e);
      return;
    }
    const std::vector<uint32_t> residents(c.begin(), c.end());
    for (const uint32_t v : residents) {
      if (used.count(v)) continue;
      c.erase(v);
      c.insert(e);
      self(self, m + 1);
      c.erase(e);
      c.insert(v);
    }
  };
  // In every order: when a batch outnumbers the slots, which misses get
  // one is a choice too.
  std::sort(misses.begin(), misses.end());
  do {
    place(place, 0);
  } while (std::next_permutation(misses.begin(), misses.end()));
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
    const uint32_t n_expert = 3 + rng() % 3;
    std::vector<uint32_t> budgets;
    for (uint32_t l = 0; l < n_layer; ++l) budgets.push_back(1 + rng() % 2);
    std::vector<ServedPass> passes;
    const int n = 5 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i) {
      ServedPass p;
      p.layer = rng() % n_layer;
      p.counted = true;
      std::set<uint32_t> s;
      const uint32_t k = 1 + rng() % 3;
      while (s.size() < k) s.insert(rng() % n_expert);
      p.experts.assign(s.begin(), s.end());
      passes.push_back(p);
    }
    std::vector<std::set<uint32_t>> cache(n_layer);
    const uint64_t best = ExhaustiveBest(passes, budgets, 0, cache);
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
  // Budget 2 over A B C A B C A B C: MIN evicts the one used furthest
  // ahead; the tally starts at the fourth pass.
  std::vector<ServedPass> passes;
  for (int i = 0; i < 9; ++i) passes.push_back({0, i >= 3, {static_cast<uint32_t>(i % 3)}});
  const MinTally all = ServedMin(passes, std::vector<uint32_t>{2});
  for (ServedPass& p : passes) p.counted = true;
  const MinTally whole = ServedMin(passes, std::vector<uint32_t>{2});
  // Misses: A, B, C (evicts B), B (evicts A)... one hit in two after the first two.
  EXPECT_EQ(whole.requests, 9u);
  EXPECT_EQ(whole.hits, 3u);
  EXPECT_EQ(all.requests, 6u);
  EXPECT_EQ(all.hits, 3u);
  EXPECT_DOUBLE_EQ(all.hit_rate(), 0.5);
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
