#include "log/daemon_log.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <mutex>

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

}  // namespace

void SetLogSink(LogSink sink) {
  std::lock_guard<std::mutex> lock(LogMutex());
  Sink() = std::move(sink);
}

void LogMessage(LogLevel level, std::string_view message) {
  std::lock_guard<std::mutex> lock(LogMutex());
  if (Sink()) {
    Sink()(level, message);
    return;
  }
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  tm local{};
  localtime_r(&now.tv_sec, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
  const char letter = level == LogLevel::kInfo ? 'I' : level == LogLevel::kWarning ? 'W' : 'E';
  std::fprintf(stderr, "%s.%03ld %c moetierd[%d] %.*s\n", stamp, now.tv_nsec / 1'000'000, letter,
               static_cast<int>(getpid()), static_cast<int>(message.size()), message.data());
}

}  // namespace moetier
