// KV cache types (--cache-type-k / --cache-type-v) on the CUDA engine: each
// type's logits against the engine's own exact f32 cache within the type's
// rounding (the bounds of tests/cpu/kv_cache_types_test.cc), keys and values
// of different types, the same bits token by token and in GEMV batches (a
// row is quantized once, when its token is computed), and a copied state
// that continues as the original. Decoding keeps every product on the GEMV,
// where activations stay fp32, so the cache's rounding is what differs.
// The checks made before any device call run everywhere.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "cuda_test_util.h"
#include "engine/cuda_engine.h"
#include "gtest/gtest.h"
#include "model/kv_cache_types.h"

namespace moetier {
namespace {

using cuda_test::Agreement;
using cuda_test::Compare;
using cuda_test::Load;
using cuda_test::Loaded;
using cuda_test::NewSequence;
using cuda_test::RunAll;
using cuda_test::RunDecode;
using cuda_test::WorstRowError;

constexpr int kMaxCtx = 64;

absl::StatusOr<std::unique_ptr<CudaEngine>> EngineWith(const Loaded& m, KvCacheTypes types,
                                                       CudaEngineConfig config = {}) {
  config.max_ctx = kMaxCtx;
  config.kv_types = types;
  return CudaEngine::Create(m.model, config);
}

std::string Name(const KvCacheTypes& t) {
  return KvCacheTypeName(t.k) + "/" + KvCacheTypeName(t.v);
}

class CudaKvTypesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device or driver on this machine; run tests/cuda/run-on-gpu.sh "
                      "where a GPU exists";
    }
  }
};

struct TypeBound {
  KvCacheTypes types;
  double max_mean_kl;  // from the f32 cache's logits
};

TEST_P(CudaKvTypesTest, EveryTypeStaysWithinItsRoundingOfTheF32Cache) {
  std::unique_ptr<Loaded> m = Load(GetParam());
  ASSERT_NE(m, nullptr);
  absl::StatusOr<std::unique_ptr<CudaEngine>> exact = EngineWith(*m, {});
  ASSERT_TRUE(exact.ok()) << exact.status();
  const std::vector<float> want = RunDecode(**exact, m->ids);
  const size_t n_vocab = (*exact)->n_vocab();
  const TypeBound bounds[] = {
      {{TensorType::kF32, TensorType::kF16}, 1e-5},
      {{TensorType::kF16, TensorType::kF32}, 1e-5},
      {{TensorType::kF16, TensorType::kF16}, 1e-5},
      {{TensorType::kQ8_0, TensorType::kF16}, 1e-3},
      {{TensorType::kQ8_0, TensorType::kQ8_0}, 1e-3},
      {{TensorType::kQ8_0, TensorType::kQ4_0}, 0.25},
      {{TensorType::kQ4_0, TensorType::kQ4_0}, 0.25},
  };
  double previous_kl = 0.0;
  for (const TypeBound& b : bounds) {
    SCOPED_TRACE(Name(b.types));
    absl::StatusOr<std::unique_ptr<CudaEngine>> engine = EngineWith(*m, b.types);
    ASSERT_TRUE(engine.ok()) << engine.status();
    const std::vector<float> got = RunDecode(**engine, m->ids);
    const Agreement a = Compare(got, want, n_vocab);
    std::printf("%s %s: mean KL from f32 %.3g, top-1 %.3f\n", GetParam().c_str(),
                Name(b.types).c_str(), a.mean_kl, a.top1_fraction);
    EXPECT_LT(a.mean_kl, b.max_mean_kl);
    EXPECT_GT(a.mean_kl, 0.0) << "rounds nothing: the type is not used";
    if (b.types.k == b.types.v) {
      EXPECT_GT(a.mean_kl, previous_kl) << "closer than a finer type";
      previous_kl = a.mean_kl;
    }
  }
  absl::StatusOr<std::unique_ptr<CudaEngine>> f32_named =
      EngineWith(*m, {TensorType::kF32, TensorType::kF32});
  ASSERT_TRUE(f32_named.ok());
  EXPECT_EQ(RunDecode(**f32_named, m->ids), want);
}

