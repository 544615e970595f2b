#include "blocks/cuda/cuda_expert_cache.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "backend/cuda/cuda_kernels.h"
#include "base/check.h"
#include "blocks/cuda/cuda_check.h"

namespace moetier {
namespace {

// Each matrix of a slot starts at a multiple of this (the GEMV reads rows
// with aligned vector loads; 256 also suits the copy engines).
constexpr uint64_t kSlotAlign = 256;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;
// The copy-rate probe: 16 slots' worth, at most this many bytes.
constexpr uint64_t kCopyProbeMaxBytes = uint64_t{64} << 20;
constexpr int kProbeReps = 5;
constexpr int kProbeRows = 8;

// Prefixes the cache's CUDA errors, which reach the user through the
// engine's Forward.
constexpr absl::string_view kCacheContext = "expert cache: ";

cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t AsEvent(void* e) { return static_cast<cudaEvent_t>(e); }

double Median(std::vector<double> v) {
  MOETIER_CHECK(!v.empty());
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device and pinned blocks of the start-up probes, freed on every path.
struct ProbeBlocks {
  std::vector<void*> device;
  std::vector<void*> pinned;
  std::vector<cudaEvent_t> events;
  ~ProbeBlocks() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    for (void* p : device) cudaFree(p);
    for (void* p : pinned) cudaFreeHost(p);
    cudaGetLastError();
  }
  absl::StatusOr<void*> Device(uint64_t bytes, const char* what) {
    void* p = nullptr;
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaMalloc(&p, std::max<uint64_t>(bytes, 1)),
                                     absl::StrFormat("cudaMalloc of %d bytes for %s", bytes, what),
                                     kCacheContext));
    device.push_back(p);
    return p;
  }
  absl::StatusOr<void*> Pinned(uint64_t bytes, const char* what) {
    void* p = nullptr;
    MOETIER_RETURN_IF_ERROR(
        CudaCall(cudaMallocHost(&p, std::max<uint64_t>(bytes, 1)),
                 absl::StrFormat("cudaMallocHost of %d bytes for %s", bytes, what), kCacheContext));
    pinned.push_back(p);
    return p;
  }
  absl::StatusOr<cudaEvent_t> Event() {
    cudaEvent_t e = nullptr;
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaEventCreate(&e), "cudaEventCreate", kCacheContext));
    events.push_back(e);
    return e;
  }
};

// Seconds between two timing events already recorded on `stream`, after
// waiting for it.
absl::StatusOr<double> ElapsedSeconds(cudaEvent_t start, cudaEvent_t end) {
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaEventSynchronize(end), "waiting for a timing event", kCacheContext));
  float ms = 0;
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime", kCacheContext));
  // The events' resolution is about half a microsecond; a zero would make
  // an infinite rate.
  return std::max(1e-6, static_cast<double>(ms) * 1e-3);
}


}  // namespace

ExpertSlotCacheOptions CudaSlotCacheOptions(const RoutedExpertShapes& experts,
                                            const CudaExpertCacheConfig& config) {
  ExpertSlotCacheOptions options = ExpertSlotGeometry(experts, kSlotAlign);
  options.policy = config.policy;
  options.miss_policy = config.miss_policy;
  options.prefetch = config.prefetch;
  options.static_host_layers = config.static_host_layers;
  return options;
}

absl::StatusOr<std::unique_ptr<CudaExpertCache>> CudaExpertCache::Create(
    const RoutedExpertShapes& experts, ExpertWeightSource& source,
    const CudaExpertCacheConfig& config, std::span<const HostMemoryRange> dma_ranges, int max_rows,
    void* compute_stream) {
  if (max_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("expert cache: max_rows %d is not positive", max_rows));
  }
  if (config.pool_bytes < -1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("expert cache: pool size %d bytes is negative (-1 sizes it from free VRAM)",
                        config.pool_bytes));
  }
  if (config.static_host_layers < -1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("expert cache: static host layers %d is below -1 (-1: dynamic placement)",
                        config.static_host_layers));
  }
  if (source.max_experts_held() < 1) {
    return absl::InvalidArgumentError("expert cache: the expert source holds no expert at once");
  }
  int threads = config.host_threads;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::unique_ptr<CudaExpertCache> cache(
      new CudaExpertCache(experts, source, max_rows, threads));
  MOETIER_RETURN_IF_ERROR(cache->Init(experts, config, dma_ranges, compute_stream));
  return cache;
}

