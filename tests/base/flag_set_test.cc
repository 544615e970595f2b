#include "base/flags/flag_set.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct Values {
  int threads = 1;
  uint64_t budget = 0;
  uint32_t layers = 0;
  uint64_t seed = 0;
  double prob = -1;
  float temp = -1;
  std::string out;
  bool json = false;
};

FlagSet MakeFlags(Values& v) {
  FlagSet f;
  f.AddInt({"-t", "--threads"}, "N", "threads", &v.threads, 1, 64);
  f.AddInt({"--layers"}, "N", "layers", &v.layers, uint32_t{1}, uint32_t{4096});
  f.AddInt({"--seed"}, "N", "seed", &v.seed);
  f.AddInt({"--budget"}, "N", "a bounded 64-bit count", &v.budget, uint64_t{2}, uint64_t{1} << 40);
  f.AddText("Model:");
  f.AddFloat({"--prob"}, "P", "a probability", &v.prob, 0.0, 1.0);
  f.AddFloat({"--temp"}, "T", "temperature", &v.temp, 0.0, 100.0);
  f.AddString({"--out"}, "FILE", "where to write", &v.out);
  f.AddSwitch({"--json"}, "JSON output", &v.json);
  return f;
}

absl::Status ParseInto(Values& v, const std::vector<std::string>& args,
                       FlagSet::Parsed* parsed = nullptr) {
  FlagSet::Parsed local;
  return MakeFlags(v).Parse(args, parsed ? parsed : &local);
}

TEST(FlagSetTest, TypedFlagsTakeTheNextArgumentOrTheValueAfterEquals) {
  Values v;
  FlagSet::Parsed parsed;
  ASSERT_TRUE(ParseInto(v,
                        {"-t", "4", "--layers=48", "in.txt", "--seed", "18446744073709551615",
                         "--prob=0.25", "--temp", "0.7", "--out", "x.json", "--json", "more"},
                        &parsed)
                  .ok());
  EXPECT_EQ(v.threads, 4);
  EXPECT_EQ(v.layers, 48u);
  EXPECT_EQ(v.seed, UINT64_MAX);
  EXPECT_DOUBLE_EQ(v.prob, 0.25);
  EXPECT_FLOAT_EQ(v.temp, 0.7f);
  EXPECT_EQ(v.out, "x.json");
  EXPECT_TRUE(v.json);
  ASSERT_TRUE(ParseInto(v, {"--out=a=b", "--budget", "1099511627776"}).ok());
  EXPECT_EQ(v.out, "a=b");
  EXPECT_EQ(v.budget, uint64_t{1} << 40);
  EXPECT_THAT(parsed.positionals, ElementsAre("in.txt", "more"));
}

TEST(FlagSetTest, BadValuesAreOneLineNamingTheFlag) {
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--threads", "0"}, "flag --threads: 0 is outside 1..64"},
      {{"-t", "x"}, "flag -t: 'x' is not an integer"},
      {{"-t", "+2"}, "flag -t: '+2' is not an integer"},
      {{"-t", " 2"}, "flag -t: ' 2' is not an integer"},
      {{"-t", "-"}, "flag -t: '-' is not an integer"},
      {{"-t", "99999999999999999999"}, "flag -t: '99999999999999999999' is not an integer"},
      {{"--layers=5000"}, "flag --layers: 5000 is outside 1..4096"},
      {{"--seed", "-1"}, "flag --seed: '-1' is not an unsigned integer"},
      {{"--seed", "+1"}, "flag --seed: '+1' is not an unsigned integer"},
      {{"--seed", "18446744073709551616"},
       "flag --seed: '18446744073709551616' is not an unsigned"},
      {{"--budget", "1"}, "flag --budget: 1 is outside 2..1099511627776"},
      {{"--budget=1099511627777"}, "flag --budget: 1099511627777 is outside 2..1099511627776"},
      {{"--prob", "1.5"}, "flag --prob: 1.5 is outside [0, 1]"},
      {{"--prob", "nan"}, "flag --prob: 'nan' is not a finite number"},
      {{"--temp", "1e999"}, "flag --temp: '1e999' is not a finite number"},
      {{"--threads"}, "flag --threads needs a value"},
      {{"--json=1"}, "flag --json takes no value"},
      {{"--bogus"}, "unknown flag '--bogus' (see --help)"},
  };
  for (const auto& c : cases) {
    Values v;
    const absl::Status s = ParseInto(v, c.args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.args[0];
    EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos);
  }
}

TEST(FlagSetTest, DashesEndTheFlagsAndALoneDashIsAValue) {
  Values v;
  FlagSet::Parsed parsed;
  ASSERT_TRUE(ParseInto(v, {"--out", "-", "-", "--", "--threads", "9"}, &parsed).ok());
  EXPECT_EQ(v.out, "-");
  EXPECT_EQ(v.threads, 1);
  EXPECT_THAT(parsed.positionals, ElementsAre("-"));
  EXPECT_THAT(parsed.after_dashes, ElementsAre("--threads", "9"));
}

TEST(FlagSetTest, StopAtPositionalLeavesTheRestUnparsed) {
  Values v;
  FlagSet::Parsed parsed;
  ASSERT_TRUE(MakeFlags(v).Parse({"--json", "cmd", "--threads", "x"}, &parsed, true).ok());
  EXPECT_TRUE(v.json);
  EXPECT_THAT(parsed.positionals, ElementsAre("cmd", "--threads", "x"));
  EXPECT_THAT(parsed.after_dashes, IsEmpty());
}

