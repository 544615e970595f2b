// Byte counts as people write and read them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace moetier {

// "512 B", "8.00 MiB", "17.3 GiB".
std::string FormatBytes(uint64_t bytes);

// A plain integer, or an integer/decimal with a unit: B; KiB MiB GiB TiB
// (powers of 1024); K M G T (also 1024, as systemd and ulimit read them);
// KB MB GB TB (powers of 1000). Case of the unit is ignored except that
// "b" alone is refused (bits are not bytes). Errors say what was expected.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

}  // namespace moetier
