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

namespace moetier {
namespace {

class LongContextTest : public ::testing::TestWithParam<testing::LongContextCase> {};

TEST_P(LongContextTest, AFactPlanted100kTokensEarlierReachesTheQuery) {
  const testing::LongContextCase& c = GetParam();
  absl::StatusOr<std::unique_ptr<testing::LongContextModel>> m =
      testing::OpenLongContextModel(c.arch, std::string("cpu_") + c.name, c.yarn);
  ASSERT_TRUE(m.ok()) << m.status();
  CpuEngineConfig config;
  config.max_ctx = testing::kLongContextMaxCtx;
  config.n_threads = 2;
  config.kv_types = c.kv_types;
  absl::StatusOr<std::unique_ptr<CpuEngine>> cpu = CpuEngine::Create((*m)->model, config);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  testing::ExpectTheFactReachesTheQuery(
      c.name, **cpu, [&](Sequence& seq, int n) { return (*cpu)->SkipPositionsForTiming(seq, n); },
      **m, c.max_range_error);
}

INSTANTIATE_TEST_SUITE_P(
    Models, LongContextTest,
    ::testing::Values(
        testing::LongContextCase{"qwen3moe_f32_kv", SynthArch::kQwen3Moe, {}, 1e-5},
        testing::LongContextCase{
            "qwen3moe_f16_kv", SynthArch::kQwen3Moe, {TensorType::kF16, TensorType::kF16}, 1e-3},
        testing::LongContextCase{"qwen35moe_f32_kv", SynthArch::kQwen35Moe, {}, 1e-5},
        testing::LongContextCase{"qwen35moe_q8_0_kv",
                                 SynthArch::kQwen35Moe,
                                 {TensorType::kQ8_0, TensorType::kQ8_0},
                                 1e-4},
        testing::LongContextCase{"qwen3moe_yarn_f32_kv", SynthArch::kQwen3Moe, {}, 1e-5, true}),
    testing::LongContextCaseName);

}  // namespace
}  // namespace moetier
