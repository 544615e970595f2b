// The CPU worker's expert cache through the real daemon and shared memory:
// for cache sizes down to top_k slots per layer, each miss policy, prefetch
// on and off and static placement, a greedy generation yields the same
// tokens and Score the same logits, bit for bit, as the worker without a
// cache; and the status page shows the cache at work. `moetier budget`
// (SetBudget) resizes a running worker's cache without changing a token.
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "daemon_harness.h"
#include "gtest/gtest.h"

namespace moetier::e2e {
namespace {

const std::string kModel = VectorPath("small-q4_k_m.gguf");
constexpr int kNewTokens = 24;

std::vector<int32_t> PromptIds() { return VectorPromptIds("small-q4_k_m", 6); }

struct Outcome {
  std::vector<int32_t> generated;
  std::string logits;  // Score of prompt + generated, raw float32
  v1::Status status;   // after both calls
};

std::unique_ptr<RunningDaemon> StartWith(const std::vector<std::string>& worker_flags) {
  DaemonSetup setup;
  setup.model_path = kModel;
  setup.worker_flags = worker_flags;
  std::string error;
  std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Start(setup, &error);
  EXPECT_NE(daemon, nullptr) << error;
  return daemon;
}

v1::GenerateRequest GreedyRequest() {
  v1::GenerateRequest request;
  const std::vector<int32_t> prompt = PromptIds();
  request.mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
  request.set_max_new_tokens(kNewTokens);
  request.set_ignore_end_of_generation(true);
  return request;
}

grpc::Status SetBudget(RunningDaemon& daemon, const std::string& device, uint64_t mib,
                       v1::SetBudgetResponse* response) {
  v1::SetBudgetRequest request;
  request.set_device(device);
  request.set_expert_cache_mib(mib);
  grpc::ClientContext context;
  return daemon.stub().SetBudget(&context, request, response);
}

// Starts a daemon whose worker gets `worker_flags`, generates and scores.
Outcome RunWith(const std::vector<std::string>& worker_flags) {
  std::unique_ptr<RunningDaemon> daemon = StartWith(worker_flags);
  Outcome out;
  if (daemon == nullptr) return out;
  const std::vector<int32_t> prompt = PromptIds();
  const Generation g = Generate(daemon->stub(), GreedyRequest());
  EXPECT_TRUE(g.status.ok()) << g.status.error_message() << "\n" << daemon->Log();
  out.generated = g.token_ids;

  v1::ScoreRequest score;
  score.mutable_token_ids()->Add(prompt.begin(), prompt.end());
  score.mutable_token_ids()->Add(g.token_ids.begin(), g.token_ids.end());
  grpc::ClientContext context;
  v1::ScoreResponse response;
  const grpc::Status s = daemon->stub().Score(&context, score, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  out.logits = response.logits_f32le();
  out.status = daemon->GetStatus();
  return out;
}

class ExpertCacheE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { baseline_ = new Outcome(RunWith({})); }
  static void TearDownTestSuite() {
    delete baseline_;
    baseline_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(baseline_->generated.size(), static_cast<size_t>(kNewTokens));
    ASSERT_FALSE(baseline_->logits.empty());
    // Without a cache there is nothing in "VRAM".
    ASSERT_EQ(baseline_->status.workers_size(), 1);
    EXPECT_EQ(baseline_->status.workers(0).expert_cache_bytes(), 0u);
  }

  // Same tokens, same logits bits; returns worker 0's status.
  static v1::WorkerStatus ExpectSameResults(const std::vector<std::string>& flags) {
    const Outcome run = RunWith(flags);
    EXPECT_EQ(run.generated, baseline_->generated);
    EXPECT_TRUE(run.logits == baseline_->logits) << "Score differs from the worker without a cache";
    EXPECT_EQ(run.status.workers_size(), 1);
    return run.status.workers_size() == 1 ? run.status.workers(0) : v1::WorkerStatus();
  }

  static Outcome* baseline_;
};
Outcome* ExpertCacheE2eTest::baseline_ = nullptr;

TEST_F(ExpertCacheE2eTest, SmallestCacheCopyingMissesWithPrefetch) {
  // 25% of 4 layers x 8 experts is top_k = 2 slots per layer.
  const v1::WorkerStatus w = ExpectSameResults(
      {"--expert-cache-mib=25%", "--miss-policy=copy", "--prefetch=on", "--cache-policy=lru"});
  EXPECT_GT(w.expert_cache_bytes(), 0u);
  EXPECT_GT(w.vram().misses(), 0u);
  EXPECT_EQ(w.misses_on_host(), 0u);
  EXPECT_GT(w.bytes_copied(), 0u);
  EXPECT_GT(w.prefetch_issued(), 0u);
  EXPECT_LE(w.prefetch_used() + w.prefetch_wasted(), w.prefetch_issued());
  EXPECT_LE(w.vram().resident_experts(), 8u);
  EXPECT_GT(w.vram().resident_experts(), 0u);
}

TEST_F(ExpertCacheE2eTest, HalfCacheComputingMissesOnTheHost) {
  const v1::WorkerStatus w =
      ExpectSameResults({"--expert-cache-mib=50%", "--miss-policy=cpu", "--prefetch=on"});
  EXPECT_GT(w.misses_on_host(), 0u);
  EXPECT_GT(w.prefetch_issued(), 0u);
  EXPECT_GT(w.vram().hits(), 0u);  // from prefetched experts only
  EXPECT_LE(w.vram().resident_experts(), 16u);
}

TEST_F(ExpertCacheE2eTest, AutoMissPolicyWithoutPrefetch) {
  const v1::WorkerStatus w =
      ExpectSameResults({"--expert-cache-mib=50%", "--miss-policy=auto", "--prefetch=off"});
  EXPECT_EQ(w.prefetch_issued(), 0u);
  EXPECT_GT(w.vram().misses(), 0u);
}

TEST_F(ExpertCacheE2eTest, FullCacheEndsUpHittingEverything) {
  const v1::WorkerStatus w =
      ExpectSameResults({"--expert-cache-mib=100%", "--miss-policy=copy", "--prefetch=off"});
  EXPECT_GT(w.vram().hits(), w.vram().misses());
  EXPECT_LE(w.vram().misses(), 32u);  // each expert copied at most once
  EXPECT_GT(w.copy_bytes_per_s(), 0.0);
}

TEST_F(ExpertCacheE2eTest, StaticPlacementLikeNCpuMoe) {
  const v1::WorkerStatus w = ExpectSameResults({"--n-cpu-moe=2"});
  // Layers 2 and 3 are whole in slots from the start; 0 and 1 on the host.
  EXPECT_EQ(w.vram().resident_experts(), 16u);
  EXPECT_GT(w.vram().hits(), 0u);
  EXPECT_GT(w.misses_on_host(), 0u);
  EXPECT_EQ(w.misses_on_host(), w.vram().misses());
}

TEST_F(ExpertCacheE2eTest, BudgetResizesTheRunningWorkersCache) {
  std::unique_ptr<RunningDaemon> daemon = StartWith({"--expert-cache-mib=25%"});
  ASSERT_NE(daemon, nullptr);
  const Generation before = Generate(daemon->stub(), GreedyRequest());
  ASSERT_TRUE(before.status.ok()) << before.status.error_message();
  EXPECT_EQ(before.token_ids, baseline_->generated);
  // 25% is the smallest cache: top_k = 2 of 8 experts in each layer.
  const uint64_t smallest = daemon->GetStatus().workers(0).expert_cache_bytes();
  ASSERT_GT(smallest, 0u);
  const uint64_t slot = smallest / 8;
  const uint64_t min_mib = (smallest + (1 << 20) - 1) >> 20;

  // Three quarters of every expert, in whole MiB, then rounded down to
  // whole slots by the worker.
  const uint64_t mib = (smallest * 3) >> 20;
  ASSERT_GT(mib << 20, smallest + slot) << "the model's experts are too small for this test";
  v1::SetBudgetResponse response;
  grpc::Status s = SetBudget(*daemon, "cpu", mib, &response);
  ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << daemon->Log();
  EXPECT_EQ(response.expert_cache_bytes(), (mib << 20) / slot * slot);
  EXPECT_EQ(response.expert_cache_mib(), response.expert_cache_bytes() >> 20);
  EXPECT_EQ(daemon->GetStatus().workers(0).expert_cache_bytes(), response.expert_cache_bytes());

  // The bigger cache computes the same tokens, bit for bit.
  const Generation after = Generate(daemon->stub(), GreedyRequest());
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.token_ids, before.token_ids);

