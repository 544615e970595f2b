#include "control/control_channel.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace moetier::control {
namespace {

absl::Status ErrnoStatus(int error, const char* what) {
  if (error == EPIPE || error == ECONNRESET || error == ENOTCONN) {
    return absl::UnavailableError(
        absl::StrFormat("%s: the other side closed the control channel", what));
  }
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrFormat("%s: %s", what, std::strerror(error)));
}

}  // namespace

void ConfigureControlSocket(int socket_fd) {
  const int bytes = static_cast<int>(kMaxControlMessageBytes * 16);
  setsockopt(socket_fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(socket_fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

absl::Status SendControlMessage(int socket_fd, const google::protobuf::MessageLite& message) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) {
    return absl::InternalError("control message does not serialize (missing fields?)");
  }
  if (bytes.empty()) {
    // A zero-length datagram reads as end-of-file on the other side.
    return absl::InvalidArgumentError("empty control message");
  }
  if (bytes.size() > kMaxControlMessageBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("control message of %d bytes exceeds the channel's %d-byte limit",
                        bytes.size(), kMaxControlMessageBytes));
  }
  ssize_t sent;
  do {
    sent = send(socket_fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return ErrnoStatus(errno, "sending on the control channel");
  if (static_cast<size_t>(sent) != bytes.size()) {
    return absl::UnavailableError(absl::StrFormat(
        "control channel: sent %d of %d bytes", sent, bytes.size()));
  }
  return absl::OkStatus();
}

absl::Status ReceiveControlMessage(int socket_fd, google::protobuf::MessageLite* message,
                                   int64_t timeout_ms) {
  pollfd pfd{socket_fd, POLLIN, 0};
  int ready;
  do {
    ready = poll(&pfd, 1, timeout_ms < 0 ? -1 : static_cast<int>(timeout_ms));
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) return ErrnoStatus(errno, "waiting on the control channel");
  if (ready == 0) {
    return absl::DeadlineExceededError(
        absl::StrFormat("no message on the control channel within %d ms", timeout_ms));
  }
  // One byte more than the limit reveals an oversized datagram.
  thread_local std::vector<char> buffer(kMaxControlMessageBytes + 1);
  ssize_t got;
  do {
    got = recv(socket_fd, buffer.data(), buffer.size(), MSG_TRUNC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return ErrnoStatus(errno, "receiving on the control channel");
  if (got == 0) {
    return absl::UnavailableError("the other side closed the control channel");
  }
  if (static_cast<size_t>(got) > kMaxControlMessageBytes) {
    return absl::DataLossError(absl::StrFormat(
        "control message of %d bytes exceeds the %d-byte limit", got, kMaxControlMessageBytes));
  }
  if (!message->ParseFromArray(buffer.data(), static_cast<int>(got))) {
    return absl::DataLossError(
        absl::StrFormat("malformed control message (%d bytes)", got));
  }
  return absl::OkStatus();
}

}  // namespace moetier::control
