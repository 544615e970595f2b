// The CUDA engine with its VRAM expert cache (engine/cuda_expert_cache.h)
// against the same engine with every expert resident, on the test vectors:
// a 6-token prompt, then one token per call.
//
// Every product goes through the GEMV (gemv_max_rows = max_batch), whose
// arithmetic per row does not depend on the batch or on where the weights
// sit, so:
// - miss policy copy (every expert computed from a slot holding the file's
//   bytes) must give the resident engine's logits bit for bit, for every
//   cache size, with prefetch on and off, with DMA from registered memory
//   and through the staging buffers, and from a source that overwrites its
//   bytes as soon as they are released (copies must be done by then);
// - where experts are computed on the host (miss policy cpu and auto,
//   static placement) the host kernels quantize the expert's activations to
//   8 bits as llama.cpp does (Q8_0 / Q8_K blocks: each element off by up to
//   1/254 of its block's largest magnitude) before each product. tests/data/vectors' README
//   measures what quantizing every product's activations costs against
//   exact logits: mean KL 1.1e-3 (tiny-q8_0) and 1.9e-2 (small-q4_k_m), and
//   single positions off by up to 10% of the logit range where a router
//   near-tie flips. Only the expert products are quantized here, but which
//   ones differs with the cache's state, so a flip may land on another
//   position: one flipped position of 24 alone is worth a mean KL of about
//   5e-3. The bounds are the CPU engine's against llama.cpp (mean KL 1e-2,
//   top-1 >= 90%) for tiny-q8_0 and 3e-2 / 85% for small-q4_k_m; on
//   tiny-q8_0 the greedy tokens must also equal the resident engine's.
// Counters must add up, and a source whose Acquire fails must leave no slot
// that a later run could read wrongly.
//
// Everything that needs a device skips without one; the configuration
// checks, which run before any device call, run everywhere.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "backend/cuda/cuda_device.h"
#include "engine/mapped_expert_source.h"
#include "engine/cuda_engine.h"
#include "gguf/gguf_reader.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "model/architectures.h"

