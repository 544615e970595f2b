// The CUDA engine against the fp32 reference engine on the test vectors of
// tests/data/vectors: decoding one token at a time, prompts through the fp16
// GEMM (cuBLAS and the tiled kernel), continuing sequences, new sequences,
// sampling on the device, greedy generation, and the
// preconditions of ForwardEngine; for the hybrid qwen35moe files also the
// CPU engine's assertions (tests/cpu/engine_test.cc): the recurrent state
// the same in batches and token by token, chunked and not, a checkpoint
// that rewinds a sequence, sequences that keep their own state, and a mean
// KL from the exact logits no worse than llama.cpp's. Everything that needs
// a device skips without one; the configuration and weight-type checks,
// which run before any device call, run everywhere.
//
// Tolerances:
// - GEMV path (batches of at most gemv_max_rows rows): weights are decoded
//   exactly, activations stay fp32 and sums are fp32 where the reference
//   sums in double, so the only differences are fp32 rounding (relative
//   ~1e-6 per dot product, growing slowly through 4 layers). 1e-4 of each
//   row's logit range leaves two orders of magnitude of room, and is what
//   the CPU engine meets with fp32 activations. On small-q4_k_m a router
//   near-tie can flip under any change of summation order (tests/cpu saw it
//   between SIMD levels), which moves a position by up to ~10% of its
//   range, so that model is held to distribution agreement instead.
// - GEMM path: weights and activations are rounded to fp16 (relative
//   2^-11 per element) before an fp32-accumulated product: per-logit errors
//   of ~1e-3 of the range and occasional router flips, about what the CPU
//   engine's 8-bit activation quantization costs. Held to the bounds the CPU
//   synthetic-model test uses: mean KL <= 5e-3, top-1 agreement >= 85%.
// - Gated DeltaNet layers: batches of deltanet_chunk_min_tokens or more run
//   the chunked delta rule, which equals the token-by-token one within fp32
//   rounding (~1e-6 of the values, tests/cuda/delta_rule_chunk_test.cc);
//   held to the CPU engine's batch-versus-token bound, 1e-5 of the range.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_kernels.h"
#include "engine/cuda_engine.h"
#include "gguf/gguf_reader.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "model/architectures.h"
#include "reference/reference_engine.h"

