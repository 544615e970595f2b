#include "store/shared_futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

namespace moetier::store {

int FutexWait(uint32_t* word, uint32_t expected, int64_t timeout_ns) {
  timespec timeout{};
  timespec* timeout_ptr = nullptr;
  if (timeout_ns >= 0) {
    timeout.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000);
    timeout.tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000);
    timeout_ptr = &timeout;
  }
  // FUTEX_WAIT takes a relative timeout.
  const long rc = syscall(SYS_futex, word, FUTEX_WAIT, expected, timeout_ptr, nullptr, 0);
  if (rc == 0) return 0;
  if (errno == EAGAIN) return 0;  // the word had already changed
  return errno;
}

int FutexWakeAll(uint32_t* word) {
  const long rc = syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  return rc < 0 ? -errno : static_cast<int>(rc);
}

uint64_t MonotonicNowNs() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(now.tv_nsec);
}

}  // namespace moetier::store
