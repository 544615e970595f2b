// moetier-bench-cpu --routing-from-trace: runs with the trace's routing and
// labels its results.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

extern char** environ;

namespace moetier {
namespace {

using ::testing::HasSubstr;

const char kBench[] = MOETIER_BINARY_DIR "/worker/bench/moetier-bench-cpu";

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/moetier_bench_replay_", getpid(), "_", name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Exit code, stdout and stderr together.
std::pair<int, std::string> RunBench(const std::vector<std::string>& args) {
  const std::string out_path = TempPath("out");
  std::vector<std::string> copies = args;
  std::string program = kBench;
  std::vector<char*> argv = {program.data()};
  for (std::string& a : copies) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, kBench, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << kBench;
  if (rc != 0) return {-1, ""};
  int status = 0;
  waitpid(pid, &status, 0);
  std::string out = ReadFile(out_path);
  std::remove(out_path.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
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
