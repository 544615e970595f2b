// What every CUDA block of an engine shares: the device, the compute
// stream, the cuBLAS handle, device and pinned allocations (freed with the
// context, with errors that name what was being allocated and the device's
// memory), and the matrix product that picks the GEMV or the fp16 GEMM by
// row count. Plain C++ over the CUDA runtime; no model types.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cuda/cuda_kernels.h"
#include "blocks/cuda/phase_timeline.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {

// A 2-D weight (or one expert's slice) in device memory, in the file's encoding.
struct DeviceMatrix {
  TensorType type = TensorType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
};

class CudaContext {
 public:
  // Matrix inputs of at most `gemv_max_rows` rows use the GEMV (in calls of
  // up to kCudaGemvMaxBatch rows), more rows the fp16 GEMM (cuBLAS when
  // `use_cublas`, else the backend's tiled kernel).
  CudaContext(int device, int gemv_max_rows, bool use_cublas);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  // Makes the device current and creates the stream (and the cuBLAS handle
  // when a GEMM may run: `max_rows` > gemv_max_rows).
  absl::Status Init(int max_rows);

  int device() const { return device_; }
  cuda::CudaStream stream() const { return stream_; }
  // The current device is per host thread; a caller's may differ.
  absl::Status MakeCurrent() const;

  // cudaMalloc / cudaMallocHost freed with the context. Errors name `what`,
  // the size, and the device's free and total memory.
  absl::StatusOr<void*> DeviceAlloc(uint64_t bytes, const std::string& what);
  absl::StatusOr<void*> PinnedAlloc(uint64_t bytes, const std::string& what);
  // DeviceAlloc of `elems` elements into `dst`, counted as buffer bytes.
  template <typename T>
  absl::Status AllocBuffer(T*& dst, uint64_t elems, const std::string& what) {
    absl::StatusOr<void*> p = DeviceAlloc(elems * sizeof(T), what);
    if (!p.ok()) return p.status();
    buffer_bytes_ += elems * sizeof(T);
    dst = static_cast<T*>(*p);
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status AllocPinned(T*& dst, uint64_t elems, const std::string& what) {
    if (elems == 0) return absl::OkStatus();
    absl::StatusOr<void*> p = PinnedAlloc(elems * sizeof(T), what);
    if (!p.ok()) return p.status();
    dst = static_cast<T*>(*p);
    return absl::OkStatus();
  }
  // A host vector decoded to fp32 on the device, counted as weight bytes.
  absl::StatusOr<float*> UploadFloats(const std::vector<float>& values, const std::string& what);

  // The GEMM's fp16 scratch: the largest matrix and the most activation
  // values it will be given. Not needed when every product takes the GEMV.
  absl::Status AllocGemmScratch(int64_t largest_matrix_elems, int64_t widest_input_elems);
  bool gemm_possible(int max_rows) const { return gemv_max_rows_ < max_rows; }

  // y[t * w.rows + r] = sum_c w[r, c] * x[t * w.cols + c] for t < n.
  absl::Status MatMul(const DeviceMatrix& w, const float* x, int64_t n, float* y);
  // Waits for the stream; a kernel fault becomes a Status naming `where`.
  absl::Status Sync(const char* where) const;

  // Phase timing (blocks/cuda/phase_timeline.h), off until enabled: the
  // engine starts and collects a pass, the blocks mark their phases' ends.
  // While off every call is a branch. Enabling creates the events once.
  absl::Status EnablePhaseTiming(bool on);
  bool phase_timing() const { return timing_on_; }
  absl::Status StartPhases() { return timing_on_ ? timeline_->Start() : absl::OkStatus(); }
  absl::Status MarkPhase(CudaPhase phase) {
    return timing_on_ ? timeline_->Mark(phase) : absl::OkStatus();
  }
  // After the pass's sync. A failure turns timing off and is kept
  // (phase_timing_error()) rather than failing a pass whose work is done.
  void CollectPhases() {
    if (!timing_on_) return;
    if (absl::Status s = timeline_->Collect(); !s.ok()) {
      timing_on_ = false;
      timing_error_ = std::move(s);
    }
  }
  const absl::Status& phase_timing_error() const { return timing_error_; }
  // Device seconds per phase since the last reset (zeros before timing).
  CudaPhaseSeconds phase_seconds() const {
    return timeline_ != nullptr ? timeline_->seconds() : CudaPhaseSeconds{};
  }
  void ResetPhaseTimes() {
    if (timeline_ != nullptr) timeline_->Reset();
  }

  void add_weight_bytes(uint64_t bytes) { weight_bytes_ += bytes; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  uint64_t buffer_bytes() const { return buffer_bytes_; }

 private:
  const int device_;
  const int gemv_max_rows_;
  const bool use_cublas_;
  cuda::CudaStream stream_ = nullptr;
  std::unique_ptr<cuda::CudaBlas> blas_;
  std::vector<void*> device_blocks_;
  std::vector<void*> pinned_blocks_;
  uint64_t weight_bytes_ = 0;
  uint64_t buffer_bytes_ = 0;
  uint16_t* w_scratch_ = nullptr;  // fp16 copy of the largest matrix (GEMM only)
  uint16_t* x_scratch_ = nullptr;  // fp16 copy of the widest input
  int64_t w_scratch_elems_ = 0;
  int64_t x_scratch_elems_ = 0;
  std::unique_ptr<PhaseEventClock> phase_clock_;
  std::unique_ptr<PhaseTimeline> timeline_;
  bool timing_on_ = false;
  absl::Status timing_error_;
};

}  // namespace moetier
