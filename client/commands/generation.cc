#include "commands/generation.h"

#include <chrono>
#include <istream>
#include <iterator>

#include "absl/strings/str_format.h"
#include "chat/chat_session.h"
#include "commands/chat_loop.h"
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
  std::chrono::steady_clock::time_point first_token;
  while (reader->Read(&response)) {
    if (response.token_ids_size() > 0) {
      const auto now = std::chrono::steady_clock::now();
      if (outcome.tokens == 0) first_token = now;
      outcome.tokens += response.token_ids_size();
      outcome.seconds_since_first_token = std::chrono::duration<double>(now - first_token).count();
    }
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

StreamOutcome StreamChat(const v1::ChatRequest& request, const CommandContext& ctx) {
  auto stub = v1::Moetier::NewStub(ctx.channel);
  grpc::ClientContext call;
  ApplyDeadline(&call, ctx.timeout_ms);
  CancelOnInterrupt cancel(&call);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub->Chat(&call, request);
  return StreamText(&call, reader.get(), *ctx.out);
}

int RunChat(const ChatOptions& options, const CommandContext& ctx) {
  if (!options.message.has_value()) {
    ChatSession session(options.request, options.system);
    ChatLoopOptions loop;
    loop.command = "chat";
    loop.banner = "chatting with moetierd at " + ctx.target.where +
                  "; /help for the commands, /bye or Ctrl-D to end";
    loop.full_stats = options.stats;
    return RunChatLoop(session, loop, ctx);
  }
  v1::ChatRequest request = options.request;
  const auto add = [&request](const char* role, const std::string& content) {
    v1::ChatMessage* m = request.add_messages();
    m->set_role(role);
    m->set_content(content);
  };
  if (!options.system.empty()) add("system", options.system);
  add("user", *options.message);
  const StreamOutcome outcome = StreamChat(request, ctx);
  EndLine(outcome.text, *ctx.out);
  if (!outcome.status.ok()) return ReportRpcError(ctx, "chat", "Chat", outcome.status);
  if (options.stats && outcome.stats.has_value()) {
    *ctx.err << FormatGenerationStats(*outcome.stats) << std::endl;
  }
  return kExitOk;
}

}  // namespace moetier::client
