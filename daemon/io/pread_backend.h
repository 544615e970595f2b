// Plain pread(2) behind the IoBackend interface: the fallback where
// io_uring is refused, and a test double that injects faults. Reads are
// queued by Submit and performed, in order, by Reap. With direct_io it
// opens files O_DIRECT where the file system allows (no page-cache copy).
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "io/io_backend.h"
#include "io/read_progress.h"

namespace moetier {

struct InjectedFault {
  enum class Kind { kError, kShortRead, kEndOfFile };
  Kind kind = Kind::kError;
  int error = 0;       // kError: the errno to report
  uint64_t bytes = 0;  // kShortRead: how many bytes this attempt returns (< asked)
};

// Called before every attempt (the first and each resubmission) with the
// request and the attempt's file range; nullopt lets the attempt run.
using FaultInjector = std::function<std::optional<InjectedFault>(
    const ReadRequest& request, uint64_t attempt_offset, uint64_t attempt_length)>;

class PreadBackend : public IoBackend {
 public:
  explicit PreadBackend(uint32_t queue_depth, FaultInjector injector = nullptr,
                        bool direct_io = false);
  ~PreadBackend() override;

  std::string_view name() const override { return "pread"; }
  absl::StatusOr<uint32_t> RegisterFile(const std::string& path) override;
  uint64_t alignment() const override { return direct_io_ ? kPreadDirectAlignmentBytes : 1; }
  uint32_t queue_depth() const override { return queue_depth_; }
  uint32_t in_flight() const override { return static_cast<uint32_t>(pending_.size()); }
  void Submit(const ReadRequest& request) override;
  size_t Reap(std::span<ReadCompletion> out, int64_t timeout_ns) override;
  IoStats stats() const override { return stats_; }

 private:
  ReadCompletion Perform(ReadProgress& progress);

  static constexpr uint64_t kPreadDirectAlignmentBytes = 4096;
  uint32_t queue_depth_;
  FaultInjector injector_;
  bool direct_io_;
  std::vector<int> fds_;
  std::deque<ReadProgress> pending_;
  IoStats stats_;
};

}  // namespace moetier
