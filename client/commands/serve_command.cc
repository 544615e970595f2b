#include "commands/serve_command.h"

#include <poll.h>

#include <chrono>
#include <filesystem>
#include <ostream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "base/model_id.h"
#include "commands/private_session.h"
#include "connection/interrupt.h"

namespace moetier::client {
namespace {

constexpr const char* kCommand = "serve";
constexpr int kPollIntervalMs = 200;
// moetierd logs the HTTP line before its gRPC health says SERVING; the wait
// only covers a log written late.
constexpr int kPortLineWaitMs = 5000;
constexpr int kLogTailLines = 20;
// Every line of the log (the worker writes there too).
constexpr int kWholeLogLines = 1 << 20;

std::optional<int> WaitForHttpPort(const PrivateDaemon& daemon) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kPortLineWaitMs);
  while (true) {
    if (std::optional<int> port = HttpPortFromLog(daemon.LogTail(kWholeLogLines))) return port;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollIntervalMs));
  }
}

void PrintWhereToPoint(const CommandContext& ctx, const std::string& base_url,
                       const std::string& model_id, const ServeOptions& serve) {
  std::ostream& out = *ctx.out;
  out << absl::StrFormat("moetier serve: OpenAI-compatible API at %s/v1 (model \"%s\")\n",
                         base_url, model_id);
  out << absl::StrFormat("status page %s/ , metrics %s/metrics\n", base_url, base_url);
  if (!serve.api_keys_file.empty()) {
    out << absl::StrFormat("Requests need one of the keys in %s (Authorization: Bearer KEY).\n",
                           serve.api_keys_file);
  }
  out << "Ctrl-C stops it." << std::endl;
}

// Until a signal (true) or the daemon's end (false).
bool WaitForInterrupt(PrivateDaemon& daemon) {
  while (!Interrupted()) {
    if (daemon.Ended().has_value()) return false;
    pollfd wake{InterruptWakeFd(), POLLIN, 0};
    poll(&wake, 1, kPollIntervalMs);
  }
  return true;
}

}  // namespace

std::optional<int> HttpPortFromLog(std::string_view log) {
  constexpr std::string_view kLine = "serving the HTTP API on ";
  constexpr std::string_view kPort = " (port ";
  std::optional<int> found;
  for (size_t at = log.find(kLine); at != std::string_view::npos; at = log.find(kLine, at + 1)) {
    const size_t line_end = std::min(log.find('\n', at), log.size());
    const std::string_view line = log.substr(at, line_end - at);
    const size_t port_at = line.find(kPort);
    if (port_at == std::string_view::npos) continue;
    const std::string_view digits = line.substr(port_at + kPort.size());
    const size_t close = digits.find(')');
    int port = 0;
    if (close != std::string_view::npos && absl::SimpleAtoi(std::string(digits.substr(0, close)), &port) &&
        port > 0 && port <= 65535) {
      found = port;
    }
  }
  return found;
}

std::string HostAndPort(std::string_view host, int port) {
  const bool ipv6 = host.find(':') != std::string_view::npos;
  return ipv6 ? absl::StrFormat("[%s]:%d", host, port) : absl::StrFormat("%s:%d", host, port);
}

std::string ServedModelId(std::string_view model_path) { return ModelIdFromPath(model_path); }

int ServeHttpApi(const RunOptions& options, const CommandContext& ctx) {
  const ServeOptions& serve = options.serve;
  std::vector<std::string> daemon_args = {
      "--http_listen_address=" + HostAndPort(serve.host, static_cast<int>(serve.port))};
  if (!serve.api_keys_file.empty()) {
    std::error_code ignored;
    const std::filesystem::path keys = std::filesystem::absolute(serve.api_keys_file, ignored);
    daemon_args.push_back("--api_keys_file=" + keys.string());
  }
  PrivateSession session;
  if (int status = StartPrivateSession(options, daemon_args, kCommand, ctx, &session);
      status != kExitOk) {
    return status;
  }
  PrivateDaemon& daemon = *session.daemon;
  const std::optional<int> port = WaitForHttpPort(daemon);
  if (!port.has_value()) {
    PrintError(ctx, kCommand,
               absl::StrFormat("moetierd serves but logged no \"serving the HTTP API\" line; the "
                               "end of its log:\n%s",
                               daemon.LogTail(kLogTailLines)));
    return StopPrivateSession(session, kCommand, kExitError);
  }
  PrintWhereToPoint(ctx, "http://" + HostAndPort(serve.host, *port),
                    ServedModelId(session.model_path), serve);

  if (!WaitForInterrupt(daemon)) {
    PrintError(ctx, kCommand,
               absl::StrFormat("moetierd %s while serving; the end of its log:\n%s",
                               daemon.Ended().value_or("ended"), daemon.LogTail(kLogTailLines)));
    return kExitError;
  }
  return StopPrivateSession(session, kCommand, kExitOk);
}

}  // namespace moetier::client
