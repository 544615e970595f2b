// moetierd: parse the configuration, build the model manifest, have the
// worker executable check the model, create the expert store (preload or
// cache), spawn and supervise the workers, and serve the gRPC front door
// (and the HTTP API when configured); stop cleanly on SIGTERM/SIGINT.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/model_id.h"
#include "config/auto_devices.h"
#include "config/daemon_config.h"
#include "frontdoor/api_server.h"
#include "frontdoor/moetier_service.h"
#include "frontdoor/status_report.h"
#include "gguf/gguf_reader.h"
#include "heat/heat_keeper.h"
#include "http/http_api.h"
#include "io/io_backend_factory.h"
#include "log/daemon_log.h"
#include "manifest/model_manifest.h"
#include "store/expert_store.h"
#include "store/shared_futex.h"
#include "scheduler/request_scheduler.h"
#include "supervisor/model_check.h"
#include "supervisor/worker_supervisor.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/tokenizer.h"
#include "util/byte_size.h"
#include "util/systemd_notify.h"

namespace moetier {
namespace {

constexpr int kExitConfigError = 2;
constexpr int kExitStartupError = 1;
// Each start-up report buys at least this much more of TimeoutStartSec.
constexpr uint64_t kStartupExtendMinUsec = 30'000'000;
constexpr int64_t kMainTickNs = 200'000'000;

// moetier-worker next to this executable (an installed tree), else in the
// build tree's worker/ folder beside daemon/.
std::string DefaultWorkerPath() {
  char self[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "moetier-worker";
  std::string path(self, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : path.substr(0, slash);
  const std::string installed = dir + "/moetier-worker";
  const std::string build_tree = dir + "/../worker/moetier-worker";
  if (access(installed.c_str(), X_OK) != 0 && access(build_tree.c_str(), X_OK) == 0) {
    return build_tree;
  }
  return installed;
}

int Run(const DaemonConfig& config) {
  // Reports come at least every preload_progress_interval_ms; the extension
  // covers a few of those, so a slow chunk does not trip the start timeout.
  const uint64_t extend_usec = std::max<uint64_t>(
      kStartupExtendMinUsec, uint64_t{3} * config.preload_progress_interval_ms() * 1000);
  NotifySystemd(absl::StrFormat("STATUS=opening %s\nEXTEND_TIMEOUT_USEC=%d", config.model_path(),
                                extend_usec));
  absl::StatusOr<std::unique_ptr<GgufModel>> model = GgufModel::Open(config.model_path());
  if (!model.ok()) {
    LogError("cannot open the model: %s", model.status().message());
    return kExitStartupError;
  }
  absl::StatusOr<ModelManifest> manifest = BuildModelManifest(**model);
  if (!manifest.ok()) {
    LogError("cannot serve %s: %s", config.model_path(), manifest.status().message());
    return kExitStartupError;
  }
  const std::string worker_path = config.worker_executable_path().empty()
                                      ? DefaultWorkerPath()
                                      : config.worker_executable_path();
  // Before the store: a model the workers refuse must not cost a preload
  // and then restart them forever. One check per kind of engine the workers
  // run (every cuda:N runs the same one), since their tensor types differ.
  std::vector<std::string> engine_kinds;
  for (const std::string& device : config.devices()) {
    const bool cpu = device == "cpu";
    if (std::none_of(engine_kinds.begin(), engine_kinds.end(),
                     [cpu](const std::string& seen) { return (seen == "cpu") == cpu; })) {
      engine_kinds.push_back(device);
    }
  }
  if (engine_kinds.empty()) engine_kinds.push_back("");
  for (const std::string& device : engine_kinds) {
    absl::Status check = CheckModelWithWorker(worker_path, config.model_path(), device);
    if (check.ok()) continue;
    if (check.code() == absl::StatusCode::kFailedPrecondition) {
      LogError("model %s cannot be served: %s", config.model_path(), check.message());
      return kExitConfigError;
    }
    LogError("cannot check the model: %s", check.message());
    return kExitStartupError;
  }
  ApiKeys api_keys;
  if (!config.api_keys_file().empty()) {
    absl::StatusOr<ApiKeys> loaded = ApiKeys::Load(config.api_keys_file());
    if (!loaded.ok()) {
      LogError("%s", loaded.status().message());
      return kExitConfigError;
    }
    api_keys = std::move(*loaded);
  }
  // Without a tokenizer the API still serves token ids (Score, Generate
  // with prompt_token_ids); text requests say why they cannot be served.
  const absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromGgufMetadata((*model)->metadata());
  absl::StatusOr<ChatTemplate> chat_template =
      tokenizer.ok() ? ChatTemplate::ForTokenizer(*tokenizer) : tokenizer.status();
  if (!tokenizer.ok()) {
    LogWarning("text requests are unavailable for this model: %s", tokenizer.status().message());
  } else if (!chat_template.ok()) {
    LogWarning("Chat is unavailable for this model: %s", chat_template.status().message());
  }
  model->reset();  // the store reads the files itself
  const store::ModelHparams& hp = manifest->hparams;
  LogInfo("model %s: %s, %d layers, %d experts per layer (top-%d), %d shard(s); experts %s, "
          "dense weights %s, fingerprint %016x",
          config.model_path(), hp.architecture, hp.n_layer, hp.n_expert, hp.n_expert_used,
          manifest->shard_paths.size(), FormatBytes(manifest->total_expert_bytes),
          FormatBytes(manifest->dense_bytes), manifest->fingerprint);

  HeatKeeperOptions heat_options;
  heat_options.state_directory = ResolveStateDirectory(config, std::getenv("STATE_DIRECTORY"));
  heat_options.fingerprint = manifest->fingerprint;
  heat_options.n_layer = hp.n_layer;
  heat_options.n_expert = hp.n_expert;
  heat_options.top_k = std::max<uint32_t>(1, hp.n_expert_used);
  HeatKeeper heat(std::move(heat_options));
  LogInfo("heat profile: %s", heat.Describe());

  SupervisorOptions supervisor_options;
  supervisor_options.worker_executable_path = worker_path;
  supervisor_options.control_socket_path = config.worker_socket_path();
  supervisor_options.model_path = config.model_path();
  supervisor_options.devices.assign(config.devices().begin(), config.devices().end());
  supervisor_options.worker_extra_args.assign(config.worker_extra_args().begin(),
                                              config.worker_extra_args().end());
  supervisor_options.handshake_timeout_ms = config.worker_handshake_timeout_ms();
  supervisor_options.heartbeat_timeout_ms = config.worker_heartbeat_timeout_ms();
  supervisor_options.restart_backoff_initial_ms = config.worker_restart_backoff_initial_ms();
  supervisor_options.restart_backoff_max_ms = config.worker_restart_backoff_max_ms();
  supervisor_options.stable_after_ms = config.worker_stable_after_ms();
  supervisor_options.stop_grace_ms = config.worker_stop_grace_ms();
  RequestScheduler scheduler(SchedulerLimits{config.max_queued_requests(),
                                             config.max_active_sequences()});
  supervisor_options.on_admitted = [&scheduler](AdmittedWorker worker) {
    scheduler.AddWorker(std::move(worker));
  };
  absl::StatusOr<std::unique_ptr<WorkerSupervisor>> supervisor =
      WorkerSupervisor::Create(std::move(supervisor_options));
  if (!supervisor.ok()) {
    LogError("cannot supervise workers: %s", supervisor.status().message());
    return kExitStartupError;
  }

  absl::StatusOr<IoBackendKind> kind = ParseIoBackendKind(config.io_backend());
  if (!kind.ok()) {
    LogError("%s", kind.status().message());
    return kExitConfigError;
  }
  IoBackendOptions io_options;
  io_options.kind = *kind;
  io_options.queue_depth = config.io_queue_depth();
  io_options.direct_io = config.direct_io();
  absl::StatusOr<std::unique_ptr<IoBackend>> io = CreateIoBackend(io_options);
  if (!io.ok()) {
    LogError("%s", io.status().message());
    return kExitStartupError;
  }

  ExpertStoreOptions store_options;
  store_options.ram_budget_bytes = config.ram_budget_bytes();
  store_options.segment.lock_memory = config.lock_memory();
  store_options.segment.allow_unlocked_memory = config.allow_unlocked_memory();
  store_options.segment.huge_pages = config.huge_pages();
  store_options.progress_log_interval_ms = config.preload_progress_interval_ms();
  store_options.preload_bytes_per_s = config.preload_bytes_per_s();
  if (config.warm_start() && heat.started_from().has_value()) {
    store_options.warm_ranks = WarmRanks(*heat.started_from());
    store_options.warm_order = HottestFirst(*heat.started_from());
  }
  store_options.on_startup_progress = [extend_usec](const StartupProgress& p) {
    NotifySystemd(StartupProgressMessage(p.phase, p.done_bytes, p.total_bytes, extend_usec));
  };
  absl::StatusOr<std::unique_ptr<ExpertStore>> store =
      ExpertStore::Create(*manifest, std::move(*io), store_options);
  if (!store.ok()) {
    LogError("cannot create the expert store: %s", store.status().message());
    // A budget that cannot work is a configuration error, like any other value.
    return store.status().code() == absl::StatusCode::kInvalidArgument ? kExitConfigError
                                                                        : kExitStartupError;
  }
  (*store)->Start();
  (*supervisor)->Start(store->get());

  StatusReporter reporter(config, store->get(), supervisor->get(), &scheduler);
  reporter.set_heat_keeper(&heat);
  RequestMetrics request_metrics;
  const int32_t n_vocab = static_cast<int32_t>(manifest->hparams.n_vocab);
  HttpModel http_model;
  http_model.model_id = ModelIdFromPath(config.model_path());
  http_model.created_unix_s = static_cast<int64_t>(std::time(nullptr));
  http_model.text_unavailable = WhyTextUnavailable(tokenizer, n_vocab);
  if (http_model.text_unavailable.ok()) http_model.tokenizer = &*tokenizer;
  std::optional<ChatTemplate> http_chat_template;
  if (chat_template.ok()) {
    http_chat_template.emplace(*chat_template);
    http_model.chat_template = &*http_chat_template;
  } else {
    http_model.chat_unavailable = chat_template.status();
  }
  http_model.scheduler = &scheduler;
  http_model.limits = FrontDoorLimitsFromConfig(config);
  http_model.metrics = &request_metrics;
  std::atomic<bool> http_serving{false};
  http_model.not_serving_reason = [&http_serving, &store]() -> std::string {
    if (http_serving.load()) return {};
    if ((*store)->phase() != store::DaemonPhase::kReady) return "the expert store is still starting";
    return "no worker has loaded the model yet";
  };
  MoetierService service(&tokenizer, std::move(chat_template),
                         static_cast<int32_t>(manifest->hparams.n_vocab), &scheduler, &reporter,
                         {config.devices().begin(), config.devices().end()},
                         FrontDoorLimitsFromConfig(config));
  service.set_metrics(&request_metrics);
  ApiServerOptions api_options;
  api_options.socket_path = config.api_socket_path();
  api_options.socket_mode = *ParseSocketMode(config.api_socket_mode());  // validated
  api_options.socket_group = config.api_socket_group();
  api_options.listen_address = config.listen_address();
  absl::StatusOr<std::unique_ptr<ApiServer>> api = ApiServer::Start(api_options, &service);
  if (!api.ok()) {
    LogError("cannot start the API: %s", api.status().message());
    scheduler.Shutdown();
    (*supervisor)->Stop();
    (*store)->Stop();
    return kExitStartupError;
  }
  LogInfo("serving the API on unix:%s%s", config.api_socket_path(),
          config.listen_address().empty()
              ? std::string()
              : absl::StrFormat(" and %s (port %d)", config.listen_address(), (*api)->tcp_port()));

  std::unique_ptr<HttpServer> http;
  if (!config.http_listen_address().empty()) {
    HttpServerOptions http_options;
    http_options.listen_address = config.http_listen_address();
    http_options.api_keys = std::move(api_keys);
    http_options.max_body_bytes = config.http_max_body_bytes();
    // A thread for every request the scheduler may hold, so the queue's
    // limit (429), not a shortage of threads, is what a burst meets.
    http_options.threads =
        static_cast<int>(config.max_active_sequences() + config.max_queued_requests()) + 4;
    HttpPagesSource pages;
    pages.status = [&reporter] { return reporter.Build(); };
    pages.set_budget = [&service](const v1::SetBudgetRequest& request) {
      return service.ApplyBudget(request, [] { return false; });
    };
    absl::StatusOr<std::unique_ptr<HttpServer>> started =
        StartHttpApi(std::move(http_options), http_model, std::move(pages));
    if (!started.ok()) {
      LogError("cannot start the HTTP API: %s", started.status().message());
      (*api)->Shutdown();
      scheduler.Shutdown();
      (*supervisor)->Stop();
      (*store)->Stop();
      return kExitStartupError;
    }
    http = std::move(*started);
    LogInfo("serving the HTTP API on %s (port %d)%s", config.http_listen_address(), http->port(),
            config.api_keys_file().empty() ? "" : ", API keys required");
  }

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  const std::optional<uint64_t> watchdog_ping_usec = WatchdogPingIntervalUsec(
      std::getenv("WATCHDOG_USEC"), std::getenv("WATCHDOG_PID"), getpid());
  uint64_t watchdog_ping_ns = 0;
  const uint64_t heat_save_interval_ns = uint64_t{config.heat_profile_save_interval_s()} * 1'000'000'000;
  uint64_t next_heat_save_ns = store::MonotonicNowNs() + heat_save_interval_ns;
  const auto save_heat = [&heat, &store]() {
    heat.Absorb((*store)->RoutedTotals());
    if (absl::Status saved = heat.Save(); !saved.ok()) {
      LogWarning("cannot save the heat profile (the daemon goes on without it): %s",
                 saved.message());
      return false;
    }
    return true;
  };
  bool ready_sent = false;
  bool serving = false;
  int exit_code = 0;
  while (true) {
    if (std::optional<std::string> failure = (*store)->startup_failure(); failure.has_value()) {
      LogError("cannot finish starting: %s", *failure);
      exit_code = kExitStartupError;
      break;
    }
    if (!ready_sent && (*store)->phase() == store::DaemonPhase::kReady) {
      NotifySystemd("READY=1\nSTATUS=expert store ready");
      LogInfo("ready%s", watchdog_ping_usec.has_value()
                             ? absl::StrFormat(" (systemd watchdog fed every %.1f s)",
                                               static_cast<double>(*watchdog_ping_usec) / 1e6)
                             : std::string());
      ready_sent = true;
    }
    // Fed only while the store's service thread still goes round: a daemon
    // whose store is stuck serves nothing and is better restarted.
    if (ready_sent && watchdog_ping_usec.has_value()) {
      const uint64_t now = store::MonotonicNowNs();
      const uint64_t ping_ns = *watchdog_ping_usec * 1000;
      const uint64_t heartbeat = (*store)->service_heartbeat_ns();
      const bool service_alive = heartbeat + ping_ns >= now;
      if (now - watchdog_ping_ns >= ping_ns && service_alive) {
        NotifySystemd("WATCHDOG=1");
        watchdog_ping_ns = now;
      }
    }
    if (heat_save_interval_ns > 0 && store::MonotonicNowNs() >= next_heat_save_ns) {
      save_heat();
      next_heat_save_ns = store::MonotonicNowNs() + heat_save_interval_ns;
    }
    // Healthy once requests can be computed: the store is ready and a
    // worker has loaded the model.
    const bool can_serve = ready_sent && scheduler.ReadyLimits().has_value();
    if (can_serve != serving) {
      (*api)->SetServing(can_serve);
      http_serving.store(can_serve);
      serving = can_serve;
    }
    const int64_t tick_ns =
        watchdog_ping_usec.has_value()
            ? std::min<int64_t>(kMainTickNs, static_cast<int64_t>(*watchdog_ping_usec) * 1000 / 4)
            : kMainTickNs;
    const timespec tick{tick_ns / 1'000'000'000, tick_ns % 1'000'000'000};
    const int signal_number = sigtimedwait(&stop_signals, nullptr, &tick);
    if (signal_number > 0) {
      LogInfo("received %s; stopping", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
      break;
    }
  }
  NotifySystemd("STOPPING=1");
  // HTTP first: its streams end at their next token while the scheduler
  // still delivers.
  if (http != nullptr) http->Shutdown();
  (*api)->Shutdown();
  scheduler.Shutdown();
  (*supervisor)->Stop();
  // After the workers: every routed count is in.
  if (!heat.path().empty() && save_heat() && heat.Current().tokens > 0) {
    LogInfo("heat profile saved to %s (%.0f tokens)", heat.path(), heat.Current().tokens);
  }
  (*store)->Stop();
  LogInfo("stopped");
  return exit_code;
}

}  // namespace
}  // namespace moetier

int main(int argc, char** argv) {
  // Blocked before any thread starts, so every thread inherits the mask and
  // only the main thread's sigtimedwait sees these signals.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const std::vector<std::string> args(argv, argv + argc);
  absl::StatusOr<moetier::DaemonCommandLine> command_line = moetier::ParseDaemonCommandLine(args);
  if (!command_line.ok()) {
    std::fprintf(stderr, "moetierd: %s\nRun moetierd --help for the flags.\n",
                 std::string(command_line.status().message()).c_str());
    return moetier::kExitConfigError;
  }
  if (command_line->help) {
    std::fputs(moetier::DaemonUsage().c_str(), stdout);
    return 0;
  }
  const std::string auto_devices =
      moetier::ResolveAutoDevices(command_line->config, moetier::LocalGpuProbe());
  if (!auto_devices.empty()) moetier::LogInfo("%s", auto_devices);
  if (absl::Status valid = moetier::ValidateDaemonConfig(command_line->config); !valid.ok()) {
    std::fprintf(stderr, "moetierd: invalid configuration: %s\n",
                 std::string(valid.message()).c_str());
    return moetier::kExitConfigError;
  }
  return moetier::Run(command_line->config);
}
