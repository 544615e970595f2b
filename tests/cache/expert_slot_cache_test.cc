#include "cache/expert_slot_cache.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace moetier {
namespace {

constexpr uint64_t kSlot = 1000;

// 3 layers x 8 experts, top-2, slots of 1000 bytes; `slots` in the pool.
ExpertSlotCacheOptions Options(uint32_t slots, MissPolicy miss = MissPolicy::kCopy) {
  ExpertSlotCacheOptions o;
  o.n_layer = 3;
  o.n_expert = 8;
  o.top_k = 2;
  o.expert_bytes = {900, 1000, 800};
  o.slot_bytes = kSlot;
  o.pool_bytes = slots * kSlot;
  o.policy = ExpertPolicyKind::kLru;
  o.miss_policy = miss;
  return o;
}

std::unique_ptr<ExpertSlotCache> Make(const ExpertSlotCacheOptions& o) {
  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> cache = ExpertSlotCache::Create(o);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

// One decode token at `layer`: Route, Place (one row each), Release.
std::vector<ExpertPlacement> Token(ExpertSlotCache& cache, uint32_t layer,
                                   std::vector<int32_t> experts) {
  cache.Route(layer, experts);
  std::vector<uint32_t> rows(experts.size(), 1);
  std::vector<ExpertPlacement> out(experts.size());
  cache.Place(layer, experts, rows, out);
  cache.Release(layer);
  return out;
}

TEST(ExpertSlotCacheTest, TooSmallAPoolSaysHowMuchItNeeds) {
  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> cache = ExpertSlotCache::Create(Options(5));
  ASSERT_FALSE(cache.ok());
  EXPECT_NE(cache.status().message().find("top_k = 2 slots per layer, 6 in all"),
            absl::string_view::npos)
      << cache.status();
  ExpertSlotCacheOptions o = Options(6);
  o.static_host_layers = 1;  // 2 device layers x 8 experts = 16 slots
  cache = ExpertSlotCache::Create(o);
  ASSERT_FALSE(cache.ok());
  EXPECT_NE(cache.status().message().find("--n-cpu-moe 1"), absl::string_view::npos);
  o = Options(6);
  o.expert_bytes[1] = kSlot + 1;
  EXPECT_FALSE(ExpertSlotCache::Create(o).ok());
  o = Options(6);
  o.static_host_layers = 4;
  EXPECT_FALSE(ExpertSlotCache::Create(o).ok());
}

TEST(ExpertSlotCacheTest, PoolIsSpreadOverLayersRemainderFirst) {
  std::unique_ptr<ExpertSlotCache> cache = Make(Options(8));
  EXPECT_EQ(cache->n_slots(), 8u);
  EXPECT_EQ(cache->slot_budget(0), 3u);
  EXPECT_EQ(cache->slot_budget(1), 3u);
  EXPECT_EQ(cache->slot_budget(2), 2u);
  // More than every expert: capped at every expert.
  EXPECT_EQ(Make(Options(100))->n_slots(), 24u);
}

// A layer without routed experts (glm4moe's dense first layer) has
// expert_bytes 0: it gets no slots, counts toward no minimum, and static
// placement skips it.
TEST(ExpertSlotCacheTest, ALayerWithoutExpertsGetsNoSlots) {
  ExpertSlotCacheOptions o = Options(4);
  o.expert_bytes = {0, 1000, 800};
  EXPECT_EQ(MinDynamicPoolBytes(o), 2 * 2 * kSlot);
  EXPECT_EQ(FullPoolBytes(o), 2 * 8 * kSlot);
  std::unique_ptr<ExpertSlotCache> cache = Make(o);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->slot_budget(0), 0u);
  EXPECT_EQ(cache->slot_budget(1), 2u);
  EXPECT_EQ(cache->slot_budget(2), 2u);
  EXPECT_EQ(cache->max_group(), 2u);
  EXPECT_NE(cache->Describe().find("2-2 per layer"), std::string::npos) << cache->Describe();
  EXPECT_EQ(Make([&] {
              ExpertSlotCacheOptions big = o;
              big.pool_bytes = 100 * kSlot;
              return big;
            }())
                ->n_slots(),
            16u);

  // Static placement with no host layers: layers 1 and 2 own slots 0-15.
  o.pool_bytes = 16 * kSlot;
  o.static_host_layers = 0;
  EXPECT_EQ(StaticPoolBytes(o, 0), 16 * kSlot);
  cache = Make(o);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->InitialFills().size(), 16u);
  EXPECT_EQ(cache->slot_budget(0), 0u);
  EXPECT_FALSE(cache->Resident(0, 3));
  const std::vector<ExpertPlacement> at1 = Token(*cache, 1, {3, 5});
  EXPECT_EQ(at1[0].slot, 3);
  EXPECT_EQ(at1[1].slot, 5);
  const std::vector<ExpertPlacement> at2 = Token(*cache, 2, {0, 7});
  EXPECT_EQ(at2[0].slot, 8);
  EXPECT_EQ(at2[1].slot, 15);