namespace moetier {
namespace {

using cuda_test::Agreement;
using cuda_test::Compare;
using cuda_test::Load;
using cuda_test::Loaded;
using cuda_test::NewSequence;
using cuda_test::ReadFloats;
using cuda_test::ReadIds;
using cuda_test::RunAll;
using cuda_test::RunDecode;
using cuda_test::VectorPath;
using cuda_test::WorstRowError;

constexpr int kMaxCtx = 64;

std::unique_ptr<CudaEngine> Engine(const Loaded& m, CudaEngineConfig config = {}) {
  config.max_ctx = kMaxCtx;
  absl::StatusOr<std::unique_ptr<CudaEngine>> engine = CudaEngine::Create(m.model, config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

std::unique_ptr<ReferenceEngine> Reference(const Loaded& m) {
  absl::StatusOr<std::unique_ptr<ReferenceEngine>> ref =
      ReferenceEngine::Create(m.model, kMaxCtx);
  EXPECT_TRUE(ref.ok()) << ref.status();
  return ref.ok() ? *std::move(ref) : nullptr;
}

// The GEMV-path bound for `name` (see the file comment).
void ExpectGemvAgreement(const std::string& name, const std::vector<float>& got,
                         const std::vector<float>& want, size_t n_vocab) {
  if (name.ends_with("small-q4_k_m")) {
    const Agreement a = Compare(got, want, n_vocab);
    EXPECT_LE(a.mean_kl, 1e-3) << name;
    EXPECT_GE(a.top1_fraction, 0.9) << name;
  } else {
    EXPECT_LT(WorstRowError(got, want, n_vocab), 1e-4) << name;
  }
}

class CudaEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device or driver on this machine; run tests/cuda/run-on-gpu.sh "
                      "where a GPU exists";
    }
  }
};

// qwen3moe, llama with experts (NORM rope, no q/k norm), olmoe (q/k norm
// over the whole projection, no renormalization), qwen35moe (Gated
// DeltaNet and gated attention layers, multi-section rope, the shared
// expert) and qwen3next (the same with value heads grouped by key head and
// projections regrouped at load), qwen2moe (q/k/v biases, a shared expert
// in every layer), qwen3vlmoe (multi-section rope on plain attention),
// glm4moe (a dense layer, a sigmoid router with a selection bias, an
// ungated shared expert); rope scaled by YaRN and linearly, and by llama's
// rope_freqs.
const char* const kModels[] = {"tiny-f32",
                               "tiny-q8_0",
                               "small-q4_k_m",
                               "mixtral-tiny-f32",
                               "olmoe-tiny-f32",
                               "mixtral-small-q4_k_m",
                               "qwen35moe-tiny-f32",
                               "qwen35moe-small-q4_k_m",
                               "yarn-tiny-f32",
                               "mixtral-linear-tiny-f32",
                               "qwen35moe-yarn-tiny-f32",
                               "mixtral-rope-freqs-tiny-f32",
                               "qwen3next-tiny-f32",
                               "qwen3next-ssm-in-tiny-f32",
                               "qwen3next-small-q4_k_m",
                               "qwen2moe-tiny-f32",
                               "qwen2moe-small-q4_k_m",
                               "qwen3vlmoe-tiny-f32",
                               "qwen3vlmoe-small-q4_k_m",
                               "glm4moe-tiny-f32",
                               "glm4moe-small-q4_k_m",
                               "ernie45moe-tiny-f32",
                               "ernie45moe-small-q4_k_m"};

TEST_F(CudaEngineTest, DecodeMatchesReference) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    std::unique_ptr<ReferenceEngine> ref = Reference(*m);
    std::unique_ptr<CudaEngine> engine = Engine(*m);
    ASSERT_NE(ref, nullptr);
    ASSERT_NE(engine, nullptr);
    const size_t n_vocab = engine->n_vocab();
    const std::vector<float> want = RunAll(*ref, m->ids);
    const std::vector<float> got = RunDecode(*engine, m->ids);
    std::printf("%s decode: worst |error| / range %.3g\n", name,
                WorstRowError(got, want, n_vocab));
    ExpectGemvAgreement(name, got, want, n_vocab);
    // An independent float64 implementation, for the all-f32 models.
    if (std::string(name).ends_with("-f32")) {
      const std::vector<float> exact = ReadFloats(VectorPath(std::string(name) + ".exact.f32"));
      ASSERT_EQ(exact.size(), got.size());
      EXPECT_LT(WorstRowError(got, exact, n_vocab), 1e-3);
    }
  }
}

// With every product on the GEMV, a prompt in batches (GEMV calls of 8 rows,
// experts on exactly their rows, the delta rule token by token) computes
// each row with the same arithmetic as decoding it alone, so the logits are
// identical, not just close.
TEST_F(CudaEngineTest, GemvPrefillEqualsDecodeBitForBit) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    CudaEngineConfig config;
    config.max_batch = 16;  // 24 tokens: one batch of 16, one of 8
    config.gemv_max_rows = config.max_batch;
    config.deltanet_chunk_min_tokens = config.max_batch + 1;  // never chunked
    std::unique_ptr<CudaEngine> engine = Engine(*m, config);
    ASSERT_NE(engine, nullptr);
    const std::vector<float> batched = RunAll(*engine, m->ids);
    const std::vector<float> decoded = RunDecode(*engine, m->ids);
    size_t differing = 0;
    for (size_t i = 0; i < batched.size(); ++i) differing += batched[i] != decoded[i];
    EXPECT_EQ(differing, 0u) << "of " << batched.size() << " logits; worst |error| / range "
                             << WorstRowError(batched, decoded, engine->n_vocab());
    // The same input twice gives the same bits (no atomics anywhere).
    EXPECT_EQ(RunAll(*engine, m->ids), batched);
  }
}

struct GemmCase {
  const char* name;
  bool use_cublas;
  int gemv_max_rows;  // 0: every product on the GEMM, experts included
};

class CudaEngineGemmTest : public CudaEngineTest,
                           public ::testing::WithParamInterface<GemmCase> {};

