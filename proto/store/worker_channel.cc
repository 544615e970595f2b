#include "store/worker_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace moetier::store {
namespace {

absl::Status ErrnoStatus(int error, std::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrFormat("%s: %s", what, std::strerror(error)));
}

}  // namespace

absl::Status SendChannelMessage(int socket_fd, std::span<const uint8_t> bytes, int pass_fd) {
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
  }
  ssize_t sent;
  do {
    sent = sendmsg(socket_fd, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return ErrnoStatus(errno, "sending on the worker control channel");
  if (static_cast<size_t>(sent) != bytes.size()) {
    return absl::UnavailableError(absl::StrFormat(
        "worker control channel: sent %d of %d bytes", sent, bytes.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ReceiveChannelMessage(int socket_fd, std::span<uint8_t> out,
                                          int64_t timeout_ms) {
  pollfd pfd{socket_fd, POLLIN, 0};
  int ready;
  do {
    ready = poll(&pfd, 1, timeout_ms < 0 ? -1 : static_cast<int>(timeout_ms));
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) return ErrnoStatus(errno, "waiting on the worker control channel");
  if (ready == 0) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "no message on the worker control channel within %d ms", timeout_ms));
  }
  iovec iov{out.data(), out.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = recvmsg(socket_fd, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return ErrnoStatus(errno, "receiving on the worker control channel");
  int received_fd = -1;
  for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    const size_t n_fds = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n_fds; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
      // Keep the first descriptor; a peer sending more gets them closed.
      if (received_fd < 0) {
        received_fd = fd;
      } else {
        close(fd);
      }
    }
  }
  if (got == 0) {
    if (received_fd >= 0) close(received_fd);
    return absl::UnavailableError("the worker control channel was closed by the peer");
  }
  if (static_cast<size_t>(got) != out.size() || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    if (received_fd >= 0) close(received_fd);
    return absl::DataLossError(absl::StrFormat(
        "worker control channel: expected a %d-byte message, got %d bytes%s", out.size(), got,
        (msg.msg_flags & MSG_TRUNC) ? " (truncated)" : ""));
  }
  return received_fd;
}

absl::StatusOr<DaemonAdmission> JoinDaemon(const std::string& socket_path,
                                           uint32_t worker_index, std::string_view device,
                                           int64_t timeout_ms) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "control socket path '%s' is longer than %d bytes", socket_path,
        sizeof(address.sun_path) - 1));
  }
  if (device.size() >= kDeviceNameBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("device name '%s' is too long", device));
  }
  std::memcpy(address.sun_path, socket_path.data(), socket_path.size());
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus(errno, "creating the worker control socket");
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoStatus(error, absl::StrFormat("connecting to moetierd at %s", socket_path));
  }
  WorkerHello hello{};
  hello.magic = kWorkerHelloMagic;
  hello.layout_version = kLayoutVersion;
  hello.pid = static_cast<int32_t>(getpid());
  hello.worker_index = worker_index;
  std::memcpy(hello.device, device.data(), device.size());
  if (absl::Status sent = SendChannelMessage(
          fd, {reinterpret_cast<const uint8_t*>(&hello), sizeof(hello)}, -1);
      !sent.ok()) {
    close(fd);
    return sent;
  }
  DaemonAdmission admission;
  absl::StatusOr<int> segment_fd = ReceiveChannelMessage(
      fd, {reinterpret_cast<uint8_t*>(&admission.welcome), sizeof(DaemonWelcome)}, timeout_ms);
  if (!segment_fd.ok()) {
    close(fd);
    return absl::Status(segment_fd.status().code(),
                        absl::StrFormat("joining moetierd at %s: %s", socket_path,
                                        segment_fd.status().message()));
  }
  const DaemonWelcome& welcome = admission.welcome;
  auto refuse = [&](std::string message) {
    if (*segment_fd >= 0) close(*segment_fd);
    close(fd);
    return absl::FailedPreconditionError(std::move(message));
  };
  if (welcome.magic != kDaemonWelcomeMagic) {
    return refuse(absl::StrFormat("%s did not answer like moetierd (magic 0x%08x)", socket_path,
                                  welcome.magic));
  }
  if (welcome.error != 0) {
    char message[sizeof(welcome.message) + 1] = {};
    std::memcpy(message, welcome.message, sizeof(welcome.message));
    return refuse(absl::StrFormat("moetierd refused worker %d: %s", worker_index, message));
  }
  if (welcome.layout_version != kLayoutVersion) {
    return refuse(absl::StrFormat(
        "moetierd uses store layout version %d, this worker was built for version %d; "
        "install the daemon and the worker from the same release",
        welcome.layout_version, kLayoutVersion));
  }
  if (*segment_fd < 0) return refuse("moetierd admitted the worker but sent no segment");
  admission.control_fd = fd;
  admission.segment_fd = *segment_fd;
  return admission;
}

}  // namespace moetier::store