CudaExpertCache::CudaExpertCache(const RoutedExpertShapes& experts, ExpertWeightSource& source,
                                 int max_rows, int host_threads)
    : source_(source),
      max_rows_(max_rows),
      n_embd_(experts.n_embd),
      top_k_(experts.top_k),
      host_pool_(host_threads),
      // At least the probe's rows, so that MeasureHostExpertCost can time them.
      host_ffn_(experts, std::max(max_rows, kProbeRows), host_pool_) {}

CudaExpertCache::~CudaExpertCache() {
  // Errors are ignored: nothing is left to do but free.
  (void)FinishHold();
  if (copy_stream_ != nullptr) cudaStreamSynchronize(AsStream(copy_stream_));
  for (void* e : filled_) cudaEventDestroy(AsEvent(e));
  for (void* e : last_read_) cudaEventDestroy(AsEvent(e));
  for (int i = 0; i < kStagingBuffers; ++i) {
    if (staging_done_[i] != nullptr) cudaEventDestroy(AsEvent(staging_done_[i]));
    if (staging_[i] != nullptr) cudaFreeHost(staging_[i]);
  }
  for (void* e : {copy_start_, copy_end_}) {
    if (e != nullptr) cudaEventDestroy(AsEvent(e));
  }
  if (pool_ != nullptr) cudaFree(pool_);
  if (host_in_ != nullptr) cudaFreeHost(host_in_);
  if (host_out_ != nullptr) cudaFreeHost(host_out_);
  for (const Registered& r : registered_) cudaHostUnregister(const_cast<uint8_t*>(r.begin));
  if (copy_stream_ != nullptr) cudaStreamDestroy(AsStream(copy_stream_));
  cudaGetLastError();
}

