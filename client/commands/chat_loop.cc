#include "commands/chat_loop.h"

#include <memory>
#include <ostream>

#include "absl/strings/str_format.h"
#include "chat/line_input.h"
#include "commands/generation.h"
#include "connection/interrupt.h"
#include "connection/rpc_error.h"

namespace moetier::client {
namespace {

constexpr const char* kDim = "\x1b[2m";
constexpr const char* kPlain = "\x1b[0m";

std::unique_ptr<LineInput> OpenInput(const CommandContext& ctx) {
  if (ctx.in_fd >= 0) return std::make_unique<FdLineInput>(ctx.in_fd);
  return std::make_unique<StreamLineInput>(ctx.in);
}

void PrintCounts(const StreamOutcome& outcome, bool stopped, const CommandContext& ctx) {
  const bool have_stats = outcome.stats.has_value();
  const int32_t tokens = have_stats ? outcome.stats->generated_tokens() : outcome.tokens;
  double rate = have_stats ? outcome.stats->decode_tokens_per_s() : 0.0;
  if (!have_stats && outcome.tokens > 1 && outcome.seconds_since_first_token > 0) {
    rate = (outcome.tokens - 1) / outcome.seconds_since_first_token;
  }
  const bool dim = ctx.err_is_terminal && ctx.map_style.color;
  *ctx.err << (dim ? kDim : "") << FormatTurnCounts(tokens, rate, stopped) << (dim ? kPlain : "")
           << std::endl;
}

}  // namespace

std::string FormatTurnCounts(int32_t tokens, double tokens_per_s, bool stopped) {
  std::string counts = absl::StrFormat("%d token%s", tokens, tokens == 1 ? "" : "s");
  if (tokens > 0 && tokens_per_s > 0) absl::StrAppendFormat(&counts, ", %.1f tok/s", tokens_per_s);
  return absl::StrFormat("[%s%s]", counts, stopped ? "; stopped" : "");
}

int RunChatLoop(ChatSession& session, const ChatLoopOptions& options, const CommandContext& ctx) {
  // Ctrl-C at the prompt must reach the loop (through the input) rather than
  // exit at once: `moetier run` still has a daemon to stop.
  DeferInterrupt defer;
  const bool interactive = ctx.in_is_terminal;
  std::unique_ptr<LineInput> input = OpenInput(ctx);
  if (interactive && !options.banner.empty()) *ctx.err << options.banner << std::endl;
  std::string line;
  while (true) {
    if (interactive) {
      *ctx.out << kChatPrompt;
      ctx.out->flush();
    }
    const LineRead read = input->Read(&line);
    if (read != LineRead::kLine) {
      if (interactive) {
        *ctx.out << '\n';  // the cursor was left after the prompt
        ctx.out->flush();
      }
      if (read == LineRead::kEnd) return kExitOk;
      ClearInterrupt();
      return kExitInterrupted;
    }
    const ChatInput in = session.Take(line);
    switch (in.kind) {
      case ChatInput::Kind::kNothing:
        continue;
      case ChatInput::Kind::kQuit:
        return kExitOk;
      case ChatInput::Kind::kInfo:
        *ctx.err << in.text << std::endl;
        continue;
      case ChatInput::Kind::kError:
        PrintError(ctx, options.command, in.text);
        if (!interactive) return kExitUsage;
        continue;
      case ChatInput::Kind::kSend:
        break;
    }

    const StreamOutcome outcome = StreamChat(session.Request(), ctx);
    if (!outcome.text.empty() && outcome.text.back() != '\n') *ctx.out << '\n';
    ctx.out->flush();
    const bool stopped =
        outcome.status.error_code() == grpc::StatusCode::CANCELLED && Interrupted();
    // A Ctrl-C that came as the answer ended was meant for the answer too.
    ClearInterrupt();
    if (!outcome.status.ok() && !stopped) {
      session.DropLastUserMessage();
      const int exit_status = ReportRpcError(ctx, options.command, "Chat", outcome.status);
      // At a terminal a rejected message need not end the conversation; a
      // daemon that went away does, and so does any error in a script.
      if (!interactive || DaemonUnreachable(outcome.status, ctx.target)) return exit_status;
      continue;
    }
    if (stopped && outcome.text.empty()) {
      session.DropLastUserMessage();
    } else {
      session.AddReply(outcome.text);
    }
    if (options.full_stats && outcome.stats.has_value()) {
      *ctx.err << FormatGenerationStats(*outcome.stats) << std::endl;
    } else if (interactive) {
      PrintCounts(outcome, stopped, ctx);
    }
  }
}

}  // namespace moetier::client
