// moetier-bench-batch, run as a user would run it: a JSON row per batch
// width whose expert bytes per token fall as sequences share a layer's
// experts, the join's figures (a start loaded from a kept state shortening
// the time to first token), and bad flags refused.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/subprocess.h"

namespace {

using moetier::testing::CommandResult;
using ::testing::HasSubstr;

CommandResult RunBench(const std::string& args) {
  return moetier::testing::RunBuiltProgram("tools/bench_batch/moetier-bench-batch", args);
}

const std::string kModel = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/small-q4_k_m.gguf";

TEST(BenchBatchTest, WiderBatchesReadFewerExpertBytesPerToken) {
  const CommandResult r =
      RunBench("--model " + kModel +
               " --sequences 1,4,8 --context 32 --decode-steps 4 --runs 3 --join-running 3 "
               "--join-prompt-tokens 40 --chunk 16 --join-runs 2 --shared-prefix-tokens 32 "
               "--threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> widths;
  nlohmann::json join;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json row = nlohmann::json::parse(line);
    if (row.contains("width")) {
      widths.push_back(row);
    } else {
      join = row;
    }
  }
  ASSERT_EQ(widths.size(), 3u) << r.output;
  EXPECT_EQ(widths[0]["width"], 1);
  EXPECT_EQ(widths[0]["speedup_vs_first_width"], 1.0);
  // One sequence reads top_k experts per layer and token: 4 layers x 4.
  const double solo = widths[0]["expert_bytes_per_token"].get<double>();
  EXPECT_GT(solo, 0);
  EXPECT_EQ(widths[0]["expert_bytes_vs_first_width"], 1.0);
  // Eight tokens over 8 experts per layer share some of them.
  EXPECT_LT(widths[2]["expert_bytes_per_token"].get<double>(),
            widths[1]["expert_bytes_per_token"].get<double>());
  EXPECT_LT(widths[1]["expert_bytes_per_token"].get<double>(), solo);
  for (const nlohmann::json& w : widths) EXPECT_GT(w["tokens_per_s"].get<double>(), 0);
  ASSERT_TRUE(join.contains("ttft_p50_s")) << r.output;
  EXPECT_EQ(join["join_running"], 3);
  EXPECT_GT(join["ttft_p50_s"].get<double>(), 0);
  EXPECT_GE(join["ttft_p99_s"].get<double>(), join["ttft_p50_s"].get<double>());
  EXPECT_GT(join["alone_prefill_s"].get<double>(), 0);
  EXPECT_GT(join["step_during_join_s"].get<double>(), 0);
  // The same arrivals with 32 of their 40 tokens loaded: one step of 8
  // tokens instead of three of 16, 16 and 8. (Counted, not timed: a test
  // machine's load can make one step slower than three.)
  EXPECT_EQ(join["steps_to_first_token"], 3);
  EXPECT_EQ(join["shared_prefix_tokens"], 32);
  EXPECT_EQ(join["hit_steps_to_first_token"], 1);
  EXPECT_GT(join["hit_ttft_p50_s"].get<double>(), 0);
  EXPECT_GT(join["state_copy_s"].get<double>(), 0);
  EXPECT_GT(join["state_load_s"].get<double>(), 0);
}

TEST(BenchBatchTest, TheTableNamesWidthsAndTheJoin) {
  const CommandResult r = RunBench("--model " + kModel +
                                   " --sequences 1,2 --context 8 --decode-steps 2 --runs 3 "
                                   "--join-running 1 --join-prompt-tokens 8 --join-runs 1 "
                                   "--shared-prefix-tokens 4 --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("width  tok/s (median)"));
  EXPECT_THAT(r.output, HasSubstr("bytes bound  of bound"));
  EXPECT_THAT(r.output, HasSubstr("width 2 time by phase:"));
  EXPECT_THAT(r.output, HasSubstr("join: a 8-token prompt"));
  EXPECT_THAT(r.output, HasSubstr("TTFT p50"));
  EXPECT_THAT(r.output, HasSubstr("its first 4 tokens loaded from a kept state"));
}

// Replayed routing, each row its own stream: when every stream is the same
// trace, the rows of a decode step choose the same experts, so a step of W
// sequences reads each of them once, 1/W of the bytes per token of one
// sequence; independent streams (one seed each) share less.
TEST(BenchBatchTest, RowsReplayTheirOwnTraces) {
  const std::string tracegen =
      std::string(MOETIER_BINARY_DIR) + "/tools/tracegen/moetier-tracegen";
  const std::string dir = ::testing::TempDir();
  std::vector<std::string> paths;
  for (int seed = 1; seed <= 4; ++seed) {
    paths.push_back(dir + "/bench_batch_" + std::to_string(seed) + ".trace");
    const std::string command = tracegen + " --layers 4 --experts 8 --top-k 2 --tokens 300 " +
                                "--seed " + std::to_string(seed) + " --out " + paths.back();
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  auto run = [&](const std::string& traces) {
    const CommandResult r = RunBench("--model " + kModel +
                                     " --sequences 1,4 --context 8 --decode-steps 4 --runs 3 "
                                     "--join-running 0 --threads 2 --json --routing-from-trace " +
                                     traces);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::vector<nlohmann::json> rows;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
    return rows;
  };
  const std::string same = paths[0] + "," + paths[0] + "," + paths[0] + "," + paths[0];
  const std::vector<nlohmann::json> shared = run(same);
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_EQ(shared[0]["routing"], "trace");
  EXPECT_DOUBLE_EQ(shared[1]["expert_bytes_vs_first_width"].get<double>(), 0.25);
  // Four rows reading what one reads: a memory-bound engine gets 4x.
  EXPECT_DOUBLE_EQ(shared[0]["memory_bound_speedup"].get<double>(), 1.0);
  EXPECT_NEAR(shared[1]["memory_bound_speedup"].get<double>(), 4.0, 1e-9);
  const std::vector<nlohmann::json> own =
      run(paths[0] + "," + paths[1] + "," + paths[2] + "," + paths[3]);
  ASSERT_EQ(own.size(), 2u);
  EXPECT_GT(own[1]["expert_bytes_vs_first_width"].get<double>(), 0.25);
  EXPECT_LT(own[1]["expert_bytes_vs_first_width"].get<double>(), 1.0);
  // Fewer shared experts: the bound lies between 1x and 4x, and is the
  // bytes' own arithmetic (dense weights once per step, experts per token).
  const double dense = own[1]["dense_bytes_per_step"].get<double>();
  const double solo = own[0]["expert_bytes_per_token"].get<double>();
  const double four = own[1]["expert_bytes_per_token"].get<double>();
  EXPECT_GT(dense, 0);
  EXPECT_NEAR(own[1]["memory_bound_speedup"].get<double>(),
              4 * (dense + solo) / (dense + 4 * four), 1e-9);
  EXPECT_GT(own[1]["memory_bound_speedup"].get<double>(), 1.0);
  EXPECT_LT(own[1]["memory_bound_speedup"].get<double>(), 4.0);
  EXPECT_NEAR(own[1]["speedup_of_memory_bound"].get<double>(),
              own[1]["speedup_vs_first_width"].get<double>() /
                  own[1]["memory_bound_speedup"].get<double>(),
              1e-9);

  // A trace of another shape is refused, naming both shapes.
  const std::string wrong = dir + "/bench_batch_wrong.trace";
  ASSERT_EQ(std::system((tracegen + " --layers 3 --experts 8 --top-k 2 --tokens 10 --out " +
                         wrong)
                            .c_str()),
            0);
  const CommandResult refused = RunBench("--model " + kModel + " --routing-from-trace " + wrong);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.output, HasSubstr("3 layers x 8 experts, top-2; the model is 4 x 8, top-2"));
}

TEST(BenchBatchTest, BadFlagsAndImpossibleRunsAreRefused) {
  const CommandResult help = RunBench("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("--join-prompt-tokens N"));
  EXPECT_EQ(RunBench("").exit_code, 2);
  const CommandResult width = RunBench("--model " + kModel + " --sequences 1,0");
  EXPECT_EQ(width.exit_code, 2);
  EXPECT_THAT(width.output, HasSubstr("not a width"));
  EXPECT_EQ(RunBench("--model " + kModel + " --runs 2").exit_code, 2);
  EXPECT_EQ(RunBench("--model " + kModel + " --cache-type-k q5_1").exit_code, 2);
  const CommandResult too_long = RunBench("--model " + kModel + " --context 100000");
  EXPECT_EQ(too_long.exit_code, 2);
  EXPECT_THAT(too_long.output, HasSubstr("training context"));
  const CommandResult whole_prefix = RunBench("--model " + kModel +
                                             " --join-prompt-tokens 8 --shared-prefix-tokens 8");
  EXPECT_EQ(whole_prefix.exit_code, 2);
  EXPECT_THAT(whole_prefix.output, HasSubstr("leaves nothing"));
  EXPECT_EQ(RunBench("--model /nonexistent.gguf").exit_code, 1);
}

}  // namespace