namespace moetier {
namespace {

using cuda_test::Agreement;
using cuda_test::Compare;
using cuda_test::Load;
using cuda_test::Loaded;
using cuda_test::NewSequence;
using cuda_test::ReadFloats;
using cuda_test::ReadIds;
using cuda_test::RunAll;
using cuda_test::RunDecode;
using cuda_test::VectorPath;
using cuda_test::WorstRowError;

constexpr int kMaxCtx = 64;
constexpr int kMaxBatch = 8;
constexpr size_t kPrompt = 6;

// kPrompt rows in one call, then one token per call: logits of every position.
absl::Status RunSequence(ForwardEngine& engine, const std::vector<int32_t>& ids,
                         std::vector<float>* out) {
  return cuda_test::RunSequence(engine, ids, kPrompt, out);
}

std::vector<float> RunOk(ForwardEngine& engine, const std::vector<int32_t>& ids) {
  return cuda_test::RunOk(engine, ids, kPrompt);
}

// The host bytes of every routed expert tensor: one range over the mapping.
HostMemoryRange ExpertBytes(const Model& model) {
  const uint8_t* begin = nullptr;
  const uint8_t* end = nullptr;
  for (const LayerWeights& l : model.weights.layers) {
    for (const WeightRef* r : {&l.moe.gate_exps, &l.moe.up_exps, &l.moe.down_exps}) {
      const uint8_t* e = r->data + static_cast<uint64_t>(r->ne[2] - 1) * r->expert_stride_bytes +
                         static_cast<uint64_t>(r->ne[1]) * r->row_bytes;
      begin = begin == nullptr ? r->data : std::min(begin, r->data);
      end = std::max(end, e);
    }
  }
  return {begin, static_cast<uint64_t>(end - begin)};
}

CudaEngineConfig BaseConfig() {
  CudaEngineConfig config;
  config.max_ctx = kMaxCtx;
  config.max_batch = kMaxBatch;
  config.gemv_max_rows = kMaxBatch;  // every product on the GEMV
  return config;
}

absl::StatusOr<std::unique_ptr<CudaEngine>> MakeEngine(const Loaded& m,
                                                         const CudaEngineConfig& config) {
  return CudaEngine::Create(m.model, config);
}

std::unique_ptr<CudaEngine> Engine(const Loaded& m, const CudaEngineConfig& config) {
  absl::StatusOr<std::unique_ptr<CudaEngine>> engine = MakeEngine(m, config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

// Greedy continuation of the prompt, `n` tokens.
std::vector<int32_t> Greedy(ForwardEngine& engine, const std::vector<int32_t>& prompt, int n) {
  std::vector<float> logits(static_cast<size_t>(engine.n_vocab()));
  std::vector<int32_t> out;
  std::unique_ptr<Sequence> seq = NewSequence(engine);
  if (seq == nullptr) return out;
  absl::Status s = engine.Forward(*seq, prompt, LogitRows::kLast, logits.data());
  EXPECT_TRUE(s.ok()) << s;
  for (int i = 0; i < n && s.ok(); ++i) {
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    const int32_t in[1] = {next};
    s = engine.Forward(*seq, in, LogitRows::kLast, logits.data());
    EXPECT_TRUE(s.ok()) << s;
  }
  return out;
}

void ExpectHostAgreement(const std::string& name, const std::vector<float>& got,
                         const std::vector<float>& want, size_t n_vocab) {
  const Agreement a = Compare(got, want, n_vocab);
  std::printf("  %s: mean KL %.3g, top-1 %.2f\n", name.c_str(), a.mean_kl, a.top1_fraction);
  if (name == "tiny-q8_0") {
    EXPECT_LE(a.mean_kl, 1e-2);
    EXPECT_GE(a.top1_fraction, 0.9);
  } else {
    EXPECT_LE(a.mean_kl, 3e-2);
    EXPECT_GE(a.top1_fraction, 0.85);
  }
}

// The counters' identities (cache/expert_slot_cache.h).
void ExpectCountersAddUp(const ExpertSlotCacheStats& s) {
  EXPECT_EQ(s.misses, s.misses_on_host + s.demand_fills);
  EXPECT_LE(s.prefetch_used + s.prefetch_wasted, s.prefetch_issued);
}

size_t Differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

// Serves each Acquire from copies in its own buffer (held at most 4 experts,
// fewer than a layer has, so the engine's groups are cut by the source) and
// overwrites the buffer with 0xFF bytes (NaN scales) on Release: a copy that
// still read it after Release would put garbage into a slot. Registered
// for DMA, its bytes are copied straight from the buffer.
class ScratchSource final : public ExpertWeightSource {
 public:
  static constexpr int kHeld = 4;

  explicit ScratchSource(const ModelWeights& weights) : weights_(weights) {
    for (const LayerWeights& l : weights.layers) {
      stride_ =
          std::max(stride_, Bytes(l.moe.gate_exps) + Bytes(l.moe.up_exps) + Bytes(l.moe.down_exps));
    }
    buffer_.assign(kHeld * stride_, 0xFF);
  }

  absl::Status Acquire(int layer, std::span<const int32_t> experts,
                       std::span<ExpertMatrices> out) override {
    if (held_ >= 0 || experts.size() > static_cast<size_t>(kHeld)) ++violations_;
    const LayerWeights& l = weights_.layers[static_cast<size_t>(layer)];
    for (size_t i = 0; i < experts.size() && i < static_cast<size_t>(kHeld); ++i) {
      uint8_t* base = buffer_.data() + i * stride_;
      uint8_t* p = base;
      const uint8_t* m[3] = {};
      int k = 0;
      for (const WeightRef* r : {&l.moe.gate_exps, &l.moe.up_exps, &l.moe.down_exps}) {
        std::memcpy(p, r->expert(experts[i]), Bytes(*r));
        m[k++] = p;
        p += Bytes(*r);
      }
      out[i] = {m[0], m[1], m[2]};
    }
    held_ = layer;
    return absl::OkStatus();
  }
  void Release(int layer) override {
    if (held_ != layer) ++violations_;
    held_ = -1;
    std::memset(buffer_.data(), 0xFF, buffer_.size());
  }
  int max_experts_held() const override { return kHeld; }

  HostMemoryRange range() const { return {buffer_.data(), buffer_.size()}; }
  int violations() const { return violations_; }
  bool held() const { return held_ >= 0; }

 private:
  static uint64_t Bytes(const WeightRef& r) { return uint64_t(r.rows()) * r.row_bytes; }

  const ModelWeights& weights_;
  uint64_t stride_ = 0;
  std::vector<uint8_t> buffer_;
  int held_ = -1;
  int violations_ = 0;
};

// Where the cached engine's host copies come from.
enum class Dma {
  kStaged,      // the GGUF mapping, not registered: staging buffers
  kRegistered,  // the GGUF mapping, registered
  kScratch,     // a ScratchSource, registered
};

class CudaCacheEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device or driver on this machine; run tests/cuda/run-on-gpu.sh "
                      "where a GPU exists";
    }
  }
};

// qwen35moe: Gated DeltaNet layers and a shared expert, which is dense and
// never goes through the cache.
const char* const kModels[] = {"small-q4_k_m", "tiny-q8_0", "mixtral-small-q4_k_m",
                               "qwen35moe-small-q4_k_m"};

// The slot geometry the engine uses for `m`.
ExpertSlotCacheOptions CacheOptions(const Loaded& m) {
  return CudaSlotCacheOptions(RoutedExpertShapesOf(m.model), CudaExpertCacheConfig{});
}

TEST_F(CudaCacheEngineTest, CopyMissesGiveTheResidentLogitsBitForBit) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name, kPrompt);
    ASSERT_NE(m, nullptr);
    const ModelHparams& hp = m->model.hparams;
    std::unique_ptr<CudaEngine> resident = Engine(*m, BaseConfig());
    ASSERT_NE(resident, nullptr);
    EXPECT_EQ(resident->expert_cache_report(), nullptr);
    const std::vector<float> want = RunOk(*resident, m->ids);

    const ExpertSlotCacheOptions options = CacheOptions(*m);
    ASSERT_GT(options.slot_bytes, 0u);
    // Each matrix of a slot is 256-byte aligned.
    EXPECT_EQ(options.slot_bytes % 256, 0u);
    const uint64_t min_bytes = MinDynamicPoolBytes(options);
    const uint64_t full_bytes = FullPoolBytes(options);
    const uint64_t sizes[] = {min_bytes, std::max(min_bytes, full_bytes / 2), full_bytes};
    uint64_t prefetches = 0;
    for (const uint64_t pool : sizes) {
      for (const bool prefetch : {true, false}) {
        for (const Dma dma : {Dma::kStaged, Dma::kRegistered, Dma::kScratch}) {
          SCOPED_TRACE(::testing::Message() << "pool " << pool << " prefetch " << prefetch
                                            << " dma " << static_cast<int>(dma));
          const bool registered = dma != Dma::kStaged;
          MappedExpertSource mapped(m->model.weights);
          ScratchSource scratch(m->model.weights);
          CudaEngineConfig config = BaseConfig();
          config.expert_source = &mapped;
          config.expert_cache.pool_bytes = static_cast<int64_t>(pool);
          config.expert_cache.miss_policy = MissPolicy::kCopy;
          config.expert_cache.prefetch = prefetch;
          if (dma == Dma::kRegistered) config.dma_ranges.push_back(ExpertBytes(m->model));
          if (dma == Dma::kScratch) {
            config.expert_source = &scratch;
            config.dma_ranges.push_back(scratch.range());
          }
          std::unique_ptr<CudaEngine> engine = Engine(*m, config);
          ASSERT_NE(engine, nullptr);
          const ExpertCacheReport* report = engine->expert_cache_report();
          ASSERT_NE(report, nullptr);
          EXPECT_EQ(report->cache().options().slot_bytes, options.slot_bytes);
          EXPECT_EQ(uint64_t{report->cache().n_slots()}, pool / options.slot_bytes);
          // The engine holds no expert bytes of its own.
          EXPECT_LT(engine->weight_bytes(), resident->weight_bytes());
          if (registered) {
            std::printf(
                "  registered %llu bytes for DMA\n",
                static_cast<unsigned long long>(engine->expert_cache()->registered_bytes()));
          } else {
            EXPECT_EQ(engine->expert_cache()->registered_bytes(), 0u);
          }

          // The prompt: each layer places between top_k and every expert.
          std::vector<float> got(want.size());
          std::unique_ptr<Sequence> seq = NewSequence(*engine);
          ASSERT_NE(seq, nullptr);
          const std::vector<int32_t> prompt(m->ids.begin(), m->ids.begin() + kPrompt);
          ASSERT_TRUE(engine->Forward(*seq, prompt, LogitRows::kAll, got.data()).ok());
          const ExpertSlotCacheStats after_prompt = report->cache().stats();
          const uint64_t prompt_placements = after_prompt.hits + after_prompt.misses;
          EXPECT_GE(prompt_placements, uint64_t(hp.n_layer) * hp.n_expert_used);
          EXPECT_LE(
              prompt_placements,
              uint64_t(hp.n_layer) * std::min<uint64_t>(kPrompt * hp.n_expert_used, hp.n_expert));
          // Decoding: exactly top_k distinct experts per layer and token.
          for (size_t i = kPrompt; i < m->ids.size(); ++i) {
            const int32_t token[1] = {m->ids[i]};
            const absl::Status s =
                engine->Forward(*seq, token, LogitRows::kLast, got.data() + i * engine->n_vocab());
            ASSERT_TRUE(s.ok()) << s;
          }
          EXPECT_EQ(Differing(got, want), 0u) << "of " << want.size() << " logits";

          const ExpertSlotCacheStats& s = report->cache().stats();
          std::printf(
              "  %s pool %llu prefetch %d: hits %llu misses %llu fills %llu prefetch "
              "%llu/%llu/%llu busy %llu ns\n",
              name, static_cast<unsigned long long>(pool), prefetch,
              static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses),
              static_cast<unsigned long long>(s.demand_fills),
              static_cast<unsigned long long>(s.prefetch_issued),
              static_cast<unsigned long long>(s.prefetch_used),
              static_cast<unsigned long long>(s.prefetch_wasted),
              static_cast<unsigned long long>(report->copy_busy_ns()));
          EXPECT_EQ(s.hits + s.misses - prompt_placements,
                    uint64_t(m->ids.size() - kPrompt) * hp.n_layer * hp.n_expert_used);
          ExpectCountersAddUp(s);
          // Groups fit the cache, so copy mode computes nothing on the host.
          EXPECT_EQ(s.misses_on_host, 0u);
          EXPECT_GT(s.demand_fills, 0u);  // the cache starts empty
          EXPECT_GT(report->copy_busy_ns(), 0u);
          if (!prefetch) {
            EXPECT_EQ(s.prefetch_issued, 0u);
          }
          prefetches += s.prefetch_issued;
          if (pool == min_bytes) {
            EXPECT_GT(s.evictions, 0u);
          }

          // A second pass over the same tokens (a warm cache) is exact too.
          EXPECT_EQ(Differing(RunOk(*engine, m->ids), want), 0u);
          EXPECT_EQ(scratch.violations(), 0);
          EXPECT_FALSE(scratch.held());
        }
      }
    }
    EXPECT_GT(prefetches, 0u) << "prefetch never issued a fill";
  }
}