absl::Status CudaExpertCache::Init(const RoutedExpertShapes& experts,
                                   const CudaExpertCacheConfig& config,
                                   std::span<const HostMemoryRange> dma_ranges,
                                   void* compute_stream) {
  ExpertSlotCacheOptions options = CudaSlotCacheOptions(experts, config);
  for (const ExpertLayerShape& lw : experts.layers) {
    geometry_.push_back(ExpertSlotLayoutOf(lw, kSlotAlign));
    shapes_.push_back(lw);
  }
  if (geometry_.empty() || options.slot_bytes == 0) {
    return absl::InvalidArgumentError("expert cache: the model has no expert layers");
  }

  cudaStream_t copy = nullptr;
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking),
                                   "creating the copy stream", kCacheContext));
  copy_stream_ = copy;
  for (void** e : {&copy_start_, &copy_end_}) {
    cudaEvent_t ev = nullptr;
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaEventCreate(&ev), "cudaEventCreate", kCacheContext));
    *e = ev;
  }
  for (int i = 0; i < kStagingBuffers; ++i) {
    void* p = nullptr;
    MOETIER_RETURN_IF_ERROR(
        CudaCall(cudaMallocHost(&p, options.slot_bytes),
                 absl::StrFormat("cudaMallocHost of a %d-byte staging buffer", options.slot_bytes),
                 kCacheContext));
    staging_[i] = static_cast<uint8_t*>(p);
    cudaEvent_t ev = nullptr;
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                                     "cudaEventCreate", kCacheContext));
    staging_done_[i] = ev;
  }
  const uint64_t host_rows_bytes = static_cast<uint64_t>(max_rows_) *
                                   static_cast<uint64_t>(top_k_) * static_cast<uint64_t>(n_embd_) *
                                   sizeof(float);
  for (float** dst : {&host_in_, &host_out_}) {
    void* p = nullptr;
    MOETIER_RETURN_IF_ERROR(
        CudaCall(cudaMallocHost(&p, host_rows_bytes),
                 absl::StrFormat("cudaMallocHost of %d bytes for host-computed expert rows",
                                 host_rows_bytes),
                 kCacheContext));
    *dst = static_cast<float*>(p);
  }
  RegisterRanges(dma_ranges);

  if (config.miss_policy == MissPolicy::kAuto) {
    // Needs the staging ring (the probe's expert comes through the source)
    // but no pool: it runs before free VRAM is measured.
    MOETIER_RETURN_IF_ERROR(MeasureCosts(experts, compute_stream));
    options.cost = cost_;
  }
  absl::StatusOr<uint64_t> pool = ChoosePoolBytes(config, options);
  if (!pool.ok()) return pool.status();
  options.pool_bytes = *pool;
  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> cache = ExpertSlotCache::Create(options);
  if (!cache.ok()) return cache.status();
  cache_ = *std::move(cache);

  pool_bytes_ = uint64_t{cache_->n_slots()} * options.slot_bytes;
  if (pool_bytes_ > 0) {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, pool_bytes_);
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      std::string memory = "unknown";
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
        memory =
            absl::StrFormat("%.2f GiB free of %.2f GiB", free_bytes / kGiB, total_bytes / kGiB);
      }
      cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrFormat(
          "expert cache: cudaMalloc of the %.1f MiB slot pool (%u slots of %.2f MiB) failed: %s; "
          "device memory: %s (give a smaller VRAM budget or more host layers)",
          pool_bytes_ / kMiB, cache_->n_slots(), options.slot_bytes / kMiB, cudaGetErrorString(err),
          memory));
    }
    pool_ = static_cast<uint8_t*>(p);
  }
  filled_.reserve(cache_->n_slots());
  last_read_.reserve(cache_->n_slots());
  for (uint32_t s = 0; s < cache_->n_slots(); ++s) {
    for (std::vector<void*>* events : {&filled_, &last_read_}) {
      cudaEvent_t ev = nullptr;
      MOETIER_RETURN_IF_ERROR(CudaCall(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                                       "cudaEventCreate", kCacheContext));
      events->push_back(ev);
    }
  }
  return FillInitialSlots();
}

absl::StatusOr<uint64_t> CudaExpertCache::Resize(uint64_t pool_bytes, void* compute_stream) {
  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> next = ResizedExpertSlotCache(*cache_, pool_bytes);
  if (!next.ok()) return next.status();
  if ((*next)->n_slots() == cache_->n_slots()) return pool_bytes_;
  MOETIER_RETURN_IF_ERROR(FinishHold());
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaStreamSynchronize(AsStream(compute_stream)),
                                   "cudaStreamSynchronize", kCacheContext));
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaStreamSynchronize(AsStream(copy_stream_)),
                                   "cudaStreamSynchronize", kCacheContext));
  const uint32_t n_slots = (*next)->n_slots();
  const uint64_t bytes = uint64_t{n_slots} * slot_bytes();
  void* p = nullptr;
  if (const cudaError_t err = cudaMalloc(&p, bytes); err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrFormat(
        "expert cache: cudaMalloc of a %.1f MiB slot pool failed (%s); the %.1f MiB cache stays",
        bytes / kMiB, cudaGetErrorString(err), pool_bytes_ / kMiB));
  }
  // One fill and one last-read event per slot: create the missing ones,
  // drop the extra ones (idle after the synchronizations above).
  while (filled_.size() < n_slots) {
    for (std::vector<void*>* events : {&filled_, &last_read_}) {
      cudaEvent_t ev = nullptr;
      const absl::Status s = CudaCall(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                                      "cudaEventCreate", kCacheContext);
      if (!s.ok()) {
        cudaFree(p);
        return s;
      }
      events->push_back(ev);
    }
  }
  while (filled_.size() > n_slots) {
    cudaEventDestroy(AsEvent(filled_.back()));
    cudaEventDestroy(AsEvent(last_read_.back()));
    filled_.pop_back();
    last_read_.pop_back();
  }
  if (pool_ != nullptr) cudaFree(pool_);
  pool_ = static_cast<uint8_t*>(p);
  pool_bytes_ = bytes;
  cache_ = *std::move(next);
  return pool_bytes_;
}

