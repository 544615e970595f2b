#include "util/systemd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "util/byte_size.h"

namespace moetier {
namespace {
__extension__ typedef unsigned __int128 Uint128;
}  // namespace


void NotifySystemd(std::string_view state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const size_t length = std::strlen(path);
  if (length >= sizeof(address.sun_path)) return;
  std::memcpy(address.sun_path, path, length);
  if (path[0] == '@') address.sun_path[0] = '\0';  // abstract namespace
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  const socklen_t address_length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length);
  sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
         reinterpret_cast<const sockaddr*>(&address), address_length);
  close(fd);
}

std::string StartupProgressMessage(std::string_view phase, uint64_t done_bytes,
                                   uint64_t total_bytes, uint64_t extend_timeout_usec) {
  const uint64_t percent =
      total_bytes == 0 ? 100
                       : static_cast<uint64_t>(static_cast<Uint128>(done_bytes) * 100 /
                                               total_bytes);
  return absl::StrFormat("STATUS=%s: %d%% (%s of %s)\nEXTEND_TIMEOUT_USEC=%d",
                         absl::string_view(phase.data(), phase.size()), percent,
                         FormatBytes(done_bytes), FormatBytes(total_bytes), extend_timeout_usec);
}

std::optional<uint64_t> WatchdogPingIntervalUsec(const char* watchdog_usec,
                                                 const char* watchdog_pid, pid_t self) {
  uint64_t usec = 0;
  if (watchdog_usec == nullptr || !absl::SimpleAtoi(watchdog_usec, &usec) || usec == 0) {
    return std::nullopt;
  }
  if (watchdog_pid != nullptr && watchdog_pid[0] != '\0') {
    int64_t pid = 0;
    if (!absl::SimpleAtoi(watchdog_pid, &pid) || pid != self) return std::nullopt;
  }
  return usec / 2;
}

}  // namespace moetier
