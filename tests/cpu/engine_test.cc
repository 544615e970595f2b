// The CPU engine on the test vectors of tests/data/vectors (see its
// README.md): exact logits for every file, llama.cpp's distance from them as
// the bar on quantized files, and self-consistency of batching, incremental
// decoding, thread counts and SIMD levels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_kernels.h"
#include "engine/cpu_engine.h"
#include "engine_run.h"
#include "gguf/gguf_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/architectures.h"
#include "reference/reference_engine.h"
#include "vectors_model.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;

std::string VectorPath(const std::string& name) {
  return std::string(MOETIER_TEST_DATA_DIR) + "/vectors/" + name;
}

using testing::Agreement;
using testing::ReadFloats;
using testing::ReadIds;
using testing::WorstRowError;

using Loaded = testing::VectorsModel;

std::unique_ptr<Loaded> Load(const std::string& name) { return testing::LoadVectorsModel(name); }

// The Gated DeltaNet hybrids (qwen35moe, qwen3next), whose recurrence
// carries rounding from token to token.
bool IsHybrid(const std::string& name) {
  return name.starts_with("qwen35moe") || name.starts_with("qwen3next");
}

// max_ctx 0: the vector's length, at least 64.
std::unique_ptr<CpuEngine> Engine(const Loaded& m, int n_threads = 2, int max_batch = 256,
                                  int max_ctx = 0) {
  CpuEngineConfig config;
  config.max_ctx = max_ctx > 0 ? max_ctx : std::max<int>(64, static_cast<int>(m.ids.size()));
  config.n_threads = n_threads;
  config.max_batch = max_batch;
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(m.model, config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

std::vector<float> RunAll(ForwardEngine& engine, const std::vector<int32_t>& ids) {
  return testing::RunNewSequence(engine, ids);
}

std::unique_ptr<Sequence> NewSequenceOrDie(ForwardEngine& engine) {
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  EXPECT_TRUE(seq.ok()) << seq.status();
  return seq.ok() ? *std::move(seq) : nullptr;
}

// Measured: at most 9e-8 from exact (llama.cpp: 1e-3 to 1.5e-2), a
// fraction of at most 1e-5 of llama.cpp's; the bounds leave a wide margin for
// rounding differences between machines.
constexpr double kMaxMeanKlFromExact = 1e-6;
constexpr double kKlFractionOfLlamaCpps = 0.01;

TEST(CpuEngineTest, F32MatchesExactLogits) {
  std::unique_ptr<Loaded> m = Load("tiny-f32");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CpuEngine> engine = Engine(*m);
  ASSERT_NE(engine, nullptr);
  const std::vector<float> expected = ReadFloats(VectorPath("tiny-f32.exact.f32"));
  ASSERT_EQ(expected.size(), m->ids.size() * engine->n_vocab());
  for (cpu::SimdLevel level :
       {cpu::SimdLevel::kScalar, cpu::SimdLevel::kAvx2, cpu::SimdLevel::kAvx512}) {
    if (!cpu::SimdLevelSupported(level)) continue;
    ASSERT_TRUE(cpu::SetSimdLevel(level).ok());
    const std::vector<float> logits = RunAll(*engine, m->ids);
    EXPECT_LT(WorstRowError(logits, expected, engine->n_vocab()), 1e-3)
        << cpu::SimdLevelName(level);
  }
  ASSERT_TRUE(cpu::SetSimdLevel(cpu::BestSupportedSimdLevel()).ok());
}

class F32VectorTest : public ::testing::TestWithParam<const char*> {};

TEST_P(F32VectorTest, MatchesReferenceEngine) {
  std::unique_ptr<Loaded> m = Load(GetParam());
  ASSERT_NE(m, nullptr);
  absl::StatusOr<std::unique_ptr<ReferenceEngine>> ref =
      ReferenceEngine::Create(m->model, std::max<int>(64, static_cast<int>(m->ids.size())));
  ASSERT_TRUE(ref.ok()) << ref.status();
  std::unique_ptr<CpuEngine> engine = Engine(*m);
  ASSERT_NE(engine, nullptr);
  const std::vector<float> want = RunAll(**ref, m->ids);
  const std::vector<float> got = RunAll(*engine, m->ids);
  EXPECT_LT(WorstRowError(got, want, engine->n_vocab()), 1e-4);
}

// qwen3moe, llama with experts (NORM rope, no q/k norm), olmoe (q/k norm
// over the whole projection, no renormalization) and qwen2moe (q/k/v
// biases, a shared expert): one set of blocks; glm4moe (a dense layer, a
// sigmoid router with a selection bias, half-head rope); gpt-oss (sinks,
// a sliding window, biases everywhere, the clamped SwiGLU); multi-section rope
// (qwen35moe and qwen3vlmoe); and rope scaled linearly and by YaRN, and
// divided by llama's rope_freqs.
INSTANTIATE_TEST_SUITE_P(Vectors, F32VectorTest,
                         ::testing::Values("tiny-f32", "mixtral-tiny-f32", "olmoe-tiny-f32",
                                           "qwen35moe-tiny-f32", "yarn-tiny-f32",
                                           "mixtral-linear-tiny-f32", "qwen35moe-yarn-tiny-f32",
                                           "mixtral-rope-freqs-tiny-f32", "qwen3next-tiny-f32",
                                           "qwen3next-ssm-in-tiny-f32", "qwen2moe-tiny-f32",
                                           "qwen3vlmoe-tiny-f32", "glm4moe-tiny-f32",
                                           "ernie45moe-tiny-f32", "gpt-oss-tiny-f32"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string s = param_info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// Quantized files with the residual activation plane (--activations q8x2;
// ctest runs these as cpu_engine_q8x2_activations): the engine computes over
// the dequantized weights, so it is held to the exact logits. Its
// activations keep about 15 bits (two 8-bit planes), so every SIMD level
// lands close to them, and the levels, which
// differ only in float summation order, agree with one another (to 1e-4 of
// the range, except where the DeltaNet recurrence carries rounding from
// token to token).
class QuantizedVectorTest : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantizedVectorTest, CloseToExactLogitsAtEveryLevel) {
  if (!cpu::ActivationsHaveResidualPlane()) {
    GTEST_SKIP() << "needs MOETIER_CPU_ACTIVATIONS=q8x2 (ctest: cpu_engine_q8x2_activations)";
  }
  const std::string name = GetParam();
  std::unique_ptr<Loaded> m = Load(name);
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CpuEngine> engine = Engine(*m);
  ASSERT_NE(engine, nullptr);
  const size_t n_vocab = engine->n_vocab();
  const std::vector<float> exact = ReadFloats(VectorPath(name + ".exact.f32"));
  ASSERT_EQ(exact.size(), m->ids.size() * n_vocab);
  std::vector<float> first;
  for (cpu::SimdLevel level :
       {cpu::SimdLevel::kScalar, cpu::SimdLevel::kAvx2, cpu::SimdLevel::kAvx512}) {
    if (!cpu::SimdLevelSupported(level)) continue;
    SCOPED_TRACE(cpu::SimdLevelName(level));
    ASSERT_TRUE(cpu::SetSimdLevel(level).ok());
    const std::vector<float> logits = RunAll(*engine, m->ids);
    const Agreement a = testing::CompareLogits(logits, exact, n_vocab);
    EXPECT_LE(a.mean_kl, kMaxMeanKlFromExact);
    EXPECT_GE(a.top1_fraction, 0.95);
    if (first.empty()) {
      first = logits;
    } else {
      EXPECT_LT(WorstRowError(logits, first, n_vocab), IsHybrid(name) ? 1e-3 : 1e-4);
    }
  }
  ASSERT_TRUE(cpu::SetSimdLevel(cpu::BestSupportedSimdLevel()).ok());
}

INSTANTIATE_TEST_SUITE_P(Vectors, QuantizedVectorTest,
                         ::testing::Values("tiny-q8_0", "small-q4_k_m", "mixtral-small-q4_k_m",
                                           "qwen35moe-small-q4_k_m", "qwen3next-small-q4_k_m",
                                           "qwen2moe-small-q4_k_m", "qwen3vlmoe-small-q4_k_m",
                                           "glm4moe-small-q4_k_m", "ernie45moe-small-q4_k_m",
                                           "gpt-oss-small-mxfp4", "mixed-low-bit",
                                           "iq-grids-low-bit"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string s = param_info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// llama.cpp's 8-bit activations (Q8_K / Q8_0) cost it most of its distance
// from the exact logits. With one plane (the default, the same formats) the
// engine loses about as much: within 5% of llama.cpp's mean KL (7% on
// tiny-q8_0), and below it on the hybrid model, where llama.cpp loses most;
// its logits also agree with llama.cpp's. mixed-low-bit (made here: every
// weight type beyond Q4_0 and the common K-quants, llama.cpp's logits from
// tests/interop/llamacpp-oracle) is held by its median. On iq-grids-low-bit
// (the i-quant grid types) 8-bit activations cost both engines about 4.5e-2.
// The residual plane (q8x2; ctest
// runs this as cpu_engine_q8x2_activations) removes most of that, to a
// small fraction of llama.cpp's KL on every quantized file.
class FaithfulnessTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FaithfulnessTest, MeanKlFromExactAgainstLlamaCpps) {
  const std::string name = GetParam();
  std::unique_ptr<Loaded> m = Load(name);
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CpuEngine> engine = Engine(*m);
  ASSERT_NE(engine, nullptr);
  const size_t n_vocab = engine->n_vocab();
  const std::vector<float> exact = ReadFloats(VectorPath(name + ".exact.f32"));
  const std::vector<float> llamacpp = ReadFloats(VectorPath(name + ".llamacpp.f32"));
  const std::vector<float> ours = RunAll(*engine, m->ids);
  ASSERT_EQ(exact.size(), ours.size());
  const Agreement a = testing::CompareLogits(ours, exact, n_vocab);
  const Agreement theirs = testing::CompareLogits(llamacpp, exact, n_vocab);
  const bool residual = cpu::ActivationsHaveResidualPlane();
  std::printf("%s (%s): mean KL from exact %.3g (llama.cpp %.3g), top-1 %.3f (llama.cpp %.3f)\n",
              name.c_str(), residual ? "q8x2" : "q8", a.mean_kl, theirs.mean_kl, a.top1_fraction,
              theirs.top1_fraction);
  if (residual) {
    EXPECT_LE(a.mean_kl, kKlFractionOfLlamaCpps * theirs.mean_kl);
    return;
  }
  const Agreement with_llamacpp = testing::CompareLogits(ours, llamacpp, n_vocab);
  EXPECT_LE(with_llamacpp.mean_kl, 1e-2);
  // qwen3next-small-q4_k_m (made here) is touchy: 8-bit activations put
  // both engines 4e-2 mean KL from the exact logits, yet only 8e-4 from each
  // other, and its near-tied top tokens flip at 3 of 24 positions between
  // them; the KL bounds hold it.
  if (name != "qwen3next-small-q4_k_m") {
    EXPECT_GE(with_llamacpp.top1_fraction, 0.9);
  }
  if (name == "mixed-low-bit") {
    // Two of its 24 positions sit on router near-ties that the engine's
    // rounding flips and llama.cpp's does not (KL 0.04 and 0.15 there, below
    // llama.cpp's at most other positions): the median says how the kernels
    // do, the mean how those two fell.
    EXPECT_LE(a.median_kl, 1.2 * theirs.median_kl);
    return;
  }
  const double bound = IsHybrid(name) ? 1.0 : name == "tiny-q8_0" ? 1.07 : 1.05;
  EXPECT_LE(a.mean_kl, bound * theirs.mean_kl);
}

INSTANTIATE_TEST_SUITE_P(Vectors, FaithfulnessTest,
                         ::testing::Values("tiny-q8_0", "small-q4_k_m", "mixtral-small-q4_k_m",
                                           "qwen35moe-small-q4_k_m", "qwen3next-small-q4_k_m",
                                           "qwen2moe-small-q4_k_m", "qwen3vlmoe-small-q4_k_m",
                                           "glm4moe-small-q4_k_m", "ernie45moe-small-q4_k_m",
                                           "gpt-oss-small-mxfp4", "mixed-low-bit",
                                           "iq-grids-low-bit"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string s = param_info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// The recurrent layers: a prompt in batches of any size, and decoding one
// token at a time, carry the same state, with value heads tiled over the
// key heads (qwen35moe) and grouped by them (qwen3next).
TEST(CpuEngineTest, HybridStateIsTheSameInBatchesAndTokenByToken) {
  for (const char* name : {"qwen35moe-tiny-f32", "qwen3next-tiny-f32"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    std::unique_ptr<CpuEngine> whole = Engine(*m, 2, 256);
    ASSERT_NE(whole, nullptr);
    const size_t n_vocab = whole->n_vocab();
    const std::vector<float> want = RunAll(*whole, m->ids);
    for (int batch : {1, 3, 7}) {
      std::unique_ptr<CpuEngine> engine = Engine(*m, 2, batch);
      ASSERT_NE(engine, nullptr);
      EXPECT_LT(WorstRowError(RunAll(*engine, m->ids), want, n_vocab), 1e-5) << "batch " << batch;
    }
    // A prompt, then one token per call.
    std::unique_ptr<Sequence> seq = NewSequenceOrDie(*whole);
    ASSERT_NE(seq, nullptr);
    std::vector<float> step(m->ids.size() * n_vocab);
    ASSERT_TRUE(
        whole->Forward(*seq, std::span(m->ids).first(4), LogitRows::kAll, step.data()).ok());
    for (size_t i = 4; i < m->ids.size(); ++i) {
      ASSERT_TRUE(whole
                      ->Forward(*seq, std::span(m->ids).subspan(i, 1), LogitRows::kAll,
                                step.data() + i * n_vocab)
                      .ok());
    }
    EXPECT_LT(WorstRowError(step, want, n_vocab), 1e-5);
    // A new sequence starts from a zero state.
    seq.reset();
    std::vector<int32_t> other(m->ids.rbegin(), m->ids.rend());
    (void)RunAll(*whole, other);
    EXPECT_EQ(RunAll(*whole, m->ids), want);
  }
}

// The state a sequence holds, from the file's shapes worked out by hand:
// qwen35moe-tiny has one attention layer (2 KV heads x 32) and three DeltaNet
// layers (conv kernel 4 over 2*2*16 + 4*16 channels, 4 value heads of
// 16 x 16), all fp32.
TEST(CpuEngineTest, SequenceStateSizeFollowsTheLayerPlan) {
  std::unique_ptr<Loaded> m = Load("qwen35moe-tiny-f32");
  ASSERT_NE(m, nullptr);
  const SequenceStateSize size = SequenceStateSizeOf(m->model);
  EXPECT_EQ(size.kv_bytes_per_token, 1u * 2 * 2 * 32 * 4);
  EXPECT_EQ(size.recurrent_bytes, 3u * (3 * (2 * 2 * 16 + 4 * 16) + 4 * 16 * 16) * 4);
  std::unique_ptr<Loaded> dense = Load("tiny-f32");  // 4 attention layers, 2 KV heads x 16
  ASSERT_NE(dense, nullptr);
  EXPECT_EQ(SequenceStateSizeOf(dense->model).kv_bytes_per_token, 4u * 2 * 2 * 16 * 4);
  EXPECT_EQ(SequenceStateSizeOf(dense->model).recurrent_bytes, 0u);
}

// A checkpoint brings a sequence back to where it was saved, recurrent
// state included, whatever ran after it.
TEST(CpuEngineTest, RestoringACheckpointRewindsTheSequence) {
  for (const char* name : {"qwen35moe-tiny-f32", "tiny-q8_0"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    std::unique_ptr<CpuEngine> engine = Engine(*m, 2, 4);
    ASSERT_NE(engine, nullptr);
    const size_t n_vocab = engine->n_vocab();
    const std::vector<float> want = RunAll(*engine, m->ids);
    std::unique_ptr<Sequence> seq = NewSequenceOrDie(*engine);
    ASSERT_NE(seq, nullptr);
    EXPECT_EQ(engine->RestoreCheckpoint(*seq).code(), absl::StatusCode::kFailedPrecondition);
    const std::span<const int32_t> ids(m->ids);
    std::vector<float> got(want.size());
    ASSERT_TRUE(engine->Forward(*seq, ids.first(9), LogitRows::kAll, got.data()).ok());
    ASSERT_TRUE(engine->SaveCheckpoint(*seq).ok());
    EXPECT_EQ(seq->checkpoint_length(), 9);
    // Something else after the checkpoint...
    std::vector<int32_t> other(m->ids.rbegin(), m->ids.rend());
    std::vector<float> scratch(other.size() * n_vocab);
    ASSERT_TRUE(engine->Forward(*seq, std::span(other).first(7), LogitRows::kAll, scratch.data())
                    .ok());
    // ...then back, and the rest of the original tokens.
    ASSERT_TRUE(engine->RestoreCheckpoint(*seq).ok());
    EXPECT_EQ(seq->length(), 9);
    ASSERT_TRUE(engine->Forward(*seq, ids.subspan(9), LogitRows::kAll, got.data() + 9 * n_vocab)
                    .ok());
    EXPECT_LT(WorstRowError(got, want, n_vocab), 1e-5);
  }
}

TEST(CpuEngineTest, IncrementalDecodeEqualsWholeSequence) {
  std::unique_ptr<Loaded> m = Load("small-q4_k_m");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CpuEngine> engine = Engine(*m);
  ASSERT_NE(engine, nullptr);
  const size_t n_vocab = engine->n_vocab();
  const std::vector<float> whole = RunAll(*engine, m->ids);
  // A prompt of 5, then one token at a time.
  std::unique_ptr<Sequence> seq = NewSequenceOrDie(*engine);
  ASSERT_NE(seq, nullptr);
  std::vector<float> step(m->ids.size() * n_vocab);
  ASSERT_TRUE(
      engine->Forward(*seq, std::span(m->ids).first(5), LogitRows::kAll, step.data()).ok());
  for (size_t i = 5; i < m->ids.size(); ++i) {
    ASSERT_TRUE(engine
                    ->Forward(*seq, std::span(m->ids).subspan(i, 1), LogitRows::kAll,
                              step.data() + i * n_vocab)
                    .ok());
    EXPECT_EQ(seq->length(), static_cast<int>(i + 1));
  }
  EXPECT_LT(WorstRowError(step, whole, n_vocab), 1e-5);
}

TEST(CpuEngineTest, BatchSizeAndThreadCountDoNotChangeLogits) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CpuEngine> base = Engine(*m, 1, 256);
  ASSERT_NE(base, nullptr);
  const std::vector<float> want = RunAll(*base, m->ids);
  for (auto [threads, batch] :
       {std::pair{3, 256}, std::pair{2, 3}, std::pair{1, 1}, std::pair{4, 7}}) {
    std::unique_ptr<CpuEngine> engine = Engine(*m, threads, batch);
    ASSERT_NE(engine, nullptr);
    const std::vector<float> got = RunAll(*engine, m->ids);
    EXPECT_LT(WorstRowError(got, want, engine->n_vocab()), 1e-5)
        << threads << " threads, batch " << batch;
  }
}

TEST(CpuEngineTest, HugePageCopyGivesIdenticalLogits) {
  std::unique_ptr<Loaded> m = Load("small-q4_k_m");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CpuEngine> mapped = Engine(*m);
  ASSERT_NE(mapped, nullptr);
  const std::vector<float> want = RunAll(*mapped, m->ids);
  CpuEngineConfig config;
  config.max_ctx = 64;
  config.n_threads = 2;
  config.copy_weights_to_huge_pages = true;
  absl::StatusOr<std::unique_ptr<CpuEngine>> copied = CpuEngine::Create(m->model, config);
  if (!copied.ok() && copied.status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << copied.status();  // no transparent huge pages on this kernel
  }
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_GE((*copied)->allocated_bytes(), mapped->allocated_bytes() + 9'000'000u);
  EXPECT_EQ(RunAll(**copied, m->ids), want);
  // The model's own mapping still reads correctly after its pages were released.
  EXPECT_EQ(RunAll(*mapped, m->ids), want);
}

TEST(CpuEngineTest, LastRowOnlyAndSampleFromTheKeptRow) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CpuEngine> engine = Engine(*m, 2, 4);
  ASSERT_NE(engine, nullptr);
  const size_t n_vocab = engine->n_vocab();
  const std::vector<float> all = RunAll(*engine, m->ids);
  const std::vector<float> want_last(all.end() - n_vocab, all.end());
  std::vector<float> last(n_vocab);
  std::unique_ptr<Sequence> seq = NewSequenceOrDie(*engine);
  ASSERT_NE(seq, nullptr);
  ASSERT_TRUE(engine->Forward(*seq, m->ids, LogitRows::kLast, last.data()).ok());
  EXPECT_EQ(last, want_last);
  // Without host rows the engine still keeps the last row for Sample.
  seq.reset();
  seq = NewSequenceOrDie(*engine);
  ASSERT_NE(seq, nullptr);
  ASSERT_TRUE(engine->Forward(*seq, m->ids, LogitRows::kNone, nullptr).ok());
  absl::StatusOr<Sampler> greedy = Sampler::Create(engine->n_vocab(), {.temperature = 0});
  ASSERT_TRUE(greedy.ok());
  absl::StatusOr<int32_t> token = engine->Sample(*greedy);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, std::max_element(want_last.begin(), want_last.end()) - want_last.begin());
}

TEST(CpuEngineTest, SequencesKeepTheirOwnState) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  CpuEngineConfig config;
  config.max_ctx = 64;
  config.n_threads = 2;
  config.max_sequences = 2;
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(m->model, config);
  ASSERT_TRUE(engine.ok()) << engine.status();
  CpuEngine& e = **engine;
  const size_t n_vocab = e.n_vocab();
  std::vector<int32_t> other = m->ids;
  std::reverse(other.begin(), other.end());
  const std::vector<float> want_a = RunAll(e, m->ids);
  const std::vector<float> want_b = RunAll(e, other);
  // Both at once, a token of each in turn.
  std::unique_ptr<Sequence> a = NewSequenceOrDie(e);
  std::unique_ptr<Sequence> b = NewSequenceOrDie(e);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->slot(), b->slot());
  EXPECT_EQ(e.NewSequence().status().code(), absl::StatusCode::kResourceExhausted);
  std::vector<float> got_a(want_a.size()), got_b(want_b.size());
  for (size_t i = 0; i < m->ids.size(); ++i) {
    ASSERT_TRUE(e.Forward(*a, std::span(m->ids).subspan(i, 1), LogitRows::kAll,
                          &got_a[i * n_vocab])
                    .ok());
    ASSERT_TRUE(
        e.Forward(*b, std::span(other).subspan(i, 1), LogitRows::kAll, &got_b[i * n_vocab]).ok());
  }
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
  // A finished sequence gives its slot back.
  a.reset();
  EXPECT_TRUE(e.NewSequence().ok());
}

TEST(CpuEngineTest, RejectsBadInputsWithStatus) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CpuEngine> engine = Engine(*m, 1, 8, 16);
  ASSERT_NE(engine, nullptr);
  std::unique_ptr<Sequence> seq = NewSequenceOrDie(*engine);
  ASSERT_NE(seq, nullptr);
  std::vector<float> logits(32 * engine->n_vocab());
  const std::vector<int32_t> ok = {1, 2, 3};
  EXPECT_EQ(engine->Forward(*seq, {}, LogitRows::kAll, logits.data()).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> bad = {1, engine->n_vocab()};
  EXPECT_EQ(engine->Forward(*seq, bad, LogitRows::kAll, logits.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Forward(*seq, ok, LogitRows::kAll, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> long_input(17, 1);
  EXPECT_EQ(engine->Forward(*seq, long_input, LogitRows::kAll, logits.data()).code(),
            absl::StatusCode::kOutOfRange);
  absl::StatusOr<Sampler> greedy = Sampler::Create(engine->n_vocab(), {.temperature = 0});
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(engine->Sample(*greedy).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(engine->Forward(*seq, ok, LogitRows::kAll, logits.data()).ok());
  EXPECT_EQ(seq->length(), 3);
  // 3 + 14 > 16.
  const std::vector<int32_t> too_many_more(14, 1);
  EXPECT_EQ(engine->Forward(*seq, too_many_more, LogitRows::kNone, nullptr).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(seq->length(), 3);

  CpuEngineConfig config;
  config.max_ctx = m->model.hparams.n_ctx_train + 1;
  EXPECT_EQ(CpuEngine::Create(m->model, config).status().code(),
            absl::StatusCode::kInvalidArgument);
  config.max_ctx = 16;
  config.n_threads = 0;
  EXPECT_FALSE(CpuEngine::Create(m->model, config).ok());
  config.n_threads = 1;
  config.max_sequences = 0;
  EXPECT_FALSE(CpuEngine::Create(m->model, config).ok());
  config.max_sequences = 1;
  for (int bad_batch : {0, 8193}) {
    config.max_batch = bad_batch;
    const absl::Status s = CpuEngine::Create(m->model, config).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("batch size ", bad_batch, " is outside 1..8192")));
  }
  config.max_batch = 8192;
  EXPECT_TRUE(CpuEngine::Create(m->model, config).ok());
}

TEST(CpuEngineTest, FactoryFromEngineOptions) {
  std::unique_ptr<Loaded> m = Load("tiny-f32");
  ASSERT_NE(m, nullptr);
  EngineOptions options;
  options.max_ctx = 32;
  options.n_threads = 2;
  absl::StatusOr<std::unique_ptr<ForwardEngine>> engine = CreateCpuEngine(m->model, options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->max_ctx(), 32);
  EXPECT_EQ((*engine)->n_vocab(), m->model.hparams.n_vocab);
}

}  // namespace
}  // namespace moetier
