// CreateCudaWorkerEngine in a build with the CUDA engine.
#include "engine/cuda_engine_factory.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "backend/cuda/cuda_device.h"
#include "blocks/cuda/cuda_check.h"
#include "engine/cuda_engine.h"

namespace moetier {

bool CudaEngineBuilt() { return true; }

absl::Status CheckCudaDevice(int ordinal) {
  absl::StatusOr<std::vector<CudaDeviceInfo>> devices = ListCudaDevices();
  if (!devices.ok()) return devices.status();
  if (ordinal < 0 || ordinal >= static_cast<int>(devices->size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device cuda:%d does not exist: this machine has %d CUDA device(s)", ordinal,
        devices->size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> MeasurePinnedCopyBytesPerS(int device, uint64_t bytes, int passes) {
  if (absl::Status s = CheckCudaDevice(device); !s.ok()) return s;
  absl::Status s = CudaCall(cudaSetDevice(device), "cudaSetDevice");
  void* host = nullptr;
  void* dev = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  if (s.ok()) s = CudaCall(cudaMallocHost(&host, bytes), "cudaMallocHost");
  if (s.ok()) s = CudaCall(cudaMalloc(&dev, bytes), "cudaMalloc");
  if (s.ok()) s = CudaCall(cudaEventCreate(&start), "cudaEventCreate");
  if (s.ok()) s = CudaCall(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> rates;
  for (int p = 0; s.ok() && p <= passes; ++p) {
    s = CudaCall(cudaEventRecord(start, nullptr), "cudaEventRecord");
    if (s.ok()) {
      s = CudaCall(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, nullptr),
                   "cudaMemcpyAsync (pinned host to device)");
    }
    if (s.ok()) s = CudaCall(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    if (s.ok()) s = CudaCall(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (s.ok()) s = CudaCall(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (s.ok() && p > 0 && ms > 0) rates.push_back(static_cast<double>(bytes) / (ms * 1e-3));
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  if (dev != nullptr) cudaFree(dev);
  if (host != nullptr) cudaFreeHost(host);
  if (!s.ok()) return s;
  if (rates.empty()) return absl::InternalError("no pinned copy was timed");
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

absl::Status CheckModelForCudaWorker(const Model& model) { return CudaEngine::CheckModel(model); }

absl::StatusOr<CudaWorkerEngine> CreateCudaWorkerEngine(const Model& model,
                                                        const CudaWorkerEngineOptions& options) {
  if (absl::Status s = CheckCudaDevice(options.device); !s.ok()) return s;
  absl::StatusOr<std::vector<CudaDeviceInfo>> devices = ListCudaDevices();
  if (!devices.ok()) return devices.status();
  CudaEngineConfig config;
  config.device = options.device;
  config.max_ctx = options.max_ctx;
  config.max_sequences = options.max_sequences;
  config.kv_types = options.kv_types;
  config.routing_observer = options.routing_observer;
  config.routing_override = options.routing_override;
  config.routing_counter = options.routing_counter;
  if (options.expert_source != nullptr) {
    CudaExpertCacheConfig& cache = config.expert_cache;
    cache.policy = options.policy;
    cache.miss_policy = options.miss_policy;
    cache.prefetch = options.prefetch;
    cache.static_host_layers = options.static_host_layers;
    cache.host_threads = options.host_threads;
    if (options.cache_bytes >= 0) {
      cache.pool_bytes = options.cache_bytes;
    } else if (options.cache_fraction >= 0) {
      // Whole slots of the device's layout: 100% holds every expert.
      const ExpertSlotCacheOptions geometry = CudaSlotCacheOptions(RoutedExpertShapesOf(model), cache);
      const double slots = std::round(options.cache_fraction * static_cast<double>(
                                                                   FullPoolBytes(geometry) /
                                                                   geometry.slot_bytes));
      cache.pool_bytes = static_cast<int64_t>(slots) * static_cast<int64_t>(geometry.slot_bytes);
    }
    config.expert_source = options.expert_source;
    for (const std::span<const uint8_t> range : options.dma_ranges) {
      config.dma_ranges.push_back({range.data(), range.size()});
    }
  }
  absl::StatusOr<std::unique_ptr<CudaEngine>> engine = CudaEngine::Create(model, config);
  if (!engine.ok()) return engine.status();
  const CudaDeviceInfo& d = (*devices)[static_cast<size_t>(options.device)];
  CudaWorkerEngine out;
  out.description.push_back(absl::StrFormat(
      "cuda:%d %s (sm_%d%d, %.1f GiB): weights %.2f GiB, buffers %.2f GiB%s", options.device,
      d.name, d.compute_capability_major, d.compute_capability_minor,
      d.total_memory_bytes / 1073741824.0, (*engine)->weight_bytes() / 1073741824.0,
      (*engine)->buffer_bytes() / 1073741824.0,
      (*engine)->expert_cache() == nullptr ? ", every expert resident" : ""));
  if (const CudaExpertCache* cache = (*engine)->expert_cache(); cache != nullptr) {
    out.description.push_back(cache->cache().Describe());
    out.description.push_back(absl::StrFormat(
        "expert cache DMA: %.2f GiB of host memory registered, the rest through pinned staging",
        cache->registered_bytes() / 1073741824.0));
    if (options.miss_policy == MissPolicy::kAuto && (*engine)->miss_cost_model() != nullptr) {
      out.description.push_back("miss cost model: " + (*engine)->miss_cost_model()->ToString());
    }
  }
  out.cache_report = (*engine)->expert_cache_report();
  if (out.cache_report != nullptr) out.cache_control = engine->get();
  out.phase_timers = engine->get();
  out.engine = *std::move(engine);
  return out;
}

}  // namespace moetier
