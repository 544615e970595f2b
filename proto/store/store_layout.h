// The expert store contract: every byte that moetierd and the workers share
// through the store segment (one memfd, MAP_SHARED). Both sides compile this
// header; nothing else in the segment is interpreted by anyone.
//
// Segment, in order (every region starts on a 4096-byte boundary):
//
//   SegmentHeader                4096 B: identity, geometry, hparams, daemon liveness, counters
//   LayerDesc[n_layer]           shape and type of each layer's gate, up, down matrices
//   ExpertEntry[n_layer*n_expert]  state, slot, matrix offsets, pins, futex word, counters
//   SlotDesc[n_slot]             offset and capacity of each slot
//   DenseTensorEntry[n_dense]    name, type, dims, offset of every non-expert tensor
//   WorkerRegion[kMaxWorkers]    status page + request ring + completion ring per worker
//   -- the worker maps everything above read-write, everything below read-only --
//   dense data                   the dense tensors' bytes, as in the file
//   slot area                    expert slots, 4096-aligned: each expert's gate, up and
//                                down matrices as read from the file, in its encoding
//
// A slot is filled by O_DIRECT reads of the 4096-aligned file ranges that
// cover the expert's matrices, straight into the slot (no copy). So the
// matrices sit at per-expert offsets (ExpertEntry.slice_offset) with a few
// KiB of neighbouring file bytes around them; bytes [0, span_bytes) of the
// slot hold all three.
//
// Ownership of writes:
//   - identity, geometry, tables: the daemon, before the first worker attaches;
//   - ExpertEntry.state/slot/futex_word/last_error: the daemon only
//     (transitions kOnDisk -> kLoading -> kResident -> kEvicting -> kOnDisk);
//   - ExpertEntry.pins[w]: worker w (+1 on acquire, -1 on release); the daemon
//     zeroes them only after worker w has exited;
//   - ExpertEntry.routed: every worker (relaxed adds); the daemon reads it
//     into the heat profile;
//   - ExpertEntry.warm_rank: the daemon, before the first worker attaches;
//   - request ring: produced by the worker, consumed by the daemon;
//     completion ring: the other way round;
//   - status page: identity by the daemon at attach, the rest by the worker.
//
// Hit path: pins[w] += 1 (seq_cst), then load state (seq_cst); if kResident
// the slot cannot be evicted until the pin is dropped, because eviction
// stores kEvicting (seq_cst) and then loads every pin (seq_cst): of the two
// orders one side always sees the other. Otherwise the pin is undone and the
// miss path posts a request (then bumps and wakes the header's doorbell) and
// FUTEX_WAITs on futex_word. The daemon bumps and wakes futex_word after
// every load outcome, once state (and last_error) are published: a word
// that moved since the request means it was answered — resident, or
// failed with last_error.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace moetier::store {

// "MOETSTOR" read as a little-endian u64.
inline constexpr uint64_t kSegmentMagic = 0x524F545354454F4DULL;
// Bump on any change to a struct below, and on any change to what the
// control protocol's messages mean (moetier/worker/v1/control.proto): the
// worker's join (worker_channel.h) and attach refuse other versions, so a
// daemon and a worker from different builds never talk. 3: the control
// protocol's sampling settings are exact, every field present. 4: experts
// count their routed token rows and carry the heat profile's warm rank.
inline constexpr uint32_t kLayoutVersion = 4;

inline constexpr uint32_t kMaxLayers = 128;
inline constexpr uint32_t kMaxExpertsPerLayer = 512;
inline constexpr uint32_t kMaxWorkers = 16;
inline constexpr uint32_t kRingCapacity = 256;  // entries; a power of two
inline constexpr uint32_t kMaxDenseTensors = 65536;
inline constexpr uint64_t kPageBytes = 4096;
inline constexpr uint64_t kSlotAlignmentBytes = 4096;   // O_DIRECT and DMA friendly
inline constexpr uint64_t kDenseAlignmentBytes = 256;   // each dense tensor's start
inline constexpr size_t kTensorNameBytes = 64;          // 63 bytes + NUL, as GGUF allows
inline constexpr size_t kArchitectureBytes = 32;
inline constexpr size_t kDeviceNameBytes = 32;
inline constexpr uint32_t kNoSlot = 0xFFFFFFFFu;
inline constexpr uint16_t kMaxPinsPerWorker = 0xFFFFu;
inline constexpr uint32_t kResidencyWords = kMaxLayers * kMaxExpertsPerLayer / 64;

