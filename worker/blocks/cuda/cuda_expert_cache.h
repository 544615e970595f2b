// The VRAM expert cache of the CUDA engine: one pool of device slots run by
// ExpertSlotCache (cache/expert_slot_cache.h), filled from the host copies
// an ExpertWeightSource serves (the daemon's store, or the model's mapping),
// plus what the engine needs to compute misses on host cores.
//
// The MoE block drives the per-layer protocol (blocks/cuda/moe_block.cc);
// this class owns the device side of it:
// - the slot pool (one cudaMalloc): slot s holds one expert, gate at offset
//   0, up and down each at the next 256-byte boundary;
// - a copy stream and two events per slot. "filled" is recorded on the copy
//   stream after a fill; the compute stream waits on it before a kernel
//   reads the slot. "last read" is recorded on the compute stream after the
//   last kernel that reads the slot's expert; the copy stream waits on it
//   before overwriting the slot;
// - DMA from the host copies: ranges the caller names are registered with
//   cudaHostRegister and copied from directly; anything else goes through a
//   small ring of pinned staging buffers (memcpy, then cudaMemcpyAsync);
// - the source's pins: one Acquire is held at a time, and released only
//   after the copies that read it have completed (an event wait in
//   FinishHold, done before the next Acquire at the latest);
// - host compute of misses: a thread pool, HostExpertFfn and pinned buffers
//   for the rows that go down to the host and back;
// - the miss cost model, measured at creation for MissPolicy::kAuto.
//
// Not thread-safe: the engine's forward thread drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cpu/thread_pool.h"
#include "cache/expert_slot_cache.h"
#include "cache/expert_slot_layout.h"
#include "engine/expert_source.h"
#include "blocks/cpu/host_expert_ffn.h"

namespace moetier {

// Cache settings of the CUDA engine (used when it has an expert source).
struct CudaExpertCacheConfig {
  // Bytes of VRAM for the slot pool. -1: free device memory after the
  // engine's own allocations, minus a reserve of max(1 GiB, 5% of the
  // device), capped at what every expert needs. Static placement uses
  // exactly the slots it needs when -1.
  int64_t pool_bytes = -1;
  ExpertPolicyKind policy = kDefaultExpertPolicy;
  MissPolicy miss_policy = MissPolicy::kAuto;
  // Predict the next layer's experts (decode batches of up to
  // kCudaPrefetchMaxTokens tokens, dynamic placement) and fill them early.
  bool prefetch = true;
  // >= 0: static placement, the experts of layers < N on the host and every
  // other expert resident (llama.cpp's --n-cpu-moe N); -1: dynamic.
  int static_host_layers = -1;
  // Host threads for misses computed on the host; <= 0: one per hardware
  // thread.
  int host_threads = 0;
};

// Decode batches of at most this many tokens predict the next layer's
// experts for prefetch.
inline constexpr int kCudaPrefetchMaxTokens = 4;

// Host memory to register for DMA (cudaHostRegister, read-only where the
// device supports it), e.g. the daemon's store segment. The range is widened
// to whole pages, which must all be mapped.
struct HostMemoryRange {
  const void* data = nullptr;
  uint64_t bytes = 0;
};

// Device pointers of one expert in a slot.
struct SlotExpertPointers {
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down = nullptr;
};

// One fill: the expert whose host copy is `from` into `slot`.
struct SlotFillJob {
  int32_t slot = kNoSlot;
  ExpertMatrices from;
};

// The cache options the engine uses for `experts`: per-layer expert bytes and
// the slot size (each matrix 256-byte aligned in its slot), with config's
// policies; pool_bytes and the cost model are left zero (the engine sizes
// and measures them at creation). For computing MinDynamicPoolBytes,
// FullPoolBytes and StaticPoolBytes ahead of creation.
ExpertSlotCacheOptions CudaSlotCacheOptions(const RoutedExpertShapes& experts,
                                            const CudaExpertCacheConfig& config);

class CudaExpertCache final : public ExpertCacheReport {
 public:
  // `source` (not owned) outlives the cache. `max_rows` is the most token
  // rows one expert gets (the engine's max_batch); the host buffers hold
  // max_rows * top_k rows. `compute_stream` is the engine's stream
  // (cudaStream_t): the device cost is timed on it. The current device must
  // be the engine's. Static placement fills every resident slot here.
  static absl::StatusOr<std::unique_ptr<CudaExpertCache>> Create(
      const RoutedExpertShapes& experts, ExpertWeightSource& source,
      const CudaExpertCacheConfig& config, std::span<const HostMemoryRange> dma_ranges,
      int max_rows, void* compute_stream);
  ~CudaExpertCache() override;
  CudaExpertCache(const CudaExpertCache&) = delete;
  CudaExpertCache& operator=(const CudaExpertCache&) = delete;

  // ExpertCacheReport.
  const ExpertSlotCache& cache() const override { return *cache_; }
  uint64_t copy_busy_ns() const override { return copy_busy_ns_; }

