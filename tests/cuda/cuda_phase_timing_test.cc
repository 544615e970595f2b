// The CUDA engine's per-phase device time (CudaEngine::EnablePhaseTiming):
// timing keeps the logits' bits, turns decode graphs off while it is on,
// fills the phases each path has and only those, and never adds up to more
// than the wall time of the calls it timed. Everything skips without a
// device.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "cuda_test_util.h"
#include "engine/cuda_engine.h"
#include "engine/mapped_expert_source.h"
#include "gtest/gtest.h"
#include "model/architectures.h"

namespace moetier {
namespace {

using cuda_test::Load;
using cuda_test::Loaded;
using cuda_test::NewSequence;
using cuda_test::RunAll;
using cuda_test::RunDecode;

constexpr int kMaxCtx = 64;

std::unique_ptr<CudaEngine> Engine(const Loaded& m, CudaEngineConfig config) {
  config.max_ctx = kMaxCtx;
  absl::StatusOr<std::unique_ptr<CudaEngine>> engine = CudaEngine::Create(m.model, config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

double At(const CudaPhaseSeconds& s, CudaPhase p) { return s[static_cast<size_t>(p)]; }

double Sum(const CudaPhaseSeconds& s) {
  double total = 0;
  for (double v : s) total += v;
  return total;
}

std::string Describe(const CudaPhaseSeconds& s) {
  std::string out;
  for (size_t i = 0; i < kCudaPhaseCount; ++i) {
    out += std::string(CudaPhaseName(static_cast<CudaPhase>(i))) + " " +
           std::to_string(s[i] * 1e3) + " ms; ";
  }
  return out;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class CudaPhaseTimingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device or driver on this machine; run tests/cuda/run-on-gpu.sh "
                      "where a GPU exists";
    }
  }
};

// Resident experts: routed on the device, and on the host; attention and
// Gated DeltaNet models (qwen35moe also has a shared expert).
TEST_F(CudaPhaseTimingTest, TimedPassesKeepTheBitsAndFillTheirPhases) {
  for (const char* name : {"tiny-q8_0", "qwen35moe-tiny-f32"}) {
    for (bool on_device : {true, false}) {
      SCOPED_TRACE(::testing::Message() << name << ", routed on device " << on_device);
      std::unique_ptr<Loaded> m = Load(name);
      ASSERT_NE(m, nullptr);
      CudaEngineConfig config;
      config.route_on_device = on_device;
      std::unique_ptr<CudaEngine> plain = Engine(*m, config);
      std::unique_ptr<CudaEngine> timed = Engine(*m, config);
      ASSERT_NE(plain, nullptr);
      ASSERT_NE(timed, nullptr);
      ASSERT_TRUE(timed->EnablePhaseTiming(true).ok());
      for (double v : timed->phase_seconds()) EXPECT_EQ(v, 0.0);

      // Decode (one token a pass: routed where config says), then the
      // prompt in one pass (more rows than the GEMV takes: always routed
      // on the host).
      const double t0 = Now();
      const std::vector<float> decoded = RunDecode(*timed, m->ids);
      const double wall = Now() - t0;
      const CudaPhaseSeconds s = timed->phase_seconds();
      EXPECT_TRUE(timed->phase_timing_error().ok()) << timed->phase_timing_error();
      timed->ResetPhaseTimes();
      const std::vector<float> prompted = RunAll(*timed, m->ids);
      const CudaPhaseSeconds prompt = timed->phase_seconds();
      EXPECT_EQ(decoded, RunDecode(*plain, m->ids));
      EXPECT_EQ(prompted, RunAll(*plain, m->ids));
      ASSERT_GT(m->ids.size(), static_cast<size_t>(config.gemv_max_rows));
      EXPECT_GT(At(prompt, CudaPhase::kHostRouting), 0.0);
      EXPECT_GT(At(prompt, CudaPhase::kExperts), 0.0);

      SCOPED_TRACE(Describe(s));
      EXPECT_GT(Sum(s), 0.0);
      EXPECT_LE(Sum(s), wall * 1.01 + 1e-4);
      for (CudaPhase p : {CudaPhase::kEmbed, CudaPhase::kRouter, CudaPhase::kExperts,
                          CudaPhase::kOutput}) {
        EXPECT_GT(At(s, p), 0.0) << CudaPhaseName(p);
      }
      const bool deltanet = m->model.hparams.architecture == "qwen35moe";
      EXPECT_GT(At(s, CudaPhase::kAttention), 0.0);
      EXPECT_GT(At(s, CudaPhase::kAttentionProjections), 0.0);
      EXPECT_EQ(At(s, CudaPhase::kDeltaNet) > 0.0, deltanet);
      EXPECT_EQ(At(s, CudaPhase::kDeltaNetProjections) > 0.0, deltanet);
      EXPECT_EQ(At(s, CudaPhase::kSharedExpert) > 0.0, deltanet);
      // Host routing only where the host routes; no cache, nothing fetched.
      EXPECT_EQ(At(s, CudaPhase::kHostRouting) > 0.0, !on_device);
      EXPECT_EQ(At(s, CudaPhase::kExpertFetch), 0.0);
      EXPECT_EQ(At(s, CudaPhase::kHostExperts), 0.0);

      // Decode without logits would replay a graph; timed, it launches.
      std::unique_ptr<Sequence> seq = NewSequence(*timed);
      ASSERT_NE(seq, nullptr);
      for (int32_t id : {m->ids[0], m->ids[1], m->ids[2]}) {
        const int32_t token[1] = {id};
        ASSERT_TRUE(timed->Forward(*seq, token, LogitRows::kNone, nullptr).ok());
      }
      EXPECT_EQ(timed->captured_decode_graphs(), 0);
      EXPECT_GT(Sum(timed->phase_seconds()), Sum(prompt));

      // Off again: nothing more is added, and graphs come back.
      timed->ResetPhaseTimes();
      ASSERT_TRUE(timed->EnablePhaseTiming(false).ok());
      for (int32_t id : {m->ids[3], m->ids[4]}) {
        const int32_t token[1] = {id};
        ASSERT_TRUE(timed->Forward(*seq, token, LogitRows::kNone, nullptr).ok());
      }
      for (double v : timed->phase_seconds()) EXPECT_EQ(v, 0.0);
      EXPECT_EQ(timed->captured_decode_graphs(), on_device ? 1 : 0);
    }
  }
}

// The VRAM cache at its smallest pool: misses are copied (expert fetch) or
// computed on the host (host experts), and the host places every layer's
// experts (host routing).
TEST_F(CudaPhaseTimingTest, TheCacheFillsItsOwnPhases) {
  std::unique_ptr<Loaded> m = Load("small-q4_k_m");
  ASSERT_NE(m, nullptr);
  CudaEngineConfig base;
  const ExpertSlotCacheOptions options =
      CudaSlotCacheOptions(RoutedExpertShapesOf(m->model), CudaExpertCacheConfig{});
  for (MissPolicy policy : {MissPolicy::kCopy, MissPolicy::kHost}) {
    SCOPED_TRACE(policy == MissPolicy::kCopy ? "copy misses" : "misses on the host");
    MappedExpertSource source(m->model.weights);
    CudaEngineConfig config = base;
    config.expert_source = &source;
    config.expert_cache.miss_policy = policy;
    config.expert_cache.host_threads = 2;
    config.expert_cache.pool_bytes = MinDynamicPoolBytes(options);
    std::unique_ptr<CudaEngine> plain = Engine(*m, config);
    std::unique_ptr<CudaEngine> timed = Engine(*m, config);
    ASSERT_NE(plain, nullptr);
    ASSERT_NE(timed, nullptr);
    ASSERT_TRUE(timed->EnablePhaseTiming(true).ok());
    const double t0 = Now();
    const std::vector<float> decoded = RunDecode(*timed, m->ids);
    const double wall = Now() - t0;
    EXPECT_EQ(decoded, RunDecode(*plain, m->ids));
    const CudaPhaseSeconds s = timed->phase_seconds();
    SCOPED_TRACE(Describe(s));
    EXPECT_LE(Sum(s), wall * 1.01 + 1e-4);
    EXPECT_GT(At(s, CudaPhase::kRouter), 0.0);
    EXPECT_GT(At(s, CudaPhase::kHostRouting), 0.0);
    EXPECT_GT(At(s, CudaPhase::kExperts), 0.0);
    if (policy == MissPolicy::kHost) {
      EXPECT_GT(At(s, CudaPhase::kHostExperts), 0.0);
    } else {
      EXPECT_EQ(At(s, CudaPhase::kHostExperts), 0.0);
      EXPECT_GT(At(s, CudaPhase::kExpertFetch), 0.0);
    }
  }
}

}  // namespace
}  // namespace moetier
