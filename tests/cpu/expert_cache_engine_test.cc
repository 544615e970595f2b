// The CPU engine behind the slot cache (cache/slot_cached_expert_source.h)
// computes exactly what it computes without one: for every cache size down
// to top_k slots per layer, every miss policy, prefetch on and off, and
// static placement, the logits are bit for bit those of the engine reading
// the mapping. The counters must add up, and a failing expert source must
// leave no half-filled slot behind.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "cache/slot_cached_expert_source.h"
#include "engine/mapped_expert_source.h"
#include "engine/cpu_engine.h"
#include "gguf/gguf_reader.h"
#include "gtest/gtest.h"
#include "model/architectures.h"

namespace moetier {
namespace {

const std::string kModel = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/small-q4_k_m.gguf";
const std::string kIds = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/small-q4_k_m.ids";
constexpr int kPrefill = 6;  // tokens of the first batch; the rest are decoded one by one

std::vector<int32_t> ReadIds() {
  std::ifstream in(kIds);
  std::vector<int32_t> ids;
  std::string part;
  while (std::getline(in, part, ',')) ids.push_back(std::stoi(part));
  return ids;
}

// Fails every Acquire from the `fail_at`-th on (counting from 1) while armed.
class FlakySource final : public ExpertWeightSource {
 public:
  explicit FlakySource(ExpertWeightSource& inner) : inner_(inner) {}
  absl::Status Acquire(int layer, std::span<const int32_t> experts,
                       std::span<ExpertMatrices> out) override {
    if (fail_at_ > 0 && ++calls_ >= fail_at_) {
      return absl::UnavailableError(absl::StrFormat("layer %d: the store went away", layer));
    }
    return inner_.Acquire(layer, experts, out);
  }
  void Release(int layer) override { inner_.Release(layer); }
  int max_experts_held() const override { return inner_.max_experts_held(); }
  void Arm(int fail_at) {
    fail_at_ = fail_at;
    calls_ = 0;
  }

 private:
  ExpertWeightSource& inner_;
  int fail_at_ = 0;
  int calls_ = 0;
};

// The mapping, ranked like a daemon's heat profile, counting the router's
// choices that reach it (through a cache in front of it, or directly).
class RankedSource final : public ExpertWeightSource {
 public:
  RankedSource(ExpertWeightSource& inner, int n_layer, int n_expert, std::vector<uint32_t> ranks)
      : inner_(inner),
        n_expert_(n_expert),
        ranks_(std::move(ranks)),
        uses_(static_cast<size_t>(n_layer) * n_expert, 0) {}
  absl::Status Acquire(int layer, std::span<const int32_t> experts,
                       std::span<ExpertMatrices> out) override {
    return inner_.Acquire(layer, experts, out);
  }
  void Release(int layer) override { inner_.Release(layer); }
  int max_experts_held() const override { return inner_.max_experts_held(); }
  void Route(int layer, std::span<const int32_t> topk_ids) override {
    for (const int32_t e : topk_ids) ++uses_[static_cast<size_t>(layer) * n_expert_ + e];
  }
  uint32_t WarmRank(int layer, int expert) const override {
    return ranks_.empty() ? 0 : ranks_[static_cast<size_t>(layer) * n_expert_ + expert];
  }
  // Token rows routed to each expert, [layer * n_expert + expert].
  const std::vector<uint64_t>& uses() const { return uses_; }

 private:
  ExpertWeightSource& inner_;
  int n_expert_;
  std::vector<uint32_t> ranks_;
  std::vector<uint64_t> uses_;
};

class ExpertCacheEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(kModel);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    gguf_ = gguf->release();
    absl::StatusOr<Model> model = LoadModel(*gguf_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = new Model(*std::move(model));
    ids_ = new std::vector<int32_t>(ReadIds());
    ASSERT_GT(ids_->size(), static_cast<size_t>(kPrefill) + 8);
    baseline_ = new std::vector<float>(Run(nullptr));
  }
  static void TearDownTestSuite() {
    delete baseline_;
    delete ids_;
    delete model_;
    delete gguf_;
  }

