// The store's memory: one memfd (sealed against shrinking and growing),
// mapped MAP_SHARED, locked in RAM, with transparent huge pages requested.
// The fd is what workers receive; the mapping is the daemon's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace moetier {

struct SegmentOptions {
  bool lock_memory = true;             // mlock the whole segment
  bool allow_unlocked_memory = false;  // when mlock fails: continue (true) or fail (false)
  bool huge_pages = true;              // madvise(MADV_HUGEPAGE)
};

class StoreSegment {
 public:
  static absl::StatusOr<std::unique_ptr<StoreSegment>> Create(uint64_t bytes,
                                                             const SegmentOptions& options);
  ~StoreSegment();
  StoreSegment(const StoreSegment&) = delete;
  StoreSegment& operator=(const StoreSegment&) = delete;

  int fd() const { return fd_; }
  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  bool locked() const { return locked_; }

 private:
  StoreSegment() = default;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool locked_ = false;
};

// What to tell the operator when mlock of `bytes` failed with `error`, given
// RLIMIT_MEMLOCK's soft and hard values (RLIM_INFINITY for unlimited).
std::string MlockFailureMessage(int error, uint64_t bytes, uint64_t limit_soft,
                                uint64_t limit_hard);

}  // namespace moetier
