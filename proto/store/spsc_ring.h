// Operations on the shared single-producer/single-consumer rings of
// store_layout.h. Each side trusts only its own index: the consumer bounds
// what a (possibly corrupt) producer index claims before reading entries.
#pragma once

#include <cstdint>
#include <optional>

#include "store/store_layout.h"

namespace moetier::store {

// Producer side. Returns false when the ring is full (or the consumer's
// index is corrupt, which a producer cannot repair).
template <typename T>
bool RingPush(SpscRing<T>& ring, const T& value) {
  const uint64_t head = Shared(ring.head).load(std::memory_order_relaxed);
  const uint64_t tail = Shared(ring.tail).load(std::memory_order_acquire);
  if (head - tail >= kRingCapacity) return false;
  ring.entries[head % kRingCapacity] = value;
  Shared(ring.head).store(head + 1, std::memory_order_release);
  return true;
}

enum class RingPopResult { kValue, kEmpty, kCorrupt };

// Consumer side. kCorrupt means the producer's index claims more entries
// than the ring holds; the caller decides how to recover (RingReset).
template <typename T>
RingPopResult RingPop(SpscRing<T>& ring, T* out) {
  const uint64_t tail = Shared(ring.tail).load(std::memory_order_relaxed);
  const uint64_t head = Shared(ring.head).load(std::memory_order_acquire);
  if (head == tail) return RingPopResult::kEmpty;
  if (head - tail > kRingCapacity) return RingPopResult::kCorrupt;
  *out = ring.entries[tail % kRingCapacity];
  Shared(ring.tail).store(tail + 1, std::memory_order_release);
  return RingPopResult::kValue;
}

// Entries waiting, as the consumer sees them.
template <typename T>
uint64_t RingSize(SpscRing<T>& ring) {
  return Shared(ring.head).load(std::memory_order_acquire) -
         Shared(ring.tail).load(std::memory_order_acquire);
}

// Consumer side: drops every entry the producer has published (recovery
// from a corrupt producer index).
template <typename T>
void RingSkipAll(SpscRing<T>& ring) {
  Shared(ring.tail).store(Shared(ring.head).load(std::memory_order_acquire),
                          std::memory_order_release);
}

// Empties the ring. Only when neither side can be using it (the worker that
// produced into it has exited).
template <typename T>
void RingReset(SpscRing<T>& ring) {
  Shared(ring.head).store(0, std::memory_order_relaxed);
  Shared(ring.tail).store(0, std::memory_order_release);
}

}  // namespace moetier::store