TEST(FlagSetTest, AliasesParseLikeTheFlagAndAreListedLast) {
  Values v;
  FlagSet f = MakeFlags(v);
  f.Alias("--threads", {"--nthreads"});
  FlagSet::Parsed parsed;
  ASSERT_TRUE(f.Parse({"--nthreads=3"}, &parsed).ok());
  EXPECT_EQ(v.threads, 3);
  EXPECT_THAT(f.Help(), HasSubstr("(also --nthreads)"));
}

TEST(FlagSetTest, HelpListsEveryFlagUnderItsHeadingWrappedAt80Columns) {
  Values v;
  FlagSet f = MakeFlags(v);
  f.AddString({"--long-flag-name-for-wrapping"}, "VALUE",
              "a help text long enough that it has to be wrapped onto a second line and a "
              "third one, each indented under the first",
              &v.out);
  const std::string help = f.Help();
  EXPECT_THAT(help, HasSubstr("  -t, --threads N         threads\n"));
  EXPECT_THAT(help, HasSubstr("\nModel:\n  --prob P"));
  EXPECT_THAT(help, HasSubstr("  --long-flag-name-for-wrapping VALUE\n" + std::string(26, ' ') +
                              "a help text"));
  size_t lines = 0;
  for (size_t start = 0; start < help.size();) {
    const size_t end = help.find('\n', start);
    ASSERT_NE(end, std::string::npos);
    EXPECT_LE(end - start, 80u) << help.substr(start, end - start);
    start = end + 1;
    ++lines;
  }
  EXPECT_GE(lines, 12u);
  for (const char* name :
       {"--threads", "--layers", "--seed", "--prob", "--temp", "--out", "--json"}) {
    EXPECT_THAT(help, HasSubstr(name));
  }
}

TEST(FlagSetTest, ProgramHelpIsTheUsageThenTheFlagsThenHelpItself) {
  Values v;
  const FlagSet f = MakeFlags(v);
  const std::string help = ProgramHelp(f, "usage: prog [flags]");
  EXPECT_EQ(help.rfind("usage: prog [flags]\n\n  -t, --threads N", 0), 0u) << help;
  EXPECT_THAT(help, HasSubstr("  --json                  JSON output\n"
                              "  -h, --help              this text, then exit\n"));
}

TEST(FlagSetTest, TheHelpLineFollowsTheLastFlagNotTrailingText) {
  Values v;
  FlagSet f = MakeFlags(v);
  f.AddText("Notes:\n  a preformatted   table stays as it is");
  EXPECT_THAT(ProgramHelp(f, "usage"),
              HasSubstr("  --json                  JSON output\n"
                        "  -h, --help              this text, then exit\n"
                        "\nNotes:\n  a preformatted   table stays as it is\n"));
  FlagSet empty;
  EXPECT_EQ(ProgramHelp(empty, "usage"),
            "usage\n\n  -h, --help              this text, then exit\n");
}

TEST(FlagSetTest, ParseFlagsOrExitExitsZeroOnHelpWhereverItStands) {
  Values v;
  const FlagSet f = MakeFlags(v);
  const char* argv[] = {"prog", "--threads", "2", "-h", "--bogus"};
  EXPECT_EXIT(ParseFlagsOrExit(f, "prog", "usage", 5, argv), ::testing::ExitedWithCode(0), "");
}

TEST(FlagSetTest, ParseFlagsOrExitTakesHelpAsAValueWhereAFlagWantsOne) {
  Values v;
  const FlagSet f = MakeFlags(v);
  const char* argv[] = {"prog", "--out", "--help", "-t", "2", "rest"};
  EXPECT_THAT(ParseFlagsOrExit(f, "prog", "usage", 6, argv), ElementsAre("rest"));
  EXPECT_EQ(v.out, "--help");
  EXPECT_EQ(v.threads, 2);
  EXPECT_TRUE(f.TakesValue("--threads"));
  EXPECT_TRUE(f.TakesValue("-t"));
  EXPECT_FALSE(f.TakesValue("--json"));
  EXPECT_FALSE(f.TakesValue("--bogus"));
}

TEST(FlagSetTest, ParseFlagsOrExitExitsTwoWithTheProgramAndTheError) {
  Values v;
  const FlagSet f = MakeFlags(v);
  const char* argv[] = {"prog", "--threads", "99"};
  EXPECT_EXIT(ParseFlagsOrExit(f, "moetier-x", "usage", 3, argv), ::testing::ExitedWithCode(2),
              "moetier-x: flag --threads: 99 is outside 1..64");
}

TEST(FlagSetTest, ParseFlagsOrExitReturnsPositionalsAndWhatFollowsDashes) {
  Values v;
  const FlagSet f = MakeFlags(v);
  const char* argv[] = {"prog", "a", "--threads", "5", "b", "--", "--help"};
  EXPECT_THAT(ParseFlagsOrExit(f, "prog", "usage", 7, argv), ElementsAre("a", "b", "--help"));
  EXPECT_EQ(v.threads, 5);
}

TEST(FlagSetTest, ParseOnlyFlagsOrExitRefusesAPositional) {
  Values v;
  const FlagSet f = MakeFlags(v);
  const char* argv[] = {"prog", "--json", "stray"};
  EXPECT_EXIT(ParseOnlyFlagsOrExit(f, "moetier-x", "usage", 3, argv), ::testing::ExitedWithCode(2),
              "moetier-x: unexpected argument 'stray' \\(see --help\\)");
}

}  // namespace
}  // namespace moetier
