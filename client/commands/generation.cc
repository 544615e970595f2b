#include "commands/generation.h"

#include <istream>
#include <iterator>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "connection/finish_stream.h"
#include "connection/interrupt.h"
#include "connection/rpc_error.h"
#include "moetier/v1/moetier.grpc.pb.h"

namespace moetier::client {
namespace {

const char* StopReasonText(v1::StopReason reason) {
  switch (reason) {
    case v1::STOP_REASON_END_OF_GENERATION:
      return "end of generation";
    case v1::STOP_REASON_MAX_TOKENS:
      return "max tokens";
    case v1::STOP_REASON_CANCELLED:
      return "cancelled";
    case v1::STOP_REASON_ERROR:
      return "error";
    case v1::STOP_REASON_CONTEXT_FULL:
      return "context full";
    default:
      return "unspecified";
  }
}

// Ends the output on a line of its own, so the shell prompt does not follow
// the text.
void EndLine(const std::string& text, std::ostream& out) {
  if (!text.empty() && text.back() != '\n') out << '\n';
  out.flush();
}

}  // namespace

StreamOutcome StreamText(grpc::ClientContext* call,
                         grpc::ClientReader<v1::GenerateResponse>* reader, std::ostream& out) {
  StreamOutcome outcome;
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (!response.text().empty()) {
      out << response.text();
      out.flush();
      outcome.text += response.text();
    }
    if (response.has_final_stats()) outcome.stats = response.final_stats();
  }
  outcome.status = FinishStream(call, reader);
  return outcome;
}

std::string FormatGenerationStats(const v1::GenerationStats& s) {
  // Cached prompt tokens were kept from the worker's previous request.
  const std::string cached =
      s.cached_prompt_tokens() > 0 ? absl::StrFormat(" (%d cached)", s.cached_prompt_tokens()) : "";
  return absl::StrFormat(
      "prompt %d tokens%s, generated %d (%s); prefill %.1f tok/s, decode %.1f tok/s; "
      "seed %d; worker %s; queued %.1f ms",
      s.prompt_tokens(), cached, s.generated_tokens(), StopReasonText(s.stop_reason()),
      s.prefill_tokens_per_s(), s.decode_tokens_per_s(), s.seed(),
      s.worker_device().empty() ? "?" : s.worker_device(), s.queue_wait_ms());
}

int RunGenerate(const GenerateOptions& options, const CommandContext& ctx) {
  v1::GenerateRequest request = options.request;
  if (!options.prompt_given && request.prompt_token_ids_size() == 0) {
    if (ctx.in_is_terminal) {
      PrintError(ctx, "generate", "no prompt; give it as words, with --prompt TEXT, or on stdin");
      return kExitUsage;
    }
    request.set_prompt(std::string(std::istreambuf_iterator<char>(*ctx.in), {}));
  }
  auto stub = v1::Moetier::NewStub(ctx.channel);
  grpc::ClientContext call;
  ApplyDeadline(&call, ctx.timeout_ms);
  StreamOutcome outcome;
  {
    CancelOnInterrupt cancel(&call);
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub->Generate(&call, request);
    outcome = StreamText(&call, reader.get(), *ctx.out);
  }
  EndLine(outcome.text, *ctx.out);
  if (!outcome.status.ok()) return ReportRpcError(ctx, "generate", "Generate", outcome.status);
  if (options.stats && outcome.stats.has_value()) {
    *ctx.err << FormatGenerationStats(*outcome.stats) << std::endl;
  }
  return kExitOk;
}

namespace {

// One turn: sends the conversation, streams the reply.
StreamOutcome ChatTurn(const ChatOptions& options, const std::vector<v1::ChatMessage>& history,
                       const CommandContext& ctx) {
  v1::ChatRequest request = options.request;
  for (const v1::ChatMessage& m : history) *request.add_messages() = m;
  auto stub = v1::Moetier::NewStub(ctx.channel);
  grpc::ClientContext call;
  ApplyDeadline(&call, ctx.timeout_ms);
  CancelOnInterrupt cancel(&call);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub->Chat(&call, request);
  return StreamText(&call, reader.get(), *ctx.out);
}

v1::ChatMessage Message(const char* role, std::string content) {
  v1::ChatMessage m;
  m.set_role(role);
  m.set_content(std::move(content));
  return m;
}

}  // namespace

int RunChat(const ChatOptions& options, const CommandContext& ctx) {
  std::vector<v1::ChatMessage> history;
  if (!options.system.empty()) history.push_back(Message("system", options.system));

  if (options.message.has_value()) {
    history.push_back(Message("user", *options.message));
    const StreamOutcome outcome = ChatTurn(options, history, ctx);
    EndLine(outcome.text, *ctx.out);
    if (!outcome.status.ok()) return ReportRpcError(ctx, "chat", "Chat", outcome.status);
    if (options.stats && outcome.stats.has_value()) {
      *ctx.err << FormatGenerationStats(*outcome.stats) << std::endl;
    }
    return kExitOk;
  }

  const bool interactive = ctx.in_is_terminal;
  if (interactive) {
    *ctx.err << "chatting with moetierd at " << ctx.target.where
             << "; /reset forgets the conversation, /exit or Ctrl-D ends it" << std::endl;
  }
  std::string line;
  while (true) {
    if (interactive) {
      *ctx.out << "> ";
      ctx.out->flush();
    }
    if (!std::getline(*ctx.in, line)) {
      if (interactive) *ctx.out << '\n';  // Ctrl-D left the cursor after the prompt
      break;
    }
    const std::string text(absl::StripAsciiWhitespace(line));
    if (text.empty()) continue;
    if (text == "/exit" || text == "/quit") break;
    if (text == "/reset") {
      history.resize(options.system.empty() ? 0 : 1);
      if (interactive) *ctx.err << "(conversation forgotten)" << std::endl;
      continue;
    }
    history.push_back(Message("user", text));
    const StreamOutcome outcome = ChatTurn(options, history, ctx);
    EndLine(outcome.text, *ctx.out);
    if (!outcome.status.ok()) {
      history.pop_back();
      const bool stopped_by_user =
          outcome.status.error_code() == grpc::StatusCode::CANCELLED && Interrupted();
      if (interactive && stopped_by_user) {
        *ctx.err << "(reply stopped)" << std::endl;
        ClearInterrupt();
        continue;
      }
      const int exit_status = ReportRpcError(ctx, "chat", "Chat", outcome.status);
      // At a terminal a rejected message need not end the conversation; a
      // daemon that went away does, and so does any error in a script.
      if (!interactive || DaemonUnreachable(outcome.status, ctx.target)) return exit_status;
      continue;
    }
    history.push_back(Message("assistant", outcome.text));
    if (options.stats && outcome.stats.has_value()) {
      *ctx.err << FormatGenerationStats(*outcome.stats) << std::endl;
    }
  }
  return kExitOk;
}

}  // namespace moetier::client
