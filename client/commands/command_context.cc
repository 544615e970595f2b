#include "commands/command_context.h"

#include <ostream>

#include "connection/interrupt.h"
#include "connection/rpc_error.h"

namespace moetier::client {

void PrintError(const CommandContext& ctx, std::string_view command, std::string_view message) {
  *ctx.err << "moetier " << command << ": " << message << std::endl;
}

int ReportRpcError(const CommandContext& ctx, std::string_view command, std::string_view rpc,
                   const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::CANCELLED && Interrupted()) {
    PrintError(ctx, command, "interrupted; the request was cancelled");
    return kExitInterrupted;
  }
  PrintError(ctx, command, DescribeRpcError(status, ctx.target, rpc));
  return kExitError;
}

}  // namespace moetier::client