struct HostCase {
  const char* label;
  MissPolicy miss_policy;
  int static_host_layers;  // -1: dynamic; -2: n_layer / 2; -3: n_layer
};

TEST_F(CudaCacheEngineTest, HostComputedExpertsAgreeWithinActivationQuantization) {
  const HostCase cases[] = {
      {"cpu", MissPolicy::kHost, -1},        {"auto", MissPolicy::kAuto, -1},
      {"static 0", MissPolicy::kCopy, 0},    {"static half", MissPolicy::kCopy, -2},
      {"static all", MissPolicy::kCopy, -3},
  };
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name, kPrompt);
    ASSERT_NE(m, nullptr);
    const ModelHparams& hp = m->model.hparams;
    std::unique_ptr<CudaEngine> resident = Engine(*m, BaseConfig());
    ASSERT_NE(resident, nullptr);
    const std::vector<float> want = RunOk(*resident, m->ids);
    const std::vector<int32_t> prompt(m->ids.begin(), m->ids.begin() + 8);
    const std::vector<int32_t> want_tokens = Greedy(*resident, prompt, 12);
    const ExpertSlotCacheOptions options = CacheOptions(*m);
    for (const HostCase& c : cases) {
      SCOPED_TRACE(c.label);
      MappedExpertSource source(m->model.weights);
      CudaEngineConfig config = BaseConfig();
      config.expert_source = &source;
      config.expert_cache.miss_policy = c.miss_policy;
      config.expert_cache.host_threads = 2;
      int host_layers = c.static_host_layers;
      if (host_layers == -2) host_layers = hp.n_layer / 2;
      if (host_layers == -3) host_layers = hp.n_layer;
      config.expert_cache.static_host_layers = host_layers;
      if (host_layers < 0) config.expert_cache.pool_bytes = MinDynamicPoolBytes(options);
      std::unique_ptr<CudaEngine> engine = Engine(*m, config);
      ASSERT_NE(engine, nullptr);
      const ExpertCacheReport* report = engine->expert_cache_report();
      ASSERT_NE(report, nullptr);
      const ExpertSlotCache& cache = report->cache();
      if (c.miss_policy == MissPolicy::kAuto) {
        const MissCostModel* cost = engine->miss_cost_model();
        ASSERT_NE(cost, nullptr);
        std::printf("  cost model: %s\n", cost->ToString().c_str());
        EXPECT_GT(cost->copy_bytes_per_s, 0.0);
        EXPECT_GT(cost->host.fixed_s + cost->host.per_row_s, 0.0);
        EXPECT_GT(cost->device.fixed_s + cost->device.per_row_s, 0.0);
        EXPECT_TRUE(cost->sites_overlap);
      }
      if (host_layers >= 0) {
        EXPECT_TRUE(cache.is_static());
        EXPECT_EQ(uint64_t{cache.n_slots()}, uint64_t(hp.n_layer - host_layers) * hp.n_expert);
        // Every resident expert was filled at creation.
        uint64_t resident_bytes = 0;
        for (int l = host_layers; l < hp.n_layer; ++l) {
          resident_bytes += uint64_t(hp.n_expert) * options.expert_bytes[static_cast<size_t>(l)];
        }
        EXPECT_EQ(cache.stats().bytes_filled, resident_bytes);
      }

      const std::vector<float> got = RunOk(*engine, m->ids);
      if (host_layers == 0) {
        // Nothing on the host: the slots hold the file's bytes.
        EXPECT_EQ(Differing(got, want), 0u);
      } else {
        ExpectHostAgreement(name, got, want, engine->n_vocab());
      }
      const ExpertSlotCacheStats& s = cache.stats();
      ExpectCountersAddUp(s);
      if (c.miss_policy == MissPolicy::kHost) {
        EXPECT_GT(s.misses_on_host, 0u);
        EXPECT_EQ(s.demand_fills, 0u);  // only prefetch fills the cache
      }
      if (host_layers > 0) {
        EXPECT_GT(s.misses_on_host, 0u);
      }
      if (host_layers >= 0) {
        EXPECT_EQ(s.demand_fills, 0u);
        EXPECT_EQ(s.prefetch_issued, 0u);
        if (host_layers < hp.n_layer) {
          EXPECT_GT(s.hits, 0u);
        }
      }
      if (std::string(name) == "tiny-q8_0") {
        EXPECT_EQ(Greedy(*engine, prompt, 12), want_tokens);
      }
    }
  }
}