  // Below the minimum, and 0: refused, naming the minimum; the cache stays.
  for (const uint64_t too_small : {min_mib - 1, uint64_t{0}}) {
    SCOPED_TRACE(absl::StrFormat("%d MiB", too_small));
    v1::SetBudgetResponse refused;
    s = SetBudget(*daemon, "cpu", too_small, &refused);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find(absl::StrFormat("at least %d MiB", min_mib)),
              std::string::npos)
        << s.error_message();
  }
  EXPECT_EQ(daemon->GetStatus().workers(0).expert_cache_bytes(), response.expert_cache_bytes());

  // Back to the smallest: still the same tokens.
  s = SetBudget(*daemon, "cpu", min_mib, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.expert_cache_bytes(), (min_mib << 20) / slot * slot);
  const Generation again = Generate(daemon->stub(), GreedyRequest());
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.token_ids, before.token_ids);

  s = SetBudget(*daemon, "cuda:5", 100, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
}

TEST_F(ExpertCacheE2eTest, BudgetOfAWorkerWithoutACacheSaysHowToGetOne) {
  std::unique_ptr<RunningDaemon> daemon = StartWith({});
  ASSERT_NE(daemon, nullptr);
  v1::SetBudgetResponse response;
  const grpc::Status s = SetBudget(*daemon, "cpu", 100, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("--expert-cache-mib through worker_extra_args"),
            std::string::npos)
      << s.error_message();
  // The worker goes on serving.
  const Generation g = Generate(daemon->stub(), GreedyRequest());
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_EQ(g.token_ids, baseline_->generated);
}

}  // namespace
}  // namespace moetier::e2e
