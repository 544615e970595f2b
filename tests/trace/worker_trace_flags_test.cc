// moetier-worker's --routing-trace-out and --routing-from-trace, run as the
// binary the way outside checks run it, and their parsing in daemon mode.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cache/routing_trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "standalone/options.h"
#include "support/subprocess.h"

namespace moetier {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const char kWorker[] = MOETIER_BINARY_DIR "/worker/moetier-worker";

std::string DataPath(const std::string& name) {
  return std::string(MOETIER_TEST_DATA_DIR) + "/vectors/" + name;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/moetier_trace_flags_", getpid(), "_", name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

using Result = testing::ProgramResult;

Result RunWorker(const std::vector<std::string>& args) {
  return testing::RunProgram(kWorker, args);
}

const std::string& TinyModel() {
  static const std::string path = DataPath("tiny-f32.gguf");
  return path;
}

std::string TinyTokens() {
  std::string ids = ReadFile(DataPath("tiny-f32.ids"));
  while (!ids.empty() && (ids.back() == '\n' || ids.back() == ' ')) ids.pop_back();
  return ids;
}

size_t CountIds(const std::string& csv) {
  return std::vector<std::string>(absl::StrSplit(csv, ',')).size();
}

TEST(WorkerTraceFlagsTest, RecordThenReplayGivesTheSameLogitsLabelled) {
  const std::string trace = TempPath("rec.trace");
  const std::string plain = TempPath("plain.f32");
  const std::string recorded = TempPath("recorded.f32");
  const std::string replayed = TempPath("replayed.f32");
  const std::vector<std::string> base = {"--standalone", "--model", TinyModel(), "--threads", "2",
                                         "--tokens",     TinyTokens()};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  Result r = RunWorker(with({"--logits-out", plain}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("routing")));

  r = RunWorker(with({"--logits-out", recorded, "--routing-trace-out", trace}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("routing trace: ", CountIds(TinyTokens()),
                                            " tokens recorded to ", trace)));
  EXPECT_THAT(r.err, Not(HasSubstr("replayed")));
  EXPECT_EQ(ReadFile(recorded), ReadFile(plain));
  absl::StatusOr<RoutingTrace> parsed = ReadRoutingTrace(trace);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->n_token(), CountIds(TinyTokens()));
  EXPECT_EQ(parsed->n_layer, 4u);
  EXPECT_EQ(parsed->top_k, 2u);
  EXPECT_TRUE(parsed->has_weights());

  r = RunWorker(with({"--logits-out", replayed, "--routing-from-trace", trace}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("routing replayed from " + trace));
  EXPECT_EQ(ReadFile(replayed), ReadFile(plain));
  for (const std::string& p : {trace, plain, recorded, replayed}) std::remove(p.c_str());
}

TEST(WorkerTraceFlagsTest, GenerationRecordsAndReplaysWithALabelledStatsLine) {
  const std::string trace = TempPath("gen.trace");
  const std::string observed = TempPath("observed.trace");
  const std::vector<std::string> base = {"--standalone", "--model", TinyModel(), "--prompt",
                                         "Hello, world!", "-n",     "6",         "--temp",
                                         "0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const Result plain = RunWorker(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;

  Result r = RunWorker(with({"--routing-trace-out", trace}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);  // recording changes nothing
  absl::StatusOr<RoutingTrace> parsed = ReadRoutingTrace(trace);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // "Hello, world!" is 6 prompt tokens; each generated token but the last
  // is computed too.
  EXPECT_GE(parsed->n_token(), 6u);

  // Replaying its own routing generates the same text; every stats line
  // says the routing was replayed, and the recording made at the same time
  // holds the replayed experts.
  r = RunWorker(with({"--routing-from-trace", trace, "--routing-trace-out", observed}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  for (const absl::string_view line : absl::StrSplit(r.err, '\n', absl::SkipEmpty())) {
    if (absl::StrContains(line, "tok/s")) {
      EXPECT_THAT(std::string(line), HasSubstr("routing replayed from " + trace));
    }
  }
  EXPECT_THAT(r.err, HasSubstr("stop:"));
  absl::StatusOr<RoutingTrace> again = ReadRoutingTrace(observed);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->experts, parsed->experts);
  for (const std::string& p : {trace, observed}) std::remove(p.c_str());
}

TEST(WorkerTraceFlagsTest, BadTracesAndMisuseFailWithOneLine) {
  const std::string bad = TempPath("bad.trace");
  {
    std::ofstream out(bad);
    out << "0,1;2,3;4,5\n";  // three layers for a four-layer model
  }
  Result r = RunWorker({"--standalone", "--model", TinyModel(), "--tokens", "1,2,3",
                        "--logits-out", TempPath("x.f32"), "--routing-from-trace", bad});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("moetier-worker: error:"), HasSubstr(bad),
                           HasSubstr("3 layers but the model has 4")));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
  {
    std::ofstream out(bad);
    out << "0,1;2,3;4,5;6,8\n";  // expert 8 of 0..7
  }
  r = RunWorker({"--standalone", "--model", TinyModel(), "--prompt", "hi", "-n", "2",
                 "--routing-from-trace", bad});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("expert 8"), HasSubstr("experts 0..7")));
  std::remove(bad.c_str());

  r = RunWorker({"--standalone", "--model", TinyModel(), "--tokenize", "hi",
                 "--routing-trace-out", TempPath("t.trace")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--routing-trace-out goes only with --tokens or --prompt"));
  r = RunWorker({"--standalone", "--model", TinyModel(), "--backend", "reference", "--prompt",
                 "hi", "--routing-from-trace", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("cpu or cuda backend"));
  r = RunWorker({"--standalone", "--model", TinyModel(), "--prompt", "hi", "--routing-trace-out",
                 bad, "--routing-from-trace", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("same file"));
}

TEST(WorkerTraceFlagsTest, HelpDocumentsTheFlags) {
  const Result r = RunWorker({"--help"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, AllOf(HasSubstr("--routing-trace-out FILE"),
                           HasSubstr("--routing-from-trace FILE"),
                           HasSubstr("routing replayed from FILE"), HasSubstr("{worker}")));
}

TEST(WorkerTraceFlagsTest, DaemonModeAcceptsTheFlags) {
  const char* argv[] = {"moetier-worker",       "--daemon",
                        "--control-socket=/s",  "--worker-index=0",
                        "--device=cpu",         "--model=/m.gguf",
                        "--routing-trace-out",  "/tmp/r{worker}.trace",
                        "--routing-from-trace", "/tmp/in.trace"};
  absl::StatusOr<WorkerOptions> o = ParseWorkerArgs(static_cast<int>(std::size(argv)), argv);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->routing_trace_out, "/tmp/r{worker}.trace");
  EXPECT_EQ(o->routing_from_trace, "/tmp/in.trace");
}

}  // namespace
}  // namespace moetier
