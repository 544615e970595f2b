#include "blocks/cuda/cuda_context.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/check.h"
#include "blocks/cuda/cuda_check.h"

namespace moetier {
namespace {

// Enough for a decode step's marks on the largest models without the
// timeline's mid-pass waits (about 8 a layer).
constexpr int kPhaseEvents = 1024;

// CUDA events on one stream, created once and destroyed with the clock.
class CudaEventClock final : public PhaseEventClock {
 public:
  explicit CudaEventClock(cudaStream_t stream) : stream_(stream) {}
  ~CudaEventClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cudaGetLastError();
  }
  absl::Status Create(int n) {
    for (int i = 0; i < n; ++i) {
      cudaEvent_t e = nullptr;
      MOETIER_RETURN_IF_ERROR(CudaCall(cudaEventCreate(&e), "cudaEventCreate (phase timing)"));
      events_.push_back(e);
    }
    return absl::OkStatus();
  }
  int capacity() const override { return static_cast<int>(events_.size()); }
  absl::Status Record(int i) override {
    return CudaCall(cudaEventRecord(events_[static_cast<size_t>(i)], stream_),
                    "cudaEventRecord (phase timing)");
  }
  absl::Status Wait(int i) override {
    return CudaCall(cudaEventSynchronize(events_[static_cast<size_t>(i)]),
                    "waiting for a phase timing event");
  }
  absl::StatusOr<double> Seconds(int from, int to) override {
    float ms = 0.0f;
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaEventElapsedTime(&ms, events_[static_cast<size_t>(from)],
                                                          events_[static_cast<size_t>(to)]),
                                     "cudaEventElapsedTime (phase timing)"));
    return ms * 1e-3;
  }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

CudaContext::CudaContext(int device, int gemv_max_rows, bool use_cublas)
    : device_(device), gemv_max_rows_(gemv_max_rows), use_cublas_(use_cublas) {}

CudaContext::~CudaContext() {
  // Errors are ignored here: a failed device leaves nothing to do but free.
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  blas_.reset();  // its stream is ours
  timeline_.reset();
  phase_clock_.reset();
  for (void* p : device_blocks_) cudaFree(p);
  for (void* p : pinned_blocks_) cudaFreeHost(p);
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  cudaGetLastError();
}

absl::Status CudaContext::MakeCurrent() const {
  return CudaCall(cudaSetDevice(device_), absl::StrFormat("cudaSetDevice(%d)", device_));
}

absl::Status CudaContext::Init(int max_rows) {
  MOETIER_RETURN_IF_ERROR(MakeCurrent());
  cudaStream_t stream = nullptr;
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  stream_ = stream;
  if (gemm_possible(max_rows) && use_cublas_) {
    absl::StatusOr<std::unique_ptr<cuda::CudaBlas>> blas = cuda::CudaBlas::Create();
    if (!blas.ok()) return blas.status();
    blas_ = *std::move(blas);
  }
  return absl::OkStatus();
}

absl::Status CudaContext::EnablePhaseTiming(bool on) {
  if (on && timeline_ == nullptr) {
    MOETIER_RETURN_IF_ERROR(MakeCurrent());
    auto clock = std::make_unique<CudaEventClock>(static_cast<cudaStream_t>(stream_));
    MOETIER_RETURN_IF_ERROR(clock->Create(kPhaseEvents));
    timeline_ = std::make_unique<PhaseTimeline>(*clock);
    phase_clock_ = std::move(clock);
  }
  timing_on_ = on;
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaContext::DeviceAlloc(uint64_t bytes, const std::string& what) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, std::max<uint64_t>(bytes, 1));
  if (err == cudaSuccess) {
    device_blocks_.push_back(p);
    return p;
  }
  cudaGetLastError();
  size_t free_bytes = 0, total_bytes = 0;
  std::string memory = "unknown";
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    memory = absl::StrFormat("%.2f GiB free of %.2f GiB", free_bytes / 1073741824.0,
                             total_bytes / 1073741824.0);
  }
  cudaGetLastError();
  const std::string message = absl::StrFormat(
      "cudaMalloc of %d bytes (%.1f MiB) for %s on cuda:%d failed: %s; device memory: %s; "
      "already allocated by this engine: %.2f GiB of weights, %.2f GiB of buffers",
      bytes, bytes / 1048576.0, what, device_, cudaGetErrorString(err), memory,
      weight_bytes_ / 1073741824.0, buffer_bytes_ / 1073741824.0);
  if (err != cudaErrorMemoryAllocation) return absl::InternalError(message);
  return absl::ResourceExhaustedError(
      message + " (use a smaller model, a shorter context or a smaller batch)");
}

absl::StatusOr<void*> CudaContext::PinnedAlloc(uint64_t bytes, const std::string& what) {
  void* p = nullptr;
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaMallocHost(&p, bytes),
                                   absl::StrFormat("cudaMallocHost of %d bytes for %s", bytes,
                                                   what)));
  pinned_blocks_.push_back(p);
  return p;
}

absl::StatusOr<float*> CudaContext::UploadFloats(const std::vector<float>& values,
                                                 const std::string& what) {
  const uint64_t bytes = values.size() * sizeof(float);
  absl::StatusOr<void*> p = DeviceAlloc(bytes, what);
  if (!p.ok()) return p.status();
  weight_bytes_ += bytes;
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaMemcpy(*p, values.data(), bytes, cudaMemcpyHostToDevice),
                                   "copying " + what + " to the device"));
  return static_cast<float*>(*p);
}

absl::Status CudaContext::AllocGemmScratch(int64_t largest_matrix_elems,
                                           int64_t widest_input_elems) {
  MOETIER_RETURN_IF_ERROR(AllocBuffer(w_scratch_, static_cast<uint64_t>(largest_matrix_elems),
                                      "GEMM weight scratch (fp16)"));
  MOETIER_RETURN_IF_ERROR(AllocBuffer(x_scratch_, static_cast<uint64_t>(widest_input_elems),
                                      "GEMM activation scratch (fp16)"));
  w_scratch_elems_ = largest_matrix_elems;
  x_scratch_elems_ = widest_input_elems;
  return absl::OkStatus();
}

absl::Status CudaContext::MatMul(const DeviceMatrix& w, const float* x, int64_t n, float* y) {
  if (n <= gemv_max_rows_) {
    for (int64_t t0 = 0; t0 < n; t0 += cuda::kCudaGemvMaxBatch) {
      const int rows = static_cast<int>(std::min<int64_t>(cuda::kCudaGemvMaxBatch, n - t0));
      MOETIER_RETURN_IF_ERROR(cuda::GemvQuant(w.type, w.data, x + t0 * w.cols, w.rows, w.cols,
                                              rows, y + t0 * w.rows, stream_));
    }
    return absl::OkStatus();
  }
  MOETIER_CHECK(w_scratch_ != nullptr && w.rows * w.cols <= w_scratch_elems_ &&
                n * w.cols <= x_scratch_elems_);
  return cuda::GemmQuant(blas_.get(), w.type, w.data, x, w.rows, w.cols, n, w_scratch_,
                         x_scratch_, y, stream_);
}

absl::Status CudaContext::Sync(const char* where) const {
  return CudaCall(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)),
                  absl::StrFormat("CUDA work of %s", where));
}

}  // namespace moetier
