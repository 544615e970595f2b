// Paces reads to `bytes_per_s` (0: unlimited), for preload_bytes_per_s: a
// full-speed preload saturates the disk and the page allocator, and a
// desktop sharing the machine stops responding. A read may start once the
// reads before it have been paid for at the rate, less `burst_bytes` of
// credit, so the pace holds on average without idling the queue between
// reads. Times are given by the caller (CLOCK_MONOTONIC in the daemon).
#pragma once

#include <cstdint>

namespace moetier {

class ByteRateLimiter {
 public:
  ByteRateLimiter(uint64_t bytes_per_s, uint64_t burst_bytes);

  bool limited() const { return bytes_per_s_ != 0; }
  // Nanoseconds from `now_ns` until a read may start; 0: now.
  uint64_t DelayNs(uint64_t now_ns) const;
  // Books a read of `bytes` started at `now_ns`.
  void Consume(uint64_t bytes, uint64_t now_ns);

 private:
  uint64_t NsFor(uint64_t bytes) const;

  uint64_t bytes_per_s_;
  uint64_t burst_ns_;
  uint64_t paid_until_ns_ = 0;  // when the reads booked so far are paid for at the rate
};

}  // namespace moetier
