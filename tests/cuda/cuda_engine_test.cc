// The CUDA qwen3moe engine against the fp32 reference engine on the test
// vectors of tests/data/vectors: decoding one token at a time, prompts
// through the fp16 GEMM (cuBLAS and the tiled kernel), continuation and
// rewinding at arbitrary pos0, Reset, the experts seam, greedy generation,
// and the preconditions of ForwardEngine. Everything that needs a device
// skips without one; the configuration and weight-type checks, which run
// before any device call, run everywhere.
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
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_kernels.h"
#include "engine/qwen3moe_cuda.h"
#include "gguf/gguf_reader.h"
#include "gtest/gtest.h"
#include "model/qwen3moe_model.h"
#include "reference/reference_qwen3moe.h"

namespace moetier {
namespace {

constexpr int kMaxCtx = 64;

std::string VectorPath(const std::string& name) {
  return std::string(MOETIER_TEST_DATA_DIR) + "/vectors/" + name;
}

std::vector<int32_t> ReadIds(const std::string& path) {
  std::ifstream in(path);
  std::vector<int32_t> ids;
  std::string part;
  while (std::getline(in, part, ',')) ids.push_back(std::stoi(part));
  return ids;
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

struct Loaded {
  std::unique_ptr<GgufModel> gguf;
  Qwen3MoeModel model;
  std::vector<int32_t> ids;
};

std::unique_ptr<Loaded> Load(const std::string& name) {
  auto out = std::make_unique<Loaded>();
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(VectorPath(name + ".gguf"));
  EXPECT_TRUE(gguf.ok()) << gguf.status();
  if (!gguf.ok()) return nullptr;
  out->gguf = *std::move(gguf);
  absl::StatusOr<Qwen3MoeModel> model = LoadQwen3Moe(*out->gguf);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  out->model = *std::move(model);
  out->ids = ReadIds(VectorPath(name + ".ids"));
  EXPECT_FALSE(out->ids.empty());
  return out;
}

std::unique_ptr<CudaQwen3Moe> Engine(const Loaded& m, CudaEngineConfig config = {}) {
  config.max_ctx = kMaxCtx;
  absl::StatusOr<std::unique_ptr<CudaQwen3Moe>> engine = CudaQwen3Moe::Create(m.model, config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

std::unique_ptr<ReferenceQwen3Moe> Reference(const Loaded& m) {
  absl::StatusOr<std::unique_ptr<ReferenceQwen3Moe>> ref =
      ReferenceQwen3Moe::Create(m.model, kMaxCtx);
  EXPECT_TRUE(ref.ok()) << ref.status();
  return ref.ok() ? *std::move(ref) : nullptr;
}

// Every row of `ids` from position 0 in one call.
std::vector<float> RunAll(ForwardEngine& engine, const std::vector<int32_t>& ids) {
  std::vector<float> logits(ids.size() * engine.n_vocab());
  engine.Reset();
  const absl::Status s = engine.Forward(ids, 0, LogitRows::kAll, logits.data());
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

// Every row of `ids`, one token per call (decode).
std::vector<float> RunDecode(ForwardEngine& engine, const std::vector<int32_t>& ids) {
  const size_t n_vocab = engine.n_vocab();
  std::vector<float> logits(ids.size() * n_vocab);
  engine.Reset();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t token[1] = {ids[i]};
    const absl::Status s =
        engine.Forward(token, static_cast<int>(i), LogitRows::kLast, logits.data() + i * n_vocab);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    EXPECT_EQ(engine.cached_tokens(), static_cast<int>(i + 1));
  }
  return logits;
}

// max |a - b| / (max - min of b) over every row.
double WorstRowError(const std::vector<float>& a, const std::vector<float>& b, size_t n_vocab) {
  double worst = 0.0;
  for (size_t row = 0; row < b.size() / n_vocab; ++row) {
    const float* pa = a.data() + row * n_vocab;
    const float* pb = b.data() + row * n_vocab;
    const auto [lo, hi] = std::minmax_element(pb, pb + n_vocab);
    double max_abs = 0.0;
    for (size_t i = 0; i < n_vocab; ++i) {
      // NaN must fail the comparison, so it counts as infinitely wrong.
      const double d = std::fabs(static_cast<double>(pa[i]) - pb[i]);
      max_abs = std::isnan(d) ? INFINITY : std::max(max_abs, d);
    }
    worst = std::max(worst, max_abs / (static_cast<double>(*hi) - *lo));
  }
  return worst;
}

struct Agreement {
  double mean_kl = 0.0;        // KL(expected || actual), mean over positions
  double top1_fraction = 0.0;  // positions whose argmax agrees
};

Agreement Compare(const std::vector<float>& actual, const std::vector<float>& expected,
                  size_t n_vocab) {
  Agreement a;
  const size_t n_pos = expected.size() / n_vocab;
  int same = 0;
  for (size_t p = 0; p < n_pos; ++p) {
    const float* x = actual.data() + p * n_vocab;
    const float* y = expected.data() + p * n_vocab;
    const double mx = *std::max_element(x, x + n_vocab);
    const double my = *std::max_element(y, y + n_vocab);
    double zx = 0.0, zy = 0.0;
    for (size_t i = 0; i < n_vocab; ++i) {
      zx += std::exp(x[i] - mx);
      zy += std::exp(y[i] - my);
    }
    double kl = 0.0;
    for (size_t i = 0; i < n_vocab; ++i) {
      const double log_py = y[i] - my - std::log(zy);
      const double log_px = x[i] - mx - std::log(zx);
      kl += std::exp(log_py) * (log_py - log_px);
    }
    a.mean_kl += kl / n_pos;
    same += std::max_element(x, x + n_vocab) - x == std::max_element(y, y + n_vocab) - y;
  }
  a.top1_fraction = static_cast<double>(same) / n_pos;
  // NaN logits must not pass.
  if (std::isnan(a.mean_kl)) a.mean_kl = INFINITY;
  return a;
}

// The GEMV-path bound for `name` (see the file comment).
void ExpectGemvAgreement(const std::string& name, const std::vector<float>& got,
                         const std::vector<float>& want, size_t n_vocab) {
  if (name == "small-q4_k_m") {
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

const char* const kModels[] = {"tiny-f32", "tiny-q8_0", "small-q4_k_m"};

TEST_F(CudaEngineTest, DecodeMatchesReference) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    std::unique_ptr<ReferenceQwen3Moe> ref = Reference(*m);
    std::unique_ptr<CudaQwen3Moe> engine = Engine(*m);
    ASSERT_NE(ref, nullptr);
    ASSERT_NE(engine, nullptr);
    const size_t n_vocab = engine->n_vocab();
    const std::vector<float> want = RunAll(*ref, m->ids);
    const std::vector<float> got = RunDecode(*engine, m->ids);
    std::printf("%s decode: worst |error| / range %.3g\n", name,
                WorstRowError(got, want, n_vocab));
    ExpectGemvAgreement(name, got, want, n_vocab);
    // An independent float64 implementation, for the all-f32 model.
    if (std::string(name) == "tiny-f32") {
      const std::vector<float> exact = ReadFloats(VectorPath("tiny-f32.exact.f32"));
      ASSERT_EQ(exact.size(), got.size());
      EXPECT_LT(WorstRowError(got, exact, n_vocab), 1e-3);
    }
  }
}

// With every product on the GEMV, a prompt in batches (GEMV calls of 8 rows,
// experts on exactly their rows) computes each row with the same arithmetic
// as decoding it alone, so the logits are identical, not just close.
TEST_F(CudaEngineTest, GemvPrefillEqualsDecodeBitForBit) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    CudaEngineConfig config;
    config.max_batch = 16;  // 24 tokens: one batch of 16, one of 8
    config.gemv_max_rows = config.max_batch;
    std::unique_ptr<CudaQwen3Moe> engine = Engine(*m, config);
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
    std::unique_ptr<ReferenceQwen3Moe> ref = Reference(*m);
    ASSERT_NE(ref, nullptr);
    CudaEngineConfig config;
    config.max_batch = 16;  // two batches, the second one of 8 rows
    config.use_cublas = c.use_cublas;
    config.gemv_max_rows = c.gemv_max_rows;
    std::unique_ptr<CudaQwen3Moe> engine = Engine(*m, config);
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
    engine->Reset();
    ASSERT_TRUE(engine->Forward(m->ids, 0, LogitRows::kLast, last.data()).ok());
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

// Continuing at pos0 = cached_tokens(), and rewinding to an earlier pos0
// (which drops the later cache entries), as the reference does.
TEST_F(CudaEngineTest, ContinuationAndRewindMatchReference) {
  for (const char* name : {"tiny-f32", "tiny-q8_0"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    std::unique_ptr<ReferenceQwen3Moe> ref = Reference(*m);
    ASSERT_NE(ref, nullptr);
    CudaEngineConfig config;
    config.max_batch = 4;
    std::unique_ptr<CudaQwen3Moe> engine = Engine(*m, config);
    ASSERT_NE(engine, nullptr);
    const size_t n_vocab = engine->n_vocab();
    const std::vector<int32_t>& ids = m->ids;
    std::vector<int32_t> other(ids.rbegin(), ids.rend());
    // (start, count, source) steps: a prompt, a continuation, a rewind into
    // the middle with different tokens, a decode step.
    struct Step {
      int pos0;
      int count;
      const std::vector<int32_t>* src;
    };
    const Step steps[] = {{0, 10, &ids}, {10, 6, &ids}, {5, 7, &other}, {12, 1, &ids}};
    for (ForwardEngine* e : {static_cast<ForwardEngine*>(ref.get()),
                             static_cast<ForwardEngine*>(engine.get())}) {
      e->Reset();
    }
    for (const Step& s : steps) {
      SCOPED_TRACE(::testing::Message() << "pos0 " << s.pos0 << " count " << s.count);
      const std::vector<int32_t> tokens(s.src->begin() + s.pos0,
                                        s.src->begin() + s.pos0 + s.count);
      std::vector<float> want(tokens.size() * n_vocab), got(tokens.size() * n_vocab);
      ASSERT_TRUE(ref->Forward(tokens, s.pos0, LogitRows::kAll, want.data()).ok());
      const absl::Status status = engine->Forward(tokens, s.pos0, LogitRows::kAll, got.data());
      ASSERT_TRUE(status.ok()) << status;
      EXPECT_EQ(engine->cached_tokens(), s.pos0 + s.count);
      EXPECT_LT(WorstRowError(got, want, n_vocab), 1e-4);
    }
  }
}

TEST_F(CudaEngineTest, ResetForgetsTheCache) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CudaQwen3Moe> engine = Engine(*m);
  ASSERT_NE(engine, nullptr);
  const std::vector<float> first = RunAll(*engine, m->ids);
  EXPECT_EQ(engine->cached_tokens(), static_cast<int>(m->ids.size()));
  engine->Reset();
  EXPECT_EQ(engine->cached_tokens(), 0);
  // Only position 0 may start after Reset.
  std::vector<float> logits(engine->n_vocab());
  const int32_t token[1] = {m->ids[0]};
  EXPECT_EQ(engine->Forward(token, 1, LogitRows::kLast, logits.data()).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> again(first.size());
  ASSERT_TRUE(engine->Forward(m->ids, 0, LogitRows::kAll, again.data()).ok());
  EXPECT_EQ(again, first);
}

TEST_F(CudaEngineTest, GreedyGenerationMatchesReference) {
  constexpr int kGenerate = 12;
  for (const char* name : {"tiny-f32", "tiny-q8_0"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    std::unique_ptr<ReferenceQwen3Moe> ref = Reference(*m);
    std::unique_ptr<CudaQwen3Moe> engine = Engine(*m);
    ASSERT_NE(ref, nullptr);
    ASSERT_NE(engine, nullptr);
    const int n_vocab = engine->n_vocab();
    const std::vector<int32_t> prompt(m->ids.begin(), m->ids.begin() + 8);
    std::vector<std::vector<int32_t>> generated(2);
    int which = 0;
    for (ForwardEngine* e : {static_cast<ForwardEngine*>(ref.get()),
                             static_cast<ForwardEngine*>(engine.get())}) {
      std::vector<float> logits(static_cast<size_t>(n_vocab));
      e->Reset();
      ASSERT_TRUE(e->Forward(prompt, 0, LogitRows::kLast, logits.data()).ok());
      for (int i = 0; i < kGenerate; ++i) {
        const int32_t next =
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        generated[static_cast<size_t>(which)].push_back(next);
        const int32_t in[1] = {next};
        ASSERT_TRUE(e->Forward(in, static_cast<int>(prompt.size()) + i, LogitRows::kLast,
                               logits.data())
                        .ok());
      }
      ++which;
    }
    EXPECT_EQ(generated[1], generated[0]);
  }
}

// A DeviceExperts of the test's own (every expert uploaded by the test) in
// place of the engine's: the same logits bit for bit, and exactly one
// request per used expert and layer.
class TestExperts final : public DeviceExperts {
 public:
  explicit TestExperts(const Qwen3MoeModel& model) {
    for (const Qwen3MoeLayerWeights& l : model.weights.layers) {
      Layer layer;
      for (auto [dst, ref] : {std::pair{&layer.gate, &l.ffn_gate_exps},
                              std::pair{&layer.up, &l.ffn_up_exps},
                              std::pair{&layer.down, &l.ffn_down_exps}}) {
        for (int64_t e = 0; e < ref->ne[2]; ++e) {
          const size_t bytes = static_cast<size_t>(ref->ne[1] * ref->row_bytes);
          void* p = nullptr;
          ok_ = ok_ && cudaMalloc(&p, bytes) == cudaSuccess &&
                cudaMemcpy(p, ref->expert(e), bytes, cudaMemcpyHostToDevice) == cudaSuccess;
          if (p != nullptr) allocations_.push_back(p);
          dst->push_back(p);
        }
      }
      layers_.push_back(std::move(layer));
    }
    // A copy from pageable memory may return before its DMA is done.
    ok_ = ok_ && cudaDeviceSynchronize() == cudaSuccess;
  }
  ~TestExperts() override {
    for (void* p : allocations_) cudaFree(p);
  }

  absl::StatusOr<DeviceExpertMatrices> ExpertPointers(int layer, int expert,
                                                      cuda::CudaStream) override {
    ++requests_;
    const Layer& l = layers_.at(static_cast<size_t>(layer));
    const size_t e = static_cast<size_t>(expert);
    return DeviceExpertMatrices{l.gate.at(e), l.up.at(e), l.down.at(e)};
  }

  bool ok() const { return ok_; }
  int requests() const { return requests_; }

 private:
  struct Layer {
    std::vector<const void*> gate, up, down;
  };
  std::vector<Layer> layers_;
  std::vector<void*> allocations_;
  bool ok_ = true;
  int requests_ = 0;
};

TEST_F(CudaEngineTest, ExternalDeviceExpertsGiveTheSameLogits) {
  std::unique_ptr<Loaded> m = Load("tiny-q8_0");
  ASSERT_NE(m, nullptr);
  TestExperts experts(m->model);
  ASSERT_TRUE(experts.ok());
  CudaEngineConfig config;
  config.device_experts = &experts;
  std::unique_ptr<CudaQwen3Moe> external = Engine(*m, config);
  std::unique_ptr<CudaQwen3Moe> resident = Engine(*m);
  ASSERT_NE(external, nullptr);
  ASSERT_NE(resident, nullptr);
  // The external engine holds no expert bytes.
  EXPECT_LT(external->weight_bytes(), resident->weight_bytes());
  EXPECT_EQ(RunDecode(*external, m->ids), RunDecode(*resident, m->ids));
  // One token per call: k distinct experts per layer.
  const Qwen3MoeHparams& hp = m->model.hparams;
  EXPECT_EQ(experts.requests(),
            static_cast<int>(m->ids.size()) * hp.n_layer * hp.n_expert_used);
}

TEST_F(CudaEngineTest, ForwardChecksItsPreconditions) {
  std::unique_ptr<Loaded> m = Load("tiny-f32");
  ASSERT_NE(m, nullptr);
  std::unique_ptr<CudaQwen3Moe> engine = Engine(*m);
  ASSERT_NE(engine, nullptr);
  const int n_vocab = engine->n_vocab();
  std::vector<float> logits(static_cast<size_t>(kMaxCtx + 1) * n_vocab);
  const std::vector<int32_t> two = {m->ids[0], m->ids[1]};
  ASSERT_TRUE(engine->Forward(two, 0, LogitRows::kAll, logits.data()).ok());
  ASSERT_EQ(engine->cached_tokens(), 2);

  const std::vector<int32_t> empty;
  EXPECT_EQ(engine->Forward(empty, 0, LogitRows::kAll, logits.data()).code(),
            absl::StatusCode::kInvalidArgument);
  for (int32_t bad : {-1, n_vocab}) {
    const std::vector<int32_t> tokens = {m->ids[0], bad};
    const absl::Status s = engine->Forward(tokens, 2, LogitRows::kAll, logits.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("vocabulary"), absl::string_view::npos) << s;
  }
  EXPECT_EQ(engine->Forward(two, 3, LogitRows::kAll, logits.data()).code(),
            absl::StatusCode::kInvalidArgument);  // pos0 > cached_tokens
  EXPECT_EQ(engine->Forward(two, -1, LogitRows::kAll, logits.data()).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> too_long(static_cast<size_t>(kMaxCtx - 1), m->ids[0]);
  EXPECT_EQ(engine->Forward(too_long, 2, LogitRows::kAll, logits.data()).code(),
            absl::StatusCode::kOutOfRange);  // 2 + 63 > 64
  EXPECT_EQ(engine->Forward(two, 2, LogitRows::kAll, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // Rejected calls leave the cache as it was.
  EXPECT_EQ(engine->cached_tokens(), 2);
  // Exactly filling the context works.
  const std::vector<int32_t> rest(static_cast<size_t>(kMaxCtx - 2), m->ids[0]);
  EXPECT_TRUE(engine->Forward(rest, 2, LogitRows::kLast, logits.data()).ok());
  EXPECT_EQ(engine->cached_tokens(), kMaxCtx);
}

// Checks that come before any device call: they run on every machine.
TEST(CudaEngineArgsTest, RejectsBadConfigurationsAndWeightTypes) {
  std::unique_ptr<Loaded> m = Load("tiny-f32");
  ASSERT_NE(m, nullptr);
  auto create = [&](const CudaEngineConfig& config) {
    return CudaQwen3Moe::Create(m->model, config).status();
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

  // A type the CUDA kernels lack is named with its tensor.
  Qwen3MoeModel unsupported = m->model;
  unsupported.weights.layers[1].ffn_down_exps.type = TensorType::kQ2_K;
  const absl::Status s = CudaQwen3Moe::Create(unsupported, config).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find(unsupported.weights.layers[1].ffn_down_exps.name),
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

}  // namespace
}  // namespace moetier
