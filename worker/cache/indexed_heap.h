// A binary min-heap over the ids 0 .. capacity-1 with a key per member:
// push, erase and re-key any member in O(log n), read the minimum in O(1).
// Storage is allocated once; nothing allocates afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/check.h"

namespace moetier {

// Keys compare by `primary`, then by `secondary`, then by id, so equal keys
// still give one fixed order (the policies must be deterministic).
struct HeapKey {
  double primary = 0;
  uint64_t secondary = 0;
};

class IndexedMinHeap {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;

  explicit IndexedMinHeap(uint32_t capacity) : pos_(capacity, kAbsent), key_(capacity) {
    heap_.reserve(capacity);
  }

  uint32_t size() const { return static_cast<uint32_t>(heap_.size()); }
  bool empty() const { return heap_.empty(); }
  bool contains(uint32_t id) const { return pos_[id] != kAbsent; }
  const HeapKey& key(uint32_t id) const { return key_[id]; }
  size_t bytes() const {
    return heap_.capacity() * sizeof(uint32_t) + pos_.capacity() * sizeof(uint32_t) +
           key_.capacity() * sizeof(HeapKey);
  }

  // The member with the smallest key. The heap must not be empty.
  uint32_t top() const {
    MOETIER_CHECK(!heap_.empty());
    return heap_[0];
  }

  void Push(uint32_t id, HeapKey k) {
    MOETIER_CHECK(id < pos_.size() && pos_[id] == kAbsent);
    key_[id] = k;
    pos_[id] = size();
    heap_.push_back(id);
    SiftUp(pos_[id]);
  }

  void Erase(uint32_t id) {
    MOETIER_CHECK(id < pos_.size() && pos_[id] != kAbsent);
    const uint32_t at = pos_[id];
    const uint32_t last = heap_.back();
    heap_.pop_back();
    pos_[id] = kAbsent;
    if (at < heap_.size()) {
      heap_[at] = last;
      pos_[last] = at;
      SiftDown(at);
      SiftUp(pos_[last]);
    }
  }

  void Update(uint32_t id, HeapKey k) {
    MOETIER_CHECK(id < pos_.size() && pos_[id] != kAbsent);
    key_[id] = k;
    SiftUp(pos_[id]);
    SiftDown(pos_[id]);
  }

  // The smallest-key member for which `ok(id)` holds, or kAbsent. Members
  // that fail are set aside in `scratch` (capacity reserved by the caller
  // holds the at most few protected members) and put back, so the cost is
  // O((skipped + 1) log n).
  template <typename Pred>
  uint32_t TopWhere(Pred ok, std::vector<std::pair<uint32_t, HeapKey>>& scratch) {
    scratch.clear();
    uint32_t found = kAbsent;
    while (!heap_.empty()) {
      const uint32_t id = heap_[0];
      if (ok(id)) {
        found = id;
        break;
      }
      scratch.emplace_back(id, key_[id]);
      Erase(id);
    }
    for (const auto& [id, k] : scratch) Push(id, k);
    return found;
  }

 private:
  bool Less(uint32_t a, uint32_t b) const {
    const HeapKey& x = key_[a];
    const HeapKey& y = key_[b];
    if (x.primary != y.primary) return x.primary < y.primary;
    if (x.secondary != y.secondary) return x.secondary < y.secondary;
    return a < b;
  }

  void SiftUp(uint32_t at) {
    while (at > 0) {
      const uint32_t parent = (at - 1) / 2;
      if (!Less(heap_[at], heap_[parent])) break;
      Swap(at, parent);
      at = parent;
    }
  }

  void SiftDown(uint32_t at) {
    const uint32_t n = size();
    for (;;) {
      const uint32_t l = 2 * at + 1;
      if (l >= n) break;
      uint32_t best = l;
      if (l + 1 < n && Less(heap_[l + 1], heap_[l])) best = l + 1;
      if (!Less(heap_[best], heap_[at])) break;
      Swap(at, best);
      at = best;
    }
  }

  void Swap(uint32_t a, uint32_t b) {
    std::swap(heap_[a], heap_[b]);
    pos_[heap_[a]] = a;
    pos_[heap_[b]] = b;
  }

  std::vector<uint32_t> heap_;
  std::vector<uint32_t> pos_;
  std::vector<HeapKey> key_;
};

// Bytes of a set of heaps (one per layer) with their storage.
inline size_t HeapBytes(const std::vector<IndexedMinHeap>& heaps) {
  size_t bytes = heaps.capacity() * sizeof(IndexedMinHeap);
  for (const IndexedMinHeap& h : heaps) bytes += h.bytes();
  return bytes;
}

}  // namespace moetier
