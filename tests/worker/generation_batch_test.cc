// Continuous batching (generation/generation_batch.h) on an engine that
// samples ForwardMany's rows where it keeps them (SampleStep, as the CUDA
// engine does): the same tokens as sampling the rows on the host, no row
// asked of the engine for a member that wants none, rows still delivered
// for a member that wants logprobs, and a failed SampleStep ending only
// that member.
#include "generation/generation_batch.h"

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/forward_engine.h"
#include "gtest/gtest.h"
#include "vectors_model.h"

namespace moetier {
namespace {

using testing::LoadVectorsModel;
using testing::VectorsModel;

// Keeps the rows of steps that set sample_in_engine and samples them
// itself, as a GPU engine does; everything else goes to `inner`.
class RowKeepingEngine final : public ForwardEngine {
 public:
  explicit RowKeepingEngine(ForwardEngine& inner)
      : inner_(inner),
        rows_(static_cast<size_t>(inner.max_sequences()),
              std::vector<float>(static_cast<size_t>(inner.n_vocab()))) {}

  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence() override { return inner_.NewSequence(); }
  absl::Status Forward(Sequence& seq, std::span<const int32_t> tokens, LogitRows host_rows,
                       float* host_logits) override {
    kept_.clear();
    return inner_.Forward(seq, tokens, host_rows, host_logits);
  }
  absl::Status ForwardMany(std::span<const SequenceStep> steps) override {
    std::vector<SequenceStep> mine(steps.begin(), steps.end());
    kept_.assign(steps.size(), false);
    for (size_t i = 0; i < mine.size(); ++i) {
      if (!mine[i].sample_in_engine) continue;
      // A row sampled in the engine is not also asked for on the host.
      EXPECT_EQ(mine[i].last_logits, nullptr);
      ++rows_kept_;
      mine[i].last_logits = rows_.at(i).data();
      kept_[i] = true;
    }
    for (const SequenceStep& s : mine) rows_to_host_ += s.last_logits != nullptr && !s.sample_in_engine;
    return inner_.ForwardMany(mine);
  }
  absl::Status SaveCheckpoint(Sequence& seq) override { return inner_.SaveCheckpoint(seq); }
  absl::Status RestoreCheckpoint(Sequence& seq) override { return inner_.RestoreCheckpoint(seq); }
  absl::StatusOr<int32_t> Sample(Sampler& sampler) override { return inner_.Sample(sampler); }
  absl::StatusOr<std::span<const float>> LastLogitsRow() override {
    return inner_.LastLogitsRow();
  }
  bool SamplesStepsInPlace() const override { return true; }
  absl::StatusOr<int32_t> SampleStep(size_t step, Sampler& sampler) override {
    if (++samples_ == fail_sample_) return absl::InternalError("the device fell off the bus");
    if (step >= kept_.size() || !kept_[step]) {
      return absl::FailedPreconditionError("step kept no row");
    }
    return sampler.Sample(rows_[step]);
  }
  int n_vocab() const override { return inner_.n_vocab(); }
  int max_ctx() const override { return inner_.max_ctx(); }
  int max_sequences() const override { return inner_.max_sequences(); }

  int samples() const { return samples_; }
  int rows_kept() const { return rows_kept_; }
  int rows_to_host() const { return rows_to_host_; }
  // The n-th SampleStep (1-based) fails; 0: none.
  void FailSample(int n) { fail_sample_ = n; }

