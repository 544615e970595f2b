// moetier-bench-kv, run as a user would run it: one JSON row per type, the
// baseline at zero distance from itself, the types' bytes per token, the
// distance growing as the rounding coarsens, and bad flags refused.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "support/subprocess.h"

namespace {

using moetier::testing::CommandResult;
using ::testing::HasSubstr;

CommandResult RunBench(const std::string& args) {
  return moetier::testing::RunBuiltProgram("tools/bench_kv/moetier-bench-kv", args);
}

const std::string kModel = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/small-q4_k_m.gguf";

TEST(BenchKvTest, EveryTypeIsComparedWithTheBaselineOnTheSameTokens) {
  const CommandResult r = RunBench("--model " + kModel + " --context 256 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, nlohmann::json> rows;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json row = nlohmann::json::parse(line);
    EXPECT_EQ(row["baseline"], "f16");
    EXPECT_EQ(row["context"], 256);
    EXPECT_EQ(row["activations"], "q8x2");
    rows[row["type"].get<std::string>()] = row;
  }
  ASSERT_EQ(rows.size(), 4u) << r.output;
  // 4 attention layers x 2 KV heads x (K + V) of 128 values.
  EXPECT_EQ(rows["f32"]["kv_bytes_per_token"], 4 * 2 * 2 * 512);
  EXPECT_EQ(rows["f16"]["kv_bytes_per_token"], 4 * 2 * 2 * 256);
  EXPECT_EQ(rows["q8_0"]["kv_bytes_per_token"], 4 * 2 * 2 * 136);
  EXPECT_EQ(rows["q4_0"]["kv_bytes_per_token"], 4 * 2 * 2 * 72);
  EXPECT_EQ(rows["f16"]["mean_kl"], 0.0);
  EXPECT_EQ(rows["f16"]["top1"], 1.0);
  EXPECT_LT(rows["f32"]["mean_kl"].get<double>(), 1e-5);
  EXPECT_GT(rows["q8_0"]["mean_kl"].get<double>(), rows["f32"]["mean_kl"].get<double>());
  EXPECT_GT(rows["q4_0"]["mean_kl"].get<double>(), rows["q8_0"]["mean_kl"].get<double>());
  EXPECT_LT(rows["q8_0"]["mean_kl"].get<double>(), 1e-2);
  for (const auto& [type, row] : rows) EXPECT_GT(row["prompt_tokens_per_s"].get<double>(), 0) << type;
}

TEST(BenchKvTest, TheTableNamesTheModelAndTheTypes) {
  const CommandResult r =
      RunBench("--model " + kModel + " --context 64 --threads 2 --types q8_0 --baseline f32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("64 positions of seeded random tokens, activations q8x2"));
  EXPECT_THAT(r.output, HasSubstr("  q8_0 "));
}

TEST(BenchKvTest, BadFlagsAndImpossibleRunsAreRefused) {
  const CommandResult help = RunBench("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("--baseline T"));
  EXPECT_EQ(RunBench("").exit_code, 2);
  CommandResult r = RunBench("--model " + kModel + " --types q5_k");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("choose one of f32, f16, q8_0, q4_0"));
  r = RunBench("--model " + kModel + " --context 100000");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("exceeds its training context"));
  r = RunBench("--model " + std::string(MOETIER_TEST_DATA_DIR) +
               "/vectors/tiny-f32.gguf --context 16 --types q8_0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--cache-type-k q8_0"));
}

}  // namespace
