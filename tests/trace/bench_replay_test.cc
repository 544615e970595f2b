// moetier-bench-cpu --routing-from-trace: runs with the trace's routing and
// labels its results.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/subprocess.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;

const char kBench[] = MOETIER_BINARY_DIR "/worker/bench/moetier-bench-cpu";

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/moetier_bench_replay_", getpid(), "_", name);
}

// Exit code, stdout and stderr together.
std::pair<int, std::string> RunBench(const std::vector<std::string>& args) {
  const testing::ProgramResult r = testing::RunProgram(kBench, args);
  return {r.exit_code, r.out + r.err};
}

TEST(BenchReplayTest, ResultsAreLabelledAndRunsAgree) {
  const std::string trace = TempPath("pattern.trace");
  {
    std::ofstream out(trace);
    // tiny-f32: 4 layers, 8 experts, top-2; three tokens, cycled.
    out << "0,1;2,3;4,5;6,7\n7,6;5,4;3,2;1,0\n3,4;3,4;3,4;3,4\n";
  }
  const std::string model = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/tiny-f32.gguf";
  const auto [code, out] =
      RunBench({"--model", model, "--threads", "1", "--bandwidth-mib", "64", "--decode-tokens",
                "4", "--prompt-tokens", "8", "--context", "2", "--routing-from-trace", trace});
  ASSERT_EQ(code, 0) << out;
  const std::string label = "routing replayed from " + trace;
  int results = 0;
  for (const absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "decode:") || absl::StartsWith(line, "prompt:") ||
        absl::StartsWith(line, "check:")) {
      ++results;
      EXPECT_THAT(std::string(line), HasSubstr(label));
    }
  }
  EXPECT_EQ(results, 3) << out;

  {
    std::ofstream out_file(trace);
    out_file << "0,1;2,3;4,5\n";  // three layers
  }
  const auto [bad_code, bad_out] =
      RunBench({"--model", model, "--bandwidth-mib", "64", "--routing-from-trace", trace});
  EXPECT_EQ(bad_code, 1);
  EXPECT_THAT(bad_out, HasSubstr("3 layers but the model has 4"));
  std::remove(trace.c_str());
}

}  // namespace
}  // namespace moetier
