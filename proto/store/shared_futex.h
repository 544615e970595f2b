// Futex wait/wake on 32-bit words in the shared segment (process-shared, so
// not FUTEX_PRIVATE), and the one clock both processes stamp heartbeats with.
#pragma once

#include <cstdint>

namespace moetier::store {

// Blocks while *word == expected, at most timeout_ns (< 0: no limit).
// Returns 0 when woken or when the word already differed, ETIMEDOUT, or
// EINTR. Spurious returns are possible: callers re-check their condition.
int FutexWait(uint32_t* word, uint32_t expected, int64_t timeout_ns);

// Wakes every waiter on `word`; returns how many were woken (or -errno).
int FutexWakeAll(uint32_t* word);

// CLOCK_MONOTONIC in nanoseconds; comparable across processes on one host.
uint64_t MonotonicNowNs();

}  // namespace moetier::store
