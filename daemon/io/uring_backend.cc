#include "io/uring_backend.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "log/daemon_log.h"
#include "base/check.h"

namespace moetier {

absl::StatusOr<std::unique_ptr<UringBackend>> UringBackend::Create(uint32_t queue_depth,
                                                                   bool direct_io) {
  if (queue_depth == 0 || queue_depth > 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("io queue depth %d is outside [1, 4096]", queue_depth));
  }
  std::unique_ptr<UringBackend> backend(new UringBackend());
  const int rc = io_uring_queue_init(queue_depth, &backend->ring_, 0);
  if (rc < 0) {
    return absl::Status(absl::ErrnoToStatusCode(-rc),
                        absl::StrFormat("io_uring_queue_init(%d): %s", queue_depth,
                                        std::strerror(-rc)));
  }
  backend->ring_ready_ = true;
  backend->queue_depth_ = queue_depth;
  backend->direct_io_ = direct_io;
  backend->ops_.resize(queue_depth);
  for (uint32_t i = queue_depth; i > 0; --i) backend->free_ops_.push_back(i - 1);
  return backend;
}

UringBackend::~UringBackend() {
  if (ring_ready_) io_uring_queue_exit(&ring_);
  for (int fd : fds_) close(fd);
}

absl::StatusOr<uint32_t> UringBackend::RegisterFile(const std::string& path) {
  int fd = -1;
  if (direct_io_) {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0 && errno == EINVAL) {
      // Reads stay aligned (harmless for a buffered file), so only this
      // file changes mode.
      LogWarning("%s: the file system refuses O_DIRECT; reading it through the page cache",
                 path);
      ++buffered_files_;
      fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    }
  } else {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) {
    return absl::Status(absl::ErrnoToStatusCode(errno),
                        absl::StrFormat("opening %s: %s", path, std::strerror(errno)));
  }
  fds_.push_back(fd);
  return static_cast<uint32_t>(fds_.size() - 1);
}

void UringBackend::Submit(const ReadRequest& request) {
  MOETIER_CHECK(!free_ops_.empty());
  MOETIER_CHECK(request.file < fds_.size());
  MOETIER_CHECK(request.length > 0 && request.length <= kMaxReadBytes);
  MOETIER_CHECK(request.offset % alignment() == 0 && request.length % alignment() == 0 &&
                      reinterpret_cast<uintptr_t>(request.dest) % alignment() == 0);
  const uint32_t op = free_ops_.back();
  free_ops_.pop_back();
  ops_[op] = ReadProgress{};
  ops_[op].request = request;
  ++in_flight_;
  SubmitAttempt(op);
}

void UringBackend::SubmitAttempt(uint32_t op) {
  const ReadProgress& p = ops_[op];
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    // Never more SQEs than queue entries are outstanding, but the kernel may
    // not have consumed the last batch yet.
    io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  MOETIER_CHECK(sqe != nullptr);
  io_uring_prep_read(sqe, fds_[p.request.file], p.attempt_dest(),
                     static_cast<unsigned>(p.attempt_length()), p.attempt_offset());
  io_uring_sqe_set_data64(sqe, op);
  ++stats_.reads_submitted;
  io_uring_submit(&ring_);
}

size_t UringBackend::Reap(std::span<ReadCompletion> out, int64_t timeout_ns) {
  size_t n = 0;
  bool waited = false;
  while (n < out.size() && in_flight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_peek_cqe(&ring_, &cqe);
    if (rc == -EAGAIN && n == 0 && !waited && timeout_ns != 0) {
      waited = true;
      if (timeout_ns < 0) {
        rc = io_uring_wait_cqe(&ring_, &cqe);
      } else {
        __kernel_timespec ts{};
        ts.tv_sec = timeout_ns / 1'000'000'000;
        ts.tv_nsec = timeout_ns % 1'000'000'000;
        rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
      }
    }
    if (rc < 0) break;  // nothing ready (EAGAIN, ETIME, EINTR)
    const uint32_t op = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    MOETIER_CHECK(op < ops_.size());
    ReadProgress& p = ops_[op];
    if (res == -EINTR || res == -EAGAIN) {
      SubmitAttempt(op);
      continue;
    }
    ReadCompletion completion;
    completion.user_data = p.request.user_data;
    if (res < 0) {
      completion.error = -res;
      ++stats_.errors;
    } else if (!p.OnBytes(static_cast<uint64_t>(res), alignment())) {
      ++stats_.short_reads;
      SubmitAttempt(op);
      continue;
    } else {
      completion.bytes = p.done;
    }
    out[n++] = completion;
    free_ops_.push_back(op);
    --in_flight_;
  }
  return n;
}

}  // namespace moetier
