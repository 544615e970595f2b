#include "commands/run_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <thread>

#include "absl/strings/str_format.h"
#include "chat/chat_session.h"
#include "commands/chat_loop.h"
#include "commands/generation.h"
#include "commands/status_command.h"
#include "connection/health_check.h"
#include "connection/interrupt.h"
#include "run/executables.h"
#include "run/model_cache.h"
#include "run/private_daemon.h"

namespace moetier::client {
namespace {

constexpr int kPollIntervalMs = 200;
constexpr int kHealthTimeoutMs = 2000;
constexpr int kStopGraceMs = 30000;
constexpr size_t kProgressWidth = 70;

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// Whether a daemon without the health service is ready: it answers
// GetStatus and one of its workers is ready.
bool ReadyByStatus(const CommandContext& ctx) {
  v1::Status status;
  if (!FetchStatus(ctx, &status).ok()) return false;
  for (const v1::WorkerStatus& w : status.workers()) {
    if (w.state() == "ready") return true;
  }
  return false;
}

// "2026-01-01 10:00:00.000 I moetierd[123] message" -> "message".
std::string WithoutLogPrefix(const std::string& line) {
  const size_t tag = line.find(" moetierd[");
  if (tag == std::string::npos) return line;
  const size_t end = line.find("] ", tag);
  return end == std::string::npos ? line : line.substr(end + 2);
}

// Shows what the daemon is doing while we wait: its last log line.
class Progress {
 public:
  explicit Progress(const CommandContext& ctx) : ctx_(ctx) {}

  void Update(double elapsed_s, const std::string& last_line) {
    std::string line = WithoutLogPrefix(last_line);
    if (ctx_.err_is_terminal) {
      if (line.size() > kProgressWidth) line = line.substr(0, kProgressWidth - 3) + "...";
      *ctx_.err << absl::StrFormat("\r\x1b[K[%5.1f s] %s", elapsed_s, line) << std::flush;
      drawn_ = true;
    } else if (last_line != shown_) {
      *ctx_.err << absl::StrFormat("moetier run: [%.1f s] %s", elapsed_s, line) << std::endl;
    }
    shown_ = last_line;
  }

  void Done() {
    if (drawn_) *ctx_.err << "\r\x1b[K" << std::flush;
    drawn_ = false;
  }