// An expert source that fails its `fail_at`-th Acquire (1-based; 0: never)
// and checks the contract: one Acquire held at a time, Release of the held
// layer.
class FlakySource final : public ExpertWeightSource {
 public:
  explicit FlakySource(const ModelWeights& weights) : inner_(weights) {}

  absl::Status Acquire(int layer, std::span<const int32_t> experts,
                       std::span<ExpertMatrices> out) override {
    if (held_ >= 0) ++violations_;
    ++acquires_;
    if (fail_at_ > 0 && acquires_ == fail_at_) {
      ++failures_;
      return absl::UnavailableError(
          absl::StrFormat("test source: expert %d of layer %d failed", experts[0], layer));
    }
    held_ = layer;
    return inner_.Acquire(layer, experts, out);
  }
  void Release(int layer) override {
    if (held_ != layer) ++violations_;
    held_ = -1;
  }
  int max_experts_held() const override { return inner_.max_experts_held(); }

  void Arm(int fail_at) {
    fail_at_ = fail_at;
    acquires_ = 0;
  }
  int failures() const { return failures_; }
  int violations() const { return violations_; }
  bool held() const { return held_ >= 0; }

 private:
  MappedExpertSource inner_;
  int fail_at_ = 0;
  int acquires_ = 0;
  int failures_ = 0;
  int violations_ = 0;
  int held_ = -1;
};

