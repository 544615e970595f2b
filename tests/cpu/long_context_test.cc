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
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/cpu_engine.h"
#include "gguf/gguf_reader.h"
#include "gtest/gtest.h"
#include "model/architectures.h"
#include "model/kv_cache_types.h"
#include "reference/reference_engine.h"
#include "synth/synth_model.h"
#include "synth/synth_writer.h"

namespace moetier {
namespace {

constexpr int kFiller = 100000;
constexpr int kMaxCtx = kFiller + 64;

struct Case {
  const char* name;
  SynthArch arch;
  KvCacheTypes kv_types;
  double max_range_error;  // CPU against the reference, over the logits' range
};

// Tiny f32 weights (so the CPU engine computes in f32, close to the
// reference) with a training context past the filler.
absl::StatusOr<std::unique_ptr<GgufModel>> WriteModel(const Case& c, std::string* path) {
  absl::StatusOr<SynthShape> shape = SynthPreset(c.arch, "tiny");
  if (!shape.ok()) return shape.status();
  shape->n_ctx = 131072;
  SynthOptions options;
  options.shape = *shape;
  options.quant = SynthQuant::kF32;
  options.seed = 11;
  options.threads = 2;
  options.out_path = std::string(MOETIER_BINARY_DIR) + "/cpu_long_context_" + c.name + ".gguf";
  *path = options.out_path;
  absl::StatusOr<SynthPlan> plan = PlanSynthModel(options);
  if (!plan.ok()) return plan.status();
  if (absl::Status s = WriteSynthModel(*plan, options); !s.ok()) return s;
  return GgufModel::Open(options.out_path);
}

// The query's last logits row after `fact`, the filler skipped, `query`.
template <typename Engine>
std::vector<float> QueryLogits(Engine& engine, const std::vector<int32_t>& fact,
                               const std::vector<int32_t>& query) {
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  EXPECT_TRUE(seq.ok()) << seq.status();
  if (!seq.ok()) return {};
  std::vector<float> row(static_cast<size_t>(engine.n_vocab()));
  EXPECT_TRUE(engine.Forward(**seq, fact, LogitRows::kNone, nullptr).ok());
  absl::Status skipped;
  if constexpr (std::is_same_v<Engine, CpuEngine>) {
    skipped = engine.SkipPositionsForTiming(**seq, kFiller);
  } else {
    skipped = engine.SkipPositions(**seq, kFiller);
  }
  EXPECT_TRUE(skipped.ok()) << skipped;
  const absl::Status s = engine.Forward(**seq, query, LogitRows::kLast, row.data());
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ((*seq)->length(), static_cast<int>(fact.size() + kFiller + query.size()));
  return row;
}

double MaxAbsDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

double Range(const std::vector<float>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return double(*hi) - *lo;
}

class LongContextTest : public ::testing::TestWithParam<Case> {};

TEST_P(LongContextTest, AFactPlanted100kTokensEarlierReachesTheQuery) {
  const Case& c = GetParam();
  std::string path;
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = WriteModel(c, &path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<Model> model = LoadModel(**gguf);
  ASSERT_TRUE(model.ok()) << model.status();
  CpuEngineConfig config;
  config.max_ctx = kMaxCtx;
  config.n_threads = 2;
  config.kv_types = c.kv_types;
  absl::StatusOr<std::unique_ptr<CpuEngine>> cpu = CpuEngine::Create(*model, config);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::unique_ptr<ReferenceEngine>> ref = ReferenceEngine::Create(*model, kMaxCtx);
  ASSERT_TRUE(ref.ok()) << ref.status();

  const std::vector<int32_t> query = {7, 300, 41, 5};
  const std::vector<int32_t> fact_a = {101, 202, 303, 404, 55, 66, 77, 88};
  std::vector<int32_t> fact_b = fact_a;
  fact_b[2] = 17;  // one token of the fact differs
  const std::vector<float> cpu_a = QueryLogits(**cpu, fact_a, query);
  const std::vector<float> ref_a = QueryLogits(**ref, fact_a, query);
  const std::vector<float> cpu_b = QueryLogits(**cpu, fact_b, query);
  const std::vector<float> ref_b = QueryLogits(**ref, fact_b, query);
  ASSERT_FALSE(cpu_a.empty() || ref_a.empty() || cpu_b.empty() || ref_b.empty());

  const double error = std::max(MaxAbsDifference(cpu_a, ref_a), MaxAbsDifference(cpu_b, ref_b));
  const double fact_effect = MaxAbsDifference(ref_a, ref_b);
  std::printf("%s: logits range %.3g, CPU vs reference %.3g, effect of the fact %.3g\n", c.name,
              Range(ref_a), error, fact_effect);
  EXPECT_LT(error / Range(ref_a), c.max_range_error);
  EXPECT_GT(fact_effect, 20 * error) << "the fact, 100k positions back, must reach the query";
  EXPECT_GT(MaxAbsDifference(cpu_a, cpu_b), 20 * error);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Models, LongContextTest,
    ::testing::Values(Case{"qwen3moe_f32_kv", SynthArch::kQwen3Moe, {}, 1e-5},
                      Case{"qwen3moe_f16_kv", SynthArch::kQwen3Moe,
                           {TensorType::kF16, TensorType::kF16}, 1e-3},
                      Case{"qwen35moe_f32_kv", SynthArch::kQwen35Moe, {}, 1e-5}),
    [](const ::testing::TestParamInfo<Case>& param_info) {
      return std::string(param_info.param.name);
    });

}  // namespace
}  // namespace moetier
