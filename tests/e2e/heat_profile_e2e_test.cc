// The heat profile through the real daemon and worker: a daemon that stops
// saves what its worker routed; the next start says it loaded it and its
// worker's expert cache holds the hottest experts before any request,
// with the same tokens as a cold start; a corrupt profile means a cold
// start with a warning, and is replaced at the next save.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "daemon_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kModel = VectorPath("small-q4_k_m.gguf");
constexpr int kNewTokens = 24;
constexpr uint64_t kCacheSlots = 8;  // 25% of 4 layers x 8 experts

class HeatProfileE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/moetier_heat_e2e_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    state_dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(state_dir_); }

  std::unique_ptr<RunningDaemon> Start(bool warm_start = true) {
    DaemonSetup setup;
    setup.model_path = kModel;
    setup.extra_config = {"state_directory: \"" + state_dir_ + "\"",
                          "heat_profile_save_interval_s: 0",
                          std::string("warm_start: ") + (warm_start ? "true" : "false")};
    setup.worker_flags = {"--expert-cache-mib=25%", "--prefetch=off", "--cache-policy=lru"};
    std::string error;
    std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Start(setup, &error);
    EXPECT_NE(daemon, nullptr) << error;
    return daemon;
  }

  static Generation GenerateGreedy(RunningDaemon& daemon) {
    v1::GenerateRequest request;
    const std::vector<int32_t> prompt = VectorPromptIds("small-q4_k_m", 6);
    request.mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
    request.set_max_new_tokens(kNewTokens);
    request.set_ignore_end_of_generation(true);
    Generation g = Generate(daemon.stub(), request);
    EXPECT_TRUE(g.status.ok()) << g.status.error_message() << "\n" << daemon.Log();
    EXPECT_EQ(g.token_ids.size(), static_cast<size_t>(kNewTokens));
    return g;
  }

  // The only file under heat/, or "".
  std::string ProfilePath() const {
    const std::string dir = state_dir_ + "/heat";
    std::string found;
    if (!std::filesystem::exists(dir)) return found;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      EXPECT_TRUE(found.empty()) << "more than one file in " << dir;
      found = entry.path().string();
    }
    return found;
  }

  std::string state_dir_;
};

TEST_F(HeatProfileE2eTest, ARestartBeginsWithTheHottestExpertsCached) {
  std::vector<int32_t> cold_tokens;
  uint64_t cold_hits = 0;
  {
    std::unique_ptr<RunningDaemon> daemon = Start();
    ASSERT_NE(daemon, nullptr);
    const v1::Status before = daemon->GetStatus();
    EXPECT_THAT(before.heat_profile(), StartsWith("cold start: no profile at " + state_dir_));
    ASSERT_EQ(before.workers_size(), 1);
    EXPECT_EQ(before.workers(0).vram().resident_experts(), 0u);
    const Generation g = GenerateGreedy(*daemon);
    cold_tokens = g.token_ids;
    cold_hits = daemon->GetStatus().workers(0).vram().hits();
    ASSERT_EQ(daemon->Terminate(30000), 0) << daemon->Log();
    EXPECT_THAT(daemon->Log(), HasSubstr("heat profile saved to"));
  }
  const std::string profile = ProfilePath();
  ASSERT_FALSE(profile.empty()) << "no profile under " << state_dir_;
  EXPECT_TRUE(absl::EndsWith(profile, ".heat"));

  std::unique_ptr<RunningDaemon> daemon = Start();
  ASSERT_NE(daemon, nullptr);
  const v1::Status before = daemon->GetStatus();
  EXPECT_THAT(before.heat_profile(), StartsWith("loaded from " + profile + " (saved "));
  ASSERT_EQ(before.workers_size(), 1);
  // Before the first request: every slot holds one of the profile's experts.
  EXPECT_EQ(before.workers(0).vram().resident_experts(), kCacheSlots);
  EXPECT_EQ(before.workers(0).vram().hits() + before.workers(0).vram().misses(), 0u);
  int vram_cells = 0;
  for (const v1::LayerResidency& layer : before.layers()) {
    for (const int tier : layer.tier()) vram_cells += tier == v1::EXPERT_TIER_VRAM;
  }
  EXPECT_EQ(vram_cells, static_cast<int>(kCacheSlots));
  // A cache, not an approximation: the same tokens, and more hits.
  const Generation g = GenerateGreedy(*daemon);
  EXPECT_EQ(g.token_ids, cold_tokens);
  EXPECT_GT(daemon->GetStatus().workers(0).vram().hits(), cold_hits);
}

TEST_F(HeatProfileE2eTest, WarmStartOffLoadsTheProfileButFillsNothing) {
  {
    std::unique_ptr<RunningDaemon> daemon = Start();
    ASSERT_NE(daemon, nullptr);
    GenerateGreedy(*daemon);
    ASSERT_EQ(daemon->Terminate(30000), 0) << daemon->Log();
  }
  std::unique_ptr<RunningDaemon> daemon = Start(/*warm_start=*/false);
  ASSERT_NE(daemon, nullptr);
  const v1::Status status = daemon->GetStatus();
  EXPECT_THAT(status.heat_profile(), StartsWith("loaded from "));
  EXPECT_EQ(status.workers(0).vram().resident_experts(), 0u);
}

TEST_F(HeatProfileE2eTest, ACorruptProfileMeansAColdStartAndIsReplaced) {
  {
    std::unique_ptr<RunningDaemon> daemon = Start();
    ASSERT_NE(daemon, nullptr);
    GenerateGreedy(*daemon);
    ASSERT_EQ(daemon->Terminate(30000), 0) << daemon->Log();
  }
  const std::string profile = ProfilePath();
  ASSERT_FALSE(profile.empty());
  const uintmax_t size = std::filesystem::file_size(profile);
  std::filesystem::resize_file(profile, size / 2);
  {
    std::unique_ptr<RunningDaemon> daemon = Start();
    ASSERT_NE(daemon, nullptr);
    const v1::Status status = daemon->GetStatus();
    EXPECT_THAT(status.heat_profile(), StartsWith("cold start: the saved profile was refused"));
    EXPECT_THAT(status.heat_profile(), HasSubstr("truncated"));
    EXPECT_THAT(daemon->Log(), HasSubstr("heat profile refused, starting cold"));
    EXPECT_EQ(status.workers(0).vram().resident_experts(), 0u);
    GenerateGreedy(*daemon);
    ASSERT_EQ(daemon->Terminate(30000), 0) << daemon->Log();
  }
  EXPECT_EQ(std::filesystem::file_size(profile), size) << "the next save replaced it";
  std::unique_ptr<RunningDaemon> daemon = Start();
  ASSERT_NE(daemon, nullptr);
  EXPECT_THAT(daemon->GetStatus().heat_profile(), StartsWith("loaded from "));
}

}  // namespace
}  // namespace moetier::e2e