  // The logits of a prefill batch and then one decode step per token.
  static std::vector<float> Run(ExpertWeightSource* source, absl::Status* status = nullptr) {
    CpuEngineConfig config;
    config.max_ctx = 64;
    config.n_threads = 2;
    config.expert_source = source;
    absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(*model_, config);
    EXPECT_TRUE(engine.ok()) << engine.status();
    const size_t n_vocab = static_cast<size_t>(model_->hparams.n_vocab);
    std::vector<float> logits(ids_->size() * n_vocab);
    const std::span<const int32_t> ids(*ids_);
    absl::StatusOr<std::unique_ptr<Sequence>> seq = (*engine)->NewSequence();
    EXPECT_TRUE(seq.ok()) << seq.status();
    absl::Status s = (*engine)->Forward(**seq, ids.first(kPrefill), LogitRows::kAll, logits.data());
    for (size_t t = kPrefill; t < ids.size() && s.ok(); ++t) {
      s = (*engine)->Forward(**seq, ids.subspan(t, 1), LogitRows::kAll,
                             logits.data() + t * n_vocab);
    }
    if (status != nullptr) {
      *status = s;
    } else {
      EXPECT_TRUE(s.ok()) << s;
    }
    return logits;
  }

  static ExpertSlotCacheOptions Geometry() { return SlotCacheOptionsFor(RoutedExpertShapesOf(*model_), {}); }

  static std::unique_ptr<SlotCachedExpertSource> Cache(ExpertWeightSource& inner,
                                                       const HostSlotCacheOptions& options) {
    absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> cache =
        SlotCachedExpertSource::Create(inner, RoutedExpertShapesOf(*model_), options);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? *std::move(cache) : nullptr;
  }

  static bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }

  static GgufModel* gguf_;
  static Model* model_;
  static std::vector<int32_t>* ids_;
  static std::vector<float>* baseline_;
};
GgufModel* ExpertCacheEngineTest::gguf_ = nullptr;
Model* ExpertCacheEngineTest::model_ = nullptr;
std::vector<int32_t>* ExpertCacheEngineTest::ids_ = nullptr;
std::vector<float>* ExpertCacheEngineTest::baseline_ = nullptr;

TEST_F(ExpertCacheEngineTest, EveryDynamicSettingGivesTheSameLogitsBitForBit) {
  const ExpertSlotCacheOptions geometry = Geometry();
  const uint64_t sizes[] = {MinDynamicPoolBytes(geometry), FullPoolBytes(geometry) / 2,
                            FullPoolBytes(geometry)};
  for (const uint64_t pool : sizes) {
    for (const MissPolicy miss : {MissPolicy::kCopy, MissPolicy::kHost, MissPolicy::kAuto}) {
      for (const bool prefetch : {false, true}) {
        SCOPED_TRACE(absl::StrFormat("pool %u bytes, misses %s, prefetch %d", pool,
                                     MissPolicyName(miss), prefetch));
        MappedExpertSource mapped(model_->weights);
        HostSlotCacheOptions options;
        options.pool_bytes = pool;
        options.miss_policy = miss;
        options.prefetch = prefetch;
        std::unique_ptr<SlotCachedExpertSource> cache = Cache(mapped, options);
        ASSERT_NE(cache, nullptr);
        EXPECT_TRUE(SameBits(Run(cache.get()), *baseline_));
        const ExpertSlotCacheStats& s = cache->cache().stats();
        EXPECT_GT(s.hits + s.misses, 0u);
        EXPECT_EQ(s.misses, s.misses_on_host + s.demand_fills);
        EXPECT_LE(s.prefetch_used + s.prefetch_wasted, s.prefetch_issued);
        if (!prefetch) {
          EXPECT_EQ(s.prefetch_issued, 0u);
        }
        if (miss == MissPolicy::kHost || miss == MissPolicy::kAuto) {
          // Auto on the CPU: a copy only adds work, so never copy.
          EXPECT_EQ(s.demand_fills, 0u);
        }
        if (miss == MissPolicy::kCopy) {
          EXPECT_GT(s.demand_fills, 0u);
          // Copies actually went through the slots.
          EXPECT_GT(cache->copy_busy_ns(), 0u);
        }
        if (miss == MissPolicy::kCopy && pool == sizes[2]) {
          // Everything fits: each expert is missed at most once.
          EXPECT_EQ(s.evictions, 0u);
          EXPECT_LE(s.misses, uint64_t{geometry.n_layer} * geometry.n_expert);
          EXPECT_GT(s.hits, s.misses);
        }
        if (miss == MissPolicy::kCopy && pool == sizes[0]) {
          EXPECT_GT(s.evictions, 0u);
        }
        if (miss != MissPolicy::kCopy) {
          // Only prefetch fills a cache whose misses stay on the host.
          if (prefetch) {
            EXPECT_GT(s.prefetch_used, 0u);
            EXPECT_GE(s.hits, s.prefetch_used);
          } else {
            EXPECT_EQ(s.hits, 0u);
          }
        }
      }
    }
  }
}