  // A model of such layers only has nothing to cache.
  o = Options(4);
  o.expert_bytes = {0, 0, 0};
  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> none = ExpertSlotCache::Create(o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no layer has routed experts"), absl::string_view::npos);
}

TEST(ExpertSlotCacheTest, MissesAreFilledOnceThenHit) {
  std::unique_ptr<ExpertSlotCache> cache = Make(Options(6));
  std::vector<ExpertPlacement> p = Token(*cache, 1, {3, 5});
  ASSERT_EQ(p[0].site, ExpertSite::kSlot);
  ASSERT_EQ(p[1].site, ExpertSite::kSlot);
  EXPECT_TRUE(p[0].fill && p[1].fill);
  EXPECT_NE(p[0].slot, p[1].slot);
  EXPECT_TRUE(cache->Resident(1, 3) && cache->Resident(1, 5));
  const std::vector<ExpertPlacement> again = Token(*cache, 1, {5, 3});
  EXPECT_EQ(again[0].slot, p[1].slot);
  EXPECT_EQ(again[1].slot, p[0].slot);
  EXPECT_FALSE(again[0].fill || again[1].fill);
  const ExpertSlotCacheStats& s = cache->stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.demand_fills, 2u);
  EXPECT_EQ(s.misses_on_host, 0u);
  EXPECT_EQ(s.bytes_filled, 2u * 1000u);  // layer 1's experts are 1000 bytes
}

TEST(ExpertSlotCacheTest, AFullLayerEvictsItsLeastRecentlyUsedExpert) {
  std::unique_ptr<ExpertSlotCache> cache = Make(Options(6));  // 2 slots per layer
  const int32_t slot_a = Token(*cache, 0, {0, 1})[0].slot;
  Token(*cache, 0, {1, 2});  // 0 is the victim: 1 was just routed
  EXPECT_FALSE(cache->Resident(0, 0));
  EXPECT_TRUE(cache->Resident(0, 1));
  EXPECT_TRUE(cache->Resident(0, 2));
  EXPECT_EQ(cache->stats().evictions, 1u);
  // The victim's slot went to the newcomer.
  EXPECT_EQ(Token(*cache, 0, {2, 1})[0].slot, slot_a);
}

TEST(ExpertSlotCacheTest, PinnedExpertsAreNeverVictimsSoOverflowGoesToTheHost) {
  std::unique_ptr<ExpertSlotCache> cache = Make(Options(6));  // 2 slots per layer
  // A prefill batch routes to three experts of layer 2 in one group.
  const std::vector<int32_t> topk = {0, 1, 1, 2};
  cache->Route(2, topk);
  const std::vector<int32_t> experts = {0, 1, 2};
  const std::vector<uint32_t> rows = {1, 2, 1};
  std::vector<ExpertPlacement> out(3);
  cache->Place(2, experts, rows, out);
  int on_slots = 0, on_host = 0;
  std::set<int32_t> slots;
  for (const ExpertPlacement& p : out) {
    if (p.site == ExpertSite::kSlot) {
      ++on_slots;
      slots.insert(p.slot);
    } else {
      ++on_host;
    }
  }
  EXPECT_EQ(on_slots, 2);
  EXPECT_EQ(on_host, 1);
  EXPECT_EQ(slots.size(), 2u);
  EXPECT_EQ(cache->stats().misses_on_host, 1u);
  cache->Release(2);
}

