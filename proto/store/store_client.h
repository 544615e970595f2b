// The worker's view of the expert store: attach to the segment the daemon
// sent, check it is the store this worker expects, and acquire experts.
//
// Acquire on a resident expert is two atomic operations on the expert's
// table entry (pin, then re-check the state) — no system call, no lock.
// A miss posts a request on this worker's ring and waits on the entry's
// futex word, in slices, so a daemon that stops heartbeating is noticed.
//
// Thread-safe: many threads of one worker may acquire and release at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/store_layout.h"

namespace moetier::store {

// Checks a header against what this build understands and against the size
// of the segment it came from. Errors say what differs and what to do.
absl::Status ValidateSegmentHeader(const SegmentHeader& header, uint64_t segment_bytes);

class StoreClient;

// One pinned expert: its slot cannot be evicted or rewritten until the pin
// is released (explicitly or by destruction). Move-only.
class ExpertPin {
 public:
  ExpertPin() = default;
  ExpertPin(ExpertPin&& other) noexcept { *this = std::move(other); }
  ExpertPin& operator=(ExpertPin&& other) noexcept;
  ExpertPin(const ExpertPin&) = delete;
  ExpertPin& operator=(const ExpertPin&) = delete;
  ~ExpertPin() { Release(); }

  bool valid() const { return pin_word_ != nullptr; }
  uint32_t layer() const { return layer_; }
  uint32_t expert() const { return expert_; }
  uint32_t slot() const { return slot_; }
  // Slot bytes [0, span): all three matrices, with the file bytes that
  // surround them in their aligned reads (one DMA moves the whole expert).
  std::span<const uint8_t> bytes() const { return {data_, span_bytes_}; }
  std::span<const uint8_t> gate() const { return Slice(kGate, desc_->gate); }
  std::span<const uint8_t> up() const { return Slice(kUp, desc_->up); }
  std::span<const uint8_t> down() const { return Slice(kDown, desc_->down); }
  // Offset of a matrix inside bytes().
  uint32_t slice_offset(SliceIndex i) const { return slice_offset_[i]; }
  const LayerDesc& desc() const { return *desc_; }

  void Release();

 private:
  friend class StoreClient;
  std::span<const uint8_t> Slice(SliceIndex i, const ExpertSliceDesc& s) const {
    return {data_ + slice_offset_[i], s.size_bytes};
  }
  uint16_t* pin_word_ = nullptr;
  const uint8_t* data_ = nullptr;
  const LayerDesc* desc_ = nullptr;
  uint32_t layer_ = 0;
  uint32_t expert_ = 0;
  uint32_t slot_ = kNoSlot;
  uint32_t span_bytes_ = 0;
  uint32_t slice_offset_[3] = {};
};

struct AttachOptions {
  uint32_t worker_index = 0;
  uint64_t expected_fingerprint = 0;    // 0: accept any model
  int64_t daemon_silence_limit_ms = 5000;  // a daemon heartbeat older than this: daemon gone
};

class StoreClient {
 public:
  // Maps the segment behind `segment_fd` (the caller keeps ownership of the
  // fd; the mapping stays valid after it is closed). Metadata is mapped
  // read-write, dense data and expert slots read-only.
  static absl::StatusOr<std::unique_ptr<StoreClient>> Attach(int segment_fd,
                                                             const AttachOptions& options);
  ~StoreClient();  // precondition: every ExpertPin from this client is released
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  const SegmentHeader& header() const { return *header_; }
  const ModelHparams& hparams() const { return header_->hparams; }
  uint32_t worker_index() const { return worker_index_; }
  uint32_t n_layer() const { return header_->n_layer; }
  uint32_t n_expert() const { return header_->n_expert; }
  const LayerDesc& layer(uint32_t layer) const;
  std::span<const DenseTensorEntry> dense_tensors() const;
  const DenseTensorEntry* FindDenseTensor(std::string_view name) const;
  std::span<const uint8_t> DenseData(const DenseTensorEntry& tensor) const;
  DaemonPhase daemon_phase() const;
  // Every expert slot's bytes, read-only: what a GPU worker registers for
  // DMA so that copies to the device go straight from the shared pages.
  std::span<const uint8_t> slot_area() const {
    return {base_ + header_->slot_area_offset, header_->slot_area_bytes};
  }
  ExpertState state(uint32_t layer, uint32_t expert) const;

  // Hit path only: a pin if the expert is resident now, nullopt otherwise
  // (nothing is requested). Counts a hit when it succeeds.
  std::optional<ExpertPin> TryAcquire(uint32_t layer, uint32_t expert);

  // Hit path, else the miss path: request it and wait up to timeout_ms.
  // Errors: InvalidArgument (ids), DeadlineExceeded, Unavailable (daemon
  // stopping or silent), DataLoss/other errno-derived codes when the
  // daemon's read of this expert failed.
  absl::StatusOr<ExpertPin> Acquire(uint32_t layer, uint32_t expert, int64_t timeout_ms);

  // A hint that the expert will be needed soon. ResourceExhausted when the
  // request ring is full (the hint is dropped; nothing else happens).
  absl::Status Prefetch(uint32_t layer, uint32_t expert);

  // Counts one token row routed to the expert (ExpertEntry.routed), hit or
  // miss, for the daemon's heat profile. Ids must be in range.
  void CountRouted(uint32_t layer, uint32_t expert) {
    Shared(entry(layer, expert).routed).fetch_add(1, std::memory_order_relaxed);
  }
  // The expert's place in its layer by the daemon's heat profile (1: the
  // hottest; 0: unknown). Ids must be in range.
  uint32_t warm_rank(uint32_t layer, uint32_t expert) const {
    return entry(layer, expert).warm_rank;
  }

  // Stamps this worker's heartbeat; the daemon restarts workers that stop.
  void Heartbeat();

  // Completions the daemon posted for this worker's requests, oldest first.
  size_t PollCompletions(std::span<ExpertCompletion> out);

  // This worker's status page (residency bitmap, VRAM counters).
  WorkerStatusPage& status_page() { return region_->status; }

  // Ok while the daemon is running and heartbeating.
  absl::Status CheckDaemonAlive() const;

 private:
  StoreClient() = default;
  absl::Status ValidateTables() const;
  absl::Status CheckIds(uint32_t layer, uint32_t expert) const;
  std::optional<ExpertPin> TryPin(uint32_t layer, uint32_t expert);
  absl::Status PostRequest(uint32_t layer, uint32_t expert, RequestKind kind,
                           uint64_t deadline_ns);
  ExpertEntry& entry(uint32_t layer, uint32_t expert) const {
    return experts_[ExpertIndex(layer, expert, header_->n_expert)];
  }

  uint8_t* base_ = nullptr;
  uint64_t mapped_bytes_ = 0;
  SegmentHeader* header_ = nullptr;
  ExpertEntry* experts_ = nullptr;
  WorkerRegion* region_ = nullptr;
  uint32_t worker_index_ = 0;
  int64_t daemon_silence_limit_ms_ = 0;
  std::mutex post_mutex_;        // single producer on the request ring
  std::mutex completion_mutex_;  // single consumer of the completion ring
  uint32_t next_sequence_ = 1;   // guarded by post_mutex_
};

}  // namespace moetier::store