  ExpertSlotCache& slots() { return *cache_; }
  // The measured model (all zero unless the miss policy is auto).
  const MissCostModel& cost_model() const { return cost_; }
  uint64_t pool_bytes() const { return pool_bytes_; }
  uint64_t slot_bytes() const { return cache_->options().slot_bytes; }
  // Bytes of host memory registered for DMA (0: every copy is staged).
  uint64_t registered_bytes() const { return registered_bytes_; }
  // The most experts one group of the MoE block may place: the cache's
  // max_group and the source's max_experts_held.
  int max_group() const;
  bool predicts() const;  // prefetch on, dynamic placement

  SlotExpertPointers SlotPointers(int layer, int32_t slot) const;

  // Host copies of `experts` of `layer` from the source; first ends the
  // previous hold (FinishHold). Held until the next Acquire or FinishHold.
  absl::Status Acquire(int layer, std::span<const int32_t> experts, std::span<ExpertMatrices> out);
  // Enqueues `jobs` (experts of `layer` whose host copies the current hold
  // holds) on the copy stream: each waits for its slot's last read, then
  // copies, then records the slot's "filled" event. Fails only when a CUDA
  // call fails; the caller then discards the jobs' experts.
  absl::Status EnqueueFills(int layer, std::span<const SlotFillJob> jobs);
  // Waits for the current hold's copies, counts their busy time and
  // releases the source. No-op without a hold.
  absl::Status FinishHold();

  // A new pool of `pool_bytes` (ExpertCacheControl::ResizeExpertCache's
  // contract): waits until nothing on `compute_stream` or the copy stream
  // touches the old pool, allocates the new one before freeing the old, and
  // starts it empty with the counters continued. Between engine calls only.
  absl::StatusOr<uint64_t> Resize(uint64_t pool_bytes, void* compute_stream);

  // The compute stream waits for `slot`'s last fill before reading it.
  absl::Status WaitFilled(int32_t slot, void* compute_stream);
  // Records `slot`'s last read after the kernels enqueued on the compute
  // stream so far.
  absl::Status MarkRead(int32_t slot, void* compute_stream);

  // Host compute of misses: x and out are rows of n_embd floats in the
  // pinned buffers below (row index = the engine's grouped row).
  void ComputeOnHost(int layer, const ExpertMatrices& expert, int64_t first_row, int n_rows);
  float* host_in() const { return host_in_; }    // [max_rows * top_k][n_embd], pinned
  float* host_out() const { return host_out_; }  // [max_rows * top_k][n_embd], pinned

 private:
  struct Registered {
    const uint8_t* begin;
    const uint8_t* end;
  };
  static constexpr int kStagingBuffers = 4;

  CudaExpertCache(const RoutedExpertShapes& experts, ExpertWeightSource& source, int max_rows,
                  int host_threads);
  absl::Status Init(const RoutedExpertShapes& experts, const CudaExpertCacheConfig& config,
                    std::span<const HostMemoryRange> dma_ranges, void* compute_stream);
  void RegisterRanges(std::span<const HostMemoryRange> ranges);
  bool IsRegistered(const uint8_t* p, uint64_t bytes) const;
  absl::Status MeasureCosts(const RoutedExpertShapes& experts, void* compute_stream);
  absl::StatusOr<uint64_t> ChoosePoolBytes(const CudaExpertCacheConfig& config,
                                           const ExpertSlotCacheOptions& options) const;
  absl::Status FillInitialSlots();
  absl::Status CopyFill(int layer, const SlotFillJob& job);

  ExpertWeightSource& source_;
  const int max_rows_;
  const int64_t n_embd_;
  const int top_k_;
  std::vector<ExpertSlotLayout> geometry_;
  std::vector<ExpertLayerShape> shapes_;
  std::unique_ptr<ExpertSlotCache> cache_;
  MissCostModel cost_;

  void* copy_stream_ = nullptr;  // cudaStream_t
  uint8_t* pool_ = nullptr;      // device
  uint64_t pool_bytes_ = 0;
  std::vector<void*> filled_;           // cudaEvent_t per slot
  std::vector<void*> last_read_;        // cudaEvent_t per slot
  std::vector<Registered> registered_;  // sorted by begin
  uint64_t registered_bytes_ = 0;
  uint8_t* staging_[kStagingBuffers] = {};    // pinned, slot_bytes each
  void* staging_done_[kStagingBuffers] = {};  // cudaEvent_t
  int next_staging_ = 0;

  // The source hold: held_layer_ >= 0 while an Acquire is not released.
  int held_layer_ = -1;
  bool hold_copies_ = false;    // copies were enqueued under the hold
  void* copy_start_ = nullptr;  // cudaEvent_t with timing, around them
  void* copy_end_ = nullptr;
  uint64_t copy_busy_ns_ = 0;

  cpu::ThreadPool host_pool_;
  HostExpertFfn host_ffn_;
  float* host_in_ = nullptr;
  float* host_out_ = nullptr;
};

}  // namespace moetier
