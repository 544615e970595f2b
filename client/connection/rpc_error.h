// gRPC errors as one line a person can act on: a daemon that is not
// running, a socket they may not open (and which group to join), or the
// daemon's own message with its status code.
#pragma once

#include <string>
#include <string_view>

#include "connection/target.h"
#include "grpcpp/support/status.h"

namespace moetier::client {

enum class SocketState {
  kAccepting,         // connect() succeeded
  kMissing,           // no such file (or a path component is not a directory)
  kRefused,           // a socket file nobody listens on (a stale one)
  kPermissionDenied,  // the socket or a directory above it
  kOtherError,
};

struct SocketProbe {
  SocketState state = SocketState::kOtherError;
  int error = 0;      // errno of connect()
  std::string group;  // who may use it: the socket's group, else its directory's
};

// Connects to `path` once, without gRPC, to learn why a call failed.
SocketProbe ProbeUnixSocket(const std::string& path);

// "UNAVAILABLE", "FAILED_PRECONDITION", ...
const char* StatusCodeName(grpc::StatusCode code);

std::string NotRunningMessage(std::string_view socket_path);
std::string PermissionDeniedMessage(std::string_view socket_path, std::string_view group);

// One line, no trailing newline. `rpc` names the call ("Generate").
std::string DescribeRpcError(const grpc::Status& status, const Target& target,
                             std::string_view rpc);

// Whether the call failed because the daemon cannot be reached at all (as
// opposed to the daemon answering UNAVAILABLE, e.g. while a worker restarts).
bool DaemonUnreachable(const grpc::Status& status, const Target& target);

}  // namespace moetier::client
