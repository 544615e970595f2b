// moetier-bench-cache, run as a user would run it, on the CPU (where every
// configuration computes the same numbers, so every row must reproduce the
// resident configuration's tokens).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "support/subprocess.h"

namespace {

using moetier::testing::CommandResult;
using ::testing::HasSubstr;
using ::testing::Not;

CommandResult RunBench(const std::string& args) {
  return moetier::testing::RunBuiltProgram("tools/bench_cache/moetier-bench-cache", args);
}

const std::string kModel = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/small-q4_k_m.gguf";

TEST(BenchCacheTest, EveryConfigurationRunsAndReproducesTheResidentTokens) {
  const std::string json = testing::TempDir() + "/bench-cache.json";
  const CommandResult r =
      RunBench("--model " + kModel +
               " --threads 2 --decode-tokens 8 --prompt-tokens 16 --runs 1 --configs "
               "resident,50%:copy,25%:cpu:off,static:half --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* row : {"resident ", "50%:copy ", "25%:cpu:off ", "static:2 "}) {
    EXPECT_THAT(r.output, HasSubstr(std::string("\n") + row)) << r.output;
  }
  EXPECT_THAT(r.output, HasSubstr("memcpy rate"));
  EXPECT_THAT(r.output, Not(HasSubstr(" no\n")));  // every =res column says yes
  EXPECT_THAT(r.output, Not(HasSubstr("skipped")));
  std::ifstream in(json);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"config\": \"50%:copy\""));
  EXPECT_THAT(text.str(), HasSubstr("\"same_tokens_as_resident\": true"));
  EXPECT_THAT(text.str(), Not(HasSubstr("\"same_tokens_as_resident\": false")));
}