TEST(ExpertSlotCacheTest, ABatchIsPlacedInWavesThatEachFit) {
  std::unique_ptr<ExpertSlotCache> cache = Make(Options(6));  // 2 slots per layer
  EXPECT_EQ(cache->max_group(), 2u);
  const std::vector<int32_t> topk = {0, 1, 2, 3};  // two tokens
  cache->Route(0, topk);
  const std::vector<uint32_t> rows = {1, 1};
  for (const std::vector<int32_t>& wave : {std::vector<int32_t>{0, 1}, {2, 3}}) {
    std::vector<ExpertPlacement> out(2);
    cache->Place(0, wave, rows, out);
    for (const ExpertPlacement& p : out) {
      EXPECT_EQ(p.site, ExpertSite::kSlot);
      EXPECT_TRUE(p.fill);
    }
    cache->Release(0);
  }
  EXPECT_EQ(cache->stats().misses_on_host, 0u);
  EXPECT_EQ(cache->stats().demand_fills, 4u);
  EXPECT_TRUE(cache->Resident(0, 2) && cache->Resident(0, 3));
}

TEST(ExpertSlotCacheTest, HostMissPolicyComputesMissesOnTheHostAndPrefetchFills) {
  ExpertSlotCacheOptions o = Options(6, MissPolicy::kHost);
  o.prefetch = true;
  std::unique_ptr<ExpertSlotCache> cache = Make(o);
  std::vector<ExpertPlacement> p = Token(*cache, 0, {4, 6});
  EXPECT_EQ(p[0].site, ExpertSite::kHost);
  EXPECT_EQ(p[1].site, ExpertSite::kHost);
  EXPECT_FALSE(cache->Resident(0, 4));
  // Layer 1 predicted: 4 and 7. Both fill (free slots).
  std::vector<SlotFill> fills(2);
  const std::vector<int32_t> predicted = {4, 7};
  ASSERT_EQ(cache->Prefetch(1, predicted, fills), 2u);
  EXPECT_EQ(fills[0].layer, 1u);
  EXPECT_EQ(fills[0].expert, 4u);
  EXPECT_EQ(fills[1].expert, 7u);
  // Layer 1 routes 7 and 2: 7 is a prefetch hit, 2 a host miss.
  p = Token(*cache, 1, {7, 2});
  EXPECT_EQ(p[0].site, ExpertSite::kSlot);
  EXPECT_EQ(p[0].slot, fills[1].slot);
  EXPECT_FALSE(p[0].fill);
  EXPECT_EQ(p[1].site, ExpertSite::kHost);
  const ExpertSlotCacheStats& s = cache->stats();
  EXPECT_EQ(s.prefetch_issued, 2u);
  EXPECT_EQ(s.prefetch_used, 1u);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.misses_on_host, 3u);
  EXPECT_EQ(s.hits, 1u);
  // Resident experts are not prefetched again.
  EXPECT_EQ(cache->Prefetch(1, predicted, fills), 0u);
}

