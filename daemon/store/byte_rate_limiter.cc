#include "store/byte_rate_limiter.h"

#include <algorithm>
#include <limits>

namespace moetier {
namespace {
__extension__ typedef unsigned __int128 Uint128;
}  // namespace


ByteRateLimiter::ByteRateLimiter(uint64_t bytes_per_s, uint64_t burst_bytes)
    : bytes_per_s_(bytes_per_s), burst_ns_(0) {
  if (limited()) burst_ns_ = NsFor(burst_bytes);
}

uint64_t ByteRateLimiter::NsFor(uint64_t bytes) const {
  // 128 bits: bytes * 1e9 overflows 64 bits from 18.4 GB up.
  const Uint128 ns =
      static_cast<Uint128>(bytes) * 1'000'000'000u / bytes_per_s_;
  return ns > std::numeric_limits<uint64_t>::max() ? std::numeric_limits<uint64_t>::max()
                                                    : static_cast<uint64_t>(ns);
}

uint64_t ByteRateLimiter::DelayNs(uint64_t now_ns) const {
  if (!limited() || paid_until_ns_ <= burst_ns_) return 0;
  const uint64_t start_ns = paid_until_ns_ - burst_ns_;
  return start_ns > now_ns ? start_ns - now_ns : 0;
}

void ByteRateLimiter::Consume(uint64_t bytes, uint64_t now_ns) {
  if (!limited()) return;
  // Idle time earns no credit beyond the burst: paying starts from now.
  const uint64_t from = std::max(paid_until_ns_, now_ns);
  const uint64_t cost = NsFor(bytes);
  paid_until_ns_ = from > std::numeric_limits<uint64_t>::max() - cost
                       ? std::numeric_limits<uint64_t>::max()
                       : from + cost;
}

}  // namespace moetier