TEST_F(ExpertCacheEngineTest, AWarmStartGivesTheSameLogitsAndMoreHits) {
  const int n_layer = model_->hparams.n_layer;
  const int n_expert = model_->hparams.n_expert;
  // Rank each layer's experts by how often this very input routes to them,
  // as a heat profile of earlier use would.
  MappedExpertSource mapped(model_->weights);
  RankedSource counting(mapped, n_layer, n_expert, {});
  EXPECT_TRUE(SameBits(Run(&counting), *baseline_));
  const std::vector<uint64_t>& uses = counting.uses();
  std::vector<uint32_t> ranks(uses.size(), 0);
  for (int l = 0; l < n_layer; ++l) {
    std::vector<int> order(static_cast<size_t>(n_expert));
    std::iota(order.begin(), order.end(), 0);
    const uint64_t* u = uses.data() + static_cast<size_t>(l) * n_expert;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return u[a] > u[b]; });
    for (int r = 0; r < n_expert && u[order[r]] > 0; ++r) {
      ranks[static_cast<size_t>(l) * n_expert + order[r]] = static_cast<uint32_t>(r + 1);
    }
  }
  HostSlotCacheOptions options;
  options.pool_bytes = FullPoolBytes(Geometry()) / 4;
  options.prefetch = false;
  RankedSource cold_inner(mapped, n_layer, n_expert, {});
  std::unique_ptr<SlotCachedExpertSource> cold = Cache(cold_inner, options);
  ASSERT_NE(cold, nullptr);
  EXPECT_TRUE(SameBits(Run(cold.get()), *baseline_));
  RankedSource warm_inner(mapped, n_layer, n_expert, ranks);
  std::unique_ptr<SlotCachedExpertSource> warm = Cache(warm_inner, options);
  ASSERT_NE(warm, nullptr);
  const uint64_t warm_fills = warm->cache().stats().warm_fills;
  EXPECT_GT(warm_fills, 0u);
  EXPECT_LE(warm_fills, warm->cache().n_slots());
  EXPECT_TRUE(SameBits(Run(warm.get()), *baseline_));
  EXPECT_EQ(cold->cache().stats().warm_fills, 0u);
  EXPECT_GT(warm->cache().stats().hits, cold->cache().stats().hits);
  // The router's every choice reaches the source behind the cache.
  EXPECT_EQ(warm_inner.uses(), uses);
  EXPECT_EQ(cold_inner.uses(), uses);
}

