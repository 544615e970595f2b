// A fact planted 100,000 tokens before a query reaches it: positions and
// masks at long context, checked against the fp32 reference (not model
// quality). A few "fact" tokens are computed at positions 0..7, the next
// 100,000 positions are skipped in both engines (their keys and values
// zero: every attention layer still weighs them in its softmax), and a
// query runs at position 100,008 on. The CPU engine's query logits equal
// the reference's within its rounding, and they depend on the fact: a
// different fact moves them by far more than that rounding, so the
// query's attention and rotary positions reach back across the whole
// context.
#include <cstdio>
#include <memory>
#include <string>

#include "engine/cpu_engine.h"
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
  double max_range_error;  // CPU against the reference, over the logits' range
};

class LongContextTest : public ::testing::TestWithParam<Case> {};

TEST_P(LongContextTest, AFactPlanted100kTokensEarlierReachesTheQuery) {
  const Case& c = GetParam();
  const std::string path =
      ::testing::TempDir() + "moetier_cpu_long_context_" + c.name + ".gguf";
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = testing::WriteLongContextModel(c.arch, path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<Model> model = LoadModel(**gguf);
  ASSERT_TRUE(model.ok()) << model.status();
  CpuEngineConfig config;
  config.max_ctx = testing::kLongContextMaxCtx;
  config.n_threads = 2;
  config.kv_types = c.kv_types;
  absl::StatusOr<std::unique_ptr<CpuEngine>> cpu = CpuEngine::Create(*model, config);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::unique_ptr<ReferenceEngine>> ref =
      ReferenceEngine::Create(*model, testing::kLongContextMaxCtx);
  ASSERT_TRUE(ref.ok()) << ref.status();
  testing::ExpectTheFactReachesTheQuery(
      c.name, **cpu,
      [&](Sequence& seq, int n) { return (*cpu)->SkipPositionsForTiming(seq, n); }, **ref,
      [&](Sequence& seq, int n) { return (*ref)->SkipPositions(seq, n); }, c.max_range_error);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Models, LongContextTest,
    ::testing::Values(Case{"qwen3moe_f32_kv", SynthArch::kQwen3Moe, {}, 1e-5},
                      Case{"qwen3moe_f16_kv", SynthArch::kQwen3Moe,
                           {TensorType::kF16, TensorType::kF16}, 1e-3},
                      Case{"qwen35moe_f32_kv", SynthArch::kQwen35Moe, {}, 1e-5},
                      Case{"qwen35moe_q8_0_kv", SynthArch::kQwen35Moe,
                           {TensorType::kQ8_0, TensorType::kQ8_0}, 1e-4}),
    [](const ::testing::TestParamInfo<Case>& param_info) {
      return std::string(param_info.param.name);
    });

}  // namespace
}  // namespace moetier