static_assert((kRingCapacity & (kRingCapacity - 1)) == 0, "ring capacity must be a power of two");

// Shared fields are plain integers accessed through std::atomic_ref, so the
// structs stay standard-layout and their bytes are exactly what is declared.
template <typename T>
inline std::atomic_ref<T> Shared(T& field) {
  static_assert(std::atomic_ref<T>::is_always_lock_free,
                "a shared-memory field must be lock-free across processes");
  return std::atomic_ref<T>(field);
}

enum class ExpertState : uint32_t {
  kOnDisk = 0,    // not in RAM (only in cache mode, or before preload reaches it)
  kLoading = 1,   // a slot is reserved and being filled; do not read
  kResident = 2,  // the slot holds exactly the file's bytes
  kEvicting = 3,  // the daemon is checking pins before reusing the slot
};

enum class StoreMode : uint32_t {
  kFullyResident = 1,  // one slot per expert; everything is read at start
  kCache = 2,          // fewer slots than experts; RAM caches the file
};

enum class DaemonPhase : uint32_t {
  kStarting = 0,
  kPreloading = 1,  // serving requests while reading every expert
  kReady = 2,
  kStopping = 3,
};

enum class RequestKind : uint32_t {
  kDemand = 1,    // a worker waits for this expert
  kPrefetch = 2,  // a hint: load it if a slot can be had
};

enum class WorkerAttachState : uint32_t {
  kVacant = 0,
  kAttached = 1,
};

// Hyperparameters a worker needs without opening the model file.
struct ModelHparams {
  char architecture[kArchitectureBytes];  // NUL-terminated general.architecture
  uint32_t n_layer;        // block_count
  uint32_t n_expert;       // expert_count
  uint32_t n_expert_used;  // expert_used_count (top-k)
  uint32_t n_embd;
  uint32_t n_ff_exp;       // expert_feed_forward_length
  uint32_t n_head;
  uint32_t n_head_kv;
  uint32_t head_dim;       // attention.key_length
  uint32_t n_vocab;
  uint32_t n_ctx_train;
  float rope_freq_base;
  float rms_eps;
  uint8_t reserved[48];
};
static_assert(sizeof(ModelHparams) == 128);
static_assert(offsetof(ModelHparams, n_layer) == 32);
static_assert(offsetof(ModelHparams, rms_eps) == 76);

// The shape of one matrix of every expert of a layer: rows x cols of
// `tensor_type` (where it sits in a slot is per expert, in ExpertEntry).
struct ExpertSliceDesc {
  uint32_t tensor_type;  // ggml type id (TensorType)
  uint32_t reserved0;
  int64_t cols;          // ne[0], the input dimension K
  int64_t rows;          // ne[1], the output dimension N
  uint64_t row_bytes;
  uint64_t reserved1;
  uint64_t size_bytes;   // rows * row_bytes
};
static_assert(sizeof(ExpertSliceDesc) == 48);
static_assert(offsetof(ExpertSliceDesc, cols) == 8);
static_assert(offsetof(ExpertSliceDesc, size_bytes) == 40);

enum SliceIndex : uint32_t { kGate = 0, kUp = 1, kDown = 2 };

struct LayerDesc {
  ExpertSliceDesc gate;
  ExpertSliceDesc up;
  ExpertSliceDesc down;
  uint64_t expert_bytes;     // gate+up+down; 0 for a layer without routed experts
  uint64_t max_span_bytes;   // the largest ExpertEntry.span_bytes of this layer
  uint32_t fused_gate_up;    // 1 when the file stores ffn_gate_up_exps
  uint32_t reserved[7];
};
static_assert(sizeof(LayerDesc) == 192);
static_assert(offsetof(LayerDesc, up) == 48);
static_assert(offsetof(LayerDesc, down) == 96);
static_assert(offsetof(LayerDesc, expert_bytes) == 144);
static_assert(offsetof(LayerDesc, fused_gate_up) == 160);

