// The start of `moetier run` and `moetier serve`: find moetierd, the worker
// and the model, start a private daemon and wait until it serves.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command_line.h"
#include "commands/command_context.h"
#include "run/private_daemon.h"

namespace moetier::client {

struct PrivateSession {
  std::unique_ptr<PrivateDaemon> daemon;
  std::string model_path;
  CommandContext ctx;  // reaches the daemon's socket
};

// Starts the daemon with `options` plus `extra_daemon_args` and waits until
// grpc.health.v1 says SERVING. On failure (or Ctrl-C) it prints why as
// "moetier COMMAND: ...", stops the daemon and returns the exit status;
// kExitOk means `session` is filled. The caller must hold a DeferInterrupt.
int StartPrivateSession(const RunOptions& options, const std::vector<std::string>& extra_daemon_args,
                        std::string_view command, const CommandContext& ctx,
                        PrivateSession* session);

// Stops the daemon; reports an unclean end with its log tail and turns an
// ok `exit_status` into an error then.
int StopPrivateSession(PrivateSession& session, std::string_view command, int exit_status);

// "2026-01-01 10:00:00.000 I moetierd[123] message" -> "message".
std::string WithoutLogPrefix(const std::string& line);

// The daemon's last error line in `log` ("E moetierd[...]"), without its
// prefix; empty when there is none.
std::string LastLoggedError(const std::string& log);

}  // namespace moetier::client