TEST_F(ExpertCacheEngineTest, StaticPlacementGivesTheSameLogitsBitForBit) {
  const int n_layer = model_->hparams.n_layer;
  for (const int host_layers : {0, n_layer / 2, n_layer}) {
    SCOPED_TRACE(absl::StrFormat("--n-cpu-moe %d", host_layers));
    MappedExpertSource mapped(model_->weights);
    HostSlotCacheOptions options;
    options.static_host_layers = host_layers;
    options.pool_bytes = StaticPoolBytes(Geometry(), host_layers);
    std::unique_ptr<SlotCachedExpertSource> cache = Cache(mapped, options);
    ASSERT_NE(cache, nullptr);
    EXPECT_TRUE(SameBits(Run(cache.get()), *baseline_));
    const ExpertSlotCacheStats& s = cache->cache().stats();
    if (host_layers == 0) {
      EXPECT_EQ(s.misses, 0u);
    }
    if (host_layers == n_layer) {
      EXPECT_EQ(s.hits, 0u);
    }
    if (host_layers == n_layer / 2) {
      EXPECT_GT(s.hits, 0u);
      EXPECT_GT(s.misses_on_host, 0u);
    }
    EXPECT_EQ(s.demand_fills, 0u);
    EXPECT_EQ(s.prefetch_issued, 0u);
  }
}

TEST_F(ExpertCacheEngineTest, AFailingSourceFailsTheForwardAndLeavesNoBadSlot) {
  MappedExpertSource mapped(model_->weights);
  FlakySource flaky(mapped);
  HostSlotCacheOptions options;
  options.pool_bytes = FullPoolBytes(Geometry()) / 2;
  options.miss_policy = MissPolicy::kCopy;
  std::unique_ptr<SlotCachedExpertSource> cache = Cache(flaky, options);
  ASSERT_NE(cache, nullptr);
  for (const int fail_at : {1, 3, 9, 17}) {
    flaky.Arm(fail_at);
    absl::Status status;
    Run(cache.get(), &status);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_NE(status.message().find("the store went away"), absl::string_view::npos);
  }
  // Whatever the failures left resident is whole: the next run is exact.
  flaky.Arm(0);
  EXPECT_TRUE(SameBits(Run(cache.get()), *baseline_));
}

TEST_F(ExpertCacheEngineTest, TooSmallACacheIsRefusedWithTheSizeItNeeds) {
  MappedExpertSource mapped(model_->weights);
  HostSlotCacheOptions options;
  options.pool_bytes = MinDynamicPoolBytes(Geometry()) - 1;
  const absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> cache =
      SlotCachedExpertSource::Create(mapped, RoutedExpertShapesOf(*model_), options);
  ASSERT_FALSE(cache.ok());
  EXPECT_NE(cache.status().message().find("slots per layer"), absl::string_view::npos)
      << cache.status();
}

// Between engine calls the cache is rebuilt at the new size: it starts
// empty, refills, and the logits stay those of the engine without a cache.
TEST_F(ExpertCacheEngineTest, ResizingKeepsTheLogitsBitForBit) {
  const ExpertSlotCacheOptions geometry = Geometry();
  const uint64_t slot = geometry.slot_bytes;
  MappedExpertSource mapped(model_->weights);
  HostSlotCacheOptions options;
  options.pool_bytes = MinDynamicPoolBytes(geometry);
  options.miss_policy = MissPolicy::kCopy;
  std::unique_ptr<SlotCachedExpertSource> cache = Cache(mapped, options);
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(SameBits(Run(cache.get()), *baseline_));
  uint64_t misses = cache->cache().stats().misses;

  // Bigger, smaller, between (rounded down to whole slots) and beyond every
  // expert (capped).
  const uint64_t min = MinDynamicPoolBytes(geometry);
  const uint64_t full = FullPoolBytes(geometry);
  const struct {
    uint64_t asked, in_effect;
  } steps[] = {{full, full}, {min, min}, {min + 3 * slot + slot / 2, min + 3 * slot},
               {2 * full, full}, {full / 2, full / 2 / slot * slot}};
  for (const auto& step : steps) {
    SCOPED_TRACE(absl::StrFormat("resize to %u bytes", step.asked));
    absl::StatusOr<uint64_t> bytes = cache->ResizeExpertCache(step.asked);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, step.in_effect);
    EXPECT_EQ(uint64_t{cache->cache().n_slots()} * slot, step.in_effect);
    for (uint32_t l = 0; l < geometry.n_layer; ++l) {
      for (uint32_t e = 0; e < geometry.n_expert; ++e) {
        EXPECT_FALSE(cache->cache().Resident(l, e)) << "the new cache starts empty";
      }
    }
    EXPECT_EQ(cache->cache().stats().misses, misses) << "the counters carry on";
    EXPECT_TRUE(SameBits(Run(cache.get()), *baseline_));
    EXPECT_GT(cache->cache().stats().misses, misses) << "the new cache refilled";
    misses = cache->cache().stats().misses;
  }
  // The same number of slots keeps the cache and what it holds.
  const uint32_t slots = cache->cache().n_slots();
  absl::StatusOr<uint64_t> same = cache->ResizeExpertCache(uint64_t{slots} * slot + slot - 1);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(*same, uint64_t{slots} * slot);
  bool any_resident = false;
  for (uint32_t e = 0; e < geometry.n_expert; ++e) any_resident |= cache->cache().Resident(0, e);
  EXPECT_TRUE(any_resident);
}