TEST_F(CudaCacheEngineTest, FailedAcquireLeavesNoBadSlot) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name, kPrompt);
    ASSERT_NE(m, nullptr);
    std::unique_ptr<CudaEngine> resident = Engine(*m, BaseConfig());
    ASSERT_NE(resident, nullptr);
    const std::vector<float> want = RunOk(*resident, m->ids);
    const ExpertSlotCacheOptions options = CacheOptions(*m);
    for (const MissPolicy policy : {MissPolicy::kCopy, MissPolicy::kHost}) {
      SCOPED_TRACE(MissPolicyName(policy));
      FlakySource source(m->model.weights);
      CudaEngineConfig config = BaseConfig();
      config.expert_source = &source;
      config.expert_cache.pool_bytes = static_cast<int64_t>(MinDynamicPoolBytes(options));
      config.expert_cache.miss_policy = policy;
      config.expert_cache.host_threads = 2;
      std::unique_ptr<CudaEngine> engine = Engine(*m, config);
      ASSERT_NE(engine, nullptr);
      // Failures in the prompt's groups, in decode groups and in prefetches.
      for (const int fail_at : {1, 2, 3, 5, 9, 17, 30, 60}) {
        SCOPED_TRACE(::testing::Message() << "fail at acquire " << fail_at);
        source.Arm(fail_at);
        const int failures = source.failures();
        std::vector<float> logits;
        const absl::Status s = RunSequence(*engine, m->ids, &logits);
        if (source.failures() > failures) {
          EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
          EXPECT_NE(s.message().find("test source"), absl::string_view::npos) << s;
        } else {
          EXPECT_TRUE(s.ok()) << s;
        }
        EXPECT_FALSE(source.held());
        source.Arm(0);
        const std::vector<float> again = RunOk(*engine, m->ids);
        if (policy == MissPolicy::kCopy) {
          EXPECT_EQ(Differing(again, want), 0u);
        } else {
          ExpectHostAgreement(name, again, want, engine->n_vocab());
        }
        ExpectCountersAddUp(engine->expert_cache_report()->cache().stats());
      }
      EXPECT_GT(source.failures(), 0);
      EXPECT_EQ(source.violations(), 0);
    }
  }
}

