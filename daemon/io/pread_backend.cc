#include "io/pread_backend.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/check.h"

namespace moetier {

PreadBackend::PreadBackend(uint32_t queue_depth, FaultInjector injector, bool direct_io)
    : queue_depth_(queue_depth), injector_(std::move(injector)), direct_io_(direct_io) {
  MOETIER_CHECK(queue_depth > 0);
}

PreadBackend::~PreadBackend() {
  for (int fd : fds_) close(fd);
}

absl::StatusOr<uint32_t> PreadBackend::RegisterFile(const std::string& path) {
  int fd = direct_io_ ? open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT) : -1;
  if (fd < 0) fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);  // O_DIRECT refused: buffered
  if (fd < 0) {
    return absl::Status(absl::ErrnoToStatusCode(errno),
                        absl::StrFormat("opening %s: %s", path, std::strerror(errno)));
  }
  // Buffered or not, the model is read once, front to back per range.
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  fds_.push_back(fd);
  return static_cast<uint32_t>(fds_.size() - 1);
}

void PreadBackend::Submit(const ReadRequest& request) {
  MOETIER_CHECK(pending_.size() < queue_depth_);
  MOETIER_CHECK(request.file < fds_.size());
  MOETIER_CHECK(request.length > 0 && request.length <= kMaxReadBytes);
  MOETIER_CHECK(request.offset % alignment() == 0 && request.length % alignment() == 0 &&
                      reinterpret_cast<uintptr_t>(request.dest) % alignment() == 0);
  ReadProgress progress;
  progress.request = request;
  pending_.push_back(progress);
}

ReadCompletion PreadBackend::Perform(ReadProgress& progress) {
  ReadCompletion completion;
  completion.user_data = progress.request.user_data;
  while (true) {
    ++stats_.reads_submitted;
    ssize_t got;
    std::optional<InjectedFault> fault;
    if (injector_) {
      fault = injector_(progress.request, progress.attempt_offset(), progress.attempt_length());
    }
    if (fault.has_value() && fault->kind == InjectedFault::Kind::kError) {
      got = -1;
      errno = fault->error;
    } else if (fault.has_value() && fault->kind == InjectedFault::Kind::kEndOfFile) {
      got = 0;
    } else {
      uint64_t length = progress.attempt_length();
      if (fault.has_value()) length = std::min(length, fault->bytes);
      got = pread(fds_[progress.request.file], progress.attempt_dest(), length,
                  static_cast<off_t>(progress.attempt_offset()));
    }
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      completion.error = errno;
      ++stats_.errors;
      return completion;
    }
    if (progress.OnBytes(static_cast<uint64_t>(got), alignment())) {
      completion.bytes = progress.done;
      return completion;
    }
    ++stats_.short_reads;
  }
}

size_t PreadBackend::Reap(std::span<ReadCompletion> out, int64_t /*timeout_ns*/) {
  size_t n = 0;
  while (n < out.size() && !pending_.empty()) {
    out[n++] = Perform(pending_.front());
    pending_.pop_front();
  }
  return n;
}

}  // namespace moetier
