// sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET ("READY=1",
// "STOPPING=1", "STATUS=...", "WATCHDOG=1"), for a Type=notify unit. A
// no-op elsewhere. The rest builds the messages and reads the watchdog's
// environment, as pure functions the tests call directly.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moetier {

void NotifySystemd(std::string_view state);

// "STATUS=preloading experts: 42% (7.31 GiB of 17.4 GiB)\n
// EXTEND_TIMEOUT_USEC=N": shows where start-up is in `systemctl status` and
// gives it N more microseconds, so TimeoutStartSec only has to cover the
// longest silence between two reports, not the whole preload.
std::string StartupProgressMessage(std::string_view phase, uint64_t done_bytes,
                                   uint64_t total_bytes, uint64_t extend_timeout_usec);

// How often to send WATCHDOG=1: half of $WATCHDOG_USEC, when it is set and
// $WATCHDOG_PID is unset or names `self` (the variables are inherited, and
// a child must not feed its parent's watchdog). Nothing otherwise.
std::optional<uint64_t> WatchdogPingIntervalUsec(const char* watchdog_usec,
                                                 const char* watchdog_pid, pid_t self);

}  // namespace moetier