TEST_P(CudaEngineGemmTest, PrefillAgreesWithReference) {
  const GemmCase& c = GetParam();
  if (c.use_cublas && !cuda::CudaBlasAvailable()) GTEST_SKIP() << "this build has no cuBLAS";
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    std::unique_ptr<ReferenceEngine> ref = Reference(*m);
    ASSERT_NE(ref, nullptr);
    CudaEngineConfig config;
    config.max_batch = 16;  // two batches, the second one of 8 rows
    config.use_cublas = c.use_cublas;
    config.gemv_max_rows = c.gemv_max_rows;
    std::unique_ptr<CudaEngine> engine = Engine(*m, config);
    ASSERT_NE(engine, nullptr);
    const size_t n_vocab = engine->n_vocab();
    const std::vector<float> want = RunAll(*ref, m->ids);
    const std::vector<float> got = RunAll(*engine, m->ids);
    const Agreement a = Compare(got, want, n_vocab);
    std::printf("%s %s: mean KL %.3g, top-1 %.2f, worst |error| / range %.3g\n", c.name, name,
                a.mean_kl, a.top1_fraction, WorstRowError(got, want, n_vocab));
    EXPECT_LE(a.mean_kl, 5e-3);
    EXPECT_GE(a.top1_fraction, 0.85);
    // kLast over the same batches gives the last row of kAll.
    std::vector<float> last(n_vocab);
    std::unique_ptr<Sequence> seq = NewSequence(*engine);
    ASSERT_NE(seq, nullptr);
    ASSERT_TRUE(engine->Forward(*seq, m->ids, LogitRows::kLast, last.data()).ok());
    // Only the output projection differs (1 row against the batch's rows):
    // the tiled kernel and the GEMV compute each row alone, while cuBLAS
    // may pick another algorithm for another shape.
    const std::vector<float> got_last(got.end() - static_cast<ptrdiff_t>(n_vocab), got.end());
    if (c.use_cublas) {
      EXPECT_LT(WorstRowError(last, got_last, n_vocab), 1e-5);
    } else {
      EXPECT_EQ(last, got_last);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, CudaEngineGemmTest,
                         ::testing::Values(GemmCase{"cublas_dense", true, 8},
                                           GemmCase{"cublas_all", true, 0},
                                           GemmCase{"tiled_dense", false, 8},
                                           GemmCase{"tiled_all", false, 0}),
                         [](const ::testing::TestParamInfo<GemmCase>& param_info) {
                           return std::string(param_info.param.name);
                         });

// Continuing a sequence in pieces of any size, as the reference does, and
// a new sequence forgetting what an earlier one held.
TEST_F(CudaEngineTest, ContinuationAndNewSequencesMatchReference) {
  struct Case {
    const char* name;
    int chunk_min_tokens;  // the hybrid model also with every batch chunked
  };
  for (const Case& c : {Case{"tiny-f32", 16}, Case{"tiny-q8_0", 16},
                        Case{"qwen35moe-tiny-f32", 16}, Case{"qwen35moe-tiny-f32", 1}}) {
    const char* name = c.name;
    SCOPED_TRACE(::testing::Message() << name << ", chunked from " << c.chunk_min_tokens);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    std::unique_ptr<ReferenceEngine> ref = Reference(*m);
    ASSERT_NE(ref, nullptr);
    CudaEngineConfig config;
    config.max_batch = 4;
    config.deltanet_chunk_min_tokens = c.chunk_min_tokens;
    std::unique_ptr<CudaEngine> engine = Engine(*m, config);
    ASSERT_NE(engine, nullptr);
    const size_t n_vocab = engine->n_vocab();
    const std::vector<int32_t>& ids = m->ids;
    std::vector<int32_t> other(ids.rbegin(), ids.rend());
    // A sequence of other tokens first, then the test's in pieces: a
    // prompt, a continuation longer than a batch, a decode step.
    (void)RunAll(*engine, other);
    std::unique_ptr<Sequence> ref_seq = NewSequence(*ref);
    std::unique_ptr<Sequence> seq = NewSequence(*engine);
    ASSERT_NE(ref_seq, nullptr);
    ASSERT_NE(seq, nullptr);
    int pos = 0;
    for (int count : {10, 6, 1}) {
      SCOPED_TRACE(::testing::Message() << "from " << pos << ", " << count << " tokens");
      const std::vector<int32_t> tokens(ids.begin() + pos, ids.begin() + pos + count);
      std::vector<float> want(tokens.size() * n_vocab), got(tokens.size() * n_vocab);
      ASSERT_TRUE(ref->Forward(*ref_seq, tokens, LogitRows::kAll, want.data()).ok());
      const absl::Status status = engine->Forward(*seq, tokens, LogitRows::kAll, got.data());
      ASSERT_TRUE(status.ok()) << status;
      pos += count;
      EXPECT_EQ(seq->length(), pos);
      EXPECT_LT(WorstRowError(got, want, n_vocab), 1e-4);
    }
  }
}

TEST_F(CudaEngineTest, ANewSequenceStartsFresh) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CudaEngine> engine = Engine(*m);
  ASSERT_NE(engine, nullptr);
  const std::vector<float> first = RunAll(*engine, m->ids);
  std::vector<int32_t> other(m->ids.rbegin(), m->ids.rend());
  (void)RunAll(*engine, other);
  EXPECT_EQ(RunAll(*engine, m->ids), first);
}