 private:
  ForwardEngine& inner_;
  std::vector<std::vector<float>> rows_;
  std::vector<bool> kept_;
  int samples_ = 0, rows_kept_ = 0, rows_to_host_ = 0, fail_sample_ = 0;
};

struct Outcome {
  std::vector<int32_t> tokens;
  int with_logprobs = 0;
  GenerationResult result;
  bool finished = false;
};

class Recorder final : public GenerationEvents {
 public:
  absl::Status OnToken(uint64_t id, int32_t token, bool, double,
                       const TokenLogprobs* logprobs) override {
    outcomes[id].tokens.push_back(token);
    outcomes[id].with_logprobs += logprobs != nullptr;
    return absl::OkStatus();
  }
  absl::Status OnFinished(uint64_t id, const GenerationResult& result, std::unique_ptr<Sequence>,
                          std::vector<int32_t>) override {
    outcomes[id].result = result;
    outcomes[id].finished = true;
    return absl::OkStatus();
  }
  std::map<uint64_t, Outcome> outcomes;
};

// Four requests, joining one step apart, with different prompts, lengths
// and samplers; request 3 wants logprobs.
std::vector<BatchedGeneration> Requests(const std::vector<int32_t>& ids) {
  std::vector<BatchedGeneration> out;
  for (int i = 0; i < 4; ++i) {
    BatchedGeneration r;
    r.id = static_cast<uint64_t>(i + 1);
    for (int j = 0; j < 3 + 2 * i; ++j) {
      r.prompt.push_back(ids[static_cast<size_t>(i * 2 + j) % ids.size()]);
    }
    r.max_new_tokens = 5 + i;
    r.sampling.temperature = i == 0 ? 0.0f : 0.9f;
    r.sampling.top_k = i == 2 ? 0 : 20;
    r.sampling.repeat_penalty = i == 1 ? 1.2f : 1.0f;
    r.sampling.seed = 100 + static_cast<uint64_t>(i);
    r.top_logprobs = i == 3 ? 2 : -1;
    out.push_back(std::move(r));
  }
  return out;
}

// Runs the requests through a batch on `engine`, request i joining at step i.
std::map<uint64_t, Outcome> Serve(ForwardEngine& engine, const std::vector<int32_t>& ids) {
  GenerationBatch batch(engine, /*prefill_chunk=*/4);
  Recorder events;
  std::vector<BatchedGeneration> requests = Requests(ids);
  for (size_t step = 0; step < 200 && (step < requests.size() || !batch.empty()); ++step) {
    if (step < requests.size()) {
      absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
      EXPECT_TRUE(seq.ok()) << seq.status();
      if (!seq.ok()) break;
      batch.Add(requests[step], *std::move(seq));
    }
    const absl::Status s = batch.Step(events);
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_TRUE(batch.empty());
  return events.outcomes;
}

std::unique_ptr<ForwardEngine> CpuEngine(const VectorsModel& m) {
  EngineOptions options;
  options.max_ctx = 64;
  options.max_sequences = 4;
  options.n_threads = 1;
  options.weight_pages = WeightPages::kMapped;
  absl::StatusOr<std::unique_ptr<ForwardEngine>> engine = CreateCpuEngine(m.model, options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

TEST(GenerationBatchTest, SamplingInTheEngineGivesTheHostsTokens) {
  std::unique_ptr<VectorsModel> m = LoadVectorsModel("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<ForwardEngine> plain = CpuEngine(*m);
  std::unique_ptr<ForwardEngine> inner = CpuEngine(*m);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(inner, nullptr);
  ASSERT_FALSE(plain->SamplesStepsInPlace());
  RowKeepingEngine keeping(*inner);

  const std::map<uint64_t, Outcome> want = Serve(*plain, m->ids);
  const std::map<uint64_t, Outcome> got = Serve(keeping, m->ids);
  ASSERT_EQ(got.size(), 4u);
  int sampled_here = 0;
  for (const auto& [id, outcome] : want) {
    SCOPED_TRACE(::testing::Message() << "request " << id);
    const Outcome& g = got.at(id);
    EXPECT_TRUE(g.finished);
    EXPECT_EQ(g.tokens, outcome.tokens);
    EXPECT_EQ(g.result.stop, outcome.result.stop);
    EXPECT_EQ(g.result.generated, outcome.result.generated);
    EXPECT_TRUE(g.result.engine_error.ok()) << g.result.engine_error;
    EXPECT_FALSE(outcome.tokens.empty());
    // Only the logprobs request had rows copied out, and got its logprobs.
    EXPECT_EQ(g.with_logprobs, id == 4 ? static_cast<int>(g.tokens.size()) : 0);
    if (id != 4) sampled_here += static_cast<int>(g.tokens.size());
  }
  EXPECT_EQ(keeping.samples(), sampled_here);
  EXPECT_EQ(keeping.rows_kept(), sampled_here);
  EXPECT_EQ(keeping.rows_to_host(), static_cast<int>(got.at(4).tokens.size()));
}

TEST(GenerationBatchTest, AFailedSampleStepEndsOnlyItsMember) {
  std::unique_ptr<VectorsModel> m = LoadVectorsModel("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<ForwardEngine> inner = CpuEngine(*m);
  ASSERT_NE(inner, nullptr);
  RowKeepingEngine keeping(*inner);
  // The first SampleStep is request 1's first token (it joins first).
  keeping.FailSample(1);
  const std::map<uint64_t, Outcome> got = Serve(keeping, m->ids);
  ASSERT_EQ(got.size(), 4u);
  const Outcome& failed = got.at(1);
  EXPECT_TRUE(failed.finished);
  EXPECT_EQ(failed.result.stop, StopReason::kError);
  EXPECT_EQ(failed.result.engine_error.code(), absl::StatusCode::kInternal);
  EXPECT_NE(failed.result.engine_error.message().find("fell off the bus"), std::string::npos);
  EXPECT_TRUE(failed.tokens.empty());
  for (uint64_t id : {2u, 3u, 4u}) {
    SCOPED_TRACE(::testing::Message() << "request " << id);
    EXPECT_TRUE(got.at(id).finished);
    EXPECT_TRUE(got.at(id).result.engine_error.ok());
    EXPECT_FALSE(got.at(id).tokens.empty());
  }
}

}  // namespace
}  // namespace moetier