 private:
  const CommandContext& ctx_;
  std::string shown_;
  bool drawn_ = false;
};

// The prompt's continuation, then the map.
int GenerateOnce(const RunOptions& options, const CommandContext& ctx) {
  GenerateOptions generate = options.generate;
  if (generate.request.max_new_tokens() == 0) {
    generate.request.set_max_new_tokens(kRunDefaultMaxNewTokens);
  }
  const int exit_status = RunGenerate(generate, ctx);
  if (exit_status != kExitOk || Interrupted()) return exit_status;
  v1::Status status;
  if (grpc::Status rpc = FetchStatus(ctx, &status); !rpc.ok()) {
    return ReportRpcError(ctx, "run", "GetStatus", rpc);
  }
  *ctx.out << '\n' << RenderStatusMap(status, ctx.map_style);
  ctx.out->flush();
  return kExitOk;
}

int Chat(const RunOptions& options, const std::string& model, const CommandContext& ctx) {
  v1::ChatRequest settings;
  *settings.mutable_sampling() = options.generate.request.sampling();
  settings.set_max_new_tokens(options.generate.request.max_new_tokens());
  settings.set_enable_thinking(options.think);
  ChatSession session(settings, options.system);
  ChatLoopOptions loop;
  loop.command = "run";
  loop.banner = absl::StrFormat(
      "moetier run: chatting with %s; /help for the commands, /bye or Ctrl-D to end", model);
  loop.full_stats = options.generate.stats;
  return RunChatLoop(session, loop, ctx);
}

}  // namespace

int RunPrivateDaemon(const RunOptions& options, const CommandContext& ctx) {
  // Ctrl-C must still stop the daemon and remove its directory.
  DeferInterrupt defer;
  std::ostream& err = *ctx.err;
  const auto fail = [&ctx](std::string_view message) {
    PrintError(ctx, "run", message);
    return kExitError;
  };

  const std::string self_dir = SelfDirectory();
  const char* path_env = std::getenv("PATH");
  const std::string moetierd = !options.moetierd_path.empty()
                                   ? options.moetierd_path
                                   : FindExecutable("moetierd", self_dir, {"daemon"}, path_env);
  if (moetierd.empty()) {
    return fail(
        "cannot find moetierd next to moetier, in the build tree or in PATH; build it (cmake "
        "--build build --target moetierd moetier-worker) or pass --moetierd PATH");
  }
  if (access(moetierd.c_str(), X_OK) != 0) {
    return fail(
        absl::StrFormat("%s is not an executable program: %s", moetierd, std::strerror(errno)));
  }
  std::string worker = options.worker_path;
  if (worker.empty()) {
    worker = FindExecutable("moetier-worker", DirectoryOf(moetierd), {"worker"}, nullptr);
  }
  if (worker.empty()) worker = FindExecutable("moetier-worker", self_dir, {"worker"}, path_env);

  std::string model = options.model_path;
  if (model.empty()) {
    const std::string synth =
        !options.synth_path.empty()
            ? options.synth_path
            : FindExecutable("moetier-synth", self_dir, {"tools/synth"}, path_env);
    absl::StatusOr<std::string> cached = EnsureSyntheticModel(
        synth, CacheDirectory(std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")), err);
    if (!cached.ok()) return fail(std::string(cached.status().message()));
    model = *cached;
  }
  if (!Exists(model)) {
    const std::string hint =
        options.model_from_word ? " (the first word is the model; give a prompt with -p)" : "";
    return fail(
        absl::StrFormat("cannot open the model %s: %s%s", model, std::strerror(errno), hint));
  }
  if (Interrupted()) return kExitInterrupted;

  PrivateDaemonOptions daemon_options;
  daemon_options.moetierd_path = moetierd;
  daemon_options.worker_path = worker;
  daemon_options.model_path = model;
  daemon_options.extra_args = options.daemon_args;
  if (options.threads > 0) {
    daemon_options.extra_args.push_back(
        absl::StrFormat("--worker_extra_args=--threads=%d", options.threads));
  }
  if (options.ctx_tokens > 0) {
    daemon_options.extra_args.push_back(
        absl::StrFormat("--worker_extra_args=--ctx=%d", options.ctx_tokens));
  }
  absl::StatusOr<std::unique_ptr<PrivateDaemon>> started = PrivateDaemon::Start(daemon_options);
  if (!started.ok()) return fail(std::string(started.status().message()));
  PrivateDaemon& daemon = **started;
  err << absl::StrFormat("moetier run: started %s (pid %d) with %s; sockets and log in %s",
                         moetierd, daemon.pid(), model, daemon.directory())
      << std::endl;

  CommandContext daemon_ctx = ctx;
  daemon_ctx.target = {Target::Kind::kUnix, daemon.socket_path()};
  daemon_ctx.channel = nullptr;

  // --- wait until it serves --------------------------------------------------
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::seconds(options.start_timeout_s);
  Progress progress(ctx);
  bool serving = false;
  while (!serving) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (Interrupted()) {
      progress.Done();
      err << "moetier run: interrupted; stopping moetierd" << std::endl;
      daemon.Stop(kStopGraceMs);
      return kExitInterrupted;
    }
    if (std::optional<std::string> how = daemon.Ended(); how.has_value()) {
      progress.Done();
      return fail(absl::StrFormat("moetierd %s before serving; the end of its log:\n%s", *how,
                                  daemon.LogTail(20)));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      progress.Done();
      const std::string how = daemon.Stop(kStopGraceMs);
      return fail(absl::StrFormat(
          "moetierd did not serve within %d s (--start-timeout-s); stopped it (%s); the end of "
          "its log:\n%s",
          options.start_timeout_s, how, daemon.LogTail(20)));
    }
    // The socket appears once the front door listens; until then there is
    // nothing to ask.
    if (Exists(daemon.socket_path())) {
      if (daemon_ctx.channel == nullptr) daemon_ctx.channel = CreateChannel(daemon_ctx.target);
      ServingState state = ServingState::kUnknown;
      const grpc::Status health = CheckHealth(daemon_ctx.channel, kHealthTimeoutMs, &state);
      if (health.ok()) {
        serving = state == ServingState::kServing;
      } else if (health.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        serving = ReadyByStatus(daemon_ctx);
      }
    }
    if (!serving) {
      std::string last = daemon.LogTail(1);
      progress.Update(elapsed, last.empty() ? "starting moetierd" : last);
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollIntervalMs));
    }
  }
  progress.Done();
  err << absl::StrFormat(
             "moetier run: moetierd serves at %s after %.1f s", daemon.socket_path(),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count())
      << std::endl;

  int exit_status =
      options.one_shot ? GenerateOnce(options, daemon_ctx) : Chat(options, model, daemon_ctx);

  // --- stop ----------------------------------------------------------------------
  err << "moetier run: stopping moetierd" << std::endl;
  daemon_ctx.channel.reset();
  const std::string how = daemon.Stop(kStopGraceMs);
  if (!daemon.ExitedCleanly()) {
    err << absl::StrFormat("moetier run: moetierd %s; the end of its log:\n%s", how,
                           daemon.LogTail(20))
        << std::endl;
    if (exit_status == kExitOk) exit_status = kExitError;
  }
  if (Interrupted() && exit_status == kExitOk) exit_status = kExitInterrupted;
  return exit_status;
}

}  // namespace moetier::client