void CudaExpertCache::RegisterRanges(std::span<const HostMemoryRange> ranges) {
  int device = 0;
  int read_only = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, device) !=
          cudaSuccess) {
    read_only = 0;
  }
  cudaGetLastError();
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (const HostMemoryRange& r : ranges) {
    if (r.data == nullptr || r.bytes == 0) continue;
    const uint64_t begin = reinterpret_cast<uintptr_t>(r.data) / page * page;
    const uint64_t end = AlignUp(reinterpret_cast<uintptr_t>(r.data) + r.bytes, page);
    void* p = reinterpret_cast<void*>(static_cast<uintptr_t>(begin));
    const unsigned int flags = read_only ? cudaHostRegisterReadOnly : cudaHostRegisterDefault;
    // A failure (no permission to pin, a range already registered, a
    // mapping the driver cannot pin) only means copies from it are staged.
    if (cudaHostRegister(p, end - begin, flags) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    registered_.push_back(
        {reinterpret_cast<const uint8_t*>(p), reinterpret_cast<const uint8_t*>(p) + (end - begin)});
    registered_bytes_ += end - begin;
  }
  std::sort(registered_.begin(), registered_.end(),
            [](const Registered& a, const Registered& b) { return a.begin < b.begin; });
}

bool CudaExpertCache::IsRegistered(const uint8_t* p, uint64_t bytes) const {
  auto it = std::upper_bound(registered_.begin(), registered_.end(), p,
                             [](const uint8_t* q, const Registered& r) { return q < r.begin; });
  if (it == registered_.begin()) return false;
  --it;
  return p >= it->begin && p + bytes <= it->end;
}

