// The gRPC server of the front door: the moetier.v1 service, the standard
// grpc.health.v1 health service and server reflection (so grpcurl works),
// on a unix socket with tight permissions, plus TCP only when configured.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace moetier {

struct ApiServerOptions {
  std::string socket_path;      // unix socket; its directory is created if missing
  unsigned socket_mode = 0660;  // permission bits of the socket file
  std::string socket_group;     // group of the socket file; empty: the daemon's
  std::string listen_address;   // HOST:PORT for TCP; empty: none
  int max_message_bytes = 256 << 20;  // Score responses carry whole logit matrices
};

class ApiServer {
 public:
  // Fails when another live process serves socket_path, or the socket or
  // TCP port cannot be had. A stale socket file (nobody listening) is
  // replaced. Health starts NOT_SERVING.
  static absl::StatusOr<std::unique_ptr<ApiServer>> Start(const ApiServerOptions& options,
                                                          grpc::Service* service);
  ~ApiServer();  // Shutdown()

  // The health service's answer for "" and "moetier.v1.Moetier".
  void SetServing(bool serving);
  // Ends every call (after a short grace period), stops the server and
  // removes the socket file. Idempotent.
  void Shutdown();

  // The TCP port actually bound (useful with port 0); 0 without TCP.
  int tcp_port() const { return tcp_port_; }

 private:
  ApiServer() = default;
  std::unique_ptr<grpc::Server> server_;
  std::string socket_path_;
  int tcp_port_ = 0;
  bool shut_down_ = false;
};

}  // namespace moetier