TEST(ExpertSlotCacheTest, APrefetchEvictedUnusedCountsAsWasted) {
  ExpertSlotCacheOptions o = Options(6, MissPolicy::kCopy);
  std::unique_ptr<ExpertSlotCache> cache = Make(o);
  std::vector<SlotFill> fills(1);
  const std::vector<int32_t> predicted = {5};
  ASSERT_EQ(cache->Prefetch(0, predicted, fills), 1u);
  Token(*cache, 0, {1, 2});  // two misses need both of layer 0's slots
  Token(*cache, 0, {3, 1});  // and then one more: 5 is long gone
  EXPECT_FALSE(cache->Resident(0, 5));
  EXPECT_EQ(cache->stats().prefetch_issued, 1u);
  EXPECT_EQ(cache->stats().prefetch_used, 0u);
  EXPECT_EQ(cache->stats().prefetch_wasted, 1u);
}

TEST(ExpertSlotCacheTest, PrefetchOffDeclinesEverything) {
  ExpertSlotCacheOptions o = Options(6);
  o.prefetch = false;
  std::unique_ptr<ExpertSlotCache> cache = Make(o);
  std::vector<SlotFill> fills(2);
  const std::vector<int32_t> predicted = {1, 2};
  EXPECT_EQ(cache->Prefetch(0, predicted, fills), 0u);
  EXPECT_EQ(cache->stats().prefetch_issued, 0u);
}

TEST(ExpertSlotCacheTest, AutoFollowsTheCostModel) {
  ExpertSlotCacheOptions o = Options(6, MissPolicy::kAuto);
  o.cost.copy_bytes_per_s = 1e3;  // a second per expert: never worth it
  o.cost.host = {1e-3, 0};
  std::unique_ptr<ExpertSlotCache> slow_copy = Make(o);
  for (const ExpertPlacement& p : Token(*slow_copy, 0, {1, 2})) {
    EXPECT_EQ(p.site, ExpertSite::kHost);
  }
  o.cost.copy_bytes_per_s = 1e12;  // a nanosecond: always worth it
  std::unique_ptr<ExpertSlotCache> fast_copy = Make(o);
  for (const ExpertPlacement& p : Token(*fast_copy, 0, {1, 2})) {
    EXPECT_EQ(p.site, ExpertSite::kSlot);
    EXPECT_TRUE(p.fill);
  }
}

TEST(ExpertSlotCacheTest, StaticPlacementKeepsDeviceLayersWholeAndHostLayersOnTheHost) {
  ExpertSlotCacheOptions o = Options(100);
  o.static_host_layers = 1;
  std::unique_ptr<ExpertSlotCache> cache = Make(o);
  ASSERT_TRUE(cache->is_static());
  EXPECT_EQ(cache->n_slots(), 16u);
  const std::vector<SlotFill> fills = cache->InitialFills();
  ASSERT_EQ(fills.size(), 16u);
  std::set<int32_t> slots;
  for (const SlotFill& f : fills) {
    EXPECT_GE(f.layer, 1u);
    slots.insert(f.slot);
  }
  EXPECT_EQ(slots.size(), 16u);
  EXPECT_EQ(*slots.begin(), 0);
  EXPECT_EQ(*slots.rbegin(), 15);
  EXPECT_EQ(cache->stats().bytes_filled, 8u * 1000 + 8u * 800);
  for (const ExpertPlacement& p : Token(*cache, 0, {0, 7})) EXPECT_EQ(p.site, ExpertSite::kHost);
  const std::vector<ExpertPlacement> p = Token(*cache, 2, {0, 7});
  EXPECT_EQ(p[0].site, ExpertSite::kSlot);
  EXPECT_FALSE(p[0].fill);
  EXPECT_EQ(p[0].slot, 8);  // layer 2 is the second device layer
  EXPECT_EQ(p[1].slot, 15);
  EXPECT_FALSE(cache->Resident(0, 3));
  EXPECT_TRUE(cache->Resident(1, 3));
  std::vector<SlotFill> none(1);
  const std::vector<int32_t> predicted = {3};
  EXPECT_EQ(cache->Prefetch(0, predicted, none), 0u);
  EXPECT_EQ(cache->stats().hits, 2u);
  EXPECT_EQ(cache->stats().misses_on_host, 2u);
}

