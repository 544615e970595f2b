// Where the daemon is: its unix socket (the default) or a TCP address, and
// the gRPC channel to it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cli/command_line.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace moetier::client {

struct Target {
  enum class Kind { kUnix, kTcp };
  Kind kind = Kind::kUnix;
  std::string where;  // the socket path, or HOST:PORT

  std::string GrpcUri() const;
};

// --address, else --socket, else $MOETIER_SOCKET (`env_socket`, may be
// null), else the default socket.
Target ResolveTarget(const GlobalOptions& global, const char* env_socket);

// Unlimited receive size: Score returns n_tokens x n_vocab floats, far
// beyond gRPC's 4 MiB default for long inputs.
std::shared_ptr<grpc::Channel> CreateChannel(const Target& target);

// A deadline `timeout_ms` from now; nothing when timeout_ms is 0.
void ApplyDeadline(grpc::ClientContext* context, int64_t timeout_ms);

}  // namespace moetier::client
