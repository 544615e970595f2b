// The expert cache the worker's flags ask for (--expert-cache-mib,
// --miss-policy, --prefetch, --cache-policy, --n-cpu-moe), for the cpu
// backend: a SlotCachedExpertSource in front of the engine's expert source.
#pragma once

#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/slot_cached_expert_source.h"
#include "engine/cuda_engine_factory.h"
#include "engine/expert_source.h"
#include "engine/routing_trace_hooks.h"
#include "model/qwen3moe_model.h"
#include "standalone/options.h"

namespace moetier {

// Null when the flags ask for no cache (the cpu default). Fails, naming the
// flag, when a cache flag is given without a cache, or the size cannot hold
// what the mode needs. Describes the cache on `err`.
absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> MakeWorkerExpertCache(
    const WorkerOptions& options, const Qwen3MoeModel& model, ExpertWeightSource& inner,
    std::FILE* err);

// One line of the cache's counters, for logs.
std::string ExpertCacheSummary(const ExpertCacheReport& cache);

// The CUDA engine the flags ask for (--device cuda:N and the cache flags),
// its expert cache filled from `host_source` whose memory `dma_ranges`
// cover. Standalone (`cache_by_default` false) uploads every expert unless
// a cache flag is given; daemon mode always caches (auto-sized by default).
// `hooks` (which must outlive the engine) record or replay routing.
// Describes the engine on `err`.
absl::StatusOr<CudaWorkerEngine> MakeCudaWorkerEngine(
    const WorkerOptions& options, const Qwen3MoeModel& model, int max_ctx,
    ExpertWeightSource& host_source, std::vector<std::span<const uint8_t>> dma_ranges,
    const RoutingTraceHooks& hooks, bool cache_by_default, std::FILE* err);

}  // namespace moetier
