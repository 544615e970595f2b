// `moetier serve` (and `moetier run --serve`): a private daemon with its
// OpenAI/Anthropic-compatible HTTP API on loopback, for trying the API
// without installing the service. Prints where to point clients, serves
// until SIGINT or SIGTERM, then stops the daemon and removes its directory.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "cli/command_line.h"
#include "commands/command_context.h"

namespace moetier::client {

// Exit status 0 after Ctrl-C or SIGTERM; 1 when the daemon cannot start
// (a port in use among others: its "cannot start the HTTP API" line is
// printed) or ends while serving. The caller holds a DeferInterrupt.
int ServeHttpApi(const RunOptions& options, const CommandContext& ctx);

// The port of moetierd's "serving the HTTP API on HOST:PORT (port N)" line
// in `log`, the last one if several; nullopt when there is none.
std::optional<int> HttpPortFromLog(std::string_view log);

// "HOST:PORT", with an IPv6 address in brackets ("[::1]:8080").
std::string HostAndPort(std::string_view host, int port);

// The model's name as moetierd's /v1/models lists it: the file's name
// without ".gguf" and without a "-00001-of-N" shard suffix.
std::string ServedModelId(std::string_view model_path);

}  // namespace moetier::client