struct alignas(64) ExpertEntry {
  // Cache line 0: read by every acquire.
  uint32_t state;       // ExpertState
  uint32_t futex_word;  // bumped and woken after every load outcome
  uint32_t slot;        // valid while kResident; kNoSlot otherwise
  int32_t last_error;   // errno of the last failed load; 0 after a successful one
  // Where this expert's bytes sit in whichever slot holds it; fixed when
  // the segment is built (they follow from the file offsets alone).
  uint32_t span_bytes;       // slot bytes [0, span_bytes) hold all three matrices
  uint32_t slice_offset[3];  // gate, up, down (SliceIndex), from the slot start
  uint16_t pins[kMaxWorkers];  // per worker, so a dead worker's pins can be dropped
  // Cache line 1: statistics, bumped by workers (hits, misses) and the daemon.
  uint64_t hits;            // acquires that found it resident
  uint64_t misses;          // acquires that had to wait for a load
  uint64_t loads;           // times it was read from the file
  uint64_t evictions;
  uint64_t prefetch_hints;  // prefetch requests received for it
  uint64_t load_errors;
  // Token rows the router sent to this expert, over every worker, whether
  // or not a cache held it: the use the heat profile learns from.
  uint64_t routed;
  // Its place among its layer's experts in the heat profile the daemon
  // started with: 1 for the hottest, 0 when the profile has no use of it
  // (or there is no profile). A worker fills its cache in this order.
  uint32_t warm_rank;
  uint32_t reserved1;
};
static_assert(sizeof(ExpertEntry) == 128);
static_assert(alignof(ExpertEntry) == 64);
static_assert(offsetof(ExpertEntry, futex_word) == 4);
static_assert(offsetof(ExpertEntry, slot) == 8);
static_assert(offsetof(ExpertEntry, span_bytes) == 16);
static_assert(offsetof(ExpertEntry, slice_offset) == 20);
static_assert(offsetof(ExpertEntry, pins) == 32);
static_assert(offsetof(ExpertEntry, hits) == 64);
static_assert(offsetof(ExpertEntry, load_errors) == 104);
static_assert(offsetof(ExpertEntry, routed) == 112);
static_assert(offsetof(ExpertEntry, warm_rank) == 120);

struct SlotDesc {
  uint64_t offset;          // from the segment start; a multiple of kSlotAlignmentBytes
  uint64_t capacity_bytes;  // a multiple of kSlotAlignmentBytes
};
static_assert(sizeof(SlotDesc) == 16);

struct DenseTensorEntry {
  char name[kTensorNameBytes];  // NUL-terminated
  uint32_t tensor_type;         // ggml type id
  uint32_t n_dims;
  int64_t ne[4];                // ne[0] contiguous; unused dims are 1
  uint64_t offset;              // from the segment start; a multiple of kDenseAlignmentBytes
  uint64_t size_bytes;
  uint64_t reserved;
};
static_assert(sizeof(DenseTensorEntry) == 128);
static_assert(offsetof(DenseTensorEntry, tensor_type) == 64);
static_assert(offsetof(DenseTensorEntry, ne) == 72);
static_assert(offsetof(DenseTensorEntry, offset) == 104);

struct ExpertRequest {
  uint32_t sequence;  // chosen by the worker, echoed in the completion
  uint16_t layer;
  uint16_t expert;
  uint32_t kind;      // RequestKind
  uint32_t reserved;
};
static_assert(sizeof(ExpertRequest) == 16);

struct ExpertCompletion {
  uint32_t sequence;
  uint16_t layer;
  uint16_t expert;
  int32_t error;  // 0: resident now; otherwise an errno value
  uint32_t slot;
};
static_assert(sizeof(ExpertCompletion) == 16);

// Single producer, single consumer. head and tail count entries ever
// written/read (they never wrap in practice: 2^64); the slot is index %
// kRingCapacity. The producer publishes with a release store of head, the
// consumer frees with a release store of tail.
template <typename T>
struct alignas(64) SpscRing {
  alignas(64) uint64_t head;  // written by the producer only
  alignas(64) uint64_t tail;  // written by the consumer only
  alignas(64) T entries[kRingCapacity];
};
using RequestRing = SpscRing<ExpertRequest>;
using CompletionRing = SpscRing<ExpertCompletion>;
static_assert(offsetof(RequestRing, tail) == 64);
static_assert(offsetof(RequestRing, entries) == 128);
static_assert(sizeof(RequestRing) == 128 + 16 * kRingCapacity);
static_assert(sizeof(CompletionRing) == sizeof(RequestRing));