absl::Status CudaExpertCache::MeasureCosts(const RoutedExpertShapes& experts,
                                           void* compute_stream) {
  // The first layer with experts (a model may lead with dense layers).
  size_t probe_layer = 0;
  while (probe_layer + 1 < shapes_.size() && shapes_[probe_layer].expert_bytes() == 0) {
    ++probe_layer;
  }
  const ExpertSlotLayout& g = geometry_[probe_layer];
  const ExpertLayerShape& shape = shapes_[probe_layer];
  const uint64_t slot_bytes = AlignUp(g.end(), kSlotAlign);
  const uint64_t copy_bytes = std::min(kCopyProbeMaxBytes, 16 * slot_bytes);
  const int64_t n_embd = experts.n_embd;
  const int64_t n_ff = experts.n_ff;
  cudaStream_t compute = AsStream(compute_stream);
  cudaStream_t copy = AsStream(copy_stream_);

  ProbeBlocks blocks;
  absl::StatusOr<void*> host = blocks.Pinned(copy_bytes, "the copy-rate probe");
  absl::StatusOr<void*> dst = blocks.Device(copy_bytes, "the copy-rate probe");
  const uint64_t x_elems = static_cast<uint64_t>(kProbeRows) * n_embd;
  const uint64_t ff_elems = static_cast<uint64_t>(kProbeRows) * n_ff;
  absl::StatusOr<void*> work = blocks.Device(
      slot_bytes + (2 * x_elems + 2 * ff_elems) * sizeof(float), "the expert compute probe");
  absl::StatusOr<cudaEvent_t> start = blocks.Event();
  absl::StatusOr<cudaEvent_t> end = blocks.Event();
  for (const absl::Status& s :
       {host.status(), dst.status(), work.status(), start.status(), end.status()}) {
    MOETIER_RETURN_IF_ERROR(s);
  }

  // Copy rate: host pinned memory to device memory on the copy stream.
  std::memset(*host, 0, copy_bytes);
  std::vector<double> seconds;
  for (int rep = 0; rep <= kProbeReps; ++rep) {  // rep 0 warms up
    MOETIER_RETURN_IF_ERROR(
        CudaCall(cudaEventRecord(*start, copy), "cudaEventRecord", kCacheContext));
    MOETIER_RETURN_IF_ERROR(
        CudaCall(cudaMemcpyAsync(*dst, *host, copy_bytes, cudaMemcpyHostToDevice, copy),
                 "the copy-rate probe", kCacheContext));
    MOETIER_RETURN_IF_ERROR(
        CudaCall(cudaEventRecord(*end, copy), "cudaEventRecord", kCacheContext));
    absl::StatusOr<double> s = ElapsedSeconds(*start, *end);
    if (!s.ok()) return s.status();
    if (rep > 0) seconds.push_back(*s);
  }
  cost_.copy_bytes_per_s = static_cast<double>(copy_bytes) / Median(seconds);

  // One real expert (expert 0 of the probe layer) through the source: host
  // cost, and a device copy for the device cost.
  const int32_t probe_expert[1] = {0};
  ExpertMatrices mats[1];
  MOETIER_RETURN_IF_ERROR(Acquire(static_cast<int>(probe_layer), probe_expert, mats));
  cost_.host = MeasureHostExpertCost(host_ffn_, shape, mats[0], kProbeRows, 3);
  auto* w = static_cast<uint8_t*>(*work);
  // Staged in the slot layout, as a fill from unregistered memory is; the
  // probe's copy is not one of the pool's slots.
  std::memcpy(staging_[0], mats[0].gate, g.gate_bytes);
  std::memcpy(staging_[0] + g.up_offset, mats[0].up, g.up_bytes);
  std::memcpy(staging_[0] + g.down_offset, mats[0].down, g.down_bytes);
  absl::Status copied = CudaCall(
      cudaMemcpyAsync(w, staging_[0], g.down_offset + g.down_bytes, cudaMemcpyHostToDevice, copy),
      "copying the probe expert", kCacheContext);
  if (copied.ok())
    copied = CudaCall(cudaStreamSynchronize(copy), "copying the probe expert", kCacheContext);
  MOETIER_RETURN_IF_ERROR(FinishHold());
  MOETIER_RETURN_IF_ERROR(copied);

  // Device cost: gate and up GEMVs, SiLU·mul, down GEMV, as the MoE block
  // launches them, for 1 and kProbeRows rows.
  auto* x = reinterpret_cast<float*>(w + slot_bytes);
  float* gate_out = x + x_elems;
  float* up_out = gate_out + ff_elems;
  float* y = up_out + ff_elems;
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaMemsetAsync(x, 0, x_elems * sizeof(float), compute),
                                   "clearing the probe's input", kCacheContext));
  auto expert_seconds = [&](int rows) -> absl::StatusOr<double> {
    std::vector<double> times;
    for (int rep = 0; rep <= kProbeReps; ++rep) {
      MOETIER_RETURN_IF_ERROR(
          CudaCall(cudaEventRecord(*start, compute), "cudaEventRecord", kCacheContext));
      MOETIER_RETURN_IF_ERROR(
          cuda::GemvQuant(shape.gate.type, w, x, n_ff, n_embd, rows, gate_out, compute));
      MOETIER_RETURN_IF_ERROR(
          cuda::GemvQuant(shape.up.type, w + g.up_offset, x, n_ff, n_embd, rows, up_out, compute));
      MOETIER_RETURN_IF_ERROR(cuda::SiluMul(gate_out, up_out, rows * n_ff, gate_out, compute));
      MOETIER_RETURN_IF_ERROR(cuda::GemvQuant(shape.down.type, w + g.down_offset, gate_out, n_embd,
                                              n_ff, rows, y, compute));
      MOETIER_RETURN_IF_ERROR(
          CudaCall(cudaEventRecord(*end, compute), "cudaEventRecord", kCacheContext));
      absl::StatusOr<double> s = ElapsedSeconds(*start, *end);
      if (!s.ok()) return s.status();
      if (rep > 0) times.push_back(*s);
    }
    return Median(std::move(times));
  };
  absl::StatusOr<double> one = expert_seconds(1);
  if (!one.ok()) return one.status();
  absl::StatusOr<double> many = expert_seconds(kProbeRows);
  if (!many.ok()) return many.status();
  cost_.device.per_row_s = std::max(0.0, (*many - *one) / (kProbeRows - 1));
  cost_.device.fixed_s = std::max(0.0, *one - cost_.device.per_row_s);
  cost_.sites_overlap = true;
  return CudaCall(cudaStreamSynchronize(compute), "the expert compute probe", kCacheContext);
}

