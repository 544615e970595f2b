// Log lines: the plain format for terminals and files, syslog priority
// prefixes when stderr is the journal, and telling the two apart from
// $JOURNAL_STREAM and what stderr really is.
#include "log/daemon_log.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using ::testing::MatchesRegex;

const timespec kNoon{1'767'268'800, 250'000'000};

TEST(LogLineTest, JournalLinesCarryTheSyslogPriorityAndNothingElse) {
  EXPECT_EQ(FormatLogLine(LogFormat::kJournal, LogLevel::kError, "disk on fire", kNoon, 42),
            "<3>disk on fire\n");
  EXPECT_EQ(FormatLogLine(LogFormat::kJournal, LogLevel::kWarning, "slow disk", kNoon, 42),
            "<4>slow disk\n");
  EXPECT_EQ(FormatLogLine(LogFormat::kJournal, LogLevel::kInfo, "ready", kNoon, 42),
            "<6>ready\n");
  // journald files each line on its own; every one keeps the priority.
  EXPECT_EQ(FormatLogLine(LogFormat::kJournal, LogLevel::kWarning, "one\ntwo", kNoon, 42),
            "<4>one\n<4>two\n");
}

TEST(LogLineTest, PlainLinesKeepTheTimestampLetterAndPid) {
  tm local{};
  localtime_r(&kNoon.tv_sec, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
  EXPECT_EQ(FormatLogLine(LogFormat::kPlain, LogLevel::kWarning, "slow disk", kNoon, 42),
            absl::StrFormat("%s.250 W moetierd[42] slow disk\n", stamp));
  EXPECT_THAT(FormatLogLine(LogFormat::kPlain, LogLevel::kError, "x", kNoon, 7),
              MatchesRegex(".* E moetierd\\[7\\] x\n"));
  EXPECT_THAT(FormatLogLine(LogFormat::kPlain, LogLevel::kInfo, "x", kNoon, 7),
              MatchesRegex(".* I moetierd\\[7\\] x\n"));
}

TEST(LogLineTest, JournalStreamMustNameThisDeviceAndInode) {
  EXPECT_TRUE(JournalStreamNames("8:12345", 8, 12345));
  EXPECT_FALSE(JournalStreamNames("8:12345", 8, 12346));
  EXPECT_FALSE(JournalStreamNames("9:12345", 8, 12345));
  EXPECT_FALSE(JournalStreamNames("", 8, 12345));
  EXPECT_FALSE(JournalStreamNames("8", 8, 12345));
  EXPECT_FALSE(JournalStreamNames("8:x", 8, 12345));
}

// Points stderr at a file for the life of the object.
class CapturedStderr {
 public:
  CapturedStderr() {
    char path[] = "/tmp/moetier-log-XXXXXX";
    const int fd = mkstemp(path);
    path_ = path;
    fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  ~CapturedStderr() {
    Restore();
    unlink(path_.c_str());
  }
  std::string JournalStreamValue() const {
    struct stat st {};
    fstat(STDERR_FILENO, &st);
    return absl::StrFormat("%d:%d", st.st_dev, st.st_ino);
  }
  std::string Text() {
    Restore();
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  void Restore() {
    if (saved_ < 0) return;
    fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

TEST(LogLineTest, StderrThatIsTheJournalGetsPriorityPrefixes) {
  CapturedStderr captured;
  setenv("JOURNAL_STREAM", captured.JournalStreamValue().c_str(), 1);
  SetLogFormat(DetectLogFormat());
  LogError("cannot open %s", "the model");
  LogWarning("slow");
  LogInfo("ready");
  unsetenv("JOURNAL_STREAM");
  SetLogFormat(DetectLogFormat());
  EXPECT_EQ(captured.Text(), "<3>cannot open the model\n<4>slow\n<6>ready\n");
}

TEST(LogLineTest, AnInheritedJournalStreamNamingAnotherFileKeepsThePlainFormat) {
  CapturedStderr captured;
  // What a child of a service sees when its stderr goes to a file instead.
  setenv("JOURNAL_STREAM", "1:1", 1);
  SetLogFormat(DetectLogFormat());
  LogWarning("slow");
  unsetenv("JOURNAL_STREAM");
  SetLogFormat(DetectLogFormat());
  EXPECT_THAT(captured.Text(), MatchesRegex("[0-9-]+ [0-9:.]+ W moetierd\\[[0-9]+\\] slow\n"));
}

}  // namespace
}  // namespace moetier