TEST(BenchCacheTest, ReplayedRoutingIsLabelledAndDrivesTheCache) {
  // Three tokens that always route to experts 0 and 1 of every layer: a
  // cache of two slots per layer hits everything after the first token.
  const std::string trace = testing::TempDir() + "/bench-cache.trace";
  {
    std::ofstream out(trace);
    out << "moetier-trace v1 layers=4 experts=8 top_k=2 weights=0\n";
    for (int t = 0; t < 3; ++t) out << "0,1;1,0;0,1;1,0\n";
  }
  const CommandResult r = RunBench("--model " + kModel +
                                   " --threads 1 --decode-tokens 6 --prompt-tokens 4 --runs 1 "
                                   "--configs resident,25%:copy:off --routing-from-trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("routing replayed from " + trace));
  // Decode hit rate 100%: the timed run follows a warm-up over the same experts.
  EXPECT_THAT(r.output, HasSubstr("\n25%:copy:off"));
  EXPECT_THAT(r.output, HasSubstr("  100.0 "));
}

// Prefetch counts of the 50%:copy row of a run with --json.
struct PrefetchCounts {
  long used = -1;
  long issued = -1;
};

PrefetchCounts PrefetchOf(const std::string& json_path) {
  std::ifstream in(json_path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const size_t row = s.find("\"config\": \"50%:copy\"");
  PrefetchCounts c;
  if (row == std::string::npos) return c;
  auto number = [&](const std::string& key) {
    const size_t at = s.find("\"" + key + "\": ", row);
    return at == std::string::npos ? -1L : std::stol(s.substr(at + key.size() + 4));
  };
  c.used = number("prefetch_used");
  c.issued = number("prefetch_issued");
  return c;
}

// A trace of uniformly random routing over the small model's 4 layers x 8
// experts, top-2.
void WriteRandomTrace(const std::string& path, int tokens, uint32_t seed) {
  std::ofstream out(path);
  out << "moetier-trace v1 layers=4 experts=8 top_k=2 weights=0\n";
  uint32_t state = seed;
  auto next = [&state]() {
    state = state * 1664525u + 1013904223u;
    return (state >> 16) % 8;
  };
  for (int t = 0; t < tokens; ++t) {
    for (int l = 0; l < 4; ++l) {
      const uint32_t a = next();
      uint32_t b = next();
      while (b == a) b = next();
      out << (l ? ";" : "") << a << "," << b;
    }
    out << "\n";
  }
}

TEST(BenchCacheTest, ReplayedPrefetchPredictsFromTheTraceAtTheGivenAccuracy) {
  // Random routing over the 8 experts: half of them fit, so there is
  // something to prefetch at every layer after the first.
  const std::string trace = testing::TempDir() + "/bench-cache-random.trace";
  WriteRandomTrace(trace, 40, 12345);
  const std::string json = testing::TempDir() + "/bench-cache-prefetch.json";
  const std::string common = "--model " + kModel +
                             " --threads 1 --decode-tokens 24 --prompt-tokens 4 --runs 1 "
                             "--configs resident,50%:copy --routing-from-trace " + trace +
                             " --json " + json;
  CommandResult r = RunBench(common + " --prefetch-accuracy 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("prefetch predicted from it at accuracy 1.00"));
  EXPECT_THAT(r.output, Not(HasSubstr(" no\n")));  // same tokens as resident
  const PrefetchCounts exact = PrefetchOf(json);
  EXPECT_GT(exact.issued, 0) << r.output;
  // Every prefetched expert is the one the layer then takes.
  EXPECT_EQ(exact.used, exact.issued) << r.output;

  r = RunBench(common + " --prefetch-accuracy 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, Not(HasSubstr(" no\n")));
  const PrefetchCounts wrong = PrefetchOf(json);
  EXPECT_GT(wrong.issued, 0) << r.output;
  EXPECT_LT(wrong.used, wrong.issued) << r.output;

  EXPECT_EQ(RunBench("--model " + kModel + " --prefetch-accuracy 0.5").exit_code, 2);
  EXPECT_EQ(RunBench(common + " --prefetch-accuracy 1.5").exit_code, 2);
}

// A number of the row `config` in a --json file; NaN when absent.
double RowField(const std::string& json_path, const std::string& config, const std::string& key) {
  std::ifstream in(json_path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const size_t row = s.find("{\"config\": \"" + config + "\"");
  if (row == std::string::npos) return std::nan("");
  const size_t end = s.find('}', row);
  const size_t at = s.find("\"" + key + "\": ", row);
  if (at == std::string::npos || at > end) return std::nan("");
  return std::stod(s.substr(at + key.size() + 4));
}

TEST(BenchCacheTest, ReplayedRowsShowMinOnTheServedSequenceAndSweepTheAccuracy) {
  const std::string trace = testing::TempDir() + "/bench-cache-min.trace";
  WriteRandomTrace(trace, 64, 777);
  const std::string json = testing::TempDir() + "/bench-cache-min.json";
  // 16 tokens of context: the prefill passes route to more experts than a
  // layer has slots, which MIN must bound too.
  const CommandResult r = RunBench(
      "--model " + kModel +
      " --threads 1 --decode-tokens 24 --prompt-tokens 4 --context 16 --runs 2 "
      "--configs resident,50%:copy:off,25%:copy:off,25%:cpu:off,50%:copy --routing-from-trace " +
      trace +
      " --prefetch-accuracies 0,1 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("xMIN"));
  EXPECT_THAT(r.output, HasSubstr("at accuracies 0, 1"));
  for (const std::string config : {"50%:copy:off", "25%:copy:off", "25%:cpu:off"}) {
    SCOPED_TRACE(config);
    const double hits = RowField(json, config, "hits");
    const double misses = RowField(json, config, "misses");
    const double min_hits = RowField(json, config, "min_hits");
    EXPECT_EQ(RowField(json, config, "min_requests"), hits + misses)
        << "MIN saw what the cache placed";
    EXPECT_LE(hits, min_hits) << "no cache without prefetch beats MIN";
    EXPECT_GT(min_hits, 0);
    EXPECT_NEAR(RowField(json, config, "ratio_to_min"), hits / min_hits, 1e-5);
    EXPECT_NEAR(RowField(json, config, "min_hit_rate"), min_hits / (hits + misses), 1e-5);
  }
  // A bigger cache: MIN can only do better.
  EXPECT_GT(RowField(json, "50%:copy:off", "min_hits"), RowField(json, "25%:copy:off", "min_hits"));
  // The sweep: one row per accuracy for the prefetching cache, the same
  // served sequence under each (so the same MIN).
  EXPECT_EQ(RowField(json, "50%:copy@0", "prefetch_accuracy"), 0);
  EXPECT_EQ(RowField(json, "50%:copy@1", "prefetch_accuracy"), 1);
  EXPECT_EQ(RowField(json, "50%:copy@1", "min_hits"), RowField(json, "50%:copy:off", "min_hits"));
  EXPECT_EQ(RowField(json, "50%:copy@1", "prefetch_used"),
            RowField(json, "50%:copy@1", "prefetch_issued"));
  EXPECT_TRUE(std::isnan(RowField(json, "resident", "min_hits")));
  EXPECT_TRUE(std::isnan(RowField(json, "50%:copy", "hits"))) << "no unswept row";

  // Without a trace there is no future to know, and a sweep needs one.
  EXPECT_EQ(RunBench("--model " + kModel + " --prefetch-accuracies 0.5").exit_code, 2);
  EXPECT_EQ(RunBench("--model " + kModel + " --routing-from-trace " + trace +
                     " --prefetch-accuracies 0.5,2").exit_code, 2);
  EXPECT_EQ(RunBench("--model " + kModel + " --routing-from-trace " + trace +
                     " --prefetch-accuracy 0.5 --prefetch-accuracies 0.5").exit_code, 2);
}

TEST(BenchCacheTest, ACacheTooSmallIsSkippedWithTheReason) {
  const CommandResult r = RunBench("--model " + kModel +
                                   " --threads 1 --decode-tokens 2 --prompt-tokens 4 --runs 1 "
                                   "--configs resident,1%");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("skipped: expert cache"));
  EXPECT_THAT(r.output, HasSubstr("slots per layer"));
}

TEST(BenchCacheTest, BadFlagsAreUsageErrors) {
  EXPECT_EQ(RunBench("--model " + kModel + " --configs 150%").exit_code, 1);
  EXPECT_EQ(RunBench("--model " + kModel + " --device tpu").exit_code, 2);
  EXPECT_EQ(RunBench("--configs resident").exit_code, 2);
  const CommandResult help = RunBench("--help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag : {"--model", "--device", "--configs", "--cache-policy", "--decode-tokens",
                           "--prompt-tokens", "--context", "--runs", "--threads",
                           "--copy-probe-mib", "--json", "--routing-from-trace",
                           "--prefetch-accuracy"}) {
    EXPECT_THAT(help.output, HasSubstr(flag));
  }
}

}  // namespace
