// Reads from the model file(s) into memory, asynchronously, behind one small
// interface: io_uring with O_DIRECT (uring_backend.h), or plain pread
// (pread_backend.h) where io_uring or O_DIRECT is refused, which doubles as
// a test backend that injects faults.
//
// Every submitted read comes back as exactly one completion. A short read is
// resubmitted for the rest by the backend (from the last aligned position
// when reads must be aligned); a completion has fewer bytes than asked only
// when the file ended. Errors are per read, as an errno value.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace moetier {

// The largest single read; longer ranges are split by the caller.
inline constexpr uint64_t kMaxReadBytes = uint64_t{1} << 30;

struct ReadRequest {
  uint32_t file = 0;    // from RegisterFile
  uint64_t offset = 0;  // in the file
  uint64_t length = 0;  // 1..kMaxReadBytes
  uint8_t* dest = nullptr;
  uint64_t user_data = 0;
};

struct ReadCompletion {
  uint64_t user_data = 0;
  int error = 0;       // 0, or an errno value
  uint64_t bytes = 0;  // valid bytes at dest; < length only at end of file
};

struct IoStats {
  uint64_t reads_submitted = 0;  // including resubmissions
  uint64_t short_reads = 0;      // partial results that were resubmitted
  uint64_t errors = 0;           // completions with an error
};

class IoBackend {
 public:
  virtual ~IoBackend() = default;

  virtual std::string_view name() const = 0;
  // Opens `path` read-only the way this backend reads it; returns its index.
  virtual absl::StatusOr<uint32_t> RegisterFile(const std::string& path) = 0;
  // Offsets, lengths and destinations must be multiples of this (1: none).
  virtual uint64_t alignment() const = 0;
  virtual uint32_t queue_depth() const = 0;
  virtual uint32_t in_flight() const = 0;
  // Preconditions: in_flight() < queue_depth(); the request is aligned.
  virtual void Submit(const ReadRequest& request) = 0;
  // Collects finished reads into `out`. When reads are in flight and none
  // has finished, waits up to timeout_ns (0: do not wait; < 0: no limit).
  virtual size_t Reap(std::span<ReadCompletion> out, int64_t timeout_ns) = 0;
  virtual IoStats stats() const = 0;
};

}  // namespace moetier
