#include "setup/worker_engine.h"

#include <cmath>
#include <thread>

#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_kernels.h"
#include "engine/cpu_engine.h"
#include "gguf/gguf_reader.h"
#include "model/architectures.h"
#include "reference/reference_engine.h"

namespace moetier {

absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> MakeWorkerExpertCache(
    const WorkerOptions& options, const Model& model, ExpertWeightSource& inner, std::FILE* err) {
  const RoutedExpertShapes shapes = RoutedExpertShapesOf(model);
  HostSlotCacheOptions host;
  host.policy = options.cache_policy;
  host.miss_policy = options.miss_policy;
  host.prefetch = options.prefetch;
  host.static_host_layers = options.n_cpu_moe;
  const ExpertSlotCacheOptions geometry = SlotCacheOptionsFor(shapes, host);
  const ExpertCacheSize& size = options.expert_cache;
  switch (size.kind) {
    case ExpertCacheSize::Kind::kAuto:
      // The cpu has no device memory to fill: no cache unless static
      // placement asks for the slots it needs.
      host.pool_bytes =
          options.n_cpu_moe >= 0 ? StaticPoolBytes(geometry, options.n_cpu_moe) : 0;
      break;
    case ExpertCacheSize::Kind::kMib:
      host.pool_bytes = static_cast<uint64_t>(std::llround(size.value * 1048576.0));
      break;
    case ExpertCacheSize::Kind::kPercent:
      host.pool_bytes = static_cast<uint64_t>(
          std::llround(size.value / 100.0 * static_cast<double>(FullPoolBytes(geometry))));
      break;
  }
  if (host.pool_bytes == 0 && options.n_cpu_moe < 0) {
    if (options.cache_flags_given && size.kind == ExpertCacheSize::Kind::kAuto) {
      return absl::InvalidArgumentError(
          "the expert cache flags need --expert-cache-mib SIZE or --n-cpu-moe N: the cpu worker "
          "has no expert cache by default");
    }
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> cache =
      SlotCachedExpertSource::Create(inner, shapes, host);
  if (!cache.ok()) return cache.status();
  std::fprintf(err, "%s\n", (*cache)->cache().Describe().c_str());
  return cache;
}

std::string ExpertCacheSummary(const ExpertCacheReport& source) {
  const ExpertSlotCacheStats& s = source.cache().stats();
  const uint64_t placed = s.hits + s.misses;
  const double copy_s = source.copy_busy_ns() * 1e-9;
  return absl::StrFormat(
      "expert cache: %u hits of %u (%.1f%%), %u misses (%u computed from the store, %u copied), "
      "prefetch %u issued / %u used / %u wasted, %.1f MiB copied at %.2f GB/s",
      s.hits, placed, placed > 0 ? 100.0 * s.hits / placed : 0.0, s.misses, s.misses_on_host,
      s.demand_fills, s.prefetch_issued, s.prefetch_used, s.prefetch_wasted,
      s.bytes_filled / 1048576.0, copy_s > 0 ? s.bytes_filled / copy_s / 1e9 : 0.0);
}

absl::StatusOr<Model> LoadWorkerModel(const GgufModel& gguf, const WorkerOptions& options) {
  absl::StatusOr<Model> model = LoadModel(gguf);
  if (!model.ok() || !options.rope_scaling.given()) return model;
  ModelHparams& hp = model->hparams;
  const RopeScalingKeys keys = Overridden(hp.rope_scaling_keys, options.rope_scaling);
  absl::StatusOr<RopeScaling> scaling =
      MakeRopeScaling(keys, hp.n_rot, hp.rope_freq_base, "rope scaling flags: ");
  if (!scaling.ok()) return scaling.status();
  hp.rope_scaling = *scaling;
  hp.rope_scaling_keys = keys;
  const int64_t scaled_ctx = ScaledContext(keys);
  if (scaled_ctx > kMaxCtx) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--rope-scale %g over an original context of %d gives %d positions, more than %d",
        keys.factor, keys.original_context, scaled_ctx, kMaxCtx));
  }
  hp.n_ctx_train = std::max(hp.n_ctx_train, static_cast<int>(scaled_ctx));
  return model;
}

absl::StatusOr<int> ResolveContextLength(const WorkerOptions& options, int n_ctx_train,
                                         size_t needed) {
  if (options.ctx > 0) {
    if (options.ctx > n_ctx_train) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--ctx %d exceeds the model's training context of %d tokens", options.ctx, n_ctx_train));
    }
    return options.ctx;
  }
  const size_t ctx = std::max<size_t>(kDefaultCtx, needed);
  return static_cast<int>(std::min<size_t>(ctx, static_cast<size_t>(n_ctx_train)));
}

