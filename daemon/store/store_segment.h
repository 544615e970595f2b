// The store's memory: one memfd (sealed against shrinking and growing),
// mapped MAP_SHARED, with transparent huge pages requested, and locked in
// RAM chunk by chunk as it is filled. One mlock of a whole 17 GiB store
// faults in and zeroes every page in a single call: about a minute in
// which the daemon says nothing and the machine stalls. Chunks keep each
// call short, let the fill report progress and start reading at once.
// The fd is what workers receive; the mapping is the daemon's.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace moetier {

inline constexpr uint64_t kDefaultLockChunkBytes = uint64_t{256} << 20;

// Locks [address, address + bytes); returns 0 or an errno. mlock(2) unless
// a test records the calls or makes one fail.
using LockFunction = std::function<int(void* address, uint64_t bytes)>;

struct SegmentOptions {
  bool lock_memory = true;             // mlock the segment (chunk by chunk, see LockThrough)
  bool allow_unlocked_memory = false;  // when mlock fails: continue (true) or fail (false)
  bool huge_pages = true;              // madvise(MADV_HUGEPAGE)
  uint64_t lock_chunk_bytes = kDefaultLockChunkBytes;  // a multiple of the page size
  LockFunction lock_function;          // empty: mlock(2)
};

class StoreSegment {
 public:
  // Creates and maps the segment; locks nothing yet. With the real mlock,
  // a segment that RLIMIT_MEMLOCK cannot cover (and no CAP_IPC_LOCK to
  // exceed it) is refused here, before anything is read into it.
  static absl::StatusOr<std::unique_ptr<StoreSegment>> Create(uint64_t bytes,
                                                             const SegmentOptions& options);
  ~StoreSegment();
  StoreSegment(const StoreSegment&) = delete;
  StoreSegment& operator=(const StoreSegment&) = delete;

  // Locks the segment from where locking stopped up to `end` (rounded up to
  // a chunk, at most size()), one lock call per chunk, calling `on_chunk`
  // with the bytes locked so far after each. When a chunk cannot be locked:
  // ResourceExhausted saying how much was locked and what RLIMIT_MEMLOCK
  // is, or, with allow_unlocked_memory, a warning and no further locking.
  // Not thread-safe: one thread at a time (the creator, then the service
  // thread).
  absl::Status LockThrough(uint64_t end,
                           const std::function<void(uint64_t locked_bytes)>& on_chunk = {});

  int fd() const { return fd_; }
  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t lock_chunk_bytes() const { return options_.lock_chunk_bytes; }
  // Bytes locked from the start; safe from any thread.
  uint64_t locked_bytes() const { return locked_bytes_.load(std::memory_order_relaxed); }
  // Every byte is locked.
  bool locked() const { return locked_bytes() == size_; }
  // Locking goes on as the segment fills: asked for, not given up, not done.
  bool locking() const { return options_.lock_memory && !gave_up_ && !locked(); }

 private:
  StoreSegment() = default;
  absl::Status LockFailed(int error, uint64_t locked_bytes);

  SegmentOptions options_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  std::atomic<uint64_t> locked_bytes_{0};
  bool gave_up_ = false;
};

// What to tell the operator when mlock of the `bytes` store failed with
// `error` after `locked_bytes` of it were locked, given RLIMIT_MEMLOCK's
// soft and hard values (RLIM_INFINITY for unlimited).
std::string MlockFailureMessage(int error, uint64_t bytes, uint64_t locked_bytes,
                                uint64_t limit_soft, uint64_t limit_hard);

}  // namespace moetier
