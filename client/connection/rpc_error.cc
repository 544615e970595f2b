#include "connection/rpc_error.h"

#include <errno.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace moetier::client {
namespace {

std::string GroupName(gid_t gid) {
  std::vector<char> buffer(16384);
  group entry{};
  group* found = nullptr;
  if (getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return found->gr_name;
  }
  return absl::StrCat(gid);
}

// The group that grants access: the socket's own, or (when even stat is
// refused) that of the nearest directory above it that we can stat.
std::string AccessGroup(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) return GroupName(st.st_gid);
  std::string dir = path;
  while (true) {
    const size_t slash = dir.rfind('/');
    if (slash == std::string::npos) {
      dir.assign(1, '.');
    } else {
      dir.resize(slash == 0 ? 1 : slash);
    }
    if (stat(dir.c_str(), &st) == 0) return GroupName(st.st_gid);
    if (dir == "/" || dir == ".") return "moetier";
  }
}

std::string OneLine(std::string_view text) {
  return absl::StrReplaceAll(absl::string_view(text.data(), text.size()),
                             {{"\r\n", " "}, {"\n", " "}, {"\r", " "}});
}

}  // namespace

SocketProbe ProbeUnixSocket(const std::string& path) {
  SocketProbe probe;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    probe.error = ENAMETOOLONG;
    return probe;
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    probe.error = errno;
    return probe;
  }
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  probe.error = rc == 0 ? 0 : errno;
  close(fd);
  switch (probe.error) {
    case 0:
      probe.state = SocketState::kAccepting;
      break;
    case ENOENT:
    case ENOTDIR:
      probe.state = SocketState::kMissing;
      break;
    case ECONNREFUSED:
      probe.state = SocketState::kRefused;
      break;
    case EACCES:
    case EPERM:
      probe.state = SocketState::kPermissionDenied;
      probe.group = AccessGroup(path);
      break;
    default:
      probe.state = SocketState::kOtherError;
  }
  return probe;
}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    default:
      return "UNKNOWN_CODE";
  }
}

std::string NotRunningMessage(std::string_view socket_path) {
  return absl::StrFormat(
      "moetierd is not running at %s; start it with `systemctl start moetierd` or `moetier run`",
      socket_path);
}

std::string PermissionDeniedMessage(std::string_view socket_path, std::string_view group) {
  return absl::StrFormat(
      "permission denied on %s; add yourself to group %s (sudo usermod -aG %s $USER) and log in "
      "again",
      socket_path, group, group);
}

std::string DescribeRpcError(const grpc::Status& status, const Target& target,
                             std::string_view rpc) {
  const std::string message = OneLine(status.error_message());
  const char* code = StatusCodeName(status.error_code());
  const auto with_code = [&](std::string_view text) {
    return text.empty() ? std::string(code) : absl::StrFormat("%s (%s)", text, code);
  };
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE: {
      if (target.kind == Target::Kind::kTcp) {
        return with_code(absl::StrFormat(
            "moetierd is not reachable at %s: %s; is it running with --listen_address=%s?",
            target.where, message, target.where));
      }
      const SocketProbe probe = ProbeUnixSocket(target.where);
      switch (probe.state) {
        case SocketState::kMissing:
        case SocketState::kRefused:
          return NotRunningMessage(target.where);
        case SocketState::kPermissionDenied:
          return PermissionDeniedMessage(target.where, probe.group);
        case SocketState::kOtherError:
          return with_code(absl::StrFormat("cannot reach moetierd at %s: %s", target.where,
                                           std::strerror(probe.error)));
        case SocketState::kAccepting:
          break;
      }
      // The daemon is there and said why (a worker restarting, say).
      if (!message.empty()) return with_code(message);
      return with_code(absl::StrFormat("moetierd at %s is unavailable", target.where));
    }
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return with_code(absl::StrFormat("%s ran past its deadline (--timeout-ms)", rpc));
    case grpc::StatusCode::CANCELLED:
      return with_code(absl::StrFormat("%s cancelled", rpc));
    case grpc::StatusCode::UNIMPLEMENTED:
      return with_code(
          absl::StrFormat("moetierd at %s does not implement %s (older than this client?)%s%s",
                          target.where, rpc, message.empty() ? "" : ": ", message));
    default:
      return with_code(message);
  }
}

bool DaemonUnreachable(const grpc::Status& status, const Target& target) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return false;
  return target.kind == Target::Kind::kTcp ||
         ProbeUnixSocket(target.where).state != SocketState::kAccepting;
}

}  // namespace moetier::client
