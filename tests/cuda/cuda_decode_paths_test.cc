// The CUDA engine's ways of launching a decode step, each against another
// that must give the same bits: a DeviceExperts of the test's own against
// the engine's uploaded experts, grouped expert launches (on the host and
// routed on the device) against one expert at a time, the benchmark's
// launch switches, and decode steps replayed from CUDA graphs against
// eager decode. Everything skips without a device.
#include <cuda_runtime_api.h>

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "cuda_test_util.h"
#include "engine/cuda_engine.h"
#include "gtest/gtest.h"
#include "sampling/sampler.h"

namespace moetier {
namespace {

using cuda_test::Load;
using cuda_test::Loaded;
using cuda_test::NewSequence;
using cuda_test::RunAll;
using cuda_test::RunDecode;

constexpr int kMaxCtx = 64;

std::unique_ptr<CudaEngine> Engine(const Loaded& m, CudaEngineConfig config = {}) {
  config.max_ctx = kMaxCtx;
  absl::StatusOr<std::unique_ptr<CudaEngine>> engine = CudaEngine::Create(m.model, config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
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

// A DeviceExperts of the test's own (every expert uploaded by the test) in
// place of the engine's: the same logits bit for bit, and exactly one
// request per used expert and layer. With `pointers_stay_valid` the block
// groups each layer's experts into shared launches, else it computes them
// one at a time.
class TestExperts final : public DeviceExperts {
 public:
  explicit TestExperts(const Model& model, bool pointers_stay_valid = false)
      : pointers_stay_valid_(pointers_stay_valid) {
    for (const LayerWeights& l : model.weights.layers) {
      Layer layer;
      for (auto [dst, ref] : {std::pair{&layer.gate, &l.moe.gate_exps},
                              std::pair{&layer.up, &l.moe.up_exps},
                              std::pair{&layer.down, &l.moe.down_exps}}) {
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

  bool pointers_stay_valid() const override { return pointers_stay_valid_; }
  bool ok() const { return ok_; }
  int requests() const { return requests_; }

 private:
  struct Layer {
    std::vector<const void*> gate, up, down;
  };
  std::vector<Layer> layers_;
  std::vector<void*> allocations_;
  const bool pointers_stay_valid_;
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
  std::unique_ptr<CudaEngine> external = Engine(*m, config);
  std::unique_ptr<CudaEngine> resident = Engine(*m);
  ASSERT_NE(external, nullptr);
  ASSERT_NE(resident, nullptr);
  // The external engine holds no expert bytes.
  EXPECT_LT(external->weight_bytes(), resident->weight_bytes());
  EXPECT_EQ(RunDecode(*external, m->ids), RunDecode(*resident, m->ids));
  // One token per call: k distinct experts per layer.
  const ModelHparams& hp = m->model.hparams;
  EXPECT_EQ(experts.requests(),
            static_cast<int>(m->ids.size()) * hp.n_layer * hp.n_expert_used);
}

// Grouped expert launches give the bits of one expert at a time:
// - decode, one row per expert, grouped on the device (BuildExpertJobs);
// - a prompt in one call past gemv_max_rows, grouped on the host: GEMV jobs
//   in chunks of kCudaGemvMaxBatch rows, the GEMM past gemv_max_rows, each
//   used expert's pointers asked for once per layer as one at a time does;
// - prompt batches of 16 grouped on the device, where an expert's rows
//   split into jobs of 8.
TEST_F(CudaEngineTest, GroupedExpertLaunchesGiveTheBitsOfOneExpertAtATime) {
  for (const char* name : {"tiny-f32", "small-q4_k_m", "qwen35moe-small-q4_k_m"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    const ModelHparams& hp = m->model.hparams;
    TestExperts one_at_a_time(m->model, /*pointers_stay_valid=*/false);
    TestExperts grouped(m->model, /*pointers_stay_valid=*/true);
    ASSERT_TRUE(one_at_a_time.ok() && grouped.ok());
    CudaEngineConfig config;
    config.gemv_max_rows = 12;
    config.device_experts = &one_at_a_time;
    std::unique_ptr<CudaEngine> single = Engine(*m, config);
    config.device_experts = &grouped;
    std::unique_ptr<CudaEngine> group = Engine(*m, config);
    ASSERT_NE(single, nullptr);
    ASSERT_NE(group, nullptr);
    // The device table takes every expert's pointers once, at creation.
    EXPECT_EQ(grouped.requests(), hp.n_layer * hp.n_expert);
    EXPECT_EQ(RunDecode(*single, m->ids), RunDecode(*group, m->ids));
    EXPECT_EQ(grouped.requests(), hp.n_layer * hp.n_expert) << "decode asked for pointers";

    const int single_before = one_at_a_time.requests();
    const int group_before = grouped.requests();
    EXPECT_EQ(RunAll(*single, m->ids), RunAll(*group, m->ids));
    EXPECT_EQ(grouped.requests() - group_before, one_at_a_time.requests() - single_before);

    CudaEngineConfig wide;
    wide.max_batch = 16;
    wide.gemv_max_rows = 16;
    wide.device_experts = &one_at_a_time;
    std::unique_ptr<CudaEngine> wide_single = Engine(*m, wide);
    wide.device_experts = &grouped;
    std::unique_ptr<CudaEngine> wide_group = Engine(*m, wide);
    ASSERT_NE(wide_single, nullptr);
    ASSERT_NE(wide_group, nullptr);
    EXPECT_EQ(RunAll(*wide_single, m->ids), RunAll(*wide_group, m->ids));
  }
}

// The benchmark's switches (group_expert_launches, route_on_device) change
// how experts are launched, never the bits.
TEST_F(CudaEngineTest, ExpertLaunchSwitchesKeepTheBits) {
  for (const char* name : {"tiny-q8_0", "qwen35moe-small-q4_k_m"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    std::vector<float> decoded, prompted;
    for (auto [group, on_device] : {std::pair{true, true}, std::pair{true, false},
                                    std::pair{false, false}}) {
      SCOPED_TRACE(::testing::Message() << "grouped " << group << ", on device " << on_device);
      CudaEngineConfig config;
      config.group_expert_launches = group;
      config.route_on_device = on_device;
      std::unique_ptr<CudaEngine> engine = Engine(*m, config);
      ASSERT_NE(engine, nullptr);
      const std::vector<float> d = RunDecode(*engine, m->ids);
      const std::vector<float> p = RunAll(*engine, m->ids);
      if (decoded.empty()) {
        decoded = d;
        prompted = p;
        continue;
      }
      EXPECT_EQ(d, decoded);
      EXPECT_EQ(p, prompted);
    }
  }
}

// Decode steps replayed from captured CUDA graphs give the bits of eager
// decode: one sequence, two sequences taking turns (a graph per slot), a
// greedy sample from the replayed row, and a step after positions skipped
// without computing them (the position reaches the replay on the device).
TEST_F(CudaEngineTest, DecodeGraphsGiveTheBitsOfEagerDecode) {
  for (const char* name : {"tiny-q8_0", "small-q4_k_m", "qwen35moe-tiny-f32"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Loaded> m = Load(name);
    ASSERT_NE(m, nullptr);
    CudaEngineConfig config;
    config.max_sequences = 2;
    config.use_cuda_graphs = false;
    std::unique_ptr<CudaEngine> eager = Engine(*m, config);
    config.use_cuda_graphs = true;
    std::unique_ptr<CudaEngine> graphed = Engine(*m, config);
    ASSERT_NE(eager, nullptr);
    ASSERT_NE(graphed, nullptr);
    EXPECT_EQ(RunDecode(*graphed, m->ids), RunDecode(*eager, m->ids));
    EXPECT_TRUE(graphed->graphs_failed().ok()) << graphed->graphs_failed();
    EXPECT_EQ(graphed->captured_decode_graphs(), 1);
    EXPECT_EQ(eager->captured_decode_graphs(), 0);

    // Two sequences in turns, each sampled greedily after its step.
    const int n_vocab = eager->n_vocab();
    std::vector<std::vector<float>> logits(2);
    std::vector<std::vector<int32_t>> sampled(2);
    int which = 0;
    for (CudaEngine* e : {eager.get(), graphed.get()}) {
      std::unique_ptr<Sequence> a = NewSequence(*e);
      std::unique_ptr<Sequence> b = NewSequence(*e);
      ASSERT_NE(a, nullptr);
      ASSERT_NE(b, nullptr);
      Sampler greedy(n_vocab, SamplingParams{});  // temperature 0: greedy
      std::vector<float> row(static_cast<size_t>(n_vocab));
      for (size_t i = 0; i < 12 && i + 1 < m->ids.size(); ++i) {
        for (Sequence* seq : {a.get(), b.get()}) {
          const int32_t token[1] = {m->ids[seq == a.get() ? i : i + 1]};
          ASSERT_TRUE(e->Forward(*seq, token, LogitRows::kLast, row.data()).ok());
          logits[static_cast<size_t>(which)].insert(logits[static_cast<size_t>(which)].end(),
                                                    row.begin(), row.end());
          absl::StatusOr<int32_t> next = e->Sample(greedy);
          ASSERT_TRUE(next.ok()) << next.status();
          sampled[static_cast<size_t>(which)].push_back(*next);
        }
      }
      // Decode after 20 positions counted as computed without computing them.
      ASSERT_TRUE(e->SkipPositionsForTiming(*a, 20).ok());
      const int32_t token[1] = {m->ids[0]};
      ASSERT_TRUE(e->Forward(*a, token, LogitRows::kLast, row.data()).ok());
      logits[static_cast<size_t>(which)].insert(logits[static_cast<size_t>(which)].end(),
                                                row.begin(), row.end());
      // No logits to the host, then a sample from the device's row.
      ASSERT_TRUE(e->Forward(*a, token, LogitRows::kNone, nullptr).ok());
      absl::StatusOr<int32_t> next = e->Sample(greedy);
      ASSERT_TRUE(next.ok()) << next.status();
      sampled[static_cast<size_t>(which)].push_back(*next);
      // A server's one-step ForwardMany.
      const SequenceStep step{b.get(), token, row.data()};
      ASSERT_TRUE(e->ForwardMany(std::span<const SequenceStep>(&step, 1)).ok());
      logits[static_cast<size_t>(which)].insert(logits[static_cast<size_t>(which)].end(),
                                                row.begin(), row.end());
      ++which;
    }
    EXPECT_EQ(logits[1], logits[0]);
    EXPECT_EQ(sampled[1], sampled[0]);
    EXPECT_EQ(graphed->captured_decode_graphs(), 2);
    EXPECT_TRUE(graphed->graphs_failed().ok()) << graphed->graphs_failed();
  }
}

}  // namespace
}  // namespace moetier