absl::StatusOr<uint64_t> CudaExpertCache::ChoosePoolBytes(
    const CudaExpertCacheConfig& config, const ExpertSlotCacheOptions& options) const {
  if (config.static_host_layers >= 0) {
    if (config.pool_bytes >= 0) return static_cast<uint64_t>(config.pool_bytes);
    return StaticPoolBytes(options, config.static_host_layers);
  }
  const uint64_t full = FullPoolBytes(options);
  if (config.pool_bytes >= 0) return std::min(static_cast<uint64_t>(config.pool_bytes), full);
  size_t free_bytes = 0, total_bytes = 0;
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaMemGetInfo(&free_bytes, &total_bytes),
                                   "reading the free device memory", kCacheContext));
  const uint64_t reserve = std::max<uint64_t>(uint64_t{1} << 30, total_bytes / 20);
  const uint64_t available = free_bytes > reserve ? free_bytes - reserve : 0;
  const uint64_t need = MinDynamicPoolBytes(options);
  if (available < need && need < full) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "expert cache: %.0f MiB of VRAM is free after the engine's buffers; keeping a reserve of "
        "%.0f MiB leaves %.0f MiB, and the cache needs at least %.0f MiB (top_k = %u slots of "
        "%.2f MiB per layer); use a shorter context, a smaller batch or static placement with "
        "more host layers",
        free_bytes / kMiB, reserve / kMiB, available / kMiB, need / kMiB, options.top_k,
        options.slot_bytes / kMiB));
  }
  return std::min(std::max(available, need), full);
}

absl::Status CudaExpertCache::FillInitialSlots() {
  // Static placement's slots must all be filled; the warm start is a guess,
  // and an expert it cannot read is left to demand.
  std::vector<SlotFill> fills = cache_->InitialFills();
  const size_t n_required = fills.size();
  const std::vector<SlotFill> warm = cache_->WarmFills(
      WarmRanksOf(source_, cache_->options().n_layer, cache_->options().n_expert));
  fills.insert(fills.end(), warm.begin(), warm.end());
  const size_t group = static_cast<size_t>(source_.max_experts_held());
  std::vector<int32_t> ids(group);
  std::vector<ExpertMatrices> mats(group);
  std::vector<SlotFillJob> jobs(group);
  size_t begin = 0;
  while (begin < fills.size()) {
    size_t end = begin;
    while (end < fills.size() && end - begin < group && fills[end].layer == fills[begin].layer &&
           (end < n_required) == (begin < n_required)) {
      ++end;
    }
    const int layer = static_cast<int>(fills[begin].layer);
    const size_t n = end - begin;
    for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(fills[begin + i].expert);
    absl::Status s = Acquire(layer, std::span<const int32_t>(ids.data(), n),
                             std::span<ExpertMatrices>(mats.data(), n));
    if (s.ok()) {
      for (size_t i = 0; i < n; ++i) jobs[i] = {fills[begin + i].slot, mats[i]};
      s = EnqueueFills(layer, std::span<const SlotFillJob>(jobs.data(), n));
      const absl::Status finished = FinishHold();
      if (s.ok()) s = finished;
    }
    if (!s.ok() && begin < n_required) {
      return absl::Status(s.code(), absl::StrFormat("expert cache: filling layer %d's slots: %s",
                                                    layer, s.message()));
    }
    if (!s.ok()) {
      for (size_t i = begin; i < end; ++i) cache_->Discard(fills[i].layer, fills[i].expert);
      std::fprintf(stderr, "expert cache: warm start of layer %d cut short: %s\n", layer,
                   std::string(s.message()).c_str());
    }
    begin = end;
  }
  return absl::OkStatus();
}