TEST_F(CudaEngineTest, SampleIsTheArgmaxOfTheLastRowOnTheDevice) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CudaEngine> engine = Engine(*m);
  ASSERT_NE(engine, nullptr);
  const size_t n_vocab = engine->n_vocab();
  absl::StatusOr<Sampler> greedy = Sampler::Create(engine->n_vocab(), {.temperature = 0});
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(engine->Sample(*greedy).status().code(), absl::StatusCode::kFailedPrecondition);
  const std::vector<float> all = RunAll(*engine, m->ids);
  const float* last = all.data() + all.size() - n_vocab;
  const int32_t want = static_cast<int32_t>(std::max_element(last, last + n_vocab) - last);
  // With every row on the host, and with none.
  absl::StatusOr<int32_t> token = engine->Sample(*greedy);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, want);
  std::unique_ptr<Sequence> seq = NewSequence(*engine);
  ASSERT_NE(seq, nullptr);
  ASSERT_TRUE(engine->Forward(*seq, m->ids, LogitRows::kNone, nullptr).ok());
  token = engine->Sample(*greedy);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, want);
  // A sampler with a temperature draws on the host from the same row.
  absl::StatusOr<Sampler> hot =
      Sampler::Create(engine->n_vocab(), {.temperature = 1e-4f, .top_k = 1});
  ASSERT_TRUE(hot.ok());
  token = engine->Sample(*hot);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, want);
}