// `moetier budget` on a GPU worker: the pool grows and shrinks between
// calls, each size still gives the resident logits bit for bit (copy
// policy), and sizes that cannot work are refused with the old cache intact.
TEST_F(CudaCacheEngineTest, ResizeKeepsTheLogitsAndRefusesWhatCannotWork) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name, kPrompt);
    ASSERT_NE(m, nullptr);
    std::unique_ptr<CudaEngine> resident = Engine(*m, BaseConfig());
    ASSERT_NE(resident, nullptr);
    EXPECT_EQ(resident->ResizeExpertCache(1 << 20).status().code(),
              absl::StatusCode::kFailedPrecondition);
    const std::vector<float> want = RunOk(*resident, m->ids);
    const ExpertSlotCacheOptions options = CacheOptions(*m);
    MappedExpertSource source(m->model.weights);
    CudaEngineConfig config = BaseConfig();
    config.expert_source = &source;
    config.expert_cache.pool_bytes = static_cast<int64_t>(MinDynamicPoolBytes(options));
    config.expert_cache.miss_policy = MissPolicy::kCopy;
    std::unique_ptr<CudaEngine> engine = Engine(*m, config);
    ASSERT_NE(engine, nullptr);
    EXPECT_EQ(Differing(RunOk(*engine, m->ids), want), 0u);
    for (const uint64_t bytes : {FullPoolBytes(options), FullPoolBytes(options) / 2,
                                 MinDynamicPoolBytes(options)}) {
      const absl::StatusOr<uint64_t> got = engine->ResizeExpertCache(bytes);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_LE(*got, bytes);
      EXPECT_EQ(*got % options.slot_bytes, 0u);
      EXPECT_EQ(engine->expert_cache_report()->cache().n_slots() * options.slot_bytes, *got);
      EXPECT_EQ(Differing(RunOk(*engine, m->ids), want), 0u);
      ExpectCountersAddUp(engine->expert_cache_report()->cache().stats());
    }
    const uint32_t slots = engine->expert_cache_report()->cache().n_slots();
    EXPECT_EQ(engine->ResizeExpertCache(MinDynamicPoolBytes(options) - 1).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(engine->ResizeExpertCache(0).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(engine->expert_cache_report()->cache().n_slots(), slots);
    EXPECT_EQ(Differing(RunOk(*engine, m->ids), want), 0u);
  }
}