int CudaExpertCache::max_group() const {
  return std::max(1, std::min(static_cast<int>(cache_->max_group()), source_.max_experts_held()));
}

bool CudaExpertCache::predicts() const {
  return cache_->options().prefetch && !cache_->is_static();
}

SlotExpertPointers CudaExpertCache::SlotPointers(int layer, int32_t slot) const {
  MOETIER_CHECK(slot >= 0 && static_cast<uint32_t>(slot) < cache_->n_slots());
  const ExpertSlotLayout& g = geometry_[static_cast<size_t>(layer)];
  const uint8_t* base = pool_ + static_cast<uint64_t>(slot) * cache_->options().slot_bytes;
  return {base, base + g.up_offset, base + g.down_offset};
}

absl::Status CudaExpertCache::Acquire(int layer, std::span<const int32_t> experts,
                                      std::span<ExpertMatrices> out) {
  MOETIER_RETURN_IF_ERROR(FinishHold());
  MOETIER_CHECK(!experts.empty() &&
                experts.size() <= static_cast<size_t>(source_.max_experts_held()) &&
                out.size() >= experts.size());
  MOETIER_RETURN_IF_ERROR(source_.Acquire(layer, experts, out));
  held_layer_ = layer;
  return absl::OkStatus();
}

absl::Status CudaExpertCache::CopyFill(int layer, const SlotFillJob& job) {
  const ExpertSlotLayout& g = geometry_[static_cast<size_t>(layer)];
  const uint64_t slot_bytes = cache_->options().slot_bytes;
  MOETIER_CHECK(job.slot >= 0 && static_cast<uint32_t>(job.slot) < cache_->n_slots());
  uint8_t* dst = pool_ + static_cast<uint64_t>(job.slot) * slot_bytes;
  cudaStream_t copy = AsStream(copy_stream_);
  const std::pair<const uint8_t*, uint64_t> parts[3] = {
      {job.from.gate, g.gate_bytes}, {job.from.up, g.up_bytes}, {job.from.down, g.down_bytes}};
  const uint64_t offsets[3] = {0, g.up_offset, g.down_offset};
  bool direct = true;
  for (const auto& [p, bytes] : parts) direct = direct && IsRegistered(p, bytes);
  if (direct) {
    for (int i = 0; i < 3; ++i) {
      MOETIER_RETURN_IF_ERROR(
          CudaCall(cudaMemcpyAsync(dst + offsets[i], parts[i].first, parts[i].second,
                                   cudaMemcpyHostToDevice, copy),
                   absl::StrFormat("copying an expert of layer %d into slot %d", layer, job.slot),
                   kCacheContext));
    }
  } else {
    // The ring's oldest buffer: its previous copy must have left it.
    const int i = next_staging_;
    next_staging_ = (next_staging_ + 1) % kStagingBuffers;
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaEventSynchronize(AsEvent(staging_done_[i])),
                                     "waiting for a staging buffer", kCacheContext));
    for (int m = 0; m < 3; ++m) {
      std::memcpy(staging_[i] + offsets[m], parts[m].first, parts[m].second);
    }
    MOETIER_RETURN_IF_ERROR(
        CudaCall(cudaMemcpyAsync(dst, staging_[i], g.down_offset + g.down_bytes,
                                 cudaMemcpyHostToDevice, copy),
                 absl::StrFormat("copying an expert of layer %d into slot %d", layer, job.slot),
                 kCacheContext));
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaEventRecord(AsEvent(staging_done_[i]), copy),
                                     "cudaEventRecord", kCacheContext));
  }
  return CudaCall(cudaEventRecord(AsEvent(filled_[static_cast<size_t>(job.slot)]), copy),
                  "cudaEventRecord", kCacheContext);
}

