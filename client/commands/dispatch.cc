#include "commands/dispatch.h"

#include <ostream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "cli/command_line.h"
#include "commands/bench_command.h"
#include "commands/budget_command.h"
#include "commands/command_context.h"
#include "commands/generation.h"
#include "commands/run_command.h"
#include "commands/status_command.h"
#include "commands/tokens.h"

#ifndef MOETIER_VERSION
#define MOETIER_VERSION "unknown"
#endif

namespace moetier::client {
namespace {

MapStyle StyleFor(const GlobalOptions& global, const ClientIo& io) {
  MapStyle style;
  const bool dumb_terminal = io.env_term != nullptr && std::string_view(io.env_term) == "dumb";
  const bool no_color = io.env_no_color != nullptr && io.env_no_color[0] != '\0';
  style.color =
      global.color == ColorMode::kAlways ||
      (global.color == ColorMode::kAuto && io.out_is_terminal && !dumb_terminal && !no_color);
  if (io.env_locale != nullptr) {
    const std::string locale = absl::AsciiStrToLower(io.env_locale);
    style.unicode =
        style.color && (absl::StrContains(locale, "utf-8") || absl::StrContains(locale, "utf8"));
  }
  style.width = global.width >= 0 ? global.width : (io.out_is_terminal ? io.terminal_columns : 0);
  return style;
}

}  // namespace

int RunMoetier(const std::vector<std::string>& args, const ClientIo& io) {
  absl::StatusOr<CommandLine> parsed = ParseCommandLine(args);
  if (!parsed.ok()) {
    *io.err << "moetier: " << parsed.status().message() << std::endl;
    return kExitUsage;
  }
  const CommandLine& cl = *parsed;
  if (cl.version) {
    *io.out << "moetier " << MOETIER_VERSION << '\n';
    return kExitOk;
  }
  if (cl.help) {
    *io.out << Usage(cl.command == Command::kHelp ? cl.help_topic : cl.command);
    return kExitOk;
  }

  CommandContext ctx;
  ctx.timeout_ms = cl.global.timeout_ms;
  ctx.in = io.in;
  ctx.in_fd = io.in_fd;
  ctx.out = io.out;
  ctx.err = io.err;
  ctx.in_is_terminal = io.in_is_terminal;
  ctx.out_is_terminal = io.out_is_terminal;
  ctx.err_is_terminal = io.err_is_terminal;
  ctx.map_style = StyleFor(cl.global, io);
  if (cl.command == Command::kRun || cl.command == Command::kServe) {
    return RunPrivateDaemon(cl.run, ctx);
  }

  ctx.target = ResolveTarget(cl.global, io.env_socket);
  ctx.channel = CreateChannel(ctx.target);
  switch (cl.command) {
    case Command::kGenerate:
      return RunGenerate(cl.generate, ctx);
    case Command::kChat:
      return RunChat(cl.chat, ctx);
    case Command::kScore:
      return RunScore(cl.score, ctx);
    case Command::kTokenize:
      return RunTokenize(cl.tokenize, ctx);
    case Command::kDetokenize:
      return RunDetokenize(cl.detokenize, ctx);
    case Command::kStatus:
      return RunStatus(cl.status, ctx);
    case Command::kBench:
      return RunBench(cl.bench, ctx);
    case Command::kBudget:
      return RunBudget(cl.budget, ctx);
    case Command::kRun:
    case Command::kServe:
    case Command::kHelp:
    case Command::kNone:
      break;
  }
  *io.out << Usage(Command::kNone);
  return kExitUsage;
}

}  // namespace moetier::client