TEST_F(ExpertCacheEngineTest, ARefusedResizeLeavesTheOldCacheWorking) {
  const ExpertSlotCacheOptions geometry = Geometry();
  MappedExpertSource mapped(model_->weights);
  HostSlotCacheOptions options;
  options.pool_bytes = FullPoolBytes(geometry) / 2;
  options.miss_policy = MissPolicy::kCopy;
  std::unique_ptr<SlotCachedExpertSource> cache = Cache(mapped, options);
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(SameBits(Run(cache.get()), *baseline_));
  const uint32_t slots = cache->cache().n_slots();
  std::vector<uint8_t> resident;
  for (uint32_t l = 0; l < geometry.n_layer; ++l) {
    for (uint32_t e = 0; e < geometry.n_expert; ++e) {
      resident.push_back(cache->cache().Resident(l, e));
    }
  }

  const uint64_t min = MinDynamicPoolBytes(geometry);
  const uint64_t min_mib = (min + (1 << 20) - 1) >> 20;
  absl::StatusOr<uint64_t> small = cache->ResizeExpertCache(min - 1);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find(absl::StrFormat("give at least %u MiB", min_mib)),
            absl::string_view::npos)
      << small.status();
  absl::StatusOr<uint64_t> zero = cache->ResizeExpertCache(0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("without --expert-cache-mib"), absl::string_view::npos)
      << zero.status();

  // Same slots, same residents, and the next run hits them.
  EXPECT_EQ(cache->cache().n_slots(), slots);
  size_t i = 0;
  for (uint32_t l = 0; l < geometry.n_layer; ++l) {
    for (uint32_t e = 0; e < geometry.n_expert; ++e) {
      EXPECT_EQ(cache->cache().Resident(l, e), resident[i++] != 0);
    }
  }
  const uint64_t hits = cache->cache().stats().hits;
  EXPECT_TRUE(SameBits(Run(cache.get()), *baseline_));
  EXPECT_GT(cache->cache().stats().hits, hits);
}

TEST_F(ExpertCacheEngineTest, StaticPlacementRefusesToResize) {
  const int host_layers = model_->hparams.n_layer / 2;
  MappedExpertSource mapped(model_->weights);
  HostSlotCacheOptions options;
  options.static_host_layers = host_layers;
  options.pool_bytes = StaticPoolBytes(Geometry(), host_layers);
  std::unique_ptr<SlotCachedExpertSource> cache = Cache(mapped, options);
  ASSERT_NE(cache, nullptr);
  absl::StatusOr<uint64_t> resized = cache->ResizeExpertCache(FullPoolBytes(Geometry()));
  ASSERT_FALSE(resized.ok());
  EXPECT_EQ(resized.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(resized.status().message().find(absl::StrFormat("--n-cpu-moe %d", host_layers)),
            absl::string_view::npos)
      << resized.status();
  EXPECT_TRUE(cache->cache().is_static());
  EXPECT_TRUE(SameBits(Run(cache.get()), *baseline_));
}

}  // namespace
}  // namespace moetier
