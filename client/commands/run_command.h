// `moetier run`: a private daemon and worker for one-off use. Starts
// moetierd on sockets in a temporary directory, waits until it serves, runs
// one generation, prints the status map, then stops it and cleans up.
#pragma once

#include "cli/command_line.h"
#include "commands/command_context.h"

namespace moetier::client {

inline constexpr const char* kRunDefaultPrompt = "The quick brown fox";
inline constexpr int32_t kRunDefaultMaxNewTokens = 32;

// `ctx` supplies the streams and the map style; its target and channel are
// ignored (the private daemon's are used).
int RunPrivateDaemon(const RunOptions& options, const CommandContext& ctx);

}  // namespace moetier::client
