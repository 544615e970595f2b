#include "commands/status_command.h"

#include <chrono>
#include <ostream>
#include <thread>

#include "absl/strings/str_format.h"
#include "connection/finish_stream.h"
#include "connection/interrupt.h"
#include "google/protobuf/util/json_util.h"
#include "moetier/v1/moetier.grpc.pb.h"

namespace moetier::client {
namespace {

constexpr const char* kClearScreen = "\x1b[H\x1b[2J";

// Prints one update of --watch.
void Show(const StatusOptions& options, const CommandContext& ctx, const v1::Status& status) {
  std::ostream& out = *ctx.out;
  if (options.json) {
    out << StatusJson(status, /*one_line=*/true);
  } else if (ctx.out_is_terminal) {
    out << kClearScreen << RenderStatusMap(status, ctx.map_style)
        << absl::StrFormat("\nevery %d ms; Ctrl-C to stop\n", options.interval_ms);
  } else {
    out << RenderStatusMap(status, ctx.map_style) << '\n';
  }
  out.flush();
}

// For a daemon without WatchStatus: GetStatus every interval.
int PollStatus(const StatusOptions& options, const CommandContext& ctx) {
  DeferInterrupt defer;
  for (int64_t n = 0; options.count == 0 || n < options.count; ++n) {
    if (n > 0) {
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(options.interval_ms);
      while (std::chrono::steady_clock::now() < until && !Interrupted()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    if (Interrupted()) return kExitOk;
    v1::Status status;
    const grpc::Status rpc = FetchStatus(ctx, &status);
    if (!rpc.ok()) {
      if (Interrupted()) return kExitOk;
      return ReportRpcError(ctx, "status", "GetStatus", rpc);
    }
    Show(options, ctx, status);
  }
  return kExitOk;
}

}  // namespace

grpc::Status FetchStatus(const CommandContext& ctx, v1::Status* status) {
  auto stub = v1::Moetier::NewStub(ctx.channel);
  grpc::ClientContext call;
  ApplyDeadline(&call, ctx.timeout_ms);
  CancelOnInterrupt cancel(&call);
  return stub->GetStatus(&call, v1::GetStatusRequest(), status);
}

std::string StatusJson(const v1::Status& status, bool one_line) {
  google::protobuf::util::JsonPrintOptions json_options;
  json_options.add_whitespace = !one_line;
  json_options.always_print_primitive_fields = true;
  json_options.preserve_proto_field_names = true;
  std::string json;
  // Printing a message we built ourselves cannot fail.
  (void)google::protobuf::util::MessageToJsonString(status, &json, json_options);
  if (json.empty() || json.back() != '\n') json.push_back('\n');
  return json;
}

int RunStatus(const StatusOptions& options, const CommandContext& ctx) {
  if (!options.watch) {
    v1::Status status;
    if (grpc::Status rpc = FetchStatus(ctx, &status); !rpc.ok()) {
      return ReportRpcError(ctx, "status", "GetStatus", rpc);
    }
    *ctx.out << (options.json ? StatusJson(status, /*one_line=*/false)
                              : RenderStatusMap(status, ctx.map_style));
    ctx.out->flush();
    return kExitOk;
  }

  auto stub = v1::Moetier::NewStub(ctx.channel);
  grpc::ClientContext call;
  v1::WatchStatusRequest request;
  request.set_interval_ms(options.interval_ms);
  int64_t shown = 0;
  grpc::Status rpc;
  {
    CancelOnInterrupt cancel(&call);
    std::unique_ptr<grpc::ClientReader<v1::Status>> reader = stub->WatchStatus(&call, request);
    v1::Status status;
    while (reader->Read(&status)) {
      Show(options, ctx, status);
      if (options.count > 0 && ++shown >= options.count) {
        call.TryCancel();
        break;
      }
    }
    rpc = FinishStream(&call, reader.get());
  }
  if (options.count > 0 && shown >= options.count) return kExitOk;
  if (Interrupted()) return kExitOk;  // Ctrl-C is how a watch ends
  if (rpc.error_code() == grpc::StatusCode::UNIMPLEMENTED) return PollStatus(options, ctx);
  if (!rpc.ok()) return ReportRpcError(ctx, "status", "WatchStatus", rpc);
  return kExitOk;
}

}  // namespace moetier::client
