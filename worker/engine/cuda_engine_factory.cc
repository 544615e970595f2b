// CreateCudaWorkerEngine in a build with the CUDA engine.
#include "engine/cuda_engine_factory.h"

#include "absl/strings/str_format.h"
#include "backend/cuda/cuda_device.h"
#include "engine/qwen3moe_cuda.h"

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

absl::StatusOr<CudaWorkerEngine> CreateCudaWorkerEngine(const Qwen3MoeModel& model,
                                                        const CudaWorkerEngineOptions& options) {
  if (absl::Status s = CheckCudaDevice(options.device); !s.ok()) return s;
  absl::StatusOr<std::vector<CudaDeviceInfo>> devices = ListCudaDevices();
  if (!devices.ok()) return devices.status();
  if (options.expert_source != nullptr) {
    return absl::UnimplementedError(
        "the CUDA engine's VRAM expert cache is not built yet: run with every expert resident "
        "(standalone) or on device cpu");
  }
  CudaEngineConfig config;
  config.device = options.device;
  config.max_ctx = options.max_ctx;
  absl::StatusOr<std::unique_ptr<CudaQwen3Moe>> engine = CudaQwen3Moe::Create(model, config);
  if (!engine.ok()) return engine.status();
  const CudaDeviceInfo& d = (*devices)[static_cast<size_t>(options.device)];
  CudaWorkerEngine out;
  out.description.push_back(absl::StrFormat(
      "cuda:%d %s (sm_%d%d, %.1f GiB): weights %.2f GiB, buffers %.2f GiB, every expert resident",
      options.device, d.name, d.compute_capability_major, d.compute_capability_minor,
      d.total_memory_bytes / 1073741824.0, (*engine)->weight_bytes() / 1073741824.0,
      (*engine)->buffer_bytes() / 1073741824.0));
  out.engine = *std::move(engine);
  return out;
}

}  // namespace moetier
