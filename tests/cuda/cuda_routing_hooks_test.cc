// The CUDA engine's routing hooks (engine/routing_hook.h) on the test
// vectors: a 6-token prompt in one call, then one token per call.
//
// Every product goes through the GEMV (gemv_max_rows = max_batch), so that
// each row's arithmetic does not depend on the batch:
// - an override that keeps the router's choice, and a replayed trace that
//   the observer recorded from the same tokens, give the hook-less logits
//   bit for bit (the weights are recomputed on the host from the router's
//   probabilities in RouterTopK's fp32 order);
// - an override that forces other experts gives the CPU engine's logits
//   with the same override, within the bounds the CUDA engine tests use
//   against the fp32 reference (tiny-f32 and the hybrid qwen35moe-tiny-f32:
//   1e-4 of each row's range; the CPU engine's activations are fp32 there)
//   and those the cache tests use for 8-bit host activations (tiny-q8_0:
//   mean KL 1e-2, top-1 90%). A forced choice has no router near-ties to
//   flip;
// - the observer sees each batch's layers in order with n_tokens * top_k
//   ids and weights, the override's ids when there is one;
// - an override id outside the model fails Forward with a message naming
//   it, and the engine computes correctly afterwards;
// - with the VRAM cache, a replayed trace of the same two experts per layer
//   decides what is placed: after the first token every placement is a hit.
//
// Everything skips without a device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_device.h"
#include "engine/mapped_expert_source.h"
#include "engine/cpu_engine.h"
#include "engine/cuda_engine.h"
#include "engine/routing_trace_hooks.h"
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
std::vector<float> RunOk(ForwardEngine& engine, const std::vector<int32_t>& ids) {
  return cuda_test::RunOk(engine, ids, kPrompt);
}

CudaEngineConfig BaseConfig() {
  CudaEngineConfig config;
  config.max_ctx = kMaxCtx;
  config.max_batch = kMaxBatch;
  config.gemv_max_rows = kMaxBatch;  // every product on the GEMV
  return config;
}

std::unique_ptr<CudaEngine> Engine(const Loaded& m, const CudaEngineConfig& config) {
  absl::StatusOr<std::unique_ptr<CudaEngine>> engine = CudaEngine::Create(m.model, config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

size_t Differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

// Every batch the observer saw, in call order.
struct SeenBatch {
  int layer, n_layer, n_expert, top_k, pos0, n_tokens;
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

class Recorder final : public RoutingObserver {
 public:
  absl::Status OnRouting(const RoutingBatch& b) override {
    seen.push_back({b.layer, b.n_layer, b.n_expert, b.top_k, b.pos0, b.n_tokens,
                    std::vector<int32_t>(b.experts.begin(), b.experts.end()),
                    std::vector<float>(b.weights.begin(), b.weights.end())});
    return absl::OkStatus();
  }
  std::vector<SeenBatch> seen;
};

// Leaves the router's choice as it is (it holds it on entry), checking
// that the batch carries no experts or weights yet.
class KeepRouterChoice final : public RoutingOverride {
 public:
  absl::Status Override(const RoutingBatch& b, std::span<int32_t> experts) override {
    ++calls;
    if (!b.experts.empty() || !b.weights.empty()) ++bad_batches;
    if (experts.size() != static_cast<size_t>(b.n_tokens) * b.top_k) ++bad_batches;
    return absl::OkStatus();
  }
  int calls = 0;
  int bad_batches = 0;
};

// Token at position p, layer l: experts (5p + 3l + j * stride) mod
// n_expert for j < top_k, distinct (stride 3 is prime to 8), in an order
// unrelated to the router's scores. Counts the tokens whose choice it
// changed, and can put `bad_id` into layer `bad_layer`'s first token.
class ForceExperts final : public RoutingOverride {
 public:
  absl::Status Override(const RoutingBatch& b, std::span<int32_t> experts) override {
    for (int t = 0; t < b.n_tokens; ++t) {
      const int p = b.pos0 + t;
      bool changed = false;
      for (int j = 0; j < b.top_k; ++j) {
        int32_t& e = experts[static_cast<size_t>(t) * b.top_k + j];
        const int32_t want = (5 * p + 3 * b.layer + 3 * j) % b.n_expert;
        changed = changed || e != want;
        e = want;
      }
      changed_tokens += changed;
      ++tokens;
    }
    if (b.layer == bad_layer) experts[0] = bad_id;
    if (b.layer == fail_layer) return absl::FailedPreconditionError("test override gave up");
    return absl::OkStatus();
  }
  static int32_t Expected(int pos, int layer, int j, int n_expert) {
    return (5 * pos + 3 * layer + 3 * j) % n_expert;
  }
  int tokens = 0;
  int changed_tokens = 0;
  int bad_layer = -1;
  int32_t bad_id = 0;
  int fail_layer = -1;
};

class CudaRoutingHooksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device or driver on this machine; run tests/cuda/run-on-gpu.sh "
                      "where a GPU exists";
    }
  }
};

