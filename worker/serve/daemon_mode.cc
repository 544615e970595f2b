#include "serve/daemon_mode.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "engine/cuda_engine_factory.h"
#include "engine/forward_engine.h"
#include "engine/routing_trace_hooks.h"
#include "gguf/gguf_reader.h"
#include "model/qwen3moe_model.h"
#include "serve/control_server.h"
#include "serve/expert_cache_status.h"
#include "serve/store_expert_source.h"
#include "standalone/expert_cache_setup.h"
#include "gguf/model_fingerprint.h"
#include "store/store_client.h"
#include "store/worker_channel.h"

namespace moetier {
namespace {

class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// Stamps the worker's heartbeat every interval until destroyed, whatever
// the main thread is doing (copying weights, computing a long prefill).
class HeartbeatThread {
 public:
  HeartbeatThread(store::StoreClient& client, int64_t interval_ms)
      : thread_([this, &client, interval_ms] {
          std::unique_lock<std::mutex> lock(mutex_);
          while (!stop_) {
            client.Heartbeat();
            cv_.wait_for(lock, std::chrono::milliseconds(interval_ms), [this] { return stop_; });
          }
        }) {}
  ~HeartbeatThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

absl::Status WithContext(const absl::Status& status, std::string_view what) {
  return absl::Status(status.code(), absl::StrFormat("%s: %s", what, status.message()));
}

// moetierd gives every worker the same extra flags: "{worker}" in a trace
// path becomes this worker's index so that workers need not share a file.
std::string WorkerPath(std::string path, int worker_index) {
  constexpr std::string_view kPlaceholder = "{worker}";
  for (size_t at = path.find(kPlaceholder); at != std::string::npos;
       at = path.find(kPlaceholder, at)) {
    const std::string index = std::to_string(worker_index);
    path.replace(at, kPlaceholder.size(), index);
    at += index.size();
  }
  return path;
}

}  // namespace

absl::Status RunDaemonMode(const WorkerOptions& options, std::FILE* err,
                           const DaemonModeTuning& tuning) {
  // A device that cannot work fails before the daemon is bothered.
  if (options.device != "cpu") {
    if (absl::Status s = CheckCudaDevice(CudaOrdinalOf(options.device)); !s.ok()) {
      return WithContext(s, options.device);
    }
  }
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(options.model_path);
  if (!gguf.ok()) return gguf.status();
  const uint64_t fingerprint = store::ModelFingerprint(**gguf);

  absl::StatusOr<store::DaemonAdmission> admission =
      store::JoinDaemon(options.control_socket, static_cast<uint32_t>(options.worker_index),
                        options.device, tuning.join_timeout_ms);
  if (!admission.ok()) return admission.status();
  UniqueFd control_fd(admission->control_fd);
  UniqueFd segment_fd(admission->segment_fd);
  store::AttachOptions attach;
  attach.worker_index = static_cast<uint32_t>(options.worker_index);
  attach.expected_fingerprint = fingerprint;
  absl::StatusOr<std::unique_ptr<store::StoreClient>> client =
      store::StoreClient::Attach(segment_fd.get(), attach);
  if (!client.ok()) return WithContext(client.status(), "attaching to moetierd's expert store");
  segment_fd.reset();  // the mapping outlives the descriptor
  const HeartbeatThread heartbeat(**client, tuning.heartbeat_interval_ms);

  absl::StatusOr<Qwen3MoeModel> model = LoadQwen3Moe(**gguf);
  if (!model.ok()) return model.status();
  StoreExpertSourceOptions source_options;
  source_options.miss_timeout_ms = tuning.miss_timeout_ms;
  absl::StatusOr<std::unique_ptr<StoreExpertSource>> source =
      StoreExpertSource::Create(**client, *model, source_options);
  if (!source.ok()) return source.status();

  const Qwen3MoeHparams& hp = model->hparams;
  if (options.ctx > hp.n_ctx_train) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--ctx %d exceeds the model's training context of %d tokens", options.ctx, hp.n_ctx_train));
  }
  // Every request's tokens go through the same hooks: one recording, one
  // replay cursor, for the worker's whole life.
  absl::StatusOr<RoutingTraceHooks> hooks = OpenRoutingTraceHooks(
      options.routing_trace_out.empty()
          ? std::string()
          : WorkerPath(options.routing_trace_out, options.worker_index),
      options.routing_from_trace, hp.n_layer, hp.n_expert, hp.n_expert_used);
  if (!hooks.ok()) return hooks.status();
  EngineOptions engine_options;
  engine_options.routing_observer = hooks->recorder.get();
  engine_options.routing_override = hooks->replayer.get();
  engine_options.max_ctx = options.ctx > 0 ? options.ctx : std::min(kDefaultCtx, hp.n_ctx_train);
  engine_options.n_threads =
      options.n_threads > 0 ? options.n_threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  engine_options.weight_pages = options.weight_pages;
  const bool on_gpu = options.device != "cpu";
  // The engine, and the expert cache (if any) whose state the status page
  // follows after every engine call.
  std::unique_ptr<SlotCachedExpertSource> host_cache;
  std::unique_ptr<ForwardEngine> engine;
  const ExpertCacheReport* cache_report = nullptr;
  ExpertCacheControl* cache_control = nullptr;  // resizes through `moetier budget`
  if (on_gpu) {
    absl::StatusOr<CudaWorkerEngine> cuda =
        MakeCudaWorkerEngine(options, *model, engine_options.max_ctx, **source,
                             {(*client)->slot_area()}, *hooks, /*cache_by_default=*/true, err);
    if (!cuda.ok()) return WithContext(cuda.status(), options.device);
    engine = std::move(cuda->engine);
    cache_report = cuda->cache_report;
    cache_control = cuda->cache_control;
  } else {
    absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> cache =
        MakeWorkerExpertCache(options, *model, **source, err);
    if (!cache.ok()) return cache.status();
    host_cache = *std::move(cache);
    cache_report = host_cache.get();
    cache_control = host_cache.get();
    engine_options.expert_source = host_cache != nullptr
                                       ? static_cast<ExpertWeightSource*>(host_cache.get())
                                       : source->get();
    absl::StatusOr<std::unique_ptr<ForwardEngine>> cpu = CreateCpuEngine(*model, engine_options);
    if (!cpu.ok()) return cpu.status();
    engine = *std::move(cpu);
  }
  std::unique_ptr<CacheStatusEngine> published;
  if (cache_report != nullptr) {
    published = std::make_unique<CacheStatusEngine>(*engine, *cache_report,
                                                    (*client)->status_page());
  }
  ForwardEngine& serving =
      published != nullptr ? static_cast<ForwardEngine&>(*published) : *engine;