TEST_F(CudaEngineTest, GreedyGenerationMatchesReference) {
  constexpr int kGenerate = 12;
  for (const char* name : {"tiny-f32", "tiny-q8_0", "qwen35moe-tiny-f32"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    std::unique_ptr<ReferenceEngine> ref = Reference(*m);
    std::unique_ptr<CudaEngine> engine = Engine(*m);
    ASSERT_NE(ref, nullptr);
    ASSERT_NE(engine, nullptr);
    const int n_vocab = engine->n_vocab();
    const std::vector<int32_t> prompt(m->ids.begin(), m->ids.begin() + 8);
    std::vector<std::vector<int32_t>> generated(2);
    int which = 0;
    for (ForwardEngine* e : {static_cast<ForwardEngine*>(ref.get()),
                             static_cast<ForwardEngine*>(engine.get())}) {
      std::vector<float> logits(static_cast<size_t>(n_vocab));
      std::unique_ptr<Sequence> seq = NewSequence(*e);
      ASSERT_NE(seq, nullptr);
      ASSERT_TRUE(e->Forward(*seq, prompt, LogitRows::kLast, logits.data()).ok());
      for (int i = 0; i < kGenerate; ++i) {
        const int32_t next =
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        generated[static_cast<size_t>(which)].push_back(next);
        const int32_t in[1] = {next};
        ASSERT_TRUE(e->Forward(*seq, in, LogitRows::kLast, logits.data()).ok());
      }
      ++which;
    }
    EXPECT_EQ(generated[1], generated[0]);
  }
}

TEST_F(CudaEngineTest, ForwardChecksItsPreconditions) {
  std::unique_ptr<Loaded> m = Load("tiny-f32");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CudaEngine> engine = Engine(*m);
  ASSERT_NE(engine, nullptr);
  const int n_vocab = engine->n_vocab();
  std::vector<float> logits(static_cast<size_t>(kMaxCtx + 1) * n_vocab);
  std::unique_ptr<Sequence> seq = NewSequence(*engine);
  ASSERT_NE(seq, nullptr);
  EXPECT_EQ(engine->NewSequence().status().code(), absl::StatusCode::kResourceExhausted);
  const std::vector<int32_t> two = {m->ids[0], m->ids[1]};
  ASSERT_TRUE(engine->Forward(*seq, two, LogitRows::kAll, logits.data()).ok());
  ASSERT_EQ(seq->length(), 2);

  const std::vector<int32_t> empty;
  EXPECT_EQ(engine->Forward(*seq, empty, LogitRows::kAll, logits.data()).code(),
            absl::StatusCode::kInvalidArgument);
  for (int32_t bad : {-1, n_vocab}) {
    const std::vector<int32_t> tokens = {m->ids[0], bad};
    const absl::Status s = engine->Forward(*seq, tokens, LogitRows::kAll, logits.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("vocabulary"), absl::string_view::npos) << s;
  }
  const std::vector<int32_t> too_long(static_cast<size_t>(kMaxCtx - 1), m->ids[0]);
  EXPECT_EQ(engine->Forward(*seq, too_long, LogitRows::kAll, logits.data()).code(),
            absl::StatusCode::kOutOfRange);  // 2 + 63 > 64
  EXPECT_EQ(engine->Forward(*seq, two, LogitRows::kAll, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // Rejected calls leave the sequence as it was.
  EXPECT_EQ(seq->length(), 2);
  // Exactly filling the context works.
  const std::vector<int32_t> rest(static_cast<size_t>(kMaxCtx - 2), m->ids[0]);
  EXPECT_TRUE(engine->Forward(*seq, rest, LogitRows::kLast, logits.data()).ok());
  EXPECT_EQ(seq->length(), kMaxCtx);
}

// ------------------------------------------------------------ hybrid models
//
// The CPU engine's assertions on qwen35moe (tests/cpu/engine_test.cc), with
// every product on the GEMV so that only the delta rule's form (chunked or
// token by token) differs between runs.

CudaEngineConfig GemvConfig(int max_batch, int chunk_min_tokens) {
  CudaEngineConfig config;
  config.max_batch = max_batch;
  config.gemv_max_rows = max_batch;
  config.deltanet_chunk_min_tokens = chunk_min_tokens;
  return config;
}

// The recurrent layers: a prompt in batches of any size, chunked or not,
// and decoding one token at a time, carry the same state.
TEST_F(CudaEngineTest, HybridStateIsTheSameInBatchesAndTokenByToken) {
  for (const char* name : {"qwen35moe-tiny-f32", "qwen35moe-small-q4_k_m", "qwen3next-tiny-f32"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    // All 24 tokens in one chunked batch.
    std::unique_ptr<CudaEngine> whole = Engine(*m, GemvConfig(256, 16));
    ASSERT_NE(whole, nullptr);
    const size_t n_vocab = whole->n_vocab();
    const std::vector<float> want = RunAll(*whole, m->ids);
    struct Case {
      int batch, chunk_min_tokens;
    };
    // Token by token in batches of 1, 3 and 7; chunked in batches of 20 and 4.
    for (const Case& c : {Case{1, 16}, Case{3, 16}, Case{7, 16}, Case{20, 1}}) {
      SCOPED_TRACE(::testing::Message() << "batch " << c.batch << ", chunked from "
                                        << c.chunk_min_tokens);
      std::unique_ptr<CudaEngine> engine = Engine(*m, GemvConfig(c.batch, c.chunk_min_tokens));
      ASSERT_NE(engine, nullptr);
      const std::vector<float> got = RunAll(*engine, m->ids);
      std::printf("%s batch %d: worst |error| / range %.3g against one chunked batch\n", name,
                  c.batch, WorstRowError(got, want, n_vocab));
      EXPECT_LT(WorstRowError(got, want, n_vocab), 1e-5);
    }
    // A prompt, then one token per call.
    std::unique_ptr<Sequence> seq = NewSequence(*whole);
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

// A checkpoint brings a sequence back to where it was saved, recurrent
// state included, whatever ran after it.
TEST_F(CudaEngineTest, RestoringACheckpointRewindsTheSequence) {
  struct Case {
    const char* name;
    int chunk_min_tokens;
  };
  for (const Case& c : {Case{"qwen35moe-tiny-f32", 16}, Case{"qwen35moe-tiny-f32", 1},
                        Case{"qwen35moe-small-q4_k_m", 16}, Case{"tiny-q8_0", 16}}) {
    SCOPED_TRACE(::testing::Message() << c.name << ", chunked from " << c.chunk_min_tokens);
    std::unique_ptr<Loaded> m = Load(c.name);
    ASSERT_NE(m, nullptr);
    std::unique_ptr<CudaEngine> engine = Engine(*m, GemvConfig(4, c.chunk_min_tokens));
    ASSERT_NE(engine, nullptr);
    const size_t n_vocab = engine->n_vocab();
    const std::vector<float> want = RunAll(*engine, m->ids);
    std::unique_ptr<Sequence> seq = NewSequence(*engine);
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
    ASSERT_TRUE(
        engine->Forward(*seq, std::span(other).first(7), LogitRows::kAll, scratch.data()).ok());
    // ...then back, and the rest of the original tokens.
    ASSERT_TRUE(engine->RestoreCheckpoint(*seq).ok());
    EXPECT_EQ(seq->length(), 9);
    ASSERT_TRUE(
        engine->Forward(*seq, ids.subspan(9), LogitRows::kAll, got.data() + 9 * n_vocab).ok());
    EXPECT_LT(WorstRowError(got, want, n_vocab), 1e-5);
    // The checkpoint stays: a second rewind gives the same rows again.
    ASSERT_TRUE(engine->RestoreCheckpoint(*seq).ok());
    std::vector<float> again(want.size() - 9 * n_vocab);
    ASSERT_TRUE(engine->Forward(*seq, ids.subspan(9), LogitRows::kAll, again.data()).ok());
    EXPECT_TRUE(std::equal(again.begin(), again.end(), got.begin() + 9 * n_vocab));
    // A fresh sequence given the same calls (so the same batches and
    // chunks) computes the same bits: the restored state is the saved one,
    // and the slot's old state is not carried into the new sequence.
    seq.reset();
    std::unique_ptr<Sequence> fresh = NewSequence(*engine);
    ASSERT_NE(fresh, nullptr);
    std::vector<float> fresh_rows(want.size());
    ASSERT_TRUE(engine->Forward(*fresh, ids.first(9), LogitRows::kAll, fresh_rows.data()).ok());
    ASSERT_TRUE(engine
                    ->Forward(*fresh, ids.subspan(9), LogitRows::kAll,
                              fresh_rows.data() + 9 * n_vocab)
                    .ok());
    EXPECT_EQ(fresh_rows, got);
  }
}

// A state copied to the host at 9 positions and loaded into another slot
// (after that slot ran other tokens) continues bit for bit as the original
// sequence; an attention-only model also loads a shorter start, a hybrid
// one refuses to.
TEST_F(CudaEngineTest, ALoadedStateContinuesAsTheOriginal) {
  for (const char* name : {"tiny-q8_0", "small-q4_k_m", "qwen35moe-tiny-f32"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    CudaEngineConfig config = GemvConfig(4, 16);
    config.max_sequences = 3;
    std::unique_ptr<CudaEngine> engine = Engine(*m, config);
    ASSERT_NE(engine, nullptr);
    const size_t n_vocab = engine->n_vocab();
    const std::span<const int32_t> ids(m->ids);
    std::unique_ptr<Sequence> original = NewSequence(*engine);
    std::unique_ptr<Sequence> other = NewSequence(*engine);
    ASSERT_NE(original, nullptr);
    ASSERT_NE(other, nullptr);
    ASSERT_TRUE(engine->Forward(*original, ids.first(9), LogitRows::kNone, nullptr).ok());
    absl::StatusOr<std::unique_ptr<SequenceState>> state = engine->CopyState(*original);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ((*state)->length(), 9);
    EXPECT_EQ((*state)->bytes(), SequenceStateSizeOf(m->model).BytesAt(9));
    std::vector<int32_t> reversed(m->ids.rbegin(), m->ids.rend());
    ASSERT_TRUE(
        engine->Forward(*other, std::span(reversed).first(13), LogitRows::kNone, nullptr).ok());
    ASSERT_TRUE(engine->LoadState(*other, **state, 9).ok());
    EXPECT_EQ(other->length(), 9);
    std::vector<float> want(15 * n_vocab), got(15 * n_vocab);
    ASSERT_TRUE(engine->Forward(*original, ids.subspan(9), LogitRows::kAll, want.data()).ok());
    ASSERT_TRUE(engine->Forward(*other, ids.subspan(9), LogitRows::kAll, got.data()).ok());
    EXPECT_EQ(got, want);

    std::unique_ptr<Sequence> shorter = NewSequence(*engine);
    ASSERT_NE(shorter, nullptr);
    const absl::Status s = engine->LoadState(*shorter, **state, 5);
    if (SequenceStateSizeOf(m->model).recurrent_bytes > 0) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    ASSERT_TRUE(s.ok()) << s;
    original.reset();
    std::unique_ptr<Sequence> alone = NewSequence(*engine);
    ASSERT_NE(alone, nullptr);
    ASSERT_TRUE(engine->Forward(*alone, ids.first(5), LogitRows::kNone, nullptr).ok());
    std::vector<float> fork_alone(6 * n_vocab), fork_loaded(6 * n_vocab);
    ASSERT_TRUE(
        engine->Forward(*alone, ids.subspan(15, 6), LogitRows::kAll, fork_alone.data()).ok());
    ASSERT_TRUE(
        engine->Forward(*shorter, ids.subspan(15, 6), LogitRows::kAll, fork_loaded.data()).ok());
    EXPECT_EQ(fork_loaded, fork_alone);
  }
}

// Each sequence slot has its own KV caches and recurrent state.
TEST_F(CudaEngineTest, HybridSequencesKeepTheirOwnState) {
  std::unique_ptr<Loaded> m = Load("qwen35moe-tiny-f32");
  ASSERT_NE(m, nullptr);
  CudaEngineConfig config = GemvConfig(8, 16);
  config.max_sequences = 2;
  std::unique_ptr<CudaEngine> engine = Engine(*m, config);
  ASSERT_NE(engine, nullptr);
  const size_t n_vocab = engine->n_vocab();
  std::vector<int32_t> other(m->ids.rbegin(), m->ids.rend());
  const std::vector<float> want_a = RunDecode(*engine, m->ids);
  const std::vector<float> want_b = RunDecode(*engine, other);
  std::unique_ptr<Sequence> a = NewSequence(*engine);
  std::unique_ptr<Sequence> b = NewSequence(*engine);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->slot(), b->slot());
  std::vector<float> got_a(want_a.size()), got_b(want_b.size());
  for (size_t i = 0; i < m->ids.size(); ++i) {
    ASSERT_TRUE(engine
                    ->Forward(*a, std::span(m->ids).subspan(i, 1), LogitRows::kAll,
                              &got_a[i * n_vocab])
                    .ok());
    ASSERT_TRUE(
        engine->Forward(*b, std::span(other).subspan(i, 1), LogitRows::kAll, &got_b[i * n_vocab])
            .ok());
  }
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
}

// On quantized files the engine keeps activations in fp32 (GEMV) or fp16
// (GEMM), finer than llama.cpp's 8-bit activations: its mean KL from the
// exact logits stays within 5% of llama.cpp's, and on the hybrid model
// below it (the CPU engine's assertion, tests/cpu/engine_test.cc), on the
// GEMM path (the default configuration) and on the GEMV path (decode).
class CudaAsFaithfulAsLlamaCppTest : public CudaEngineTest,
                                     public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaAsFaithfulAsLlamaCppTest, MeanKlFromExactNoWorseThanLlamaCpp) {
  const std::string name = GetParam();
  std::unique_ptr<Loaded> m = Load(name);
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CudaEngine> engine = Engine(*m);
  ASSERT_NE(engine, nullptr);
  const size_t n_vocab = engine->n_vocab();
  const std::vector<float> exact = ReadFloats(VectorPath(name + ".exact.f32"));
  const std::vector<float> llamacpp = ReadFloats(VectorPath(name + ".llamacpp.f32"));
  const Agreement theirs = Compare(llamacpp, exact, n_vocab);
  for (const bool decode : {false, true}) {
    SCOPED_TRACE(decode ? "decode (GEMV)" : "prompt (GEMM)");
    const std::vector<float> ours = decode ? RunDecode(*engine, m->ids) : RunAll(*engine, m->ids);
    ASSERT_EQ(exact.size(), ours.size());
    const Agreement a = Compare(ours, exact, n_vocab);
    std::printf("%s %s: mean KL from exact %.3g (llama.cpp %.3g)\n", name.c_str(),
                decode ? "decode" : "prompt", a.mean_kl, theirs.mean_kl);
    if (name.starts_with("qwen35moe")) {
      EXPECT_LE(a.mean_kl, theirs.mean_kl);
    } else {
      EXPECT_LE(a.mean_kl, 1.05 * theirs.mean_kl);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vectors, CudaAsFaithfulAsLlamaCppTest,
                         ::testing::Values("small-q4_k_m", "mixtral-small-q4_k_m",
                                           "qwen35moe-small-q4_k_m"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string s = param_info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// Checks that come before any device call: they run on every machine.
TEST(CudaEngineArgsTest, RejectsBadConfigurationsAndWeightTypes) {
  std::unique_ptr<Loaded> m = Load("tiny-f32");
  ASSERT_NE(m, nullptr);
  auto create = [&](const CudaEngineConfig& config) {
    return CudaEngine::Create(m->model, config).status();
  };
  CudaEngineConfig config;
  config.max_ctx = 0;
  EXPECT_EQ(create(config).code(), absl::StatusCode::kInvalidArgument);
  config.max_ctx = m->model.hparams.n_ctx_train + 1;
  EXPECT_EQ(create(config).code(), absl::StatusCode::kInvalidArgument);
  config = {};
  config.max_ctx = kMaxCtx;
  config.max_batch = 0;
  EXPECT_EQ(create(config).code(), absl::StatusCode::kInvalidArgument);
  config.max_batch = 16;
  config.gemv_max_rows = -1;
  EXPECT_EQ(create(config).code(), absl::StatusCode::kInvalidArgument);
  config.gemv_max_rows = 8;
  config.deltanet_chunk_min_tokens = 0;
  EXPECT_EQ(create(config).code(), absl::StatusCode::kInvalidArgument);
  config.deltanet_chunk_min_tokens = 16;

  // A type the CUDA kernels lack is named with its tensor.
  Model unsupported = m->model;
  unsupported.weights.layers[1].moe.down_exps.type = TensorType::kQ2_K;
  const absl::Status s = CudaEngine::Create(unsupported, config).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find(unsupported.weights.layers[1].moe.down_exps.name),
            absl::string_view::npos)
      << s;
  EXPECT_NE(s.message().find("Q2_K"), absl::string_view::npos) << s;

  if (CudaDeviceCount() == 0) {
    // Without a device, creation fails with a message, not a crash.
    const absl::Status none = create(config);
    EXPECT_EQ(none.code(), absl::StatusCode::kUnavailable) << none;
  } else {
    config.device = CudaDeviceCount();
    EXPECT_EQ(create(config).code(), absl::StatusCode::kInvalidArgument);
  }
}

// The hybrid files pass every check the engine makes before it touches a
// device: their blocks, shapes and weight types are all ones it computes.
TEST(CudaEngineArgsTest, AcceptsEveryBlockOfTheHybridModels) {
  for (const char* name : {"qwen35moe-tiny-f32", "qwen35moe-small-q4_k_m"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    CudaEngineConfig config;
    config.max_ctx = kMaxCtx;
    const absl::Status s = CudaEngine::Create(m->model, config).status();
    if (CudaDeviceCount() == 0) {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    } else {
      EXPECT_TRUE(s.ok()) << s;
    }
    // A key head wider than the delta rule's kernels hold is refused by
    // name, before any device call.
    Model wide = m->model;
    wide.hparams.deltanet.d_k = 512;
    const absl::Status refused = CudaEngine::Create(wide, config).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented) << refused;
    EXPECT_NE(refused.message().find("d_k 512"), absl::string_view::npos) << refused;
  }
}

// gpt-oss's parts are refused by name before any device call, each of them
// alone too, rather than computed without them.
TEST(CudaEngineArgsTest, RefusesWhatGptOssAddsByName) {
  std::unique_ptr<Loaded> gpt_oss = Load("gpt-oss-tiny-f32");
  std::unique_ptr<Loaded> plain = Load("tiny-f32");
  ASSERT_NE(gpt_oss, nullptr);
  ASSERT_NE(plain, nullptr);
  CudaEngineConfig config;
  config.max_ctx = kMaxCtx;
  auto expect_refused = [&](const Model& model, const char* what) {
    const absl::Status s = CudaEngine::Create(model, config).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << what << ": " << s;
    EXPECT_NE(s.message().find("cpu backend"), absl::string_view::npos) << s;
  };
  expect_refused(gpt_oss->model, "gpt-oss");
  const LayerWeights& donor = gpt_oss->model.weights.layers[0];
  using Edit = void (*)(Model&, const LayerWeights&);
  const std::pair<const char*, Edit> edits[] = {
      {"a window", [](Model& m, const LayerWeights&) { m.weights.layers[0].attention_window = 4; }},
      {"sinks",
       [](Model& m, const LayerWeights& d) { m.weights.layers[1].attn.sinks = d.attn.sinks; }},
      {"an output bias",
       [](Model& m, const LayerWeights& d) {
         m.weights.layers[0].attn.output_bias = d.attn.output_bias;
       }},
      {"a router bias",
       [](Model& m, const LayerWeights& d) {
         m.weights.layers[0].moe.router_bias = d.moe.router_bias;
       }},
      {"expert biases",
       [](Model& m, const LayerWeights& d) {
         m.weights.layers[2].moe.down_exps_bias = d.moe.down_exps_bias;
       }},
      {"the clamped SwiGLU",
       [](Model& m, const LayerWeights&) {
         m.hparams.expert_activation = ExpertActivation::kSwigluOai;
       }},
      {"the softmax of the chosen",
       [](Model& m, const LayerWeights&) {
         m.hparams.router.gating = RouterGating::kSoftmaxOfChosen;
       }},
  };
  for (const auto& [what, edit] : edits) {
    Model model = plain->model;
    edit(model, donor);
    expect_refused(model, what);
  }
}

}  // namespace
}  // namespace moetier
