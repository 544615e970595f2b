#include "commands/run_command.h"

#include <ostream>

#include "absl/strings/str_format.h"
#include "chat/chat_session.h"
#include "commands/chat_loop.h"
#include "commands/generation.h"
#include "commands/private_session.h"
#include "commands/serve_command.h"
#include "commands/status_command.h"
#include "connection/interrupt.h"

namespace moetier::client {
namespace {

// The prompt's continuation, then the map.
int GenerateOnce(const RunOptions& options, const CommandContext& ctx) {
  GenerateOptions generate = options.generate;
  if (generate.request.max_new_tokens() == 0) {
    generate.request.set_max_new_tokens(kRunDefaultMaxNewTokens);
  }
  const int exit_status = RunGenerate(generate, ctx);
  if (exit_status != kExitOk || Interrupted()) return exit_status;
  v1::Status status;
  if (grpc::Status rpc = FetchStatus(ctx, &status); !rpc.ok()) {
    return ReportRpcError(ctx, "run", "GetStatus", rpc);
  }
  *ctx.out << '\n' << RenderStatusMap(status, ctx.map_style);
  ctx.out->flush();
  return kExitOk;
}

int Chat(const RunOptions& options, const std::string& model, const CommandContext& ctx) {
  v1::ChatRequest settings;
  *settings.mutable_sampling() = options.generate.request.sampling();
  settings.set_max_new_tokens(options.generate.request.max_new_tokens());
  settings.set_enable_thinking(options.think);
  ChatSession session(settings, options.system);
  ChatLoopOptions loop;
  loop.command = "run";
  loop.banner = absl::StrFormat(
      "moetier run: chatting with %s; /help for the commands, /bye or Ctrl-D to end", model);
  loop.full_stats = options.generate.stats;
  return RunChatLoop(session, loop, ctx);
}

}  // namespace

int RunPrivateDaemon(const RunOptions& options, const CommandContext& ctx) {
  // Ctrl-C must still stop the daemon and remove its directory.
  DeferInterrupt defer;
  if (options.serve.enabled) return ServeHttpApi(options, ctx);
  PrivateSession session;
  if (int status = StartPrivateSession(options, {}, "run", ctx, &session); status != kExitOk) {
    return status;
  }
  int exit_status = options.one_shot ? GenerateOnce(options, session.ctx)
                                     : Chat(options, session.model_path, session.ctx);
  exit_status = StopPrivateSession(session, "run", exit_status);
  if (Interrupted() && exit_status == kExitOk) exit_status = kExitInterrupted;
  return exit_status;
}

}  // namespace moetier::client
