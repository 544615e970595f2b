// Sampling without copying the logits row: TopCandidates selects a row's
// best logits on the device in the host sampler's order, and the engine's
// Sample draws from them (Sampler::SampleFromBest) the very tokens the host
// sampler draws from the whole row. Argument checks run everywhere; the
// rest skips without a device.
#include <algorithm>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_kernels.h"
#include "cuda_test_util.h"
#include "device_buffer.h"
#include "engine/cuda_engine.h"
#include "gtest/gtest.h"
#include "sampling/sampler.h"

namespace moetier {
namespace {

using cuda_test::DeviceBuffer;
using cuda_test::Load;
using cuda_test::Loaded;
using cuda_test::NewSequence;

class CudaSamplingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device or driver on this machine; run tests/cuda/run-on-gpu.sh "
                      "where a GPU exists";
    }
  }
};

// The host's answer: ids of the m best, best first.
std::vector<int32_t> HostBest(const std::vector<float>& row, int m) {
  std::vector<int32_t> order(row.size());
  for (size_t i = 0; i < row.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::partial_sort(order.begin(), order.begin() + m, order.end(), [&](int32_t a, int32_t b) {
    return row[a] != row[b] ? row[a] > row[b] : a < b;
  });
  order.resize(static_cast<size_t>(m));
  return order;
}

TEST_F(CudaSamplingTest, TopCandidatesAreTheHostsBestInOrder) {
  std::mt19937 rng(11);
  const float inf = std::numeric_limits<float>::infinity();
  for (int n_vocab : {1, 7, 2047, 2048, 2049, 50000, 151936}) {
    // Coarse levels: many ties across tiles. Some -inf, -0 and +0 too.
    std::vector<float> row(static_cast<size_t>(n_vocab));
    std::uniform_int_distribution<int> level(-200, 200);
    for (float& v : row) v = 0.0625f * static_cast<float>(level(rng));
    for (int i = 0; i < n_vocab / 50; ++i) row[rng() % n_vocab] = -inf;
    for (int i = 0; i < n_vocab / 50; ++i) row[rng() % n_vocab] = (i % 2) ? -0.0f : 0.0f;
    DeviceBuffer row_dev(row);
    const int64_t scratch_keys = cuda::TopCandidatesScratchKeys(n_vocab);
    DeviceBuffer scratch(static_cast<size_t>(scratch_keys) * sizeof(uint64_t));
    DeviceBuffer ids(cuda::kMaxTopCandidates * sizeof(int32_t));
    DeviceBuffer values(cuda::kMaxTopCandidates * sizeof(float));
    for (int m : {1, 2, 40, 104, cuda::kMaxTopCandidates}) {
      if (m > n_vocab) continue;
      SCOPED_TRACE(::testing::Message() << "n_vocab " << n_vocab << ", m " << m);
      ASSERT_TRUE(cuda::TopCandidates(row_dev.as<float>(), n_vocab, m, scratch.as<uint64_t>(),
                                      scratch_keys, ids.as<int32_t>(), values.as<float>(),
                                      nullptr)
                      .ok());
      const std::vector<int32_t> want = HostBest(row, m);
      EXPECT_EQ(ids.Download<int32_t>(static_cast<size_t>(m)), want);
      const std::vector<float> got_values = values.Download<float>(static_cast<size_t>(m));
      for (int i = 0; i < m; ++i) {
        // The row's own bits, -0 included.
        EXPECT_EQ(std::signbit(got_values[i]), std::signbit(row[want[i]]));
        EXPECT_EQ(got_values[i], row[want[i]]);
      }
    }
    // A gather of chosen ids.
    const std::vector<int32_t> some = {0, n_vocab - 1, n_vocab / 2};
    DeviceBuffer some_dev(some);
    DeviceBuffer out(some.size() * sizeof(float));
    ASSERT_TRUE(cuda::GatherLogits(row_dev.as<float>(), some_dev.as<int32_t>(),
                                   static_cast<int>(some.size()), out.as<float>(), nullptr)
                    .ok());
    const std::vector<float> gathered = out.Download<float>(some.size());
    for (size_t i = 0; i < some.size(); ++i) EXPECT_EQ(gathered[i], row[some[i]]);
  }
}

TEST(CudaSamplingArgsTest, BadCandidateRequestsAreRefusedBeforeAnyLaunch) {
  float f[4] = {};
  auto* keys = reinterpret_cast<uint64_t*>(f);
  auto* ids = reinterpret_cast<int32_t*>(f);
  const int64_t enough = cuda::TopCandidatesScratchKeys(1000);
  EXPECT_EQ(cuda::TopCandidates(f, 1000, 0, keys, enough, ids, f, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::TopCandidates(f, 1000, cuda::kMaxTopCandidates + 1, keys, enough, ids, f,
                                nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::TopCandidates(f, 10, 11, keys, enough, ids, f, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // more than the row
  const absl::Status small = cuda::TopCandidates(f, 1000, 8, keys, enough - 1, ids, f, nullptr);
  EXPECT_EQ(small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.message().find("scratch"), absl::string_view::npos) << small;
  EXPECT_EQ(cuda::TopCandidates(nullptr, 1000, 8, keys, enough, ids, f, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::GatherLogits(f, nullptr, 1, f, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_GE(cuda::TopCandidatesScratchKeys(151936), 2 * 75 * cuda::kMaxTopCandidates);
}

// The engine's Sample against the host sampler over the whole row
// (LastLogitsRow of a second engine fed the same tokens): the same token at
// every step of a generation, each accepted into both samplers' penalty
// windows, for settings that take the candidate path and one that does not.
TEST_F(CudaSamplingTest, EngineSampleDrawsTheHostSamplersTokens) {
  std::unique_ptr<Loaded> m = Load("small-q4_k_m");
  ASSERT_NE(m, nullptr);
  struct Case {
    float temperature;
    int top_k;
    float top_p, min_p, penalty;
  };
  const Case cases[] = {
      {0.8f, 40, 0.95f, 0.05f, 1.0f},  // the chat defaults
      {1.5f, 5, 1.0f, 0.0f, 1.3f},     // penalized tokens may leave the top-k
      {0.0f, 0, 1.0f, 0.0f, 1.5f},     // greedy with a penalty
      {0.9f, 0, 0.9f, 0.0f, 1.0f},     // no top-k: the whole row
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "temperature " << c.temperature << ", top_k " << c.top_k
                                      << ", penalty " << c.penalty);
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.repeat_penalty = c.penalty;
    p.repeat_last_n = 8;
    p.seed = 5;
    CudaEngineConfig config;
    config.max_ctx = 64;
    absl::StatusOr<std::unique_ptr<CudaEngine>> device = CudaEngine::Create(m->model, config);
    absl::StatusOr<std::unique_ptr<CudaEngine>> host = CudaEngine::Create(m->model, config);
    ASSERT_TRUE(device.ok()) << device.status();
    ASSERT_TRUE(host.ok()) << host.status();
    std::unique_ptr<Sequence> a = NewSequence(**device);
    std::unique_ptr<Sequence> b = NewSequence(**host);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    const int n_vocab = (*device)->n_vocab();
    Sampler on_device(n_vocab, p), on_host(n_vocab, p);
    const int32_t first[1] = {m->ids[0]};
    ASSERT_TRUE((*device)->Forward(*a, first, LogitRows::kNone, nullptr).ok());
    ASSERT_TRUE((*host)->Forward(*b, first, LogitRows::kNone, nullptr).ok());
    for (int step = 0; step < 24; ++step) {
      absl::StatusOr<int32_t> got = (*device)->Sample(on_device);
      ASSERT_TRUE(got.ok()) << got.status();
      absl::StatusOr<std::span<const float>> row = (*host)->LastLogitsRow();
      ASSERT_TRUE(row.ok()) << row.status();
      const int32_t want = on_host.Sample(*row);
      ASSERT_EQ(*got, want) << "step " << step;
      on_device.Accept(*got);
      on_host.Accept(want);
      const int32_t next[1] = {want};
      ASSERT_TRUE((*device)->Forward(*a, next, LogitRows::kNone, nullptr).ok());
      ASSERT_TRUE((*host)->Forward(*b, next, LogitRows::kNone, nullptr).ok());
    }
  }
}

// ForwardMany's rows kept on the device (sample_in_engine) and sampled
// there with SampleStep: the tokens Forward + Sample give each sequence
// alone. A small max_batch splits the prompts over passes, so kept rows
// must survive the passes after theirs; a one-token step alone goes
// through the decode graph.
TEST_F(CudaSamplingTest, SampleStepDrawsWhatSampleDrawsAlone) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  CudaEngineConfig config;
  config.max_ctx = 64;
  config.max_sequences = 3;
  config.max_batch = 5;
  absl::StatusOr<std::unique_ptr<CudaEngine>> batched = CudaEngine::Create(m->model, config);
  absl::StatusOr<std::unique_ptr<CudaEngine>> alone = CudaEngine::Create(m->model, config);
  ASSERT_TRUE(batched.ok()) << batched.status();
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_TRUE((*batched)->SamplesStepsInPlace());
  const int n_vocab = (*batched)->n_vocab();
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  p.seed = 9;
  // Three prompts of 7, 3 and 4 tokens: 14 rows over passes of 5.
  const std::vector<std::vector<int32_t>> prompts = {
      {m->ids.begin(), m->ids.begin() + 7},
      {m->ids.begin() + 7, m->ids.begin() + 10},
      {m->ids.begin() + 10, m->ids.begin() + 14}};
  std::vector<int32_t> want;
  for (const std::vector<int32_t>& prompt : prompts) {
    std::unique_ptr<Sequence> seq = NewSequence(**alone);
    ASSERT_NE(seq, nullptr);
    Sampler sampler(n_vocab, p);
    ASSERT_TRUE((*alone)->Forward(*seq, prompt, LogitRows::kNone, nullptr).ok());
    absl::StatusOr<int32_t> t = (*alone)->Sample(sampler);
    ASSERT_TRUE(t.ok()) << t.status();
    want.push_back(*t);
  }
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<SequenceStep> steps;
  for (const std::vector<int32_t>& prompt : prompts) {
    seqs.push_back(NewSequence(**batched));
    ASSERT_NE(seqs.back(), nullptr);
    steps.push_back({seqs.back().get(), prompt, nullptr, /*sample_in_engine=*/true});
  }
  steps[1].sample_in_engine = false;  // this one keeps no row
  ASSERT_TRUE((*batched)->ForwardMany(steps).ok());
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "step " << i);
    Sampler sampler(n_vocab, p);
    absl::StatusOr<int32_t> got = (*batched)->SampleStep(i, sampler);
    if (i == 1) {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want[i]);
  }
  // One sequence's one-token step: replayed from its graph, its row kept.
  std::unique_ptr<Sequence> a = NewSequence(**alone);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE((*alone)->Forward(*a, prompts[0], LogitRows::kNone, nullptr).ok());
  const int32_t next[1] = {m->ids[20]};
  ASSERT_TRUE((*alone)->Forward(*a, next, LogitRows::kNone, nullptr).ok());
  Sampler solo(n_vocab, p), in_engine(n_vocab, p);
  absl::StatusOr<int32_t> want_next = (*alone)->Sample(solo);
  ASSERT_TRUE(want_next.ok());
  const SequenceStep one{seqs[0].get(), next, nullptr, true};
  ASSERT_TRUE((*batched)->ForwardMany(std::span<const SequenceStep>(&one, 1)).ok());
  absl::StatusOr<int32_t> got_next = (*batched)->SampleStep(0, in_engine);
  ASSERT_TRUE(got_next.ok()) << got_next.status();
  EXPECT_EQ(*got_next, *want_next);
  EXPECT_GE((*batched)->captured_decode_graphs(), 1);
  // A Forward since: no kept row any more.
  ASSERT_TRUE((*batched)->Forward(*seqs[2], next, LogitRows::kNone, nullptr).ok());
  EXPECT_EQ((*batched)->SampleStep(0, in_engine).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace moetier
