#include "store/store_segment.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "log/daemon_log.h"
#include "util/byte_size.h"

namespace moetier {
namespace {

constexpr uint64_t kPageBytes = 4096;

absl::Status ErrnoStatus(int error, std::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrFormat("%s: %s", what, std::strerror(error)));
}

std::string LimitText(uint64_t limit) {
  if (limit == RLIM_INFINITY) return "unlimited";
  return absl::StrFormat("%d bytes (%s)", limit, FormatBytes(limit));
}

// CAP_IPC_LOCK lifts RLIMIT_MEMLOCK altogether (root usually has it).
bool HasIpcLockCapability() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))) != 0;
}

int Mlock(void* address, uint64_t bytes) { return mlock(address, bytes) == 0 ? 0 : errno; }

}  // namespace

std::string MlockFailureMessage(int error, uint64_t bytes, uint64_t locked_bytes,
                                uint64_t limit_soft, uint64_t limit_hard) {
  std::string message = absl::StrFormat(
      "cannot lock the %s expert store in RAM (mlock: %s, with %s of it locked); "
      "RLIMIT_MEMLOCK is %s (hard limit %s)",
      FormatBytes(bytes), std::strerror(error), FormatBytes(locked_bytes), LimitText(limit_soft),
      LimitText(limit_hard));
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
  if (options.lock_chunk_bytes == 0 || options.lock_chunk_bytes % kPageBytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the lock chunk (%d bytes) must be a positive multiple of %d", options.lock_chunk_bytes,
        kPageBytes));
  }
  std::unique_ptr<StoreSegment> segment(new StoreSegment());
  segment->options_ = options;
  if (!segment->options_.lock_function) segment->options_.lock_function = Mlock;
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
  // The kernel's own test: without CAP_IPC_LOCK, locked memory stops at
  // the soft limit. Failing now beats failing after minutes of reading.
  if (options.lock_memory && !options.lock_function) {
    rlimit limit{};
    if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
        limit.rlim_cur < bytes && !HasIpcLockCapability()) {
      if (absl::Status s = segment->LockFailed(ENOMEM, 0); !s.ok()) return s;
    }
  }
  return segment;
}

absl::Status StoreSegment::LockFailed(int error, uint64_t locked_bytes) {
  rlimit limit{};
  getrlimit(RLIMIT_MEMLOCK, &limit);
  const std::string message =
      MlockFailureMessage(error, size_, locked_bytes, limit.rlim_cur, limit.rlim_max);
  if (!options_.allow_unlocked_memory) return absl::ResourceExhaustedError(message);
  LogWarning("%s; continuing unlocked because allow_unlocked_memory is set", message);
  gave_up_ = true;
  return absl::OkStatus();
}

absl::Status StoreSegment::LockThrough(uint64_t end,
                                       const std::function<void(uint64_t)>& on_chunk) {
  if (!locking()) return absl::OkStatus();
  const uint64_t chunk = options_.lock_chunk_bytes;
  end = std::min(size_, (end + chunk - 1) / chunk * chunk);
  uint64_t locked = locked_bytes();
  while (locked < end) {
    const uint64_t n = std::min(chunk, size_ - locked);
    if (const int error = options_.lock_function(base_ + locked, n); error != 0) {
      return LockFailed(error, locked);
    }
    locked += n;
    locked_bytes_.store(locked, std::memory_order_relaxed);
    if (on_chunk) on_chunk(locked);
  }
  return absl::OkStatus();
}

StoreSegment::~StoreSegment() {
  if (base_ != nullptr) {
    if (locked_bytes() > 0) munlock(base_, locked_bytes());
    munmap(base_, size_);
  }
  if (fd_ >= 0) close(fd_);
}

}  // namespace moetier
