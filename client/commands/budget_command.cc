#include "commands/budget_command.h"

#include <ostream>

#include "absl/strings/str_format.h"
#include "connection/interrupt.h"
#include "moetier/v1/moetier.grpc.pb.h"

namespace moetier::client {

int RunBudget(const BudgetOptions& options, const CommandContext& ctx) {
  auto stub = v1::Moetier::NewStub(ctx.channel);
  grpc::ClientContext call;
  ApplyDeadline(&call, ctx.timeout_ms);
  v1::SetBudgetRequest request;
  request.set_device(options.device);
  request.set_expert_cache_mib(static_cast<uint64_t>(options.expert_cache_mib));
  v1::SetBudgetResponse response;
  grpc::Status status;
  {
    CancelOnInterrupt cancel(&call);
    status = stub->SetBudget(&call, request, &response);
  }
  if (!status.ok()) return ReportRpcError(ctx, "budget", "SetBudget", status);
  // Whole slots: the size in effect may be a little under the one asked for.
  if (response.expert_cache_bytes() > 0) {
    *ctx.out << absl::StrFormat("%s: expert cache %.1f MiB (%d bytes) in effect\n",
                                options.device, response.expert_cache_bytes() / 1048576.0,
                                response.expert_cache_bytes());
  } else {
    *ctx.out << absl::StrFormat("%s: expert cache %d MiB in effect\n", options.device,
                                response.expert_cache_mib());
  }
  ctx.out->flush();
  return kExitOk;
}

}  // namespace moetier::client