// Ranks of the 3 x 8 experts: layer 0 ranks 1..8 over experts 7..0, layer
// 1 knows only expert 4, layer 2 nothing.
std::vector<uint32_t> SampleRanks() {
  std::vector<uint32_t> ranks(24, 0);
  for (uint32_t e = 0; e < 8; ++e) ranks[e] = 8 - e;
  ranks[8 + 4] = 1;
  return ranks;
}

TEST(ExpertSlotCacheTest, AWarmStartFillsEachLayersBudgetWithItsHottestExperts) {
  for (const ExpertPolicyKind kind : AllExpertPolicyKinds()) {
    ExpertSlotCacheOptions o = Options(9);  // 3 slots per layer
    o.policy = kind;
    std::unique_ptr<ExpertSlotCache> cache = Make(o);
    ASSERT_NE(cache, nullptr);
    SCOPED_TRACE(cache->Describe());
    const std::vector<SlotFill> fills = cache->WarmFills(SampleRanks());
    ASSERT_EQ(fills.size(), 4u);
    std::set<int32_t> slots;
    for (const SlotFill& f : fills) slots.insert(f.slot);
    EXPECT_EQ(slots.size(), 4u) << "each fill has a slot of its own";
    // Layer 0: its three hottest, the coldest of them admitted first.
    EXPECT_EQ(fills[0].layer, 0u);
    EXPECT_EQ(fills[0].expert, 5u);
    EXPECT_EQ(fills[1].expert, 6u);
    EXPECT_EQ(fills[2].expert, 7u);
    EXPECT_EQ(fills[3].layer, 1u);
    EXPECT_EQ(fills[3].expert, 4u);
    for (uint32_t e = 0; e < 8; ++e) EXPECT_EQ(cache->Resident(0, e), e >= 5) << e;
    EXPECT_EQ(cache->stats().warm_fills, 4u);
    EXPECT_EQ(cache->stats().bytes_filled, 3u * 900u + 1000u);
    // The warm experts are hits; a miss in the full layer evicts one of
    // them, never an expert of another layer.
    const std::vector<ExpertPlacement> p = Token(*cache, 0, {7, 0});
    EXPECT_FALSE(p[0].fill);
    EXPECT_EQ(p[0].slot, fills[2].slot);
    EXPECT_TRUE(p[1].fill);
    EXPECT_EQ(cache->stats().hits, 1u);
    EXPECT_EQ(cache->stats().evictions, 1u);
    EXPECT_TRUE(cache->Resident(1, 4));
    // Warming again finds layer 0 full and nothing more ranked elsewhere.
    EXPECT_TRUE(cache->WarmFills(SampleRanks()).empty());
  }
}

TEST(ExpertSlotCacheTest, NoRanksOrStaticPlacementMeansNoWarmStart) {
  EXPECT_TRUE(Make(Options(9))->WarmFills({}).empty());
  EXPECT_TRUE(Make(Options(9))->WarmFills(std::vector<uint32_t>(24, 0)).empty());
  ExpertSlotCacheOptions o = Options(16);
  o.static_host_layers = 1;
  std::unique_ptr<ExpertSlotCache> cache = Make(o);
  ASSERT_NE(cache, nullptr);
  EXPECT_TRUE(cache->WarmFills(SampleRanks()).empty());
}

TEST(ExpertSlotCacheTest, ADiscardedFillIsNoLongerResident) {
  std::unique_ptr<ExpertSlotCache> cache = Make(Options(6));
  Token(*cache, 1, {2, 3});
  cache->Discard(1, 2);
  EXPECT_FALSE(cache->Resident(1, 2));
  const std::vector<ExpertPlacement> p = Token(*cache, 1, {2, 3});
  EXPECT_TRUE(p[0].fill);   // copied again
  EXPECT_FALSE(p[1].fill);  // still there
}

