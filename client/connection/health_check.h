// grpc.health.v1 Check of the whole server: SERVING once moetierd's store is
// ready and a worker serves.
#pragma once

#include <cstdint>
#include <memory>

#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"

namespace moetier::client {

enum class ServingState { kUnknown, kServing, kNotServing, kServiceUnknown };

// One Check of service "" with a deadline of `timeout_ms`.
grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, int64_t timeout_ms,
                         ServingState* state);

}  // namespace moetier::client
