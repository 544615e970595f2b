#include "connection/health_check.h"

#include "grpc/health/v1/health.grpc.pb.h"
#include "connection/target.h"

namespace moetier::client {

grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, int64_t timeout_ms,
                         ServingState* state) {
  std::unique_ptr<grpc::health::v1::Health::Stub> stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  ApplyDeadline(&context, timeout_ms);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  *state = ServingState::kUnknown;
  if (!status.ok()) return status;
  switch (response.status()) {
    case grpc::health::v1::HealthCheckResponse::SERVING:
      *state = ServingState::kServing;
      break;
    case grpc::health::v1::HealthCheckResponse::NOT_SERVING:
      *state = ServingState::kNotServing;
      break;
    case grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN:
      *state = ServingState::kServiceUnknown;
      break;
    default:
      break;
  }
  return status;
}

}  // namespace moetier::client
