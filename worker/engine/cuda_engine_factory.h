// The CUDA engine as the worker sees it, without CUDA headers: what to run
// on which device, and with which expert cache. Defined by the CUDA engine
// library where the build found nvcc; otherwise by a stub whose
// CreateCudaWorkerEngine says the worker was built without CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "blocks/cuda/phase_timeline.h"
#include "cache/expert_cache_control.h"
#include "cache/expert_slot_cache.h"
#include "cache/miss_cost_model.h"
#include "engine/expert_source.h"
#include "engine/forward_engine.h"
#include "engine/routing_hook.h"
#include "model/model.h"

namespace moetier {

struct CudaWorkerEngineOptions {
  int device = 0;  // CUDA ordinal
  int max_ctx = 4096;
  int max_sequences = 1;  // sequences alive at once (--parallel)
  KvCacheTypes kv_types;  // as CudaEngineConfig's
  // The routed experts' host copies. Null: every expert is uploaded from
  // the model's mapping at creation (the model must fit the device).
  // Otherwise the device keeps a cache of them, filled from this source.
  // Not owned; must outlive the engine.
  ExpertWeightSource* expert_source = nullptr;
  // Host memory behind expert_source to register for DMA (the store's slot
  // area); copies from elsewhere go through pinned staging buffers.
  std::vector<std::span<const uint8_t>> dma_ranges;
  // Without a cache: where the router's choices are counted (the daemon's
  // store, for its heat profile; ExpertWeightSource::Route); null: nowhere.
  ExpertWeightSource* routing_counter = nullptr;
  // The cache's size: bytes, or (when >= 0) a fraction of all experts'
  // bytes; both negative: auto (free device memory after the engine's own
  // allocations, minus a reserve).
  int64_t cache_bytes = -1;
  double cache_fraction = -1;
  ExpertPolicyKind policy = kDefaultExpertPolicy;
  MissPolicy miss_policy = MissPolicy::kAuto;
  bool prefetch = true;
  int static_host_layers = -1;  // >= 0: --n-cpu-moe N
  int host_threads = 1;         // host cores for misses computed on the host
  // Routing hooks (engine/routing_hook.h), as CudaEngineConfig's: the
  // override replaces the router's choice (benchmarks replay routing
  // traces), the observer sees the choice used (recording traces). Not
  // owned; must outlive the engine.
  RoutingObserver* routing_observer = nullptr;
  RoutingOverride* routing_override = nullptr;
};

struct CudaWorkerEngine {
  std::unique_ptr<ForwardEngine> engine;
  // The engine's expert cache, for the status page; null when every expert
  // is resident. Owned by the engine.
  const ExpertCacheReport* cache_report = nullptr;
  // Resizes that cache at run time (`moetier budget`); null with no cache.
  // Owned by the engine.
  ExpertCacheControl* cache_control = nullptr;
  // The engine's per-phase device time, for benchmarks. Owned by the engine.
  CudaPhaseTimers* phase_timers = nullptr;
  // One line each: the device, its memory use, the cache and the measured
  // cost model.
  std::vector<std::string> description;
};

// N of a "cuda:N" device name (N in 0..1023); -1 for anything else.
inline int CudaOrdinalOf(std::string_view device) {
  constexpr std::string_view kCuda = "cuda:";
  if (device.substr(0, kCuda.size()) != kCuda || device.size() == kCuda.size() ||
      device.size() > kCuda.size() + 4) {
    return -1;
  }
  int n = 0;
  for (const char c : device.substr(kCuda.size())) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n < 1024 ? n : -1;
}

// Whether this build contains the CUDA engine.
bool CudaEngineBuilt();

// OK when cuda:`ordinal` can be used: the build has CUDA, a driver answers
// and the device exists. Otherwise says which of these is missing.
absl::Status CheckCudaDevice(int ordinal);

// Host-to-device copy rate from pinned host memory, bytes/s: the median of
// `passes` cudaMemcpyAsync of `bytes` (after a warm-up), timed with events.
// The ceiling for an expert cache's fills.
absl::StatusOr<double> MeasurePinnedCopyBytesPerS(int device, uint64_t bytes, int passes);

// Whether the CUDA engine computes `model` (weight types, blocks, shapes),
// without touching a device; Unimplemented naming what it lacks, or in a
// build without CUDA.
absl::Status CheckModelForCudaWorker(const Model& model);

// Fails with Unimplemented in a build without CUDA, Unavailable without a
// usable device, and otherwise as the engine's creation does (names the
// tensor, buffer or option).
absl::StatusOr<CudaWorkerEngine> CreateCudaWorkerEngine(const Model& model,
                                                        const CudaWorkerEngineOptions& options);

}  // namespace moetier
