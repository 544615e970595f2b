// `moetier generate` and `moetier chat`: stream generated text as it
// arrives; Ctrl-C cancels the call.
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "cli/command_line.h"
#include "commands/command_context.h"
#include "grpcpp/support/sync_stream.h"
#include "moetier/v1/moetier.pb.h"

namespace moetier::client {

struct StreamOutcome {
  grpc::Status status;
  std::string text;  // everything written
  std::optional<v1::GenerationStats> stats;
  // Counted here too, for a stream cut short before its final stats.
  int32_t tokens = 0;
  double seconds_since_first_token = 0;
};

// Reads the stream to its end, writing each piece to `out` as it arrives.
StreamOutcome StreamText(grpc::ClientContext* call,
                         grpc::ClientReader<v1::GenerateResponse>* reader, std::ostream& out);

// One Chat call: streams the answer to ctx.out; Ctrl-C cancels the call.
StreamOutcome StreamChat(const v1::ChatRequest& request, const CommandContext& ctx);

// "prompt 12 tokens, generated 32 (max tokens); prefill 150.2 tok/s, ..."
std::string FormatGenerationStats(const v1::GenerationStats& stats);

int RunGenerate(const GenerateOptions& options, const CommandContext& ctx);
int RunChat(const ChatOptions& options, const CommandContext& ctx);

}  // namespace moetier::client
