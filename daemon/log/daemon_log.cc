#include "log/daemon_log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace moetier {
namespace {

std::mutex& LogMutex() {
  static std::mutex mutex;
  return mutex;
}

LogSink& Sink() {
  static LogSink sink;
  return sink;
}

std::optional<LogFormat>& Format() {
  static std::optional<LogFormat> format;
  return format;
}

// syslog(3) priorities: LOG_ERR, LOG_WARNING, LOG_INFO.
const char* JournalPrefix(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "<3>";
    case LogLevel::kWarning:
      return "<4>";
    case LogLevel::kInfo:
      break;
  }
  return "<6>";
}

}  // namespace

void SetLogSink(LogSink sink) {
  std::lock_guard<std::mutex> lock(LogMutex());
  Sink() = std::move(sink);
}

std::string FormatLogLine(LogFormat format, LogLevel level, std::string_view message,
                          const timespec& now, int pid) {
  if (format == LogFormat::kJournal) {
    std::string line;
    size_t start = 0;
    while (true) {
      const size_t end = message.find('\n', start);
      absl::StrAppend(&line, JournalPrefix(level),
                      absl::string_view(message.data() + start,
                                        (end == std::string_view::npos ? message.size() : end) -
                                            start),
                      "\n");
      if (end == std::string_view::npos) break;
      start = end + 1;
    }
    return line;
  }
  tm local{};
  localtime_r(&now.tv_sec, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
  const char letter = level == LogLevel::kInfo ? 'I' : level == LogLevel::kWarning ? 'W' : 'E';
  return absl::StrFormat("%s.%03d %c moetierd[%d] %s\n", stamp, now.tv_nsec / 1'000'000, letter,
                         pid, absl::string_view(message.data(), message.size()));
}

bool JournalStreamNames(std::string_view journal_stream, uint64_t device, uint64_t inode) {
  const size_t colon = journal_stream.find(':');
  if (colon == std::string_view::npos) return false;
  uint64_t named_device = 0;
  uint64_t named_inode = 0;
  return absl::SimpleAtoi(absl::string_view(journal_stream.data(), colon), &named_device) &&
         absl::SimpleAtoi(absl::string_view(journal_stream.data() + colon + 1,
                                            journal_stream.size() - colon - 1),
                          &named_inode) &&
         named_device == device && named_inode == inode;
}

LogFormat DetectLogFormat() {
  const char* journal_stream = std::getenv("JOURNAL_STREAM");
  struct stat st {};
  if (journal_stream == nullptr || fstat(STDERR_FILENO, &st) != 0) return LogFormat::kPlain;
  return JournalStreamNames(journal_stream, st.st_dev, st.st_ino) ? LogFormat::kJournal
                                                                  : LogFormat::kPlain;
}

void SetLogFormat(LogFormat format) {
  std::lock_guard<std::mutex> lock(LogMutex());
  Format() = format;
}

void LogMessage(LogLevel level, std::string_view message) {
  std::lock_guard<std::mutex> lock(LogMutex());
  if (Sink()) {
    Sink()(level, message);
    return;
  }
  if (!Format().has_value()) Format() = DetectLogFormat();
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  const std::string line = FormatLogLine(*Format(), level, message, now, getpid());
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace moetier
