// The expert cache the worker's flags ask for (--expert-cache-mib,
// --miss-policy, --prefetch, --cache-policy, --n-cpu-moe), for the cpu
// backend: a SlotCachedExpertSource in front of the engine's expert source.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cache/slot_cached_expert_source.h"
#include "engine/expert_source.h"
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
std::string ExpertCacheSummary(const SlotCachedExpertSource& cache);

}  // namespace moetier
