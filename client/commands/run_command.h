// `moetier run`: a private daemon and worker for one-off use. Starts
// moetierd on sockets in a temporary directory, waits until it serves, then
// chats (no prompt given) or runs one generation and prints the status map,
// then stops it and cleans up.
#pragma once

#include "cli/command_line.h"
#include "commands/command_context.h"

namespace moetier::client {

inline constexpr int32_t kRunDefaultMaxNewTokens = 32;

// `ctx` supplies the streams and the map style; its target and channel are
// ignored (the private daemon's are used).
int RunPrivateDaemon(const RunOptions& options, const CommandContext& ctx);

}  // namespace moetier::client
