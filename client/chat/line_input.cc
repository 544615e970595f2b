#include "chat/line_input.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "connection/interrupt.h"

namespace moetier::client {
namespace {

constexpr size_t kReadChunkBytes = 4096;

}  // namespace

LineRead StreamLineInput::Read(std::string* line) {
  return std::getline(*in_, *line) ? LineRead::kLine : LineRead::kEnd;
}

LineRead FdLineInput::Read(std::string* line) {
  while (true) {
    if (Interrupted()) return LineRead::kInterrupted;
    if (const size_t newline = buffered_.find('\n'); newline != std::string::npos) {
      *line = buffered_.substr(0, newline);
      buffered_.erase(0, newline + 1);
      return LineRead::kLine;
    }
    if (ended_) {
      if (buffered_.empty()) return LineRead::kEnd;
      *line = std::move(buffered_);
      buffered_.clear();
      return LineRead::kLine;
    }
    pollfd fds[2] = {{fd_, POLLIN, 0}, {InterruptWakeFd(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      ended_ = true;
      continue;
    }
    if ((fds[1].revents & POLLIN) != 0) continue;  // Interrupted() says so above
    if (fds[0].revents == 0) continue;
    char chunk[kReadChunkBytes];
    const ssize_t n = read(fd_, chunk, sizeof(chunk));
    if (n > 0) {
      buffered_.append(chunk, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      ended_ = true;
    }
  }
}

}  // namespace moetier::client
