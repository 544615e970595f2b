#include "connection/target.h"

#include <chrono>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace moetier::client {

std::string Target::GrpcUri() const { return kind == Kind::kUnix ? "unix:" + where : where; }

Target ResolveTarget(const GlobalOptions& global, const char* env_socket) {
  if (!global.address.empty()) return {Target::Kind::kTcp, global.address};
  if (!global.socket_path.empty()) return {Target::Kind::kUnix, global.socket_path};
  if (env_socket != nullptr && env_socket[0] != '\0') return {Target::Kind::kUnix, env_socket};
  return {Target::Kind::kUnix, kDefaultSocketPath};
}

std::shared_ptr<grpc::Channel> CreateChannel(const Target& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  // A daemon that is starting up (moetier run) should be seen soon after its
  // socket appears, not after gRPC's default reconnect backoff of up to 2 min.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(target.GrpcUri(), grpc::InsecureChannelCredentials(), args);
}

void ApplyDeadline(grpc::ClientContext* context, int64_t timeout_ms) {
  if (timeout_ms <= 0) return;
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
}

}  // namespace moetier::client
