// moetierd's log: one line per event on stderr (the journal under
// systemd), with a local timestamp and a severity letter. Tests can divert
// it to capture messages.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "absl/strings/str_format.h"

namespace moetier {

enum class LogLevel { kInfo, kWarning, kError };

void LogMessage(LogLevel level, std::string_view message);

using LogSink = std::function<void(LogLevel, std::string_view)>;
// Replaces where messages go (nullptr: back to stderr). Not thread-safe
// against concurrent logging; set it before starting threads.
void SetLogSink(LogSink sink);

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