absl::Status CudaExpertCache::EnqueueFills(int layer, std::span<const SlotFillJob> jobs) {
  if (jobs.empty()) return absl::OkStatus();
  MOETIER_CHECK(held_layer_ == layer);
  cudaStream_t copy = AsStream(copy_stream_);
  // Every wait first, so that the busy time starts when the copies can.
  for (const SlotFillJob& job : jobs) {
    MOETIER_CHECK(job.slot >= 0 && static_cast<uint32_t>(job.slot) < cache_->n_slots());
    MOETIER_RETURN_IF_ERROR(
        CudaCall(cudaStreamWaitEvent(copy, AsEvent(last_read_[static_cast<size_t>(job.slot)]), 0),
                 "ordering a fill after the slot's last read", kCacheContext));
  }
  if (!hold_copies_) {
    MOETIER_RETURN_IF_ERROR(
        CudaCall(cudaEventRecord(AsEvent(copy_start_), copy), "cudaEventRecord", kCacheContext));
  }
  // From here the hold's end must wait for the copies, whatever fails.
  hold_copies_ = true;
  absl::Status status = absl::OkStatus();
  for (const SlotFillJob& job : jobs) {
    status = CopyFill(layer, job);
    if (!status.ok()) break;
  }
  const absl::Status recorded =
      CudaCall(cudaEventRecord(AsEvent(copy_end_), copy), "cudaEventRecord", kCacheContext);
  return status.ok() ? recorded : status;
}

absl::Status CudaExpertCache::FinishHold() {
  if (held_layer_ < 0) return absl::OkStatus();
  absl::Status status = absl::OkStatus();
  if (hold_copies_) {
    // The copies read the source's bytes until they complete.
    status = CudaCall(cudaStreamSynchronize(AsStream(copy_stream_)),
                      "waiting for expert copies to the device", kCacheContext);
    if (status.ok()) {
      float ms = 0;
      status = CudaCall(cudaEventElapsedTime(&ms, AsEvent(copy_start_), AsEvent(copy_end_)),
                        "cudaEventElapsedTime", kCacheContext);
      if (status.ok()) copy_busy_ns_ += static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
    }
    hold_copies_ = false;
  }
  source_.Release(held_layer_);
  held_layer_ = -1;
  return status;
}

absl::Status CudaExpertCache::WaitFilled(int32_t slot, void* compute_stream) {
  MOETIER_CHECK(slot >= 0 && static_cast<uint32_t>(slot) < cache_->n_slots());
  return CudaCall(
      cudaStreamWaitEvent(AsStream(compute_stream), AsEvent(filled_[static_cast<size_t>(slot)]), 0),
      "ordering a kernel after its slot's fill", kCacheContext);
}

absl::Status CudaExpertCache::MarkRead(int32_t slot, void* compute_stream) {
  MOETIER_CHECK(slot >= 0 && static_cast<uint32_t>(slot) < cache_->n_slots());
  return CudaCall(
      cudaEventRecord(AsEvent(last_read_[static_cast<size_t>(slot)]), AsStream(compute_stream)),
      "cudaEventRecord", kCacheContext);
}

void CudaExpertCache::ComputeOnHost(int layer, const ExpertMatrices& expert, int64_t first_row,
                                    int n_rows) {
  MOETIER_CHECK(first_row >= 0 && n_rows >= 1 && n_rows <= max_rows_ &&
                first_row + n_rows <= static_cast<int64_t>(max_rows_) * top_k_);
  host_ffn_.Compute(shapes_[static_cast<size_t>(layer)], expert, host_in_ + first_row * n_embd_,
                    n_rows, host_out_ + first_row * n_embd_);
}

}  // namespace moetier