  ControlServerOptions server_options;
  server_options.backend = on_gpu ? "cuda" : "cpu";
  server_options.threads = engine_options.n_threads;
  server_options.model_fingerprint = fingerprint;
  server_options.log = err;
  server_options.expert_cache = cache_control;
  if (cache_report != nullptr) {
    store::WorkerStatusPage& page = (*client)->status_page();
    server_options.expert_cache_resized = [cache_report, &page] {
      PublishExpertCacheStatus(*cache_report, page);
    };
  }
  absl::StatusOr<std::unique_ptr<ControlServer>> server =
      ControlServer::Create(control_fd.get(), serving, server_options);
  if (!server.ok()) return server.status();
  const bool resident =
      (*client)->header().store_mode == static_cast<uint32_t>(store::StoreMode::kFullyResident);
  std::fprintf(err,
               "moetier-worker %d (%s): serving %s with %d threads, context %d tokens, experts "
               "from moetierd's %s store\n",
               options.worker_index, options.device.c_str(), options.model_path.c_str(),
               engine_options.n_threads,
               engine_options.max_ctx, resident ? "fully resident" : "cache");
  if (hooks->replayer != nullptr) {
    std::fprintf(err,
                 "moetier-worker %d (cpu): %s (%zu tokens, cycled): the experts are the trace's, "
                 "not the router's\n",
                 options.worker_index, hooks->ReplayLabel().c_str(), hooks->replayer->n_token());
  }
  if (hooks->recorder != nullptr) {
    std::fprintf(err, "moetier-worker %d (cpu): recording routing to %s\n", options.worker_index,
                 hooks->recorder->path().c_str());
  }
  std::fflush(err);
  absl::Status served = (*server)->Run();
  if (!served.ok()) return WithContext(served, "control channel");
  if (hooks->recorder != nullptr) {
    if (absl::Status s = hooks->recorder->Close(); !s.ok()) return s;
    std::fprintf(err, "moetier-worker %d (cpu): routing of %llu tokens recorded to %s\n",
                 options.worker_index,
                 static_cast<unsigned long long>(hooks->recorder->tokens_written()),
                 hooks->recorder->path().c_str());
  }
  std::fprintf(err,
               "moetier-worker %d (%s): moetierd closed the control channel after %llu "
               "requests%s; exiting\n",
               options.worker_index, options.device.c_str(),
               static_cast<unsigned long long>((*server)->requests_finished()),
               hooks->replayer != nullptr ? (" (" + hooks->ReplayLabel() + ")").c_str() : "");
  if (cache_report != nullptr) {
    std::fprintf(err, "moetier-worker %d (%s): %s\n", options.worker_index,
                 options.device.c_str(), ExpertCacheSummary(*cache_report).c_str());
  }
  return absl::OkStatus();
}

}  // namespace moetier
