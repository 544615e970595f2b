#include "store/store_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "log/daemon_log.h"
#include "util/byte_size.h"

namespace moetier {
namespace {

absl::Status ErrnoStatus(int error, std::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrFormat("%s: %s", what, std::strerror(error)));
}

std::string LimitText(uint64_t limit) {
  if (limit == RLIM_INFINITY) return "unlimited";
  return absl::StrFormat("%d bytes (%s)", limit, FormatBytes(limit));
}

}  // namespace

std::string MlockFailureMessage(int error, uint64_t bytes, uint64_t limit_soft,
                                uint64_t limit_hard) {
  std::string message = absl::StrFormat(
      "cannot lock the %s expert store in RAM (mlock: %s); RLIMIT_MEMLOCK is %s (hard limit %s)",
      FormatBytes(bytes), std::strerror(error), LimitText(limit_soft), LimitText(limit_hard));
  if (limit_soft != RLIM_INFINITY && limit_soft < bytes) {
    absl::StrAppend(&message,
                    ". Raise the limit: LimitMEMLOCK=infinity in moetierd's systemd unit, or "
                    "`ulimit -l unlimited` in the shell that starts moetierd (as root, or with "
                    "CAP_IPC_LOCK)");
  } else {
    absl::StrAppend(&message, ". The limit allows it, so RAM itself is short: lower "
                              "ram_budget_bytes");
  }
  absl::StrAppend(&message, "; or set allow_unlocked_memory: true to run with memory the "
                            "kernel may swap out");
  return message;
}

absl::StatusOr<std::unique_ptr<StoreSegment>> StoreSegment::Create(
    uint64_t bytes, const SegmentOptions& options) {
  std::unique_ptr<StoreSegment> segment(new StoreSegment());
  segment->fd_ = memfd_create("moetier-store", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (segment->fd_ < 0) return ErrnoStatus(errno, "memfd_create for the expert store");
  if (ftruncate(segment->fd_, static_cast<off_t>(bytes)) != 0) {
    return ErrnoStatus(errno, absl::StrFormat("sizing the expert store to %d bytes", bytes));
  }
  // Workers map it: a size change under them would turn reads into SIGBUS.
  if (fcntl(segment->fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return ErrnoStatus(errno, "sealing the expert store");
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, segment->fd_, 0);
  if (base == MAP_FAILED) {
    return ErrnoStatus(errno, absl::StrFormat("mapping the %s expert store", FormatBytes(bytes)));
  }
  segment->base_ = static_cast<uint8_t*>(base);
  segment->size_ = bytes;
  if (options.huge_pages && madvise(base, bytes, MADV_HUGEPAGE) != 0) {
    LogInfo("transparent huge pages not available for the store (%s); using 4 KiB pages",
            std::strerror(errno));
  }
  if (options.lock_memory) {
    if (mlock(base, bytes) == 0) {
      segment->locked_ = true;
    } else {
      const int error = errno;
      rlimit limit{};
      getrlimit(RLIMIT_MEMLOCK, &limit);
      const std::string message = MlockFailureMessage(error, bytes, limit.rlim_cur, limit.rlim_max);
      if (!options.allow_unlocked_memory) {
        return absl::ResourceExhaustedError(message);
      }
      LogWarning("%s; continuing unlocked because allow_unlocked_memory is set", message);
    }
  }
  return segment;
}

StoreSegment::~StoreSegment() {
  if (base_ != nullptr) {
    if (locked_) munlock(base_, size_);
    munmap(base_, size_);
  }
  if (fd_ >= 0) close(fd_);
}

}  // namespace moetier