struct alignas(64) WorkerStatusPage {
  // Cache line 0: identity, written by the daemon when it admits the worker.
  uint32_t attach_state;  // WorkerAttachState
  uint32_t epoch;         // bumped on every (re)start of this worker index
  int32_t pid;
  uint32_t reserved0;
  char device[kDeviceNameBytes];  // "cpu", "cuda:0", ...
  uint64_t admitted_ns;           // CLOCK_MONOTONIC
  uint64_t reserved1;
  // Cache line 1: written by the worker.
  alignas(64) uint64_t heartbeat_ns;  // CLOCK_MONOTONIC; stale => hung
  uint64_t ram_hits;                  // store acquires that found the expert resident
  uint64_t ram_misses;                // store acquires that waited for a load
  uint64_t prefetch_hints;
  uint64_t vram_hits;                 // the worker's own VRAM cache
  uint64_t vram_misses;
  uint64_t vram_bytes_copied;
  uint64_t prefix_cache_states;  // sequence states the prefix cache holds
  // Cache line 2: written by the daemon.
  alignas(64) uint64_t requests_served;
  uint64_t completions_dropped;  // completion ring was full
  uint64_t requests_rejected;    // malformed requests (out-of-range ids, ...)
  uint64_t reserved3[5];
  // Cache line 3: the worker's device expert cache, written by the worker.
  // vram_misses above counts every miss; misses_computed_on_host those of
  // them that ran on host cores from the store instead of being copied.
  alignas(64) uint64_t expert_cache_bytes;  // the slot pool; 0 without a cache
  uint64_t misses_computed_on_host;
  uint64_t prefetch_issued;  // copies started for predicted experts
  uint64_t prefetch_used;    // of those, routed before being evicted
  uint64_t prefetch_wasted;  // of those, evicted unused
  uint64_t copy_busy_ns;     // time with an expert copy in flight (copy GB/s)
  uint64_t prefix_cache_bytes;    // what those states take (worker/generation/prefix_pool.h)
  uint64_t prompt_tokens_reused;  // prompt positions not computed, over every Generate
  // Written by the worker: bit (layer * kMaxExpertsPerLayer + expert) set
  // while that expert is resident in the worker's device memory.
  alignas(64) uint64_t vram_residency[kResidencyWords];
};
static_assert(offsetof(WorkerStatusPage, device) == 16);
static_assert(offsetof(WorkerStatusPage, heartbeat_ns) == 64);
static_assert(offsetof(WorkerStatusPage, requests_served) == 128);
static_assert(offsetof(WorkerStatusPage, expert_cache_bytes) == 192);
static_assert(offsetof(WorkerStatusPage, vram_residency) == 256);
static_assert(sizeof(WorkerStatusPage) == 256 + 8 * kResidencyWords);

struct alignas(4096) WorkerRegion {
  WorkerStatusPage status;
  RequestRing requests;
  CompletionRing completions;
};
static_assert(offsetof(WorkerRegion, requests) == sizeof(WorkerStatusPage));
static_assert(offsetof(WorkerRegion, completions) ==
              sizeof(WorkerStatusPage) + sizeof(RequestRing));
static_assert(sizeof(WorkerRegion) == 20480);

struct StoreCounters {
  uint64_t loads;                // experts read from the file
  uint64_t bytes_read;           // bytes copied into slots
  uint64_t evictions;
  uint64_t load_errors;
  uint64_t demand_requests;
  uint64_t prefetch_requests;
  uint64_t prefetch_loads;       // loads started because of a prefetch hint
  uint64_t preload_experts_done;
  uint64_t preload_experts_total;
  uint64_t resident_experts;
  uint64_t reads_submitted;      // I/O requests, including resubmitted short reads
  uint64_t short_reads;
  uint64_t stalls_all_pinned;    // a load waited because every slot was pinned
  uint64_t requests_rejected;
  uint64_t warm_loads;           // loads of a cache's warm start (hottest first)
  uint64_t reserved;
};
static_assert(sizeof(StoreCounters) == 128);

struct DaemonLiveness {
  uint32_t phase;             // DaemonPhase
  int32_t daemon_pid;
  uint64_t heartbeat_ns;      // CLOCK_MONOTONIC, refreshed by the service thread
  uint64_t reserved[6];
};
static_assert(sizeof(DaemonLiveness) == 64);

