// io_uring behind the IoBackend interface: reads go straight from the model
// file into (aligned) memory with O_DIRECT, so preloading 20 GB does not
// also fill the page cache with a second copy. Where the file system
// refuses O_DIRECT the file is opened buffered (logged once per file).
#pragma once

#include <liburing.h>

#include <memory>
#include <vector>

#include "io/io_backend.h"
#include "io/read_progress.h"

namespace moetier {

// Direct reads are aligned to this; it covers every logical block size
// (512 B and 4 KiB devices).
inline constexpr uint64_t kDirectIoAlignmentBytes = 4096;

class UringBackend : public IoBackend {
 public:
  // Fails (with the kernel's reason) where io_uring is unavailable:
  // io_uring_disabled, seccomp, old kernels, RLIMIT_MEMLOCK on old kernels.
  static absl::StatusOr<std::unique_ptr<UringBackend>> Create(uint32_t queue_depth,
                                                              bool direct_io);
  ~UringBackend() override;

  std::string_view name() const override { return "io_uring"; }
  absl::StatusOr<uint32_t> RegisterFile(const std::string& path) override;
  // Reads of every registered file are aligned to this (files opened
  // buffered do not need it, but one value keeps callers simple).
  uint64_t alignment() const override { return direct_io_ ? kDirectIoAlignmentBytes : 1; }
  uint32_t queue_depth() const override { return queue_depth_; }
  uint32_t in_flight() const override { return in_flight_; }
  void Submit(const ReadRequest& request) override;
  size_t Reap(std::span<ReadCompletion> out, int64_t timeout_ns) override;
  IoStats stats() const override { return stats_; }
  // True while every registered file is read with O_DIRECT.
  bool direct_io() const { return direct_io_ && buffered_files_ == 0; }

 private:
  UringBackend() = default;
  void SubmitAttempt(uint32_t op);

  io_uring ring_{};
  bool ring_ready_ = false;
  uint32_t queue_depth_ = 0;
  bool direct_io_ = true;
  std::vector<int> fds_;
  uint32_t buffered_files_ = 0;  // opened without O_DIRECT (refused by their file system)
  std::vector<ReadProgress> ops_;
  std::vector<uint32_t> free_ops_;
  uint32_t in_flight_ = 0;
  IoStats stats_;
};

}  // namespace moetier
