// One IndexedMinHeap of resident experts per layer, keyed by the policy's
// value, and the victim search over it: what every heap-ordered policy
// (lrfu, reuse, optgen, and the lab's references) shares.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "cache/expert_cache_policy.h"
#include "cache/indexed_heap.h"

namespace moetier {

class LayerHeaps {
 public:
  LayerHeaps(uint32_t n_layer, uint32_t n_expert) {
    heaps_.reserve(n_layer);
    for (uint32_t l = 0; l < n_layer; ++l) heaps_.emplace_back(n_expert);
    scratch_.reserve(n_expert);
  }

  IndexedMinHeap& operator[](uint32_t layer) { return heaps_[layer]; }

  // The smallest-key expert of `layer` for which `evictable(e)` holds, or
  // kNoExpert.
  template <typename Pred>
  uint32_t Victim(uint32_t layer, Pred evictable) {
    const uint32_t v = heaps_[layer].TopWhere(evictable, scratch_);
    return v == IndexedMinHeap::kAbsent ? kNoExpert : v;
  }

  size_t bytes() const { return HeapBytes(heaps_) + VectorBytes(scratch_); }

 private:
  std::vector<IndexedMinHeap> heaps_;
  std::vector<std::pair<uint32_t, HeapKey>> scratch_;
};

}  // namespace moetier