const char* const kModels[] = {"tiny-f32", "tiny-q8_0", "small-q4_k_m",
                               "qwen35moe-tiny-f32"};

TEST_F(CudaRoutingHooksTest, TheRoutersOwnChoiceGivesBitIdenticalLogits) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name, kPrompt);
    ASSERT_NE(m, nullptr);
    const ModelHparams& hp = m->hp();
    std::unique_ptr<CudaEngine> plain = Engine(*m, BaseConfig());
    ASSERT_NE(plain, nullptr);
    const std::vector<float> want = RunOk(*plain, m->ids);

    // An override that keeps the router's choice.
    KeepRouterChoice keep;
    CudaEngineConfig config = BaseConfig();
    config.routing_override = &keep;
    std::unique_ptr<CudaEngine> kept = Engine(*m, config);
    ASSERT_NE(kept, nullptr);
    EXPECT_EQ(Differing(RunOk(*kept, m->ids), want), 0u) << "of " << want.size() << " logits";
    // One call per layer and batch: the prompt's batch and each decode token.
    EXPECT_EQ(keep.calls, hp.n_layer * static_cast<int>(1 + m->ids.size() - kPrompt));
    EXPECT_EQ(keep.bad_batches, 0);

    // The observer's recording, replayed: also the same logits, and the
    // recording itself changes nothing.
    const std::string path = absl::StrCat(::testing::TempDir(), "/cuda-hooks-", name, ".trace");
    absl::StatusOr<std::unique_ptr<RoutingTraceRecorder>> recorder =
        RoutingTraceRecorder::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used);
    ASSERT_TRUE(recorder.ok()) << recorder.status();
    config = BaseConfig();
    config.routing_observer = recorder->get();
    std::unique_ptr<CudaEngine> recording = Engine(*m, config);
    ASSERT_NE(recording, nullptr);
    EXPECT_EQ(Differing(RunOk(*recording, m->ids), want), 0u);
    ASSERT_TRUE((*recorder)->Close().ok());
    EXPECT_EQ((*recorder)->tokens_written(), m->ids.size());

    absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> replayer =
        RoutingTraceReplayer::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used);
    ASSERT_TRUE(replayer.ok()) << replayer.status();
    config = BaseConfig();
    config.routing_override = replayer->get();
    std::unique_ptr<CudaEngine> replaying = Engine(*m, config);
    ASSERT_NE(replaying, nullptr);
    EXPECT_EQ(Differing(RunOk(*replaying, m->ids), want), 0u);
    EXPECT_EQ((*replayer)->next_token(), 0u) << "the trace's tokens were all used once";
    std::remove(path.c_str());
  }
}

