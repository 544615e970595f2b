// Continuous batching on the CUDA engine (ForwardMany): the serving run of
// tests/worker/batched_serving.h, sequences joining, prefilling in chunks
// next to others' decode steps and leaving, gives every sequence bit for
// bit the logits it gets alone when every product goes through the GEMV
// (gemv_max_rows = max_batch, whose arithmetic per row does not depend on
// the other rows): every architecture of the test vectors, 1 to 8
// sequences at once, passes split by a small max_batch, prefix hits loaded
// from copied states, and a VRAM expert cache with copy misses in front.
// With the default GEMV limit, passes of more rows take the fp16 GEMM and
// agree within its rounding.
//
// Everything here needs a device and skips without one.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "backend/cuda/cuda_device.h"
#include "batched_serving.h"
#include "cuda_test_util.h"
#include "engine/cuda_engine.h"
#include "engine/mapped_expert_source.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using cuda_test::Load;
using cuda_test::Loaded;
using testing::ExpectBatchedEqualsAlone;
using testing::Plan;
using testing::Plans;
using testing::ServeBatched;
using testing::Transcript;

constexpr int kMaxCtx = 64;

class CudaBatchedForwardTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device or driver on this machine; run tests/cuda/run-on-gpu.sh "
                      "where a GPU exists";
    }
  }
};

// Every product on the GEMV unless `gemv_max_rows` says otherwise.
CudaEngineConfig Config(int max_sequences, int max_batch, int gemv_max_rows = -1) {
  CudaEngineConfig config;
  config.max_ctx = kMaxCtx;
  config.max_sequences = max_sequences;
  config.max_batch = max_batch;
  config.gemv_max_rows = gemv_max_rows < 0 ? max_batch : gemv_max_rows;
  return config;
}

