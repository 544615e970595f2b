// The long-context check shared by the CPU and CUDA engine tests: a tiny
// f32 synthetic model with a training context past 100k, a few "fact"
// tokens computed at positions 0..7, the next kFiller positions skipped in
// both the engine and the fp32 reference (their keys and values zero:
// every attention layer still weighs them in its softmax), and the logits
// of a query after them. An engine that gets positions and masks right
// gives the reference's query logits within its rounding, and a different
// fact moves them by far more than that.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/forward_engine.h"
#include "gguf/gguf_reader.h"
#include "gtest/gtest.h"
#include "model/architectures.h"
#include "model/kv_cache_types.h"
#include "reference/reference_engine.h"
#include "synth/synth_model.h"
#include "synth/synth_writer.h"

namespace moetier::testing {

inline constexpr int kLongContextFiller = 100000;
inline constexpr int kLongContextMaxCtx = kLongContextFiller + 64;

// One engine configuration to check: the model's architecture, the KV cache
// types, and how far from the reference its query logits may be.
struct LongContextCase {
  const char* name;
  SynthArch arch;
  KvCacheTypes kv_types;
  double max_range_error;  // against the reference, over the logits' range
  // YaRN x4 from an original context of 32768 (Qwen3's 128K setting), so
  // the query's positions lie far past the ramp; false: unscaled rope.
  bool yarn = false;
};

// gtest prints the parameter of a failed case by its name, not its bytes.
inline void PrintTo(const LongContextCase& c, std::ostream* os) { *os << c.name; }

inline std::string LongContextCaseName(
    const ::testing::TestParamInfo<LongContextCase>& param_info) {
  return param_info.param.name;
}

// The tiny f32 model written under the test temp folder (removed with
// it), loaded, and the fp32 reference over it.
struct LongContextModel {
  std::string path;
  std::unique_ptr<GgufModel> gguf;
  Model model;
  std::unique_ptr<ReferenceEngine> reference;
  ~LongContextModel() { std::remove(path.c_str()); }
};

// `name` tells the files of concurrent tests apart.
inline absl::StatusOr<std::unique_ptr<LongContextModel>> OpenLongContextModel(
    SynthArch arch, const std::string& name, bool yarn = false) {
  auto m = std::make_unique<LongContextModel>();
  m->path = ::testing::TempDir() + "moetier_long_context_" + name + ".gguf";
  absl::StatusOr<SynthShape> shape = SynthPreset(arch, "tiny");
  if (!shape.ok()) return shape.status();
  shape->n_ctx = 131072;
  if (yarn) {
    shape->rope_scaling_type = "yarn";
    shape->rope_scaling_factor = 4.0f;
    shape->rope_scaling_original_ctx = 32768;
  }
  SynthOptions options;
  options.shape = *shape;
  options.quant = SynthQuant::kF32;  // close to the reference's arithmetic
  options.seed = 11;
  options.threads = 2;
  options.out_path = m->path;
  absl::StatusOr<SynthPlan> plan = PlanSynthModel(options);
  if (!plan.ok()) return plan.status();
  if (absl::Status s = WriteSynthModel(*plan, options); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(m->path);
  if (!gguf.ok()) return gguf.status();
  m->gguf = *std::move(gguf);
  absl::StatusOr<Model> model = LoadModel(*m->gguf);
  if (!model.ok()) return model.status();
  m->model = *std::move(model);
  absl::StatusOr<std::unique_ptr<ReferenceEngine>> reference =
      ReferenceEngine::Create(m->model, kLongContextMaxCtx);
  if (!reference.ok()) return reference.status();
  m->reference = *std::move(reference);
  return m;
}

using SkipPositionsFn = std::function<absl::Status(Sequence&, int)>;

// The query's last logits row after `fact`, the filler skipped with `skip`,
// then `query`.
inline std::vector<float> LongContextQueryLogits(ForwardEngine& engine, const SkipPositionsFn& skip,
                                                 const std::vector<int32_t>& fact,
                                                 const std::vector<int32_t>& query) {
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  EXPECT_TRUE(seq.ok()) << seq.status();
  if (!seq.ok()) return {};
  std::vector<float> row(static_cast<size_t>(engine.n_vocab()));
  EXPECT_TRUE(engine.Forward(**seq, fact, LogitRows::kNone, nullptr).ok());
  const absl::Status skipped = skip(**seq, kLongContextFiller);
  EXPECT_TRUE(skipped.ok()) << skipped;
  const absl::Status s = engine.Forward(**seq, query, LogitRows::kLast, row.data());
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ((*seq)->length(), static_cast<int>(fact.size() + kLongContextFiller + query.size()));
  return row;
}

inline double MaxAbsDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

inline double Range(const std::vector<float>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return double(*hi) - *lo;
}

// Runs both facts through the engine (skipping the filler with `skip`) and
// m's reference and checks the engine within max_range_error of the
// reference's logit range, and that the fact matters 20 times more than
// that error.
inline void ExpectTheFactReachesTheQuery(const char* name, ForwardEngine& engine,
                                         const SkipPositionsFn& engine_skip, LongContextModel& m,
                                         double max_range_error) {
  ReferenceEngine& reference = *m.reference;
  const SkipPositionsFn reference_skip = [&](Sequence& seq, int n) {
    return reference.SkipPositions(seq, n);
  };
  const std::vector<int32_t> query = {7, 300, 41, 5};
  const std::vector<int32_t> fact_a = {101, 202, 303, 404, 55, 66, 77, 88};
  std::vector<int32_t> fact_b = fact_a;
  fact_b[2] = 17;  // one token of the fact differs
  const std::vector<float> got_a = LongContextQueryLogits(engine, engine_skip, fact_a, query);
  const std::vector<float> ref_a = LongContextQueryLogits(reference, reference_skip, fact_a, query);
  const std::vector<float> got_b = LongContextQueryLogits(engine, engine_skip, fact_b, query);
  const std::vector<float> ref_b = LongContextQueryLogits(reference, reference_skip, fact_b, query);
  ASSERT_FALSE(got_a.empty() || ref_a.empty() || got_b.empty() || ref_b.empty());
  const double error = std::max(MaxAbsDifference(got_a, ref_a), MaxAbsDifference(got_b, ref_b));
  const double fact_effect = MaxAbsDifference(ref_a, ref_b);
  std::printf(
      "%s: logits range %.3g, engine vs reference %.3g, effect of the "
      "fact %.3g\n",
      name, Range(ref_a), error, fact_effect);
  EXPECT_LT(error / Range(ref_a), max_range_error);
  EXPECT_GT(fact_effect, 20 * error) << "the fact, 100k positions back, must reach the query";
  EXPECT_GT(MaxAbsDifference(got_a, got_b), 20 * error);
}

}  // namespace moetier::testing