struct alignas(64) SegmentHeader {
  // Identity and geometry: written once, before any worker attaches.
  uint64_t magic;
  uint32_t layout_version;
  uint32_t header_bytes;   // sizeof(SegmentHeader)
  uint64_t segment_bytes;
  uint64_t model_fingerprint;
  uint32_t store_mode;     // StoreMode
  uint32_t n_layer;
  uint32_t n_expert;
  uint32_t n_slot;
  uint32_t n_dense;
  uint32_t max_workers;    // kMaxWorkers
  uint32_t ring_capacity;  // kRingCapacity
  uint32_t reserved0;
  uint64_t layer_table_offset;
  uint64_t expert_table_offset;
  uint64_t slot_table_offset;
  uint64_t dense_table_offset;
  uint64_t worker_region_offset;
  uint64_t worker_region_stride;  // sizeof(WorkerRegion)
  uint64_t dense_data_offset;     // the read-only part starts here
  uint64_t dense_data_bytes;
  uint64_t slot_area_offset;
  uint64_t slot_area_bytes;
  uint64_t total_expert_bytes;    // every expert of the model (matrix bytes)
  uint64_t max_span_bytes;        // the largest ExpertEntry.span_bytes
  uint64_t reserved1[4];
  ModelHparams hparams;
  // Live fields, written by the daemon.
  alignas(64) DaemonLiveness daemon;
  // Workers bump it (and FUTEX_WAKE) after posting a request.
  alignas(64) uint32_t doorbell;
  uint32_t reserved2[15];
  alignas(64) StoreCounters counters;
  uint8_t reserved3[4096 - 576];
};
static_assert(std::is_standard_layout_v<SegmentHeader>);
static_assert(sizeof(SegmentHeader) == kPageBytes);
static_assert(offsetof(SegmentHeader, layout_version) == 8);
static_assert(offsetof(SegmentHeader, segment_bytes) == 16);
static_assert(offsetof(SegmentHeader, model_fingerprint) == 24);
static_assert(offsetof(SegmentHeader, store_mode) == 32);
static_assert(offsetof(SegmentHeader, n_slot) == 44);
static_assert(offsetof(SegmentHeader, layer_table_offset) == 64);
static_assert(offsetof(SegmentHeader, worker_region_offset) == 96);
static_assert(offsetof(SegmentHeader, dense_data_offset) == 112);
static_assert(offsetof(SegmentHeader, slot_area_offset) == 128);
static_assert(offsetof(SegmentHeader, hparams) == 192);
static_assert(offsetof(SegmentHeader, daemon) == 320);
static_assert(offsetof(SegmentHeader, doorbell) == 384);
static_assert(offsetof(SegmentHeader, counters) == 448);

static_assert(std::is_trivially_copyable_v<ExpertEntry>);
static_assert(std::is_trivially_copyable_v<WorkerRegion>);
static_assert(std::is_standard_layout_v<WorkerRegion>);

inline constexpr uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

inline constexpr uint64_t ExpertIndex(uint32_t layer, uint32_t expert, uint32_t n_expert) {
  return uint64_t{layer} * n_expert + expert;
}

// Bit index in WorkerStatusPage::vram_residency.
inline constexpr uint32_t ResidencyBit(uint32_t layer, uint32_t expert) {
  return layer * kMaxExpertsPerLayer + expert;
}

// Typed views of a mapped segment. Preconditions: `base` maps a segment whose
// header passed ValidateSegmentHeader (store_client.h) or was built by the
// daemon.
inline SegmentHeader* HeaderOf(uint8_t* base) { return reinterpret_cast<SegmentHeader*>(base); }
inline LayerDesc* LayerTableOf(uint8_t* base, const SegmentHeader& h) {
  return reinterpret_cast<LayerDesc*>(base + h.layer_table_offset);
}
inline ExpertEntry* ExpertTableOf(uint8_t* base, const SegmentHeader& h) {
  return reinterpret_cast<ExpertEntry*>(base + h.expert_table_offset);
}
inline SlotDesc* SlotTableOf(uint8_t* base, const SegmentHeader& h) {
  return reinterpret_cast<SlotDesc*>(base + h.slot_table_offset);
}
inline DenseTensorEntry* DenseTableOf(uint8_t* base, const SegmentHeader& h) {
  return reinterpret_cast<DenseTensorEntry*>(base + h.dense_table_offset);
}
inline WorkerRegion* WorkerRegionOf(uint8_t* base, const SegmentHeader& h, uint32_t worker) {
  return reinterpret_cast<WorkerRegion*>(base + h.worker_region_offset +
                                         uint64_t{worker} * h.worker_region_stride);
}

}  // namespace moetier::store
