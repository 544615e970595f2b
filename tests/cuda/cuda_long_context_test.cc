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
#include "model/architectures.h"
#include "model/kv_cache_types.h"
#include "reference/reference_engine.h"

namespace moetier {
namespace {

struct Case {
  const char* name;
  SynthArch arch;
  KvCacheTypes kv_types;
  double max_range_error;  // against the reference, over the logits' range
};

class CudaLongContextTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device or driver on this machine; run tests/cuda/run-on-gpu.sh "
                      "where a GPU exists";
    }
  }
};

TEST_P(CudaLongContextTest, AFactPlanted100kTokensEarlierReachesTheQuery) {
  const Case& c = GetParam();
  const std::string path =
      ::testing::TempDir() + "moetier_cuda_long_context_" + c.name + ".gguf";
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = testing::WriteLongContextModel(c.arch, path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<Model> model = LoadModel(**gguf);
  ASSERT_TRUE(model.ok()) << model.status();
  CudaEngineConfig config;
  config.max_ctx = testing::kLongContextMaxCtx;
  config.kv_types = c.kv_types;
  absl::StatusOr<std::unique_ptr<CudaEngine>> cuda = CudaEngine::Create(*model, config);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  absl::StatusOr<std::unique_ptr<ReferenceEngine>> ref =
      ReferenceEngine::Create(*model, testing::kLongContextMaxCtx);
  ASSERT_TRUE(ref.ok()) << ref.status();
  testing::ExpectTheFactReachesTheQuery(
      c.name, **cuda,
      [&](Sequence& seq, int n) { return (*cuda)->SkipPositionsForTiming(seq, n); }, **ref,
      [&](Sequence& seq, int n) { return (*ref)->SkipPositions(seq, n); }, c.max_range_error);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaLongContextTest,
    ::testing::Values(Case{"qwen3moe_f32_kv", SynthArch::kQwen3Moe, {}, 1e-5},
                      Case{"qwen35moe_f32_kv", SynthArch::kQwen35Moe, {}, 1e-5},
                      Case{"qwen35moe_q8_0_kv", SynthArch::kQwen35Moe,
                           {TensorType::kQ8_0, TensorType::kQ8_0}, 1e-4}),
    [](const ::testing::TestParamInfo<Case>& param_info) {
      return std::string(param_info.param.name);
    });

}  // namespace
}  // namespace moetier
