#include "standalone/expert_cache_setup.h"

#include <cmath>
#include <thread>

#include "absl/strings/str_format.h"

namespace moetier {

absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> MakeWorkerExpertCache(
    const WorkerOptions& options, const Qwen3MoeModel& model, ExpertWeightSource& inner,
    std::FILE* err) {
  HostSlotCacheOptions host;
  host.policy = options.cache_policy;
  host.miss_policy = options.miss_policy;
  host.prefetch = options.prefetch;
  host.static_host_layers = options.n_cpu_moe;
  const ExpertSlotCacheOptions geometry = SlotCacheOptionsFor(model, host);
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
      SlotCachedExpertSource::Create(inner, model, host);
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

absl::StatusOr<CudaWorkerEngine> MakeCudaWorkerEngine(
    const WorkerOptions& options, const Qwen3MoeModel& model, int max_ctx,
    ExpertWeightSource& host_source, std::vector<std::span<const uint8_t>> dma_ranges,
    const RoutingTraceHooks& hooks, bool cache_by_default, std::FILE* err) {
  CudaWorkerEngineOptions cuda;
  cuda.device = CudaOrdinalOf(options.device);
  if (cuda.device < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("device '%s' is not cuda:N", options.device));
  }
  cuda.max_ctx = max_ctx;
  cuda.policy = options.cache_policy;
  cuda.miss_policy = options.miss_policy;
  cuda.prefetch = options.prefetch;
  cuda.routing_observer = hooks.recorder.get();
  cuda.routing_override = hooks.replayer.get();
  cuda.static_host_layers = options.n_cpu_moe;
  cuda.host_threads =
      options.n_threads > 0
          ? options.n_threads
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const ExpertCacheSize& size = options.expert_cache;
  const bool no_cache = size.kind == ExpertCacheSize::Kind::kMib && size.value == 0;
  if (no_cache && options.n_cpu_moe >= 0) {
    return absl::InvalidArgumentError(
        "--n-cpu-moe keeps the other layers' experts in the cache, and --expert-cache-mib 0 "
        "gives it no room; drop one of them");
  }
  // Standalone holds every expert unless a cache flag asks otherwise.
  if ((cache_by_default || options.cache_flags_given) && !no_cache) {
    cuda.expert_source = &host_source;
    cuda.dma_ranges = std::move(dma_ranges);
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

}  // namespace moetier