// With every product on the GEMV, a batch computes each row as decoding
// does, so a quantized cache written in batches holds the same bytes.
TEST_P(CudaKvTypesTest, QuantizedCacheGivesTheSameBitsInGemvBatches) {
  std::unique_ptr<Loaded> m = Load(GetParam());
  ASSERT_NE(m, nullptr);
  for (KvCacheTypes types : {KvCacheTypes{TensorType::kQ8_0, TensorType::kQ8_0},
                             KvCacheTypes{TensorType::kQ4_0, TensorType::kF16}}) {
    SCOPED_TRACE(Name(types));
    CudaEngineConfig config;
    config.max_batch = 16;
    config.gemv_max_rows = config.max_batch;
    config.deltanet_chunk_min_tokens = config.max_batch + 1;  // never chunked
    absl::StatusOr<std::unique_ptr<CudaEngine>> engine = EngineWith(*m, types, config);
    ASSERT_TRUE(engine.ok()) << engine.status();
    const std::vector<float> batched = RunAll(**engine, m->ids);
    const std::vector<float> decoded = RunDecode(**engine, m->ids);
    size_t differing = 0;
    for (size_t i = 0; i < batched.size(); ++i) differing += batched[i] != decoded[i];
    EXPECT_EQ(differing, 0u) << "of " << batched.size() << " logits; worst |error| / range "
                             << WorstRowError(batched, decoded, (*engine)->n_vocab());
  }
}

// A state copied out of a quantized cache holds the type's bytes and
// continues as the sequence it came from.
TEST_P(CudaKvTypesTest, ACopiedQuantizedStateContinuesAsTheOriginal) {
  std::unique_ptr<Loaded> m = Load(GetParam());
  ASSERT_NE(m, nullptr);
  const KvCacheTypes types{TensorType::kQ8_0, TensorType::kQ4_0};
  CudaEngineConfig config;
  config.max_batch = 4;
  config.gemv_max_rows = 4;
  config.max_sequences = 2;
  absl::StatusOr<std::unique_ptr<CudaEngine>> created = EngineWith(*m, types, config);
  ASSERT_TRUE(created.ok()) << created.status();
  CudaEngine& engine = **created;
  const size_t n_vocab = engine.n_vocab();
  const std::span<const int32_t> ids(m->ids);
  std::unique_ptr<Sequence> original = NewSequence(engine);
  std::unique_ptr<Sequence> other = NewSequence(engine);
  ASSERT_NE(original, nullptr);
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(engine.Forward(*original, ids.first(9), LogitRows::kNone, nullptr).ok());
  absl::StatusOr<std::unique_ptr<SequenceState>> state = engine.CopyState(*original);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)->bytes(), SequenceStateSizeOf(m->model, types).BytesAt(9));
  ASSERT_TRUE(engine.Forward(*other, ids.subspan(3, 5), LogitRows::kNone, nullptr).ok());
  ASSERT_TRUE(engine.LoadState(*other, **state, 9).ok());
  std::vector<float> want(6 * n_vocab), got(6 * n_vocab);
  ASSERT_TRUE(engine.Forward(*original, ids.subspan(9, 6), LogitRows::kAll, want.data()).ok());
  ASSERT_TRUE(engine.Forward(*other, ids.subspan(9, 6), LogitRows::kAll, got.data()).ok());
  EXPECT_EQ(got, want);
}

// Heads of 128 (small), 64 (mixtral-small, qwen35moe-small) and 32
// (qwen35moe-tiny): one to four blocks a row.
INSTANTIATE_TEST_SUITE_P(Vectors, CudaKvTypesTest,
                         ::testing::Values("small-q4_k_m", "mixtral-small-q4_k_m",
                                           "qwen35moe-tiny-f32", "qwen35moe-small-q4_k_m"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(CudaKvTypesArgsTest, EveryTypeIsAcceptedAndBlocksMustDivideTheHead) {
  std::unique_ptr<Loaded> small = Load("small-q4_k_m");  // head_dim 128
  ASSERT_NE(small, nullptr);
  for (TensorType k : kKvCacheTypeChoices) {
    for (TensorType v : kKvCacheTypeChoices) {
      const absl::Status s = EngineWith(*small, {k, v}).status();
      if (CudaDeviceCount() == 0) {
        EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;  // past every check
      } else {
        EXPECT_TRUE(s.ok()) << s;
      }
    }
  }
  std::unique_ptr<Loaded> tiny = Load("tiny-f32");  // head_dim 16
  ASSERT_NE(tiny, nullptr);
  const absl::Status s = EngineWith(*tiny, {TensorType::kF16, TensorType::kQ8_0}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("--cache-type-v q8_0"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace moetier
