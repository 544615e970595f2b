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
#include "model/architectures.h"
#include "serve/control_server.h"
#include "serve/expert_cache_status.h"
#include "serve/store_expert_source.h"
#include "setup/worker_engine.h"
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

  absl::StatusOr<Model> model = LoadWorkerModel(**gguf, options);
  if (!model.ok()) return model.status();
  StoreExpertSourceOptions source_options;
  source_options.miss_timeout_ms = tuning.miss_timeout_ms;
  absl::StatusOr<std::unique_ptr<StoreExpertSource>> source =
      StoreExpertSource::Create(**client, RoutedExpertShapesOf(*model), source_options);
  if (!source.ok()) return source.status();

  const ModelHparams& hp = model->hparams;
  absl::StatusOr<int> max_ctx = ResolveContextLength(options, hp.n_ctx_train, 0);
  if (!max_ctx.ok()) return max_ctx.status();
  // Every request's tokens go through the same hooks: one recording, one
  // replay cursor, for the worker's whole life.
  absl::StatusOr<RoutingTraceHooks> hooks =
      OpenRoutingTraceHooks(options.routing_trace_out.empty()
                                ? std::string()
                                : WorkerPath(options.routing_trace_out, options.worker_index),
                            options.routing_from_trace, hp.n_layer, hp.n_expert, hp.n_expert_used,
                            options.prefetch_accuracy, RoutedLayers(model->weights));
  if (!hooks.ok()) return hooks.status();
  ExpertOrigin experts;
  experts.source = source->get();
  experts.dma_ranges = {(*client)->slot_area()};
  experts.cache_by_default = true;
  // The engine, and the expert cache (if any) whose state the status page
  // follows after every engine call.
  absl::StatusOr<WorkerEngine> worker =
      MakeWorkerEngine(options, *model, *max_ctx, experts, *hooks, err);
  if (!worker.ok()) return worker.status();
  ForwardEngine* engine = worker->engine.get();
  const ExpertCacheReport* cache_report = worker->cache_report;
  std::unique_ptr<CacheStatusEngine> published;
  if (cache_report != nullptr) {
    published = std::make_unique<CacheStatusEngine>(*engine, *cache_report,
                                                    (*client)->status_page());
  }
  ForwardEngine& serving =
      published != nullptr ? static_cast<ForwardEngine&>(*published) : *engine;

  ControlServerOptions server_options;
  server_options.backend = worker->backend;
  server_options.threads = worker->threads;
  server_options.model_fingerprint = fingerprint;
  server_options.ubatch_size = options.ubatch_size;
  server_options.prefix_cache_bytes = static_cast<uint64_t>(options.prefix_cache_mib) << 20;
  store::WorkerStatusPage& status_page = (*client)->status_page();
  server_options.prefix_cache_changed = [&status_page](const PrefixCacheReport& report) {
    PublishPrefixCacheStatus(report, status_page);
  };
  server_options.state_size = SequenceStateSizeOf(*model, options.kv_types);
  server_options.kv_types = options.kv_types;
  if (options.ubatch_size > 0) {
    server_options.score_batch_tokens = std::min(server_options.score_batch_tokens,
                                                 options.ubatch_size);
  }
  server_options.log = err;
  server_options.expert_cache = worker->cache_control;
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
               worker->threads, worker->max_ctx, resident ? "fully resident" : "cache");
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
