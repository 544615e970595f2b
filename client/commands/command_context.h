// What every subcommand gets: the daemon's channel, the streams to use and
// how to render. Commands return the process exit status.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>

#include "connection/target.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"
#include "render/status_map.h"

namespace moetier::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInterrupted = 130;

struct CommandContext {
  Target target;
  std::shared_ptr<grpc::Channel> channel;
  int64_t timeout_ms = 0;  // deadline of each call; 0: none
  std::istream* in = nullptr;
  int in_fd = -1;  // stdin's descriptor, which the chat polls (chat/line_input.h); -1: use `in`
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  bool in_is_terminal = false;
  bool out_is_terminal = false;
  bool err_is_terminal = false;
  MapStyle map_style;
};

// Writes "moetier COMMAND: " + `message` as one line to ctx.err.
void PrintError(const CommandContext& ctx, std::string_view command, std::string_view message);

// The RPC error as one actionable line (see rpc_error.h); returns the exit
// status for it: 130 when the user interrupted the call, else 1.
int ReportRpcError(const CommandContext& ctx, std::string_view command, std::string_view rpc,
                   const grpc::Status& status);

}  // namespace moetier::client