TEST_F(CudaRoutingHooksTest, ForcedExpertsGiveTheCpuEnginesLogits) {
  // qwen35moe-tiny-f32: the hybrid model's blocks against the CPU engine's.
  for (const char* name : {"tiny-f32", "tiny-q8_0", "qwen35moe-tiny-f32"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name, kPrompt);
    ASSERT_NE(m, nullptr);
    const ModelHparams& hp = m->hp();
    ForceExperts cpu_force;
    Recorder cpu_seen;
    CpuEngineConfig cpu_config;
    cpu_config.max_ctx = kMaxCtx;
    cpu_config.max_batch = kMaxBatch;
    cpu_config.n_threads = 2;
    cpu_config.routing_override = &cpu_force;
    cpu_config.routing_observer = &cpu_seen;
    absl::StatusOr<std::unique_ptr<CpuEngine>> cpu = CpuEngine::Create(m->model, cpu_config);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    const std::vector<float> want = RunOk(**cpu, m->ids);

    ForceExperts force;
    Recorder seen;
    CudaEngineConfig config = BaseConfig();
    config.routing_override = &force;
    config.routing_observer = &seen;
    std::unique_ptr<CudaEngine> engine = Engine(*m, config);
    ASSERT_NE(engine, nullptr);
    const std::vector<float> got = RunOk(*engine, m->ids);
    // Most tokens are forced away from the router's choice.
    EXPECT_GT(force.changed_tokens, force.tokens / 2) << "of " << force.tokens;
    const size_t n_vocab = engine->n_vocab();
    const Agreement a = Compare(got, want, n_vocab);
    std::printf("  %s: worst |error| / range %.3g, mean KL %.3g, top-1 %.2f\n", name,
                WorstRowError(got, want, n_vocab), a.mean_kl, a.top1_fraction);
    const bool f32 = std::string(name).ends_with("-f32");
    if (f32) {
      EXPECT_LT(WorstRowError(got, want, n_vocab), 1e-4);
    } else {
      EXPECT_LE(a.mean_kl, 1e-2);
      EXPECT_GE(a.top1_fraction, 0.9);
    }
    // The forced routing is not the router's: the logits moved.
    std::unique_ptr<CudaEngine> plain = Engine(*m, BaseConfig());
    ASSERT_NE(plain, nullptr);
    EXPECT_GT(WorstRowError(got, RunOk(*plain, m->ids), n_vocab), 1e-3);

    // The observer saw the forced experts, mixed with the CPU engine's
    // weights (the router's probabilities of those experts, renormalized;
    // on tiny-q8_0 the CPU's router reads 8-bit activations).
    const float weight_tolerance = f32 ? 1e-4f : 2e-2f;
    ASSERT_EQ(seen.seen.size(), cpu_seen.seen.size());
    ASSERT_FALSE(seen.seen.empty());
    for (size_t k = 0; k < seen.seen.size(); ++k) {
      const SeenBatch& b = seen.seen[k];
      const SeenBatch& c = cpu_seen.seen[k];
      ASSERT_EQ(b.layer, c.layer);
      ASSERT_EQ(b.pos0, c.pos0);
      ASSERT_EQ(b.n_tokens, c.n_tokens);
      ASSERT_EQ(b.experts.size(), static_cast<size_t>(b.n_tokens) * hp.n_expert_used);
      ASSERT_EQ(b.weights.size(), b.experts.size());
      ASSERT_EQ(c.weights.size(), b.weights.size());
      for (int t = 0; t < b.n_tokens; ++t) {
        float sum = 0.0f;
        for (int j = 0; j < b.top_k; ++j) {
          const size_t i = static_cast<size_t>(t) * b.top_k + j;
          EXPECT_EQ(b.experts[i], ForceExperts::Expected(b.pos0 + t, b.layer, j, hp.n_expert))
              << "layer " << b.layer << " position " << b.pos0 + t;
          EXPECT_EQ(b.experts[i], c.experts[i]);
          EXPECT_NEAR(b.weights[i], c.weights[i], weight_tolerance)
              << "layer " << b.layer << " position " << b.pos0 + t;
          EXPECT_GT(b.weights[i], 0.0f);
          sum += b.weights[i];
        }
        // 1 unless the chosen probabilities sum below RouterTopK's floor.
        EXPECT_LE(sum, 1.0f + 1e-5f);
      }
    }
  }
}

TEST_F(CudaRoutingHooksTest, TheObserverSeesEveryLayerOfEveryBatchInOrder) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  const ModelHparams& hp = m->hp();
  Recorder seen;
  CudaEngineConfig config = BaseConfig();
  config.max_batch = 4;  // the 6-token prompt: batches of 4 and 2
  config.gemv_max_rows = 4;
  config.routing_observer = &seen;
  std::unique_ptr<CudaEngine> engine = Engine(*m, config);
  ASSERT_NE(engine, nullptr);
  const std::vector<float> got = RunOk(*engine, m->ids);
  // Observing changes nothing.
  CudaEngineConfig plain_config = config;
  plain_config.routing_observer = nullptr;
  std::unique_ptr<CudaEngine> plain = Engine(*m, plain_config);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(Differing(got, RunOk(*plain, m->ids)), 0u);

  // Batches (pos0, n_tokens) in order, each with every layer in order.
  std::vector<std::pair<int, int>> batches = {{0, 4}, {4, 2}};
  for (size_t i = kPrompt; i < m->ids.size(); ++i) batches.push_back({static_cast<int>(i), 1});
  ASSERT_EQ(seen.seen.size(), batches.size() * hp.n_layer);
  for (size_t b = 0; b < batches.size(); ++b) {
    for (int l = 0; l < hp.n_layer; ++l) {
      const SeenBatch& s = seen.seen[b * hp.n_layer + static_cast<size_t>(l)];
      SCOPED_TRACE(::testing::Message() << "batch " << b << " layer " << l);
      EXPECT_EQ(s.layer, l);
      EXPECT_EQ(s.n_layer, hp.n_layer);
      EXPECT_EQ(s.n_expert, hp.n_expert);
      EXPECT_EQ(s.top_k, hp.n_expert_used);
      EXPECT_EQ(s.pos0, batches[b].first);
      EXPECT_EQ(s.n_tokens, batches[b].second);
      ASSERT_EQ(s.experts.size(), static_cast<size_t>(s.n_tokens) * hp.n_expert_used);
      ASSERT_EQ(s.weights.size(), s.experts.size());
      for (int t = 0; t < s.n_tokens; ++t) {
        float sum = 0.0f;
        for (int j = 0; j < hp.n_expert_used; ++j) {
          const size_t i = static_cast<size_t>(t) * hp.n_expert_used + j;
          EXPECT_GE(s.experts[i], 0);
          EXPECT_LT(s.experts[i], hp.n_expert);
          // The router's choice: highest score first, distinct.
          if (j > 0) {
            EXPECT_GE(s.weights[i - 1], s.weights[i]);
            EXPECT_NE(s.experts[i - 1], s.experts[i]);
          }
          sum += s.weights[i];
        }
        EXPECT_NEAR(sum, 1.0f, 1e-5f);
      }
    }
  }
}

