#include "commands/private_session.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <sstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "commands/status_command.h"
#include "connection/health_check.h"
#include "connection/interrupt.h"
#include "run/executables.h"
#include "run/model_cache.h"

namespace moetier::client {
namespace {

constexpr int kPollIntervalMs = 200;
constexpr int kHealthTimeoutMs = 2000;
constexpr int kStopGraceMs = 30000;
constexpr int kLogTailLines = 20;
constexpr int kErrorSearchLines = 200;
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

// Shows what the daemon is doing while we wait: its last log line.
class Progress {
 public:
  Progress(const CommandContext& ctx, std::string_view command) : ctx_(ctx), command_(command) {}

  void Update(double elapsed_s, const std::string& last_line) {
    std::string line = WithoutLogPrefix(last_line);
    if (ctx_.err_is_terminal) {
      if (line.size() > kProgressWidth) line = line.substr(0, kProgressWidth - 3) + "...";
      *ctx_.err << absl::StrFormat("\r\x1b[K[%5.1f s] %s", elapsed_s, line) << std::flush;
      drawn_ = true;
    } else if (last_line != shown_) {
      *ctx_.err << absl::StrFormat("moetier %s: [%.1f s] %s", command_, elapsed_s, line)
                << std::endl;
    }
    shown_ = last_line;
  }

  void Done() {
    if (drawn_) *ctx_.err << "\r\x1b[K" << std::flush;
    drawn_ = false;
  }

 private:
  const CommandContext& ctx_;
  std::string_view command_;
  std::string shown_;
  bool drawn_ = false;
};

// Where the model is: the one given, or the cached synthetic one.
absl::StatusOr<std::string> ResolveModel(const RunOptions& options, const std::string& self_dir,
                                         const char* path_env, std::ostream& err) {
  std::string model = options.model_path;
  if (model.empty()) {
    const std::string synth =
        !options.synth_path.empty()
            ? options.synth_path
            : FindExecutable("moetier-synth", self_dir, {"tools/synth"}, path_env);
    absl::StatusOr<std::string> cached = EnsureSyntheticModel(
        synth, CacheDirectory(std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")), err);
    if (!cached.ok()) return cached.status();
    model = *cached;
  }
  if (!Exists(model)) {
    const std::string hint =
        options.model_from_word ? " (the first word is the model; give a prompt with -p)" : "";
    return absl::NotFoundError(
        absl::StrFormat("cannot open the model %s: %s%s", model, std::strerror(errno), hint));
  }
  return model;
}

// Why the daemon ended before serving: its own error line first, where it
// logged one, then the end of its log.
std::string EndedBeforeServing(const PrivateDaemon& daemon, const std::string& how) {
  const std::string error = LastLoggedError(daemon.LogTail(kErrorSearchLines));
  return absl::StrFormat("moetierd %s before serving%s; the end of its log:\n%s", how,
                         error.empty() ? "" : ": " + error, daemon.LogTail(kLogTailLines));
}

}  // namespace

std::string WithoutLogPrefix(const std::string& line) {
  const size_t tag = line.find(" moetierd[");
  if (tag == std::string::npos) return line;
  const size_t end = line.find("] ", tag);
  return end == std::string::npos ? line : line.substr(end + 2);
}

std::string LastLoggedError(const std::string& log) {
  std::istringstream lines(log);
  std::string found;
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" E moetierd[") != std::string::npos) found = WithoutLogPrefix(line);
  }
  return found;
}

int StartPrivateSession(const RunOptions& options, const std::vector<std::string>& extra_daemon_args,
                        std::string_view command, const CommandContext& ctx,
                        PrivateSession* session) {
  std::ostream& err = *ctx.err;
  const auto fail = [&ctx, command](std::string_view message) {
    PrintError(ctx, command, message);
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

  absl::StatusOr<std::string> model = ResolveModel(options, self_dir, path_env, err);
  if (!model.ok()) return fail(std::string(model.status().message()));
  if (Interrupted()) return kExitInterrupted;

  PrivateDaemonOptions daemon_options;
  daemon_options.moetierd_path = moetierd;
  daemon_options.worker_path = worker;
  daemon_options.model_path = *model;
  daemon_options.extra_args = options.daemon_args;
  daemon_options.extra_args.insert(daemon_options.extra_args.end(), extra_daemon_args.begin(),
                                   extra_daemon_args.end());
  if (options.threads > 0) {
    daemon_options.extra_args.push_back(
        absl::StrFormat("--worker_extra_args=--threads=%d", options.threads));
  }
  if (options.ctx_tokens > 0) {
    daemon_options.extra_args.push_back(
        absl::StrFormat("--worker_extra_args=--ctx=%d", options.ctx_tokens));
  }
  if (!options.rope_scaling.empty()) {
    daemon_options.extra_args.push_back("--worker_extra_args=--rope-scaling=" +
                                        options.rope_scaling);
  }
  if (!options.rope_scale.empty()) {
    daemon_options.extra_args.push_back("--worker_extra_args=--rope-scale=" + options.rope_scale);
  }
  if (options.yarn_orig_ctx > 0) {
    daemon_options.extra_args.push_back(
        absl::StrFormat("--worker_extra_args=--yarn-orig-ctx=%d", options.yarn_orig_ctx));
  }
  absl::StatusOr<std::unique_ptr<PrivateDaemon>> started = PrivateDaemon::Start(daemon_options);
  if (!started.ok()) return fail(std::string(started.status().message()));
  PrivateDaemon& daemon = **started;
  err << absl::StrFormat("moetier %s: started %s (pid %d) with %s; sockets and log in %s",
                         command, moetierd, daemon.pid(), *model, daemon.directory())
      << std::endl;

  CommandContext daemon_ctx = ctx;
  daemon_ctx.target = {Target::Kind::kUnix, daemon.socket_path()};
  daemon_ctx.channel = nullptr;

  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::seconds(options.start_timeout_s);
  Progress progress(ctx, command);
  bool serving = false;
  while (!serving) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (Interrupted()) {
      progress.Done();
      err << absl::StrFormat("moetier %s: interrupted; stopping moetierd", command) << std::endl;
      daemon.Stop(kStopGraceMs);
      return kExitInterrupted;
    }
    if (std::optional<std::string> how = daemon.Ended(); how.has_value()) {
      progress.Done();
      return fail(EndedBeforeServing(daemon, *how));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      progress.Done();
      const std::string how = daemon.Stop(kStopGraceMs);
      return fail(absl::StrFormat(
          "moetierd did not serve within %d s (--start-timeout-s); stopped it (%s); the end of "
          "its log:\n%s",
          options.start_timeout_s, how, daemon.LogTail(kLogTailLines)));
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
             "moetier %s: moetierd serves at %s after %.1f s", command, daemon.socket_path(),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count())
      << std::endl;
  session->daemon = std::move(*started);
  session->model_path = *model;
  session->ctx = daemon_ctx;
  return kExitOk;
}

int StopPrivateSession(PrivateSession& session, std::string_view command, int exit_status) {
  std::ostream& err = *session.ctx.err;
  err << absl::StrFormat("moetier %s: stopping moetierd", command) << std::endl;
  session.ctx.channel.reset();
  PrivateDaemon& daemon = *session.daemon;
  const std::string how = daemon.Stop(kStopGraceMs);
  if (!daemon.ExitedCleanly()) {
    err << absl::StrFormat("moetier %s: moetierd %s; the end of its log:\n%s", command, how,
                           daemon.LogTail(kLogTailLines))
        << std::endl;
    if (exit_status == kExitOk) exit_status = kExitError;
  }
  return exit_status;
}

}  // namespace moetier::client
