// The test helpers that run programs: what they collect and how they report
// the way a program ended.
#include "support/subprocess.h"

#include <string>

#include "gtest/gtest.h"

namespace moetier::testing {
namespace {

TEST(RunProgramTest, KeepsStdoutAndStderrApartAndReturnsTheExitStatus) {
  const ProgramResult r = RunProgram("/bin/sh", {"-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
}

TEST(RunProgramTest, ReadsBothStreamsWhileTheyFill) {
  // 1 MiB on each stream: far beyond a pipe's buffer, so reading one stream
  // to its end before the other would never return.
  const ProgramResult r = RunProgram(
      "/bin/sh", {"-c", "head -c 1048576 /dev/zero >&2; head -c 1048576 /dev/zero; echo done"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err.size(), 1048576u);
  EXPECT_EQ(r.out.size(), 1048576u + 5);
}

TEST(RunProgramTest, ASignalIsReportedAs128PlusItsNumber) {
  EXPECT_EQ(RunProgram("/bin/sh", {"-c", "kill -KILL $$"}).exit_code, 128 + 9);
}

TEST(RunProgramTest, AProgramThatCannotStartIsMinusOne) {
  const ProgramResult r = RunProgram("/nonexistent/program", {});
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_NE(r.err.find("/nonexistent/program"), std::string::npos);
}

TEST(RunProgramTest, StdinIsEmpty) {
  const ProgramResult r = RunProgram("/bin/sh", {"-c", "wc -c"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "0\n");
}

TEST(RunCommandTest, JoinsStderrToStdoutInTheOrderWritten) {
  const CommandResult r = RunCommand("echo a; echo b >&2; echo c; exit 5");
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_EQ(r.output, "a\nb\nc\n");
}

}  // namespace
}  // namespace moetier::testing
