// Software prefetch of the streams the kernels read once: a matrix's
// weights and, in attention, a KV head's rows.
//
// A decode step reads every weight byte once and does little arithmetic per
// cache line. The out-of-order window then keeps too few lines in flight,
// and the hardware streamer stops at each 4 KiB page and ramps up again: a
// single thread read Q8_0 at under half the machine's read bandwidth. Each
// kernel step therefore asks for the lines kPrefetchAhead bytes past the
// data it is about to read (README.md, "Prefetching the weights").
// Prefetches past the end of a buffer are harmless: they never fault (the
// address is computed as an integer, as it may lie outside the buffer).
#pragma once

#include <cstddef>
#include <cstdint>

namespace moetier::cpu {

// Far enough to cover the memory latency at the kernels' rate, near enough to
// stay in L1 until read: on huge pages 1, 2 and 4 KiB measured alike and 512
// bytes clearly worse; on 4 KiB pages 2 KiB beat 4 KiB.
inline constexpr size_t kPrefetchAhead = 2048;

// Prefetches the lines of [p + kPrefetchAhead, + step_bytes): called
// once per kernel step of step_bytes bytes of the stream, it asks for every
// line of the stream, one address in each 64 bytes.
inline void PrefetchAhead(const void* p, size_t step_bytes) {
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kPrefetchAhead;
  for (size_t i = 0; i < step_bytes; i += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(ahead + i), 0, 3);
  }
}

}  // namespace moetier::cpu