TEST(ExpertSlotCacheTest, DescribeNamesTheModeAndPolicies) {
  const std::string dynamic = Make(Options(8))->Describe();
  EXPECT_NE(dynamic.find("8 slots"), std::string::npos) << dynamic;
  EXPECT_NE(dynamic.find("policy lru"), std::string::npos) << dynamic;
  EXPECT_NE(dynamic.find("misses copy"), std::string::npos) << dynamic;
  ExpertSlotCacheOptions o = Options(100);
  o.static_host_layers = 2;
  const std::string fixed = Make(o)->Describe();
  EXPECT_NE(fixed.find("static placement"), std::string::npos) << fixed;
}

TEST(ExpertSlotCacheTest, AResizedCacheStartsEmptyWithTheCountersCarriedOn) {
  std::unique_ptr<ExpertSlotCache> cache = Make(Options(6));
  Token(*cache, 0, {1, 2});
  Token(*cache, 0, {1, 3});  // a hit on 1, a miss on 3 that evicts 2
  std::vector<SlotFill> fills(1);
  const std::vector<int32_t> predicted = {6};
  ASSERT_EQ(cache->Prefetch(1, predicted, fills), 1u);  // never used
  const ExpertSlotCacheStats before = cache->stats();
  ASSERT_EQ(before.hits, 1u);
  ASSERT_EQ(before.misses, 3u);
  ASSERT_EQ(before.prefetch_wasted, 0u);

  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> bigger =
      ResizedExpertSlotCache(*cache, 20 * kSlot + 999);  // whole slots only
  ASSERT_TRUE(bigger.ok()) << bigger.status();
  EXPECT_EQ((*bigger)->n_slots(), 20u);
  EXPECT_EQ((*bigger)->options().policy, ExpertPolicyKind::kLru);
  EXPECT_EQ((*bigger)->options().pool_bytes, 20 * kSlot + 999);
  for (uint32_t e = 0; e < 8; ++e) {
    EXPECT_FALSE((*bigger)->Resident(0, e));
    EXPECT_FALSE((*bigger)->Resident(1, e));
  }
  const ExpertSlotCacheStats& after = (*bigger)->stats();
  EXPECT_EQ(after.hits, before.hits);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.evictions, before.evictions);
  EXPECT_EQ(after.bytes_filled, before.bytes_filled);
  EXPECT_EQ(after.prefetch_issued, 1u);
  EXPECT_EQ(after.prefetch_wasted, 1u);  // dropped with the old pool
  // The old cache is untouched and keeps working.
  EXPECT_TRUE(cache->Resident(0, 1) && cache->Resident(0, 3));
  EXPECT_FALSE(Token(*cache, 0, {1, 3})[0].fill);
  // The new one fills on demand.
  EXPECT_TRUE(Token(**bigger, 0, {1, 3})[0].fill);
  EXPECT_EQ((*bigger)->stats().misses, before.misses + 2);
  // Beyond every expert: capped.
  EXPECT_EQ(ResizedExpertSlotCache(*cache, 1000 * kSlot).value()->n_slots(), 24u);
}

TEST(ExpertSlotCacheTest, AResizeBelowTheMinimumOrToZeroOrOfStaticPlacementIsRefused) {
  std::unique_ptr<ExpertSlotCache> cache = Make(Options(6));
  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> small =
      ResizedExpertSlotCache(*cache, 6 * kSlot - 1);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("top_k = 2 slots per layer, 6 in all: give at least "
                                          "1 MiB"),
            absl::string_view::npos)
      << small.status();
  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> zero = ResizedExpertSlotCache(*cache, 0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("restart the worker without --expert-cache-mib"),
            absl::string_view::npos)
      << zero.status();
  ExpertSlotCacheOptions o = Options(100);
  o.static_host_layers = 1;
  std::unique_ptr<ExpertSlotCache> fixed = Make(o);
  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> refused =
      ResizedExpertSlotCache(*fixed, 100 * kSlot);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("--n-cpu-moe 1"), absl::string_view::npos)
      << refused.status();
}

}  // namespace
}  // namespace moetier