// The heat profile's counter (CudaEngineConfig::routing_counter) of an
// engine whose batches are routed on the device hears, at each batch's end,
// exactly the choices an observer sees on the host path, layer by layer.
class CountingSource final : public ExpertWeightSource {
 public:
  absl::Status Acquire(int, std::span<const int32_t>, std::span<ExpertMatrices>) override {
    return absl::UnimplementedError("a counter holds no experts");
  }
  void Release(int) override {}
  int max_experts_held() const override { return 1; }
  void Route(int layer, std::span<const int32_t> topk_ids) override {
    heard.push_back({layer, std::vector<int32_t>(topk_ids.begin(), topk_ids.end())});
  }
  std::vector<std::pair<int, std::vector<int32_t>>> heard;
};

TEST_F(CudaRoutingHooksTest, TheRoutingCounterHearsWhatTheObserverSees) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    Recorder seen;
    CudaEngineConfig observed_config = BaseConfig();
    observed_config.routing_observer = &seen;
    CountingSource counter;
    CudaEngineConfig counted_config = BaseConfig();
    counted_config.routing_counter = &counter;
    std::unique_ptr<CudaEngine> observed = Engine(*m, observed_config);
    std::unique_ptr<CudaEngine> counted = Engine(*m, counted_config);
    ASSERT_NE(observed, nullptr);
    ASSERT_NE(counted, nullptr);
    EXPECT_EQ(Differing(RunOk(*observed, m->ids), RunOk(*counted, m->ids)), 0u);
    ASSERT_EQ(counter.heard.size(), seen.seen.size());
    for (size_t i = 0; i < seen.seen.size(); ++i) {
      EXPECT_EQ(counter.heard[i].first, seen.seen[i].layer) << "call " << i;
      EXPECT_EQ(counter.heard[i].second, seen.seen[i].experts) << "call " << i;
    }
  }
}

