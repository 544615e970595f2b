// sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET ("READY=1",
// "STOPPING=1", "STATUS=..."), for a Type=notify unit. A no-op elsewhere.
#pragma once

#include <string_view>

namespace moetier {

void NotifySystemd(std::string_view state);

}  // namespace moetier
