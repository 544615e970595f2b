// A fact planted 100,000 positions before a query reaches it on the CUDA
// engine (tests/worker/long_context.h): the query logits equal the fp32
// reference's within fp32 rounding with f32 and q8_0 KV caches, and depend
// on the fact, so the attention's positions, masks and byte offsets hold at
// that depth. The filler is skipped (CudaEngine::SkipPositionsForTiming),
// not computed. Skips without a GPU.
#include <cstdio>
#include <memory>
#include <string>

#include "backend/cuda/cuda_device.h"
#include "engine/cuda_engine.h"
#include "gtest/gtest.h"
#include "long_context.h"
namespace moetier {
namespace {

class CudaLongContextTest : public ::testing::TestWithParam<testing::LongContextCase> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device or driver on this machine; run "
                      "tests/cuda/run-on-gpu.sh "
                      "where a GPU exists";
    }
  }
};

TEST_P(CudaLongContextTest, AFactPlanted100kTokensEarlierReachesTheQuery) {
  const testing::LongContextCase& c = GetParam();
  absl::StatusOr<std::unique_ptr<testing::LongContextModel>> m =
      testing::OpenLongContextModel(c.arch, std::string("cuda_") + c.name, c.yarn);
  ASSERT_TRUE(m.ok()) << m.status();
  CudaEngineConfig config;
  config.max_ctx = testing::kLongContextMaxCtx;
  config.kv_types = c.kv_types;
  absl::StatusOr<std::unique_ptr<CudaEngine>> cuda = CudaEngine::Create((*m)->model, config);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  testing::ExpectTheFactReachesTheQuery(
      c.name, **cuda, [&](Sequence& seq, int n) { return (*cuda)->SkipPositionsForTiming(seq, n); },
      **m, c.max_range_error);
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaLongContextTest,
    ::testing::Values(testing::LongContextCase{"qwen3moe_f32_kv", SynthArch::kQwen3Moe, {}, 1e-5},
                      testing::LongContextCase{"qwen35moe_f32_kv", SynthArch::kQwen35Moe, {}, 1e-5},
                      testing::LongContextCase{"qwen35moe_q8_0_kv",
                                               SynthArch::kQwen35Moe,
                                               {TensorType::kQ8_0, TensorType::kQ8_0},
                                               1e-4},
                      testing::LongContextCase{
                          "qwen3moe_yarn_f32_kv", SynthArch::kQwen3Moe, {}, 1e-5, true}),
    testing::LongContextCaseName);

}  // namespace
}  // namespace moetier
