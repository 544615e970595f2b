// Continuous batching on the CPU engine (ForwardMany): a serving run in
// which sequences join, prefill in chunks next to others' decode steps and
// leave, gives every sequence bit for bit the logits it gets alone, for
// every architecture of the test vectors, 1 to 8 sequences at once, passes
// split by a small max_batch, and an expert cache in front of the experts.
#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "cache/slot_cached_expert_source.h"
#include "engine/cpu_engine.h"
#include "engine/mapped_expert_source.h"
#include "gtest/gtest.h"
#include "batched_serving.h"
#include "vectors_model.h"

namespace moetier {
namespace {

using testing::Plan;
using testing::Plans;
using testing::SameBits;
using testing::ServeAlone;
using testing::ServeBatched;
using testing::Transcript;

std::unique_ptr<CpuEngine> Engine(const Model& model, int max_sequences, int max_batch,
                                  ExpertWeightSource* source = nullptr) {
  CpuEngineConfig config;
  config.max_ctx = 64;
  config.n_threads = 2;
  config.max_sequences = max_sequences;
  config.max_batch = max_batch;
  config.expert_source = source;
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(model, config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

// Every plan's batched transcript equals its solo one, bit for bit.
void ExpectBatchedEqualsAlone(const Model& model, const std::vector<Plan>& plans,
                              const std::vector<Transcript>& batched) {
  std::unique_ptr<CpuEngine> alone = Engine(model, 1, 256);
  ASSERT_NE(alone, nullptr);
  testing::ExpectBatchedEqualsAlone(*alone, plans, batched);
}

class BatchedForwardTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchedForwardTest, EverySequenceOfABatchGetsItsSoloLogits) {
  std::unique_ptr<testing::VectorsModel> m = testing::LoadVectorsModel(GetParam());
  ASSERT_NE(m, nullptr);
  for (const int width : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE(absl::StrFormat("%d sequences at once", width));
    const std::vector<Plan> plans = Plans(m->ids, width + 3);
    std::unique_ptr<CpuEngine> engine = Engine(m->model, width, 256);
    ASSERT_NE(engine, nullptr);
    ExpectBatchedEqualsAlone(m->model, plans, ServeBatched(*engine, plans, /*chunk=*/5));
  }
}

// Passes of 4 rows split prompt chunks and cut batches between sequences;
// every run is under the 8 tokens from which a DeltaNet layer runs by
// chunks, so each sequence's arithmetic is still the solo one.
TEST_P(BatchedForwardTest, PassesSplitByASmallBatchChangeNothing) {
  std::unique_ptr<testing::VectorsModel> m = testing::LoadVectorsModel(GetParam());
  ASSERT_NE(m, nullptr);
  const std::vector<Plan> plans = Plans(m->ids, 9);
  std::unique_ptr<CpuEngine> engine = Engine(m->model, 6, /*max_batch=*/4);
  ASSERT_NE(engine, nullptr);
  ExpectBatchedEqualsAlone(m->model, plans, ServeBatched(*engine, plans, /*chunk=*/7));
}

// Prefix hits: plans whose prompts begin with a shared start load its state,
// copied from a sequence that computed it, and run the rest batched; they
// get their solo logits bit for bit. Attention-only models also load a
// shorter part of the state (a prompt that forks inside the start); a
// recurrent model's state serves its own length only.
TEST_P(BatchedForwardTest, PrefixHitsGetTheirSoloLogits) {
  std::unique_ptr<testing::VectorsModel> m = testing::LoadVectorsModel(GetParam());
  ASSERT_NE(m, nullptr);
  const bool recurrent = SequenceStateSizeOf(m->model).recurrent_bytes > 0;
  constexpr int kShared = 12;
  const std::vector<int32_t> shared(m->ids.begin(), m->ids.begin() + kShared);
  for (const int width : {1, 3, 8}) {
    SCOPED_TRACE(absl::StrFormat("%d sequences at once", width));
    std::unique_ptr<CpuEngine> engine = Engine(m->model, width, 256);
    ASSERT_NE(engine, nullptr);
    std::unique_ptr<SequenceState> start;
    {
      absl::StatusOr<std::unique_ptr<Sequence>> seq = engine->NewSequence();
      ASSERT_TRUE(seq.ok()) << seq.status();
      ASSERT_TRUE(engine->Forward(**seq, shared, LogitRows::kNone, nullptr).ok());
      absl::StatusOr<std::unique_ptr<SequenceState>> copied = engine->CopyState(**seq);
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
    ExpectBatchedEqualsAlone(m->model, plans, ServeBatched(*engine, plans, /*chunk=*/5));
  }
}

INSTANTIATE_TEST_SUITE_P(Vectors, BatchedForwardTest,
                         ::testing::Values("tiny-q8_0", "mixtral-tiny-f32", "olmoe-tiny-f32",
                                           "qwen35moe-tiny-f32", "qwen35moe-small-q4_k_m",
                                           "gpt-oss-tiny-f32"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Behind a slot cache smaller than a layer's experts, with prefetch: the
// union of the batch's experts is acquired per layer, and still nothing
// changes.
TEST(BatchedForwardCacheTest, AnExpertCacheInFrontChangesNothing) {
  std::unique_ptr<testing::VectorsModel> m = testing::LoadVectorsModel("small-q4_k_m");
  ASSERT_NE(m, nullptr);
  const RoutedExpertShapes shapes = RoutedExpertShapesOf(m->model);
  for (const MissPolicy miss : {MissPolicy::kCopy, MissPolicy::kHost}) {
    SCOPED_TRACE(MissPolicyName(miss));
    MappedExpertSource mapped(m->model.weights);
    HostSlotCacheOptions options;
    options.pool_bytes = MinDynamicPoolBytes(SlotCacheOptionsFor(shapes, {}));
    options.miss_policy = miss;
    absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> cache =
        SlotCachedExpertSource::Create(mapped, shapes, options);
    ASSERT_TRUE(cache.ok()) << cache.status();
    const std::vector<Plan> plans = Plans(m->ids, 7);
    std::unique_ptr<CpuEngine> engine = Engine(m->model, 4, 256, cache->get());
    ASSERT_NE(engine, nullptr);
    ExpectBatchedEqualsAlone(m->model, plans, ServeBatched(*engine, plans, /*chunk=*/4));
    EXPECT_GT((*cache)->cache().stats().misses, 0u);
  }
}

// Counts the expert source's Acquire calls and the experts they name.
class CountingSource final : public ExpertWeightSource {
 public:
  explicit CountingSource(ExpertWeightSource& inner) : inner_(inner) {}
  absl::Status Acquire(int layer, std::span<const int32_t> experts,
                       std::span<ExpertMatrices> out) override {
    ++acquires;
    experts_named += experts.size();
    return inner_.Acquire(layer, experts, out);
  }
  void Release(int layer) override { inner_.Release(layer); }
  int max_experts_held() const override { return inner_.max_experts_held(); }
  int acquires = 0;
  size_t experts_named = 0;

 private:
  ExpertWeightSource& inner_;
};

// The point of batching: a decode step of several sequences asks for each
// layer's experts once, the union of what their tokens route to.
TEST(BatchedForwardCacheTest, ADecodeStepFetchesEachLayersExpertsOnce) {
  std::unique_ptr<testing::VectorsModel> m = testing::LoadVectorsModel("small-q4_k_m");
  ASSERT_NE(m, nullptr);
  MappedExpertSource mapped(m->model.weights);
  CountingSource counting(mapped);
  constexpr int kSequences = 6;
  std::unique_ptr<CpuEngine> engine = Engine(m->model, kSequences, 256, &counting);
  ASSERT_NE(engine, nullptr);
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<std::vector<int32_t>> tokens;
  for (int i = 0; i < kSequences; ++i) {
    absl::StatusOr<std::unique_ptr<Sequence>> seq = engine->NewSequence();
    ASSERT_TRUE(seq.ok()) << seq.status();
    seqs.push_back(*std::move(seq));
    tokens.push_back({m->ids[static_cast<size_t>(i)]});
  }
  std::vector<SequenceStep> steps;
  for (int i = 0; i < kSequences; ++i) steps.push_back({seqs[i].get(), tokens[i], nullptr});
  ASSERT_TRUE(engine->ForwardMany(steps).ok());
  const int n_layer = m->model.hparams.n_layer;
  const int top_k = m->model.hparams.n_expert_used;
  EXPECT_EQ(counting.acquires, n_layer);
  // Distinct experts per layer: at most the tokens' choices, and (with six
  // tokens over few experts) fewer, since shared choices are fetched once.
  EXPECT_LE(counting.experts_named, static_cast<size_t>(n_layer * kSequences * top_k));
  EXPECT_LT(counting.experts_named, static_cast<size_t>(n_layer * kSequences * top_k));

  // The same tokens one sequence after another: an Acquire per sequence.
  counting.acquires = 0;
  for (int i = 0; i < kSequences; ++i) {
    ASSERT_TRUE(engine->Forward(*seqs[i], tokens[i], LogitRows::kNone, nullptr).ok());
  }
  EXPECT_EQ(counting.acquires, n_layer * kSequences);
}

TEST(BatchedForwardErrorsTest, BadStepsAreRefusedBeforeAnythingRuns) {
  std::unique_ptr<testing::VectorsModel> m = testing::LoadVectorsModel("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CpuEngine> engine = Engine(m->model, 2, 256);
  ASSERT_NE(engine, nullptr);
  absl::StatusOr<std::unique_ptr<Sequence>> a = engine->NewSequence();
  absl::StatusOr<std::unique_ptr<Sequence>> b = engine->NewSequence();
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> row(static_cast<size_t>(engine->n_vocab()));
  const std::vector<int32_t> good = {1, 2, 3};
  const std::vector<int32_t> bad = {4, engine->n_vocab()};
  const std::vector<int32_t> none;

  std::vector<SequenceStep> twice = {{a->get(), good, row.data()}, {a->get(), good, nullptr}};
  EXPECT_EQ(engine->ForwardMany(twice).code(), absl::StatusCode::kInvalidArgument);
  std::vector<SequenceStep> outside = {{a->get(), good, row.data()}, {b->get(), bad, nullptr}};
  const absl::Status s = engine->ForwardMany(outside);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("outside the vocabulary"), std::string::npos) << s;
  std::vector<SequenceStep> empty = {{a->get(), none, nullptr}};
  EXPECT_EQ(engine->ForwardMany(empty).code(), absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> too_long(65, 1);
  std::vector<SequenceStep> past = {{b->get(), too_long, nullptr}};
  EXPECT_EQ(engine->ForwardMany(past).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*a)->length(), 0);
  EXPECT_EQ((*b)->length(), 0);
  // Nothing kept for Sample after a ForwardMany.
  std::vector<SequenceStep> fine = {{a->get(), good, row.data()}, {b->get(), good, nullptr}};
  ASSERT_TRUE(engine->ForwardMany(fine).ok());
  EXPECT_EQ((*a)->length(), 3);
  EXPECT_EQ((*b)->length(), 3);
  EXPECT_EQ(engine->LastLogitsRow().status().code(), absl::StatusCode::kFailedPrecondition);
}

// Routes every token to the experts counting down from the last one, so
// that the choice differs from the router's; says whether it routes rows
// alone.
class FixedRouting final : public RoutingOverride {
 public:
  explicit FixedRouting(bool rows_alone) : rows_alone_(rows_alone) {}
  absl::Status Override(const RoutingBatch& batch, std::span<int32_t> experts) override {
    for (size_t i = 0; i < experts.size(); ++i) {
      experts[i] = batch.n_expert - 1 - static_cast<int32_t>(i % batch.top_k);
    }
    return absl::OkStatus();
  }
  bool routes_rows_alone() const override { return rows_alone_; }

 private:
  bool rows_alone_;
};

// An override that follows positions sees one sequence at a time; one that
// routes rows alone may see several, and each sequence gets the logits it
// gets alone under the same override.
TEST(BatchedForwardErrorsTest, RoutingOverridesTakeSeveralSequencesOnlyWhenTheyRouteRowsAlone) {
  std::unique_ptr<testing::VectorsModel> m = testing::LoadVectorsModel("small-q4_k_m");
  ASSERT_NE(m, nullptr);
  for (const bool rows_alone : {false, true}) {
    SCOPED_TRACE(rows_alone ? "rows alone" : "following positions");
    FixedRouting routing(rows_alone);
    CpuEngineConfig config;
    config.max_ctx = 64;
    config.n_threads = 2;
    config.max_sequences = 3;
    config.routing_override = &routing;
    absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(m->model, config);
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<std::unique_ptr<Sequence>> seqs;
    for (int i = 0; i < 3; ++i) seqs.push_back(*(*engine)->NewSequence());
    const size_t n_vocab = static_cast<size_t>((*engine)->n_vocab());
    std::vector<std::vector<float>> rows(3, std::vector<float>(n_vocab));
    std::vector<SequenceStep> steps;
    for (size_t i = 0; i < 3; ++i) {
      steps.push_back({seqs[i].get(), std::span(m->ids).subspan(4 * i, 5), rows[i].data()});
    }
    const absl::Status s = (*engine)->ForwardMany(steps);
    if (!rows_alone) {
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
      continue;
    }
    ASSERT_TRUE(s.ok()) << s;
    for (size_t i = 0; i < 3; ++i) {
      seqs[i].reset();
      absl::StatusOr<std::unique_ptr<Sequence>> alone = (*engine)->NewSequence();
      ASSERT_TRUE(alone.ok()) << alone.status();
      std::vector<float> row(n_vocab);
      ASSERT_TRUE((*engine)
                      ->Forward(**alone, std::span(m->ids).subspan(4 * i, 5), LogitRows::kLast,
                                row.data())
                      .ok());
      EXPECT_TRUE(SameBits(row, rows[i])) << "sequence " << i;
    }
    // The override took effect: the router's own choice gives other logits.
    std::unique_ptr<CpuEngine> routed = Engine(m->model, 1, 256);
    ASSERT_NE(routed, nullptr);
    absl::StatusOr<std::unique_ptr<Sequence>> seq = routed->NewSequence();
    ASSERT_TRUE(seq.ok());
    std::vector<float> row(n_vocab);
    ASSERT_TRUE(
        routed->Forward(**seq, std::span(m->ids).first(5), LogitRows::kLast, row.data()).ok());
    EXPECT_FALSE(SameBits(row, rows[0]));
  }
}

}  // namespace
}  // namespace moetier
