// A FIFO of expert indices with its capacity given at start-up, so the
// service thread never allocates while it serves requests.
#pragma once

#include <cstdint>
#include <vector>

#include "base/check.h"

namespace moetier {

class FixedQueue {
 public:
  void Reserve(uint32_t capacity) { items_.assign(capacity, 0); }
  bool empty() const { return size_ == 0; }
  uint32_t size() const { return size_; }
  uint32_t front() const {
    MOETIER_CHECK(size_ > 0);
    return items_[head_];
  }
  void push(uint32_t value) {
    MOETIER_CHECK(size_ < items_.size());
    items_[(head_ + size_) % items_.size()] = value;
    ++size_;
  }
  void pop() {
    MOETIER_CHECK(size_ > 0);
    head_ = static_cast<uint32_t>((head_ + 1) % items_.size());
    --size_;
  }

 private:
  std::vector<uint32_t> items_;
  uint32_t head_ = 0;
  uint32_t size_ = 0;
};

}  // namespace moetier
