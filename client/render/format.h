// Numbers for people: byte sizes, counts, rates and durations in the units a
// reader expects, short enough for one status line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace moetier::client {

// 0 B, 512 B, 1.5 KiB, 16.5 GiB (binary units, one decimal above bytes).
std::string FormatBytes(uint64_t bytes);

// 999, 12.3k, 1.2M, 3.4G.
std::string FormatCount(uint64_t count);

// 45.2 s, 12m 03s, 1h 02m 03s.
std::string FormatDuration(double seconds);

// 91.2%; "-" when there is no denominator.
std::string FormatPercent(std::optional<double> fraction);

// hits / (hits + misses), or nothing when both are zero.
std::optional<double> HitRate(uint64_t hits, uint64_t misses);

}  // namespace moetier::client