TEST_F(CudaRoutingHooksTest, AnOverrideOutsideTheModelFailsForwardNamingIt) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  const ModelHparams& hp = m->hp();
  ForceExperts force;
  CudaEngineConfig config = BaseConfig();
  config.routing_override = &force;
  std::unique_ptr<CudaEngine> engine = Engine(*m, config);
  ASSERT_NE(engine, nullptr);
  const std::vector<float> want = RunOk(*engine, m->ids);

  std::vector<float> logits(static_cast<size_t>(engine->n_vocab()) * kPrompt);
  const std::vector<int32_t> prompt(m->ids.begin(), m->ids.begin() + kPrompt);
  for (const int32_t bad : {hp.n_expert, -1}) {
    SCOPED_TRACE(bad);
    force.bad_layer = 2;
    force.bad_id = bad;
    std::unique_ptr<Sequence> seq = NewSequence(*engine);
    ASSERT_NE(seq, nullptr);
    absl::Status s = engine->Forward(*seq, prompt, LogitRows::kAll, logits.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_NE(s.message().find(absl::StrCat("expert ", bad)), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("layer 2"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("position 0"), absl::string_view::npos) << s;
    EXPECT_EQ(seq->length(), 0);
  }
  // The override's own error comes back as it is.
  force.bad_layer = -1;
  force.fail_layer = 1;
  std::unique_ptr<Sequence> seq = NewSequence(*engine);
  ASSERT_NE(seq, nullptr);
  absl::Status s = engine->Forward(*seq, prompt, LogitRows::kAll, logits.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("test override gave up"), absl::string_view::npos) << s;
  // Nothing was left half-done.
  force.fail_layer = -1;
  seq.reset();
  EXPECT_EQ(Differing(RunOk(*engine, m->ids), want), 0u);
}

TEST_F(CudaRoutingHooksTest, AReplayedTraceDrivesTheVramCache) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  const ModelHparams& hp = m->hp();
  ASSERT_EQ(hp.n_expert_used, 2);
  // One token whose every layer routes to experts 3 and 6, replayed for
  // every token.
  const std::string path = ::testing::TempDir() + "/cuda-hooks-two-experts.trace";
  {
    std::ofstream out(path);
    out << "moetier-trace v1 layers=" << hp.n_layer << " experts=" << hp.n_expert
        << " top_k=2 weights=0\n";
    for (int l = 0; l < hp.n_layer; ++l) out << (l > 0 ? ";" : "") << (l % 2 ? "6,3" : "3,6");
    out << "\n";
  }
  absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> replayer =
      RoutingTraceReplayer::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used);
  ASSERT_TRUE(replayer.ok()) << replayer.status();
  std::remove(path.c_str());

  CudaEngineConfig config = BaseConfig();
  config.routing_override = replayer->get();
  std::unique_ptr<CudaEngine> resident = Engine(*m, config);
  ASSERT_NE(resident, nullptr);
  const std::vector<float> want = RunOk(*resident, m->ids);

  const ExpertSlotCacheOptions options = CudaSlotCacheOptions(RoutedExpertShapesOf(m->model), CudaExpertCacheConfig{});
  // Prefetch off in the smallest pool (top_k slots a layer): nothing but
  // the trace's experts is ever placed. Prefetch on in a pool of every
  // expert: its guesses (the router's, not the trace's) evict nothing.
  struct Case {
    uint64_t pool;
    bool prefetch;
  };
  for (const Case c : {Case{MinDynamicPoolBytes(options), false},
                       Case{FullPoolBytes(options), true}}) {
    SCOPED_TRACE(::testing::Message() << "pool " << c.pool << " prefetch " << c.prefetch);
    MappedExpertSource source(m->model.weights);
    config.expert_source = &source;
    config.expert_cache.pool_bytes = static_cast<int64_t>(c.pool);
    config.expert_cache.miss_policy = MissPolicy::kCopy;
    config.expert_cache.prefetch = c.prefetch;
    std::unique_ptr<CudaEngine> engine = Engine(*m, config);
    ASSERT_NE(engine, nullptr);
    const ExpertSlotCache& cache = engine->expert_cache_report()->cache();

    // The prompt: every token on the same two experts, so each layer places
    // two, both missing.
    std::vector<float> got(want.size());
    std::unique_ptr<Sequence> seq = NewSequence(*engine);
    ASSERT_NE(seq, nullptr);
    const std::vector<int32_t> prompt(m->ids.begin(), m->ids.begin() + kPrompt);
    ASSERT_TRUE(engine->Forward(*seq, prompt, LogitRows::kAll, got.data()).ok());
    const uint64_t per_token = uint64_t(hp.n_layer) * hp.n_expert_used;
    EXPECT_EQ(cache.stats().misses, per_token);
    EXPECT_EQ(cache.stats().hits, 0u);
    for (size_t i = kPrompt; i < m->ids.size(); ++i) {
      const int32_t token[1] = {m->ids[i]};
      const absl::Status s =
          engine->Forward(*seq, token, LogitRows::kLast, got.data() + i * engine->n_vocab());
      ASSERT_TRUE(s.ok()) << s;
    }
    // Every decode placement hit.
    EXPECT_EQ(cache.stats().misses, per_token);
    EXPECT_EQ(cache.stats().hits, per_token * (m->ids.size() - kPrompt));
    EXPECT_EQ(cache.stats().misses_on_host, 0u);
    // The slots hold the file's bytes: the resident engine's logits.
    EXPECT_EQ(Differing(got, want), 0u);
    if (c.prefetch) {
      std::printf("  prefetch issued %llu (the router's guesses)\n",
                  static_cast<unsigned long long>(cache.stats().prefetch_issued));
    } else {
      EXPECT_EQ(cache.stats().prefetch_issued, 0u);
    }
  }
}

}  // namespace
}  // namespace moetier
