// CreateCudaWorkerEngine in a build without nvcc.
#include "engine/cuda_engine_factory.h"

namespace moetier {

bool CudaEngineBuilt() { return false; }

namespace {

absl::Status NotBuilt() {
  return absl::UnimplementedError(
      "this moetier-worker was built without CUDA (CMake found no nvcc); rebuild where the "
      "CUDA toolkit is installed (/usr/local/cuda) to run on a GPU");
}

}  // namespace

absl::Status CheckCudaDevice(int) { return NotBuilt(); }

absl::Status CheckModelForCudaWorker(const Model&) { return NotBuilt(); }

absl::StatusOr<double> MeasurePinnedCopyBytesPerS(int, uint64_t, int) { return NotBuilt(); }

absl::StatusOr<CudaWorkerEngine> CreateCudaWorkerEngine(const Model&,
                                                        const CudaWorkerEngineOptions&) {
  return NotBuilt();
}

}  // namespace moetier