TEST_F(CudaCacheEngineTest, FailedInitialFillFailsCreation) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  FlakySource source(m->model.weights);
  source.Arm(2);
  CudaEngineConfig config = BaseConfig();
  config.expert_source = &source;
  config.expert_cache.miss_policy = MissPolicy::kCopy;
  config.expert_cache.static_host_layers = 1;
  const absl::Status s = MakeEngine(*m, config).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("filling layer"), absl::string_view::npos) << s;
  EXPECT_FALSE(source.held());
  EXPECT_EQ(source.violations(), 0);
}

TEST_F(CudaCacheEngineTest, AutomaticPoolAndSizeErrors) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  const ModelHparams& hp = m->model.hparams;
  const ExpertSlotCacheOptions options = CacheOptions(*m);
  MappedExpertSource source(m->model.weights);
  CudaEngineConfig config = BaseConfig();
  config.expert_source = &source;
  config.expert_cache.miss_policy = MissPolicy::kCopy;
  {
    // A test model's experts fit any GPU's free memory: every expert gets
    // a slot.
    std::unique_ptr<CudaEngine> engine = Engine(*m, config);
    ASSERT_NE(engine, nullptr);
    EXPECT_EQ(engine->expert_cache_report()->cache().n_slots(),
              static_cast<uint32_t>(hp.n_layer * hp.n_expert));
    EXPECT_EQ(engine->expert_cache()->pool_bytes(), FullPoolBytes(options));
  }
  // Below top_k slots per layer: an error that names the size needed.
  config.expert_cache.pool_bytes = static_cast<int64_t>(MinDynamicPoolBytes(options)) - 1;
  const absl::Status s = MakeEngine(*m, config).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("top_k"), absl::string_view::npos) << s;
  // Static placement needs every device layer's experts.
  config.expert_cache.static_host_layers = 1;
  config.expert_cache.pool_bytes = static_cast<int64_t>(StaticPoolBytes(options, 1)) - 1;
  EXPECT_EQ(MakeEngine(*m, config).status().code(), absl::StatusCode::kInvalidArgument);
}