std::unique_ptr<CudaEngine> Engine(const Loaded& m, const CudaEngineConfig& config) {
  absl::StatusOr<std::unique_ptr<CudaEngine>> engine = CudaEngine::Create(m.model, config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

void ExpectEqualsAlone(const Loaded& m, const std::vector<Plan>& plans,
                       const std::vector<Transcript>& batched) {
  std::unique_ptr<CudaEngine> alone = Engine(m, Config(1, 64));
  ASSERT_NE(alone, nullptr);
  ExpectBatchedEqualsAlone(*alone, plans, batched);
}

TEST_P(CudaBatchedForwardTest, EverySequenceOfABatchGetsItsSoloLogits) {
  std::unique_ptr<Loaded> m = Load(GetParam(), 24);
  ASSERT_NE(m, nullptr);
  for (const int width : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE(absl::StrFormat("%d sequences at once", width));
    const std::vector<Plan> plans = Plans(m->ids, width + 3);
    std::unique_ptr<CudaEngine> engine = Engine(*m, Config(width, 64));
    ASSERT_NE(engine, nullptr);
    ExpectEqualsAlone(*m, plans, ServeBatched(*engine, plans, /*chunk=*/5));
  }
}

// Passes of 4 rows split prompt chunks and cut batches between sequences.
TEST_P(CudaBatchedForwardTest, PassesSplitByASmallBatchChangeNothing) {
  std::unique_ptr<Loaded> m = Load(GetParam(), 24);
  ASSERT_NE(m, nullptr);
  const std::vector<Plan> plans = Plans(m->ids, 9);
  std::unique_ptr<CudaEngine> engine = Engine(*m, Config(6, /*max_batch=*/4));
  ASSERT_NE(engine, nullptr);
  ExpectEqualsAlone(*m, plans, ServeBatched(*engine, plans, /*chunk=*/7));
}

// Prompts that begin with a shared start load its copied state (the whole
// of it for a recurrent model, a part of it otherwise) and run the rest
// batched.
TEST_P(CudaBatchedForwardTest, PrefixHitsGetTheirSoloLogits) {
  std::unique_ptr<Loaded> m = Load(GetParam(), 24);
  ASSERT_NE(m, nullptr);
  const bool recurrent = SequenceStateSizeOf(m->model).recurrent_bytes > 0;
  constexpr int kShared = 12;
  const std::vector<int32_t> shared(m->ids.begin(), m->ids.begin() + kShared);
  for (const int width : {1, 3, 8}) {
    SCOPED_TRACE(absl::StrFormat("%d sequences at once", width));
    std::unique_ptr<CudaEngine> engine = Engine(*m, Config(width, 64));
    ASSERT_NE(engine, nullptr);
    std::unique_ptr<SequenceState> start;
    {
      std::unique_ptr<Sequence> seq = cuda_test::NewSequence(*engine);
      ASSERT_NE(seq, nullptr);
      ASSERT_TRUE(engine->Forward(*seq, shared, LogitRows::kNone, nullptr).ok());
      absl::StatusOr<std::unique_ptr<SequenceState>> copied = engine->CopyState(*seq);
      ASSERT_TRUE(copied.ok()) << copied.status();
      start = *std::move(copied);
    }
    std::vector<Plan> plans = Plans(m->ids, width + 3);
    for (size_t i = 0; i < plans.size(); ++i) {
      Plan& p = plans[i];
      if (i % 3 == 2) continue;  // a miss among the hits
      p.loaded = recurrent || i % 3 == 0 ? kShared : 5 + static_cast<int>(i) % 6;
      std::vector<int32_t> prompt(shared.begin(), shared.begin() + p.loaded);
      prompt.insert(prompt.end(), p.prompt.begin(), p.prompt.end());
      p.prompt = std::move(prompt);
      p.start = start.get();
    }
    ExpectEqualsAlone(*m, plans, ServeBatched(*engine, plans, /*chunk=*/5));
  }
}

INSTANTIATE_TEST_SUITE_P(Vectors, CudaBatchedForwardTest,
                         ::testing::Values("tiny-q8_0", "mixtral-tiny-f32", "olmoe-tiny-f32",
                                           "qwen35moe-tiny-f32", "qwen35moe-small-q4_k_m"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

class CudaBatchedCacheTest : public CudaBatchedForwardTest {};

// Behind the smallest VRAM slot pool, copy misses: the union of a pass's
// experts goes through the cache per layer, and nothing changes.
TEST_F(CudaBatchedCacheTest, AnExpertCacheInFrontChangesNothing) {
  for (const char* name : {"small-q4_k_m", "qwen35moe-small-q4_k_m"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name, 24);
    ASSERT_NE(m, nullptr);
    for (const bool prefetch : {true, false}) {
      SCOPED_TRACE(prefetch ? "prefetch" : "no prefetch");
      MappedExpertSource mapped(m->model.weights);
      CudaEngineConfig config = Config(4, 64);
      config.expert_source = &mapped;
      config.expert_cache.pool_bytes = static_cast<int64_t>(MinDynamicPoolBytes(
          CudaSlotCacheOptions(RoutedExpertShapesOf(m->model), CudaExpertCacheConfig{})));
      config.expert_cache.miss_policy = MissPolicy::kCopy;
      config.expert_cache.prefetch = prefetch;
      std::unique_ptr<CudaEngine> engine = Engine(*m, config);
      ASSERT_NE(engine, nullptr);
      const std::vector<Plan> plans = Plans(m->ids, 7);
      ExpectEqualsAlone(*m, plans, ServeBatched(*engine, plans, /*chunk=*/4));
      EXPECT_GT(engine->expert_cache_report()->cache().stats().misses, 0u);
    }
  }
}

// The default GEMV limit: passes of more than 8 rows run the fp16 GEMM, so
// a sequence's rows differ from its solo ones by that rounding only.
TEST_F(CudaBatchedCacheTest, PassesOnTheGemmAgreeWithinItsRounding) {
  std::unique_ptr<Loaded> m = Load("small-q4_k_m", 24);
  ASSERT_NE(m, nullptr);
  const std::vector<Plan> plans = Plans(m->ids, 11);
  std::unique_ptr<CudaEngine> engine =
      Engine(*m, Config(8, 64, /*gemv_max_rows=*/cuda::kCudaGemvMaxBatch));
  ASSERT_NE(engine, nullptr);
  const std::vector<Transcript> batched = ServeBatched(*engine, plans, /*chunk=*/6);
  std::unique_ptr<CudaEngine> alone = Engine(*m, Config(1, 64));
  ASSERT_NE(alone, nullptr);
  const size_t n_vocab = static_cast<size_t>(alone->n_vocab());
  ASSERT_EQ(batched.size(), plans.size());
  std::vector<float> got, want;
  for (size_t i = 0; i < plans.size(); ++i) {
    const Transcript solo = testing::ServeAlone(*alone, plans[i], batched[i].chunks);
    ASSERT_EQ(solo.rows.size(), batched[i].rows.size());
    for (size_t r = 0; r < solo.rows.size(); ++r) {
      got.insert(got.end(), batched[i].rows[r].begin(), batched[i].rows[r].end());
      want.insert(want.end(), solo.rows[r].begin(), solo.rows[r].end());
    }
  }
  // The prefill GEMM's bounds against the reference (cuda_engine_test):
  // fp16 inputs can flip a router near-tie, which moves a whole position.
  const cuda_test::Agreement a = cuda_test::Compare(got, want, n_vocab);
  std::printf("GEMM passes against solo: mean KL %.3g, top-1 %.2f, worst |error| / range %.3g\n",
              a.mean_kl, a.top1_fraction, cuda_test::WorstRowError(got, want, n_vocab));
  EXPECT_LE(a.mean_kl, 5e-3);
  EXPECT_GE(a.top1_fraction, 0.85);
}

TEST_F(CudaBatchedCacheTest, BadStepsAreRefusedBeforeAnythingRuns) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CudaEngine> engine = Engine(*m, Config(2, 64));
  ASSERT_NE(engine, nullptr);
  std::unique_ptr<Sequence> a = cuda_test::NewSequence(*engine);
  std::unique_ptr<Sequence> b = cuda_test::NewSequence(*engine);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  std::vector<float> row(static_cast<size_t>(engine->n_vocab()));
  const std::vector<int32_t> good = {1, 2, 3};
  const std::vector<int32_t> bad = {4, engine->n_vocab()};
  std::vector<SequenceStep> twice = {{a.get(), good, row.data()}, {a.get(), good, nullptr}};
  EXPECT_EQ(engine->ForwardMany(twice).code(), absl::StatusCode::kInvalidArgument);
  std::vector<SequenceStep> outside = {{a.get(), good, row.data()}, {b.get(), bad, nullptr}};
  EXPECT_EQ(engine->ForwardMany(outside).code(), absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> too_long(kMaxCtx + 1, 1);
  std::vector<SequenceStep> past = {{b.get(), too_long, nullptr}};
  EXPECT_EQ(engine->ForwardMany(past).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(a->length(), 0);
  EXPECT_EQ(b->length(), 0);
  // Nothing kept for Sample after a ForwardMany.
  std::vector<SequenceStep> fine = {{a.get(), good, row.data()}, {b.get(), good, nullptr}};
  ASSERT_TRUE(engine->ForwardMany(fine).ok());
  EXPECT_EQ(a->length(), 3);
  EXPECT_EQ(b->length(), 3);
  EXPECT_EQ(engine->LastLogitsRow().status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace moetier
