// Intrusive doubly linked lists of experts, one per layer, in fixed arrays:
// O(1) push, unlink and move-to-front, no allocation after construction.
#pragma once

#include <cstdint>
#include <vector>

#include "base/check.h"

namespace moetier {

class ExpertRecencyLists {
 public:
  static constexpr uint32_t kEnd = UINT32_MAX;

  ExpertRecencyLists(uint32_t n_layer, uint32_t n_expert)
      : n_expert_(n_expert),
        prev_(static_cast<size_t>(n_layer) * n_expert, kEnd),
        next_(prev_.size(), kEnd),
        linked_(prev_.size(), 0),
        head_(n_layer, kEnd),
        tail_(n_layer, kEnd) {}

  size_t bytes() const {
    return (prev_.capacity() + next_.capacity() + head_.capacity() + tail_.capacity()) *
               sizeof(uint32_t) +
           linked_.capacity();
  }

  // Most recent first.
  uint32_t head(uint32_t layer) const { return head_[layer]; }
  // Least recent first, walking towards the head with older().
  uint32_t tail(uint32_t layer) const { return tail_[layer]; }
  uint32_t newer(uint32_t layer, uint32_t e) const { return prev_[At(layer, e)]; }
  bool linked(uint32_t layer, uint32_t e) const { return linked_[At(layer, e)] != 0; }

  void PushFront(uint32_t layer, uint32_t e) {
    const size_t i = At(layer, e);
    MOETIER_CHECK(!linked_[i]);
    linked_[i] = 1;
    prev_[i] = kEnd;
    next_[i] = head_[layer];
    if (head_[layer] != kEnd) prev_[At(layer, head_[layer])] = e;
    head_[layer] = e;
    if (tail_[layer] == kEnd) tail_[layer] = e;
  }

  void Unlink(uint32_t layer, uint32_t e) {
    const size_t i = At(layer, e);
    MOETIER_CHECK(linked_[i]);
    const uint32_t p = prev_[i];
    const uint32_t n = next_[i];
    if (p != kEnd) {
      next_[At(layer, p)] = n;
    } else {
      head_[layer] = n;
    }
    if (n != kEnd) {
      prev_[At(layer, n)] = p;
    } else {
      tail_[layer] = p;
    }
    prev_[i] = next_[i] = kEnd;
    linked_[i] = 0;
  }

  void MoveToFront(uint32_t layer, uint32_t e) {
    Unlink(layer, e);
    PushFront(layer, e);
  }

 private:
  size_t At(uint32_t layer, uint32_t e) const { return static_cast<size_t>(layer) * n_expert_ + e; }

  uint32_t n_expert_;
  std::vector<uint32_t> prev_;  // towards the head (newer)
  std::vector<uint32_t> next_;  // towards the tail (older)
  std::vector<uint8_t> linked_;
  std::vector<uint32_t> head_;
  std::vector<uint32_t> tail_;
};

}  // namespace moetier
