// moetier-policy-lab and moetier-tracegen, run as a user would run them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cache/routing_trace.h"
#include "support/subprocess.h"

namespace moetier {
namespace {

using moetier::testing::CommandResult;
using ::testing::HasSubstr;

CommandResult RunTool(const std::string& tool, const std::string& args) {
  return moetier::testing::RunBuiltProgram("tools/" + tool, args);
}

const std::string kLab = "policy_lab/moetier-policy-lab";
const std::string kGen = "tracegen/moetier-tracegen";
const std::string kGranite = std::string(MOETIER_TEST_DATA_DIR) + "/traces/granite-3.0-1b-a400m/";

TEST(PolicyLabCli, TableOnTheSharedTraces) {
  const CommandResult r =
      RunTool(kLab, kGranite + "code.decode.txt " + kGranite + "english_prose.decode.txt " +
                        kGranite + "math.decode.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("traces: 3 file(s), 192 tokens"));
  EXPECT_THAT(r.output, HasSubstr("24 layers x 32 experts, top-8"));
  // MIN's column: the README reference figures.
  EXPECT_THAT(r.output, HasSubstr("0.8202\n"));
  EXPECT_THAT(r.output, HasSubstr("prefetch, accuracy 0.80"));
  for (const char* policy : {"lru", "lfu", "lrfu", "reuse", "adaptive", "optgen", "min"}) {
    EXPECT_THAT(r.output, HasSubstr(policy));
  }
}

TEST(PolicyLabCli, JsonPerLayer) {
  const CommandResult r = RunTool(
      kLab, "--json --slots 2k --prefetch off --policies lru " + kGranite + "math.decode.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("\"slots\": \"2k\", \"slots_per_layer\": 16, \"prefetch\": false, "
                        "\"policy\": \"lru\""));
  EXPECT_THAT(r.output, HasSubstr("\"per_layer_hit_rate\": ["));
  EXPECT_THAT(r.output, HasSubstr("\"policy\": \"min\""));
  EXPECT_THAT(r.output, HasSubstr("\"ns_per_routed_expert\": "));
  EXPECT_THAT(r.output, HasSubstr("\"state_bytes_per_expert\": "));
}

TEST(PolicyLabCli, PrintsTheDecisionCostOfEveryPolicy) {
  const CommandResult r = RunTool(kLab, "--slots 2k --prefetch off --timing-repeats 1 " +
                                            kGranite + "math.decode.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("decision cost, no prefetch: ns per routed expert");
  ASSERT_NE(at, std::string::npos) << r.output;
  // One row, 2k: a number and the bytes per expert for each of the 7 columns.
  const size_t row = r.output.find("2k (16)", at);
  ASSERT_NE(row, std::string::npos) << r.output;
  std::istringstream in(r.output.substr(row + 7));
  for (int column = 0; column < 7; ++column) {
    double ns = -1, bytes = -1;
    char open = 0, close = 0;
    in >> ns >> open >> bytes >> close;
    ASSERT_TRUE(in) << "column " << column << " of " << r.output.substr(row, 200);
    EXPECT_GT(ns, 0) << column;
    EXPECT_EQ(open, '(');
    // Every policy keeps at least a slot id and a step per expert.
    EXPECT_GT(bytes, 12) << column;
    EXPECT_LT(bytes, 4096) << column;
  }
  EXPECT_EQ(RunTool(kLab, "--timing-repeats 0 " + kGranite + "math.decode.txt").exit_code, 2);
}

TEST(PolicyLabCli, ErrorsAreActionable) {
  CommandResult r = RunTool(kLab, "--policies fifo " + kGranite + "math.decode.txt");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown expert cache policy 'fifo'"));
  r = RunTool(kLab, "--slots 0 x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--slots: '0' is not a slot count"));
  r = RunTool(kLab, "--prefetch sometimes x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("flag --prefetch: 'sometimes' is not off, on or both"));
  r = RunTool(kLab, "--lrfu-lambda 0.5,0 x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("flag --lrfu-lambda: a lambda of 0 is plain LFU"));
  r = RunTool(kLab, "");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("no TRACE given"));
  r = RunTool(kLab, "/nonexistent/trace.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/trace.txt: cannot open routing trace"));
  r = RunTool(kLab, "--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"--policies", "--lrfu-lambda", "--slots", "--prefetch ", "--prefetch-accuracy", "--seed",
        "--experts", "--budgets-from", "--budget-policy", "--per-layer", "--json", "--help"}) {
    EXPECT_THAT(r.output, HasSubstr(flag));
  }
}

TEST(TraceGenCli, WritesATraceOfTheAskedShape) {
  const std::string out = std::string(MOETIER_BINARY_DIR) + "/cache_tools_cli_test_trace.txt";
  CommandResult r = RunTool(
      kGen, "--layers 6 --experts 40 --top-k 3 --tokens 17 --weights --seed 9 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  absl::StatusOr<RoutingTrace> t = ReadRoutingTrace(out);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->n_layer, 6u);
  EXPECT_EQ(t->n_expert, 40u);
  EXPECT_EQ(t->top_k, 3u);
  EXPECT_EQ(t->n_token(), 17u);
  EXPECT_TRUE(t->has_weights());
  // The lab reads what the generator writes.
  r = RunTool(kLab, "--slots 2k --prefetch off " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::remove(out.c_str());
  r = RunTool(kGen, "--top-k 300 --out " + out);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--top-k 300 exceeds --experts 128"));
}

TEST(TraceGenCli, ShapePresetsAndOverrides) {
  const std::string out = std::string(MOETIER_BINARY_DIR) + "/cache_tools_cli_test_shape.txt";
  struct Case {
    std::string args;
    uint32_t n_layer, n_expert, top_k;
  };
  const Case cases[] = {
      {"--shape qwen3.6", 40, 256, 8},
      {"--shape qwen3", 48, 128, 8},
      {"--shape mixtral", 32, 8, 2},
      {"--shape olmoe", 16, 64, 8},
      {"", 48, 128, 8},                                   // the default: qwen3
      {"--shape qwen3.6 --layers 3 --top-k 4", 3, 256, 4},  // explicit flags win
      {"--experts 16 --shape olmoe", 16, 16, 8},            // wherever they stand
  };
  for (const Case& c : cases) {
    const CommandResult r = RunTool(kGen, c.args + " --tokens 3 --out " + out);
    ASSERT_EQ(r.exit_code, 0) << c.args << ": " << r.output;
    absl::StatusOr<RoutingTrace> t = ReadRoutingTrace(out);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->n_layer, c.n_layer) << c.args;
    EXPECT_EQ(t->n_expert, c.n_expert) << c.args;
    EXPECT_EQ(t->top_k, c.top_k) << c.args;
    EXPECT_EQ(t->n_token(), 3u) << c.args;
  }
  std::remove(out.c_str());
}

TEST(TraceGenCli, ModelSeedAndSeedAreSeparate) {
  const std::string dir = std::string(MOETIER_BINARY_DIR) + "/cache_tools_cli_test_seed_";
  auto generate = [&](const std::string& name, const std::string& args) {
    const CommandResult r =
        RunTool(kGen, "--shape olmoe --tokens 64 " + args + " --out " + dir + name);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    absl::StatusOr<RoutingTrace> t = ReadRoutingTrace(dir + name);
    EXPECT_TRUE(t.ok()) << t.status();
    std::remove((dir + name).c_str());
    return t.ok() ? t->experts : std::vector<uint32_t>{};
  };
  const std::vector<uint32_t> base = generate("a", "--seed 3 --model-seed 5");
  EXPECT_EQ(generate("b", "--model-seed 5 --seed 3"), base);
  EXPECT_NE(generate("c", "--seed 4 --model-seed 5"), base);
  EXPECT_NE(generate("d", "--seed 3 --model-seed 6"), base);
  EXPECT_EQ(generate("e", "--seed 1"), generate("f", "--seed 1 --model-seed 1"));
}

TEST(TraceGenCli, BadFlagsAreNamed) {
  const std::string out = std::string(MOETIER_BINARY_DIR) + "/cache_tools_cli_test_bad.txt";
  const struct {
    std::string args;
    std::string message;
  } cases[] = {
      {"--shape qwen4", "--shape: unknown shape 'qwen4' (known: qwen3, qwen3.6, mixtral, olmoe)"},
      {"--shape", "--shape needs a value"},
      {"--model-seed -1", "--model-seed: '-1' is not an unsigned integer"},
      {"--model-seed x", "--model-seed: 'x' is not an unsigned integer"},
      {"--cross-layer-prob 1.5", "flag --cross-layer-prob: 1.5 is outside [0, 1]"},
      {"--cross-layer-prob", "--cross-layer-prob needs a value"},
      {"--shape mixtral --top-k 9", "--top-k 9 exceeds --experts 8"},
      {"--layers 0", "flag --layers: 0 is outside 1..4096"},
      {"--reuse-tail 1", "flag --reuse-tail: must be below 1"},
      {"--tokens 1x", "flag --tokens: '1x' is not an unsigned integer"},
  };
  for (const auto& c : cases) {
    // Last, so that a flag without its value is at the end.
    const CommandResult r = RunTool(kGen, "--out " + out + " " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.message)) << c.args;
  }
  const CommandResult help = RunTool(kGen, "--help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag :
       {"--shape", "qwen3.6", "mixtral", "olmoe", "--layers", "--experts", "--top-k", "--tokens",
        "--zipf ", "--zipf-shift", "--popularity-noise", "--reuse-prob", "--reuse-tail",
        "--cross-layer-prob", "--out", "--weights", "--seed", "--model-seed", "--calibrate",
        "--print-model", "--stats", "xlift", "--help"}) {
    EXPECT_THAT(help.output, HasSubstr(flag));
  }
}

TEST(TraceGenCli, StatsOfTheSharedTraces) {
  const CommandResult r =
      RunTool(kGen, "--stats " + kGranite + "code.decode.txt " + kGranite +
                        "english_prose.decode.txt " + kGranite + "math.decode.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // shared/traces/README.md: mean previous-token reuse 0.425.
  EXPECT_THAT(r.output, HasSubstr("3 trace(s), 192 tokens, 24 layers x 32 experts, top-8"));
  EXPECT_THAT(r.output, HasSubstr("0.425"));
  // The cross-layer columns: layer 0 has none; the mean lift is 0.19.
  EXPECT_THAT(r.output, HasSubstr("xl-hit xl-shuf  xlift"));
  EXPECT_THAT(r.output, HasSubstr("0.061       -       -      -\n"));
  EXPECT_THAT(r.output, HasSubstr("0.634   0.442  0.191\n"));
}

}  // namespace
}  // namespace moetier
