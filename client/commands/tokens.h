// `moetier score`, `tokenize` and `detokenize`: token ids in or out.
#pragma once

#include "cli/command_line.h"
#include "commands/command_context.h"

namespace moetier::client {

int RunScore(const ScoreOptions& options, const CommandContext& ctx);
int RunTokenize(const TokenizeOptions& options, const CommandContext& ctx);
int RunDetokenize(const DetokenizeOptions& options, const CommandContext& ctx);

}  // namespace moetier::client
