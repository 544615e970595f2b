// The CPU worker's expert cache through the real daemon and shared memory:
// for cache sizes down to top_k slots per layer, each miss policy, prefetch
// on and off and static placement, a greedy generation yields the same
// tokens and Score the same logits, bit for bit, as the worker without a
// cache; and the status page shows the cache at work.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "daemon_harness.h"
#include "gtest/gtest.h"

namespace moetier::e2e {
namespace {

const std::string kModel = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/small-q4_k_m.gguf";
const std::string kIds = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/small-q4_k_m.ids";
constexpr int kNewTokens = 24;

std::vector<int32_t> PromptIds() {
  std::ifstream in(kIds);
  std::vector<int32_t> ids;
  std::string part;
  while (std::getline(in, part, ',') && ids.size() < 6) ids.push_back(std::stoi(part));
  return ids;
}

struct Outcome {
  std::vector<int32_t> generated;
  std::string logits;  // Score of prompt + generated, raw float32
  v1::Status status;   // after both calls
};

// Starts a daemon whose worker gets `worker_flags`, generates and scores.
Outcome RunWith(const std::vector<std::string>& worker_flags) {
  DaemonSetup setup;
  setup.model_path = kModel;
  for (const std::string& flag : worker_flags) {
    setup.extra_config.push_back(absl::StrFormat("worker_extra_args: \"%s\"", flag));
  }
  std::string error;
  std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Start(setup, &error);
  Outcome out;
  EXPECT_NE(daemon, nullptr) << error;
  if (daemon == nullptr) return out;
  v1::GenerateRequest request;
  const std::vector<int32_t> prompt = PromptIds();
  request.mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
  request.set_max_new_tokens(kNewTokens);
  request.set_ignore_end_of_generation(true);
  const Generation g = Generate(daemon->stub(), request);
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

}  // namespace
}  // namespace moetier::e2e
