// moetierd's log: one line per event on stderr. On a terminal or in a file
// a line carries a local timestamp, a severity letter and the pid; when
// stderr is the journal it carries a syslog priority prefix instead
// ("<4>..."), so `journalctl -p warning` works and journald's own timestamp
// and pid are not repeated. Tests can divert it to capture messages.
#pragma once

#include <time.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/strings/str_format.h"

namespace moetier {

enum class LogLevel { kInfo, kWarning, kError };
enum class LogFormat { kPlain, kJournal };

void LogMessage(LogLevel level, std::string_view message);

using LogSink = std::function<void(LogLevel, std::string_view)>;
// Replaces where messages go (nullptr: back to stderr). Not thread-safe
// against concurrent logging; set it before starting threads.
void SetLogSink(LogSink sink);

// The line written for `message`, ending in '\n'. Plain:
// "2026-01-01 10:00:00.000 W moetierd[123] message" (local time). Journal:
// "<4>message", each line of a multi-line message prefixed, because
// journald files every line as its own entry.
std::string FormatLogLine(LogFormat format, LogLevel level, std::string_view message,
                          const timespec& now, int pid);

// Whether $JOURNAL_STREAM ("DEVICE:INODE", set by systemd) names the stream
// with this device and inode. systemd exports it to every child, so a
// stderr redirected to a file must not be mistaken for the journal.
bool JournalStreamNames(std::string_view journal_stream, uint64_t device, uint64_t inode);

// kJournal when $JOURNAL_STREAM names the file behind stderr.
LogFormat DetectLogFormat();

// The format of lines written from now on; DetectLogFormat() until set.
void SetLogFormat(LogFormat format);

template <typename... Args>
void LogInfo(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogMessage(LogLevel::kInfo, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogWarning(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogMessage(LogLevel::kWarning, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogError(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogMessage(LogLevel::kError, absl::StrFormat(format, args...));
}

}  // namespace moetier
