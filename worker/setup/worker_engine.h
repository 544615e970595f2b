// The engine the worker's flags ask for, built the same way for standalone
// runs and for daemon mode: the backend (--backend, --device), the context
// (--ctx), threads, weight pages, the routing trace hooks, and the expert
// cache (--expert-cache-mib, --miss-policy, --prefetch, --cache-policy,
// --n-cpu-moe) in front of wherever the experts come from (the model's
// mapping standalone, the daemon's store in daemon mode).
#pragma once

#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/expert_cache_control.h"
#include "cache/expert_slot_cache.h"
#include "cache/slot_cached_expert_source.h"
#include "engine/cuda_engine_factory.h"
#include "engine/expert_source.h"
#include "engine/forward_engine.h"
#include "engine/routing_trace_hooks.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"
#include "standalone/options.h"

namespace moetier {

// Where the worker's routed experts come from.
struct ExpertOrigin {
  ExpertWeightSource* source = nullptr;  // the mapping or the store; not owned
  // `source` serves the model's own mapping: without a cache the cpu engine
  // reads the mapping itself (and may copy it to huge pages).
  bool source_is_mapping = false;
  // Host memory behind `source` a GPU may read by DMA (the store's slots).
  std::vector<std::span<const uint8_t>> dma_ranges;
  // The GPU keeps an expert cache over `source` unless the flags say
  // otherwise (daemon mode); false: every expert is uploaded unless a cache
  // flag is given (standalone).
  bool cache_by_default = false;
};

struct WorkerEngine {
  // Declared before the engine, which reads through it.
  std::unique_ptr<SlotCachedExpertSource> host_cache;
  std::unique_ptr<ForwardEngine> engine;
  const ExpertCacheReport* cache_report = nullptr;  // the cache in use, if any
  ExpertCacheControl* cache_control = nullptr;      // resizes it, if any
  std::string backend;                              // "cpu", "reference", "cuda"
  int threads = 1;
  int max_ctx = 0;
};

// The model at `gguf` with the flags' rope scaling (--rope-scaling,
// --rope-scale, --yarn-orig-ctx) over the file's: the one place the worker
// loads its model. A scaling that stretches the angles (linear or YaRN with a
// factor above 1) raises the training context to original context x factor,
// the length the scaling is for, so that --ctx may reach it.
absl::StatusOr<Model> LoadWorkerModel(const GgufModel& gguf, const WorkerOptions& options);

// The context the flags give for a model trained on n_ctx_train positions:
// --ctx, else the default raised to fit `needed` positions, never beyond
// the training context. The one place the context limit is decided.
absl::StatusOr<int> ResolveContextLength(const WorkerOptions& options, int n_ctx_train,
                                         size_t needed);
int ResolveThreads(const WorkerOptions& options);

// Fails, naming the flag, when the flags do not fit together or the model
// (an error from the engine's creation otherwise). `hooks` must outlive the
// engine. Describes the engine and its cache on `err`.
absl::StatusOr<WorkerEngine> MakeWorkerEngine(const WorkerOptions& options, const Model& model,
                                              int max_ctx, const ExpertOrigin& experts,
                                              const RoutingTraceHooks& hooks, std::FILE* err);

// The expert cache the flags ask for on the cpu backend, in front of
// `inner`. Null when the flags ask for no cache (the cpu default). Fails,
// naming the flag, when a cache flag is given without a cache, or the size
// cannot hold what the mode needs. Describes the cache on `err`.
absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> MakeWorkerExpertCache(
    const WorkerOptions& options, const Model& model, ExpertWeightSource& inner, std::FILE* err);

// Whether this build serves the model at `path` on `device` ("cpu",
// "cuda:N", or empty for any backend: the architecture and that every tensor
// type decodes): what `moetier-worker --check-model FILE [--device DEV]`
// answers. Reads the header and tensor table only and touches no GPU.
absl::Status CheckModelForDevice(const std::string& path, const std::string& device);

// One line of the cache's counters, for logs.
std::string ExpertCacheSummary(const ExpertCacheReport& cache);

}  // namespace moetier
