// Software prefetch of the weight stream in the matrix kernels.
//
// A decode step reads every weight byte once and does little arithmetic per
// cache line. The out-of-order window then keeps too few lines in flight,
// and the hardware streamer stops at each 4 KiB page and ramps up again: a
// single thread read Q8_0 at under half the machine's read bandwidth. Each
// kernel step therefore asks for the lines kWeightPrefetchAhead bytes past
// the block it is about to read (README.md, "Prefetching the weights").
// Prefetches past the end of a matrix are harmless: they never fault.
#pragma once

#include <cstddef>

namespace moetier::cpu {

// Far enough to cover the memory latency at the kernels' rate, near enough to
// stay in L1 until read: 1, 2 and 4 KiB measured alike, 512 bytes clearly
// worse.
inline constexpr size_t kWeightPrefetchAhead = 2048;

// Prefetches the lines of [p + kWeightPrefetchAhead, + step_bytes): called
// once per kernel step of step_bytes weight bytes (a constant the loop
// unrolls on), it asks for every line of the stream, one address in each 64
// bytes.
inline void PrefetchWeightsAhead(const void* p, size_t step_bytes) {
  const char* ahead = static_cast<const char*>(p) + kWeightPrefetchAhead;
  for (size_t i = 0; i < step_bytes; i += 64) __builtin_prefetch(ahead + i, 0, 3);
}

}  // namespace moetier::cpu