// Each slot holds gate, up and down of any layer's expert, each matrix at a
// 256-byte boundary; the cache is told each layer's real bytes.
TEST(CudaCacheEngineArgsTest, SlotGeometry) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name, kPrompt);
    ASSERT_NE(m, nullptr);
    CudaExpertCacheConfig config;
    config.miss_policy = MissPolicy::kHost;
    config.prefetch = false;
    config.static_host_layers = 2;
    const ExpertSlotCacheOptions o = CudaSlotCacheOptions(RoutedExpertShapesOf(m->model), config);
    const ModelHparams& hp = m->model.hparams;
    EXPECT_EQ(o.n_layer, static_cast<uint32_t>(hp.n_layer));
    EXPECT_EQ(o.n_expert, static_cast<uint32_t>(hp.n_expert));
    EXPECT_EQ(o.top_k, static_cast<uint32_t>(hp.n_expert_used));
    EXPECT_EQ(o.miss_policy, MissPolicy::kHost);
    EXPECT_FALSE(o.prefetch);
    EXPECT_EQ(o.static_host_layers, 2);
    EXPECT_EQ(o.slot_bytes % 256, 0u);
    ASSERT_EQ(o.expert_bytes.size(), static_cast<size_t>(hp.n_layer));
    uint64_t widest = 0;
    for (size_t l = 0; l < o.expert_bytes.size(); ++l) {
      const LayerWeights& w = m->model.weights.layers[l];
      const uint64_t gate = uint64_t(w.moe.gate_exps.rows()) * w.moe.gate_exps.row_bytes;
      const uint64_t up = uint64_t(w.moe.up_exps.rows()) * w.moe.up_exps.row_bytes;
      const uint64_t down = uint64_t(w.moe.down_exps.rows()) * w.moe.down_exps.row_bytes;
      EXPECT_EQ(o.expert_bytes[l], gate + up + down);
      auto align = [](uint64_t n) { return (n + 255) / 256 * 256; };
      widest = std::max(widest, align(align(gate) + align(up) + down));
    }
    EXPECT_EQ(o.slot_bytes, widest);
  }
}

// Checks that come before any device call: they run on every machine.
TEST(CudaCacheEngineArgsTest, RejectsBadCacheConfigurations) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  MappedExpertSource source(m->model.weights);
  CudaEngineConfig config = BaseConfig();
  config.expert_source = &source;
  struct NoExperts final : DeviceExperts {
    absl::StatusOr<DeviceExpertMatrices> ExpertPointers(int, int, cuda::CudaStream) override {
      return absl::InternalError("unused");
    }
  } no_experts;
  config.device_experts = &no_experts;
  absl::Status s = MakeEngine(*m, config).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("not both"), absl::string_view::npos) << s;
  config.device_experts = nullptr;
  for (const int bad : {-2, m->model.hparams.n_layer + 1}) {
    config.expert_cache.static_host_layers = bad;
    s = MakeEngine(*m, config).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
  }
  config.expert_cache.static_host_layers = -1;
  config.expert_cache.pool_bytes = -2;
  EXPECT_EQ(MakeEngine(*m, config).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moetier
