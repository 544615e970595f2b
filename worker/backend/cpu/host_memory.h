// How much memory the host can still give: the kernel's estimate of what a
// new allocation can take without swapping.
#pragma once

#include <cstddef>

namespace moetier::cpu {

// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
size_t MemAvailableBytes();

}  // namespace moetier::cpu