int ResolveThreads(const WorkerOptions& options) {
  return options.n_threads > 0
             ? options.n_threads
             : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {

// The CUDA engine the flags ask for, its expert cache filled from
// `experts`.
absl::StatusOr<CudaWorkerEngine> MakeCudaWorkerEngine(const WorkerOptions& options,
                                                      const Model& model, int max_ctx,
                                                      const ExpertOrigin& experts,
                                                      const RoutingTraceHooks& hooks,
                                                      std::FILE* err) {
  CudaWorkerEngineOptions cuda;
  cuda.device = CudaOrdinalOf(options.device);
  if (cuda.device < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("device '%s' is not cuda:N", options.device));
  }
  cuda.max_ctx = max_ctx;
  cuda.max_sequences = options.parallel;
  cuda.kv_types = options.kv_types;
  cuda.policy = options.cache_policy;
  cuda.miss_policy = options.miss_policy;
  cuda.prefetch = options.prefetch;
  cuda.routing_observer = hooks.recorder.get();
  cuda.routing_override = hooks.replayer.get();
  cuda.static_host_layers = options.n_cpu_moe;
  cuda.host_threads = ResolveThreads(options);
  const ExpertCacheSize& size = options.expert_cache;
  const bool no_cache = size.kind == ExpertCacheSize::Kind::kMib && size.value == 0;
  if (no_cache && options.n_cpu_moe >= 0) {
    return absl::InvalidArgumentError(
        "--n-cpu-moe keeps the other layers' experts in the cache, and --expert-cache-mib 0 "
        "gives it no room; drop one of them");
  }
  // Standalone holds every expert unless a cache flag asks otherwise.
  cuda.routing_counter = experts.source;  // the store counts what is routed
  if ((experts.cache_by_default || options.cache_flags_given) && !no_cache) {
    cuda.expert_source = experts.source;
    cuda.dma_ranges = experts.dma_ranges;
    if (size.kind == ExpertCacheSize::Kind::kMib) {
      cuda.cache_bytes = static_cast<int64_t>(std::llround(size.value * 1048576.0));
    } else if (size.kind == ExpertCacheSize::Kind::kPercent) {
      cuda.cache_fraction = size.value / 100.0;
    }
  }
  absl::StatusOr<CudaWorkerEngine> engine = CreateCudaWorkerEngine(model, cuda);
  if (!engine.ok()) return engine.status();
  for (const std::string& line : engine->description) std::fprintf(err, "%s\n", line.c_str());
  return engine;
}

}  // namespace

absl::StatusOr<WorkerEngine> MakeWorkerEngine(const WorkerOptions& options, const Model& model,
                                              int max_ctx, const ExpertOrigin& experts,
                                              const RoutingTraceHooks& hooks, std::FILE* err) {
  WorkerEngine out;
  out.max_ctx = max_ctx;
  out.threads = ResolveThreads(options);
  // The CPU kernels (the cpu backend, and misses a GPU worker computes on
  // the host) fix their activation format before their first buffer.
  if (options.activations_given) {
    if (absl::Status s = cpu::SetActivationsResidualPlane(options.residual_activations); !s.ok()) {
      return s;
    }
  }
  switch (options.backend) {
    case BackendKind::kCuda: {
      absl::StatusOr<CudaWorkerEngine> cuda =
          MakeCudaWorkerEngine(options, model, max_ctx, experts, hooks, err);
      if (!cuda.ok()) return absl::Status(cuda.status().code(), absl::StrFormat(
                                              "%s: %s", options.device, cuda.status().message()));
      out.backend = "cuda";
      out.engine = std::move(cuda->engine);
      out.cache_report = cuda->cache_report;
      out.cache_control = cuda->cache_control;
      return out;
    }
    case BackendKind::kReference: {
      if (hooks.recorder != nullptr || hooks.replayer != nullptr) {
        return absl::InvalidArgumentError(
            "routing traces need the cpu backend (the reference has no routing hook)");
      }
      constexpr TensorType kReferenceKv[] = {TensorType::kF32};
      if (absl::Status s = CheckKvCacheTypes(options.kv_types, model.hparams.head_dim,
                                             kReferenceKv, "reference");
          !s.ok()) {
        return s;
      }
      absl::StatusOr<std::unique_ptr<ReferenceEngine>> ref = ReferenceEngine::Create(model, max_ctx);
      if (!ref.ok()) return ref.status();
      out.backend = "reference";
      out.engine = *std::move(ref);
      return out;
    }
    case BackendKind::kCpu: {
      absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> cache =
          MakeWorkerExpertCache(options, model, *experts.source, err);
      if (!cache.ok()) return cache.status();
      out.host_cache = *std::move(cache);
      out.cache_report = out.host_cache.get();
      out.cache_control = out.host_cache.get();
      EngineOptions engine_options;
      engine_options.max_ctx = max_ctx;
      engine_options.max_sequences = options.parallel;
      engine_options.n_threads = out.threads;
      engine_options.kv_types = options.kv_types;
      engine_options.weight_pages = options.weight_pages;
      engine_options.routing_observer = hooks.recorder.get();
      engine_options.routing_override = hooks.replayer.get();
      engine_options.expert_source =
          out.host_cache != nullptr ? static_cast<ExpertWeightSource*>(out.host_cache.get())
          : experts.source_is_mapping ? nullptr
                                      : experts.source;
      absl::StatusOr<std::unique_ptr<ForwardEngine>> engine = CreateCpuEngine(model, engine_options);
      if (!engine.ok()) return engine.status();
      out.backend = "cpu";
      out.engine = *std::move(engine);
      return out;
    }
  }
  return absl::InternalError("unknown backend");
}

absl::Status CheckModelForDevice(const std::string& path, const std::string& device) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(path);
  if (!gguf.ok()) return gguf.status();
  absl::StatusOr<Model> model = LoadModel(**gguf);
  if (!model.ok()) return model.status();
  absl::Status backend;
  if (device == "cpu") {
    backend = CpuEngine::CheckModel(*model);
  } else if (!device.empty()) {
    backend = CheckModelForCudaWorker(*model);
  }
  if (backend.ok()) return backend;
  return absl::Status(backend.code(),
                      absl::StrFormat("%s on %s: %s", path, device, backend.message()));
}

}  // namespace moetier
