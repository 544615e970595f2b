#include "store/store_client.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_format.h"
#include "store/shared_futex.h"
#include "store/spsc_ring.h"
#include "base/check.h"

namespace moetier::store {
namespace {

constexpr int64_t kWaitSliceNs = 20'000'000;  // re-check daemon liveness this often

absl::Status ErrnoStatus(int error, std::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrFormat("%s: %s", what, std::strerror(error)));
}

const char* StateName(uint32_t state) {
  switch (static_cast<ExpertState>(state)) {
    case ExpertState::kOnDisk: return "on disk";
    case ExpertState::kLoading: return "loading";
    case ExpertState::kResident: return "resident";
    case ExpertState::kEvicting: return "evicting";
  }
  return "invalid";
}

// [offset, offset + bytes) lies inside [lo, hi) without overflow.
bool Within(uint64_t offset, uint64_t bytes, uint64_t lo, uint64_t hi) {
  return offset >= lo && offset <= hi && bytes <= hi - offset;
}

}  // namespace

absl::Status ValidateSegmentHeader(const SegmentHeader& h, uint64_t segment_bytes) {
  if (h.magic != kSegmentMagic) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "not a moetier store segment: magic 0x%016x, expected 0x%016x", h.magic, kSegmentMagic));
  }
  if (h.layout_version != kLayoutVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "store layout version %d, but this program was built for version %d: moetierd and "
        "moetier-worker come from different builds; install both from one release and restart "
        "moetierd",
        h.layout_version, kLayoutVersion));
  }
  auto bad = [](std::string what) {
    return absl::DataLossError("corrupt store segment header: " + what);
  };
  if (h.header_bytes != sizeof(SegmentHeader)) {
    return bad(absl::StrFormat("header_bytes %d, expected %d", h.header_bytes,
                               sizeof(SegmentHeader)));
  }
  if (h.segment_bytes != segment_bytes) {
    return bad(absl::StrFormat("header says %d bytes, the segment has %d", h.segment_bytes,
                               segment_bytes));
  }
  if (h.max_workers != kMaxWorkers || h.ring_capacity != kRingCapacity ||
      h.worker_region_stride != sizeof(WorkerRegion)) {
    return bad(absl::StrFormat("max_workers %d ring_capacity %d worker_region_stride %d differ "
                               "from this build's %d %d %d",
                               h.max_workers, h.ring_capacity, h.worker_region_stride,
                               kMaxWorkers, kRingCapacity, sizeof(WorkerRegion)));
  }
  if (h.n_layer == 0 || h.n_layer > kMaxLayers || h.n_expert == 0 ||
      h.n_expert > kMaxExpertsPerLayer || h.n_slot == 0 || h.n_dense > kMaxDenseTensors) {
    return bad(absl::StrFormat("n_layer %d n_expert %d n_slot %d n_dense %d out of range",
                               h.n_layer, h.n_expert, h.n_slot, h.n_dense));
  }
  if (h.store_mode != static_cast<uint32_t>(StoreMode::kFullyResident) &&
      h.store_mode != static_cast<uint32_t>(StoreMode::kCache)) {
    return bad(absl::StrFormat("store_mode %d", h.store_mode));
  }
  struct Region {
    const char* name;
    uint64_t offset;
    uint64_t bytes;
  };
  const uint64_t n_entries = uint64_t{h.n_layer} * h.n_expert;
  const Region regions[] = {
      {"layer table", h.layer_table_offset, uint64_t{h.n_layer} * sizeof(LayerDesc)},
      {"expert table", h.expert_table_offset, n_entries * sizeof(ExpertEntry)},
      {"slot table", h.slot_table_offset, uint64_t{h.n_slot} * sizeof(SlotDesc)},
      {"dense table", h.dense_table_offset, uint64_t{h.n_dense} * sizeof(DenseTensorEntry)},
      {"worker regions", h.worker_region_offset, uint64_t{kMaxWorkers} * sizeof(WorkerRegion)},
      {"dense data", h.dense_data_offset, h.dense_data_bytes},
      {"slot area", h.slot_area_offset, h.slot_area_bytes},
  };
  uint64_t previous_end = sizeof(SegmentHeader);
  for (const Region& r : regions) {
    if (r.offset % kPageBytes != 0 || !Within(r.offset, r.bytes, previous_end, segment_bytes)) {
      return bad(absl::StrFormat("%s at [%d, +%d) is misplaced (previous region ends at %d, "
                                 "segment has %d bytes)",
                                 r.name, r.offset, r.bytes, previous_end, segment_bytes));
    }
    previous_end = r.offset + r.bytes;
  }
  return absl::OkStatus();
}

ExpertPin& ExpertPin::operator=(ExpertPin&& other) noexcept {
  if (this != &other) {
    Release();
    pin_word_ = std::exchange(other.pin_word_, nullptr);
    data_ = other.data_;
    desc_ = other.desc_;
    layer_ = other.layer_;
    expert_ = other.expert_;
    slot_ = other.slot_;
    span_bytes_ = other.span_bytes_;
    std::memcpy(slice_offset_, other.slice_offset_, sizeof(slice_offset_));
  }
  return *this;
}

void ExpertPin::Release() {
  if (pin_word_ == nullptr) return;
  // Release order: our reads of the slot happen before the daemon sees 0.
  const uint16_t before = Shared(*pin_word_).fetch_sub(1, std::memory_order_release);
  MOETIER_CHECK(before > 0);
  pin_word_ = nullptr;
}

absl::StatusOr<std::unique_ptr<StoreClient>> StoreClient::Attach(int segment_fd,
                                                                 const AttachOptions& options) {
  if (options.worker_index >= kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "worker index %d out of range [0, %d)", options.worker_index, kMaxWorkers));
  }
  struct stat st {};
  if (fstat(segment_fd, &st) != 0) return ErrnoStatus(errno, "fstat of the store segment");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < sizeof(SegmentHeader)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the store segment has %d bytes, less than its %d-byte header", size,
        sizeof(SegmentHeader)));
  }
  SegmentHeader header;
  if (pread(segment_fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    return ErrnoStatus(errno, "reading the store segment header");
  }
  if (absl::Status valid = ValidateSegmentHeader(header, size); !valid.ok()) return valid;
  if (options.expected_fingerprint != 0 &&
      header.model_fingerprint != options.expected_fingerprint) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the store holds a different model (fingerprint %016x, this worker expects %016x); "
        "point moetierd and the worker at the same model file",
        header.model_fingerprint, options.expected_fingerprint));
  }

  // One reserved range, then the writable metadata and the read-only data
  // mapped over it, so every offset in the header works from one base.
  void* reserved = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (reserved == MAP_FAILED) return ErrnoStatus(errno, "reserving address space for the store");
  uint8_t* base = static_cast<uint8_t*>(reserved);
  const uint64_t rw_bytes = header.dense_data_offset;
  if (mmap(base, rw_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, segment_fd, 0) ==
          MAP_FAILED ||
      mmap(base + rw_bytes, size - rw_bytes, PROT_READ, MAP_SHARED | MAP_FIXED, segment_fd,
           static_cast<off_t>(rw_bytes)) == MAP_FAILED) {
    const int error = errno;
    munmap(base, size);
    return ErrnoStatus(error, "mapping the store segment");
  }
  std::unique_ptr<StoreClient> client(new StoreClient());
  client->base_ = base;
  client->mapped_bytes_ = size;
  client->header_ = HeaderOf(base);
  client->experts_ = ExpertTableOf(base, *client->header_);
  client->region_ = WorkerRegionOf(base, *client->header_, options.worker_index);
  client->worker_index_ = options.worker_index;
  client->daemon_silence_limit_ms_ = options.daemon_silence_limit_ms;
  // The header is re-checked through the mapping: it is what we will use.
  if (absl::Status valid = ValidateSegmentHeader(*client->header_, size); !valid.ok()) {
    return valid;
  }
  if (absl::Status valid = client->ValidateTables(); !valid.ok()) return valid;
  const WorkerStatusPage& page = client->region_->status;
  if (Shared(const_cast<uint32_t&>(page.attach_state)).load(std::memory_order_acquire) !=
          static_cast<uint32_t>(WorkerAttachState::kAttached) ||
      page.pid != static_cast<int32_t>(getpid())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "worker slot %d of the store was not admitted for this process (pid %d; slot pid %d)",
        options.worker_index, getpid(), page.pid));
  }
  client->Heartbeat();
  return client;
}

StoreClient::~StoreClient() {
  if (base_ != nullptr) munmap(base_, mapped_bytes_);
}

absl::Status StoreClient::ValidateTables() const {
  const SegmentHeader& h = *header_;
  const LayerDesc* layers = LayerTableOf(base_, h);
  for (uint32_t l = 0; l < h.n_layer; ++l) {
    const LayerDesc& d = layers[l];
    if (d.expert_bytes == 0) continue;
    if (d.max_span_bytes > h.max_span_bytes || d.max_span_bytes < d.expert_bytes) {
      return absl::DataLossError(absl::StrFormat(
          "corrupt store: layer %d spans %d bytes per expert (matrices %d, segment maximum %d)",
          l, d.max_span_bytes, d.expert_bytes, h.max_span_bytes));
    }
    for (const ExpertSliceDesc* s : {&d.gate, &d.up, &d.down}) {
      if (s->rows < 0 || static_cast<uint64_t>(s->rows) * s->row_bytes != s->size_bytes) {
        return absl::DataLossError(
            absl::StrFormat("corrupt store: layer %d has a misshapen matrix", l));
      }
    }
    const ExpertEntry* entries = ExpertTableOf(base_, h) + uint64_t{l} * h.n_expert;
    for (uint32_t e = 0; e < h.n_expert; ++e) {
      const ExpertEntry& x = entries[e];
      const ExpertSliceDesc* slices[3] = {&d.gate, &d.up, &d.down};
      bool inside = x.span_bytes <= d.max_span_bytes;
      for (int i = 0; i < 3; ++i) {
        inside = inside && Within(x.slice_offset[i], slices[i]->size_bytes, 0, x.span_bytes);
      }
      if (!inside) {
        return absl::DataLossError(absl::StrFormat(
            "corrupt store: expert %d of layer %d has a matrix outside its %d-byte span", e, l,
            x.span_bytes));
      }
    }
  }
  const SlotDesc* slots = SlotTableOf(base_, h);
  for (uint32_t s = 0; s < h.n_slot; ++s) {
    if (slots[s].offset % kSlotAlignmentBytes != 0 ||
        !Within(slots[s].offset, slots[s].capacity_bytes, h.slot_area_offset,
                h.slot_area_offset + h.slot_area_bytes)) {
      return absl::DataLossError(absl::StrFormat("corrupt store: slot %d is misplaced", s));
    }
  }
  const DenseTensorEntry* dense = DenseTableOf(base_, h);
  for (uint32_t i = 0; i < h.n_dense; ++i) {
    if (std::memchr(dense[i].name, 0, kTensorNameBytes) == nullptr ||
        !Within(dense[i].offset, dense[i].size_bytes, h.dense_data_offset,
                h.dense_data_offset + h.dense_data_bytes)) {
      return absl::DataLossError(
          absl::StrFormat("corrupt store: dense tensor %d is misplaced or unnamed", i));
    }
  }
  return absl::OkStatus();
}

const LayerDesc& StoreClient::layer(uint32_t layer) const {
  MOETIER_CHECK(layer < header_->n_layer);
  return LayerTableOf(base_, *header_)[layer];
}

std::span<const DenseTensorEntry> StoreClient::dense_tensors() const {
  return {DenseTableOf(base_, *header_), header_->n_dense};
}

const DenseTensorEntry* StoreClient::FindDenseTensor(std::string_view name) const {
  for (const DenseTensorEntry& t : dense_tensors()) {
    if (name == std::string_view(t.name)) return &t;
  }
  return nullptr;
}

std::span<const uint8_t> StoreClient::DenseData(const DenseTensorEntry& tensor) const {
  return {base_ + tensor.offset, tensor.size_bytes};
}

DaemonPhase StoreClient::daemon_phase() const {
  return static_cast<DaemonPhase>(Shared(header_->daemon.phase).load(std::memory_order_acquire));
}

ExpertState StoreClient::state(uint32_t layer, uint32_t expert) const {
  MOETIER_CHECK(layer < header_->n_layer && expert < header_->n_expert);
  return static_cast<ExpertState>(Shared(entry(layer, expert).state).load());
}

absl::Status StoreClient::CheckIds(uint32_t layer, uint32_t expert) const {
  if (layer >= header_->n_layer || expert >= header_->n_expert) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "expert %d of layer %d does not exist (the model has %d layers of %d experts)", expert,
        layer, header_->n_layer, header_->n_expert));
  }
  if (LayerTableOf(base_, *header_)[layer].expert_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer %d of the model has no routed experts", layer));
  }
  return absl::OkStatus();
}

std::optional<ExpertPin> StoreClient::TryPin(uint32_t layer, uint32_t expert) {
  ExpertEntry& e = entry(layer, expert);
  uint16_t& pin = e.pins[worker_index_];
  // seq_cst pairs with the daemon's seq_cst kEvicting store + pin load.
  const uint16_t before = Shared(pin).fetch_add(1, std::memory_order_seq_cst);
  MOETIER_CHECK(before < kMaxPinsPerWorker);  // a leak of 65535 pins
  if (Shared(e.state).load(std::memory_order_seq_cst) !=
      static_cast<uint32_t>(ExpertState::kResident)) {
    Shared(pin).fetch_sub(1, std::memory_order_release);
    return std::nullopt;
  }
  const uint32_t slot = Shared(e.slot).load(std::memory_order_acquire);
  MOETIER_CHECK(slot < header_->n_slot);
  const SlotDesc& slot_desc = SlotTableOf(base_, *header_)[slot];
  MOETIER_CHECK(slot_desc.capacity_bytes >= e.span_bytes);  // checked at attach too
  ExpertPin result;
  result.pin_word_ = &pin;
  result.data_ = base_ + slot_desc.offset;
  result.desc_ = &LayerTableOf(base_, *header_)[layer];
  result.layer_ = layer;
  result.expert_ = expert;
  result.slot_ = slot;
  result.span_bytes_ = e.span_bytes;
  std::memcpy(result.slice_offset_, e.slice_offset, sizeof(result.slice_offset_));
  return result;
}

std::optional<ExpertPin> StoreClient::TryAcquire(uint32_t layer, uint32_t expert) {
  if (!CheckIds(layer, expert).ok()) return std::nullopt;
  std::optional<ExpertPin> pin = TryPin(layer, expert);
  if (pin.has_value()) {
    Shared(entry(layer, expert).hits).fetch_add(1, std::memory_order_relaxed);
    Shared(region_->status.ram_hits).fetch_add(1, std::memory_order_relaxed);
  }
  return pin;
}

absl::StatusOr<ExpertPin> StoreClient::Acquire(uint32_t layer, uint32_t expert,
                                               int64_t timeout_ms) {
  if (absl::Status ids = CheckIds(layer, expert); !ids.ok()) return ids;
  if (std::optional<ExpertPin> pin = TryAcquire(layer, expert)) return std::move(*pin);

  ExpertEntry& e = entry(layer, expert);
  Shared(e.misses).fetch_add(1, std::memory_order_relaxed);
  Shared(region_->status.ram_misses).fetch_add(1, std::memory_order_relaxed);
  const uint64_t start_ns = MonotonicNowNs();
  const uint64_t deadline_ns =
      timeout_ms < 0 ? UINT64_MAX : start_ns + static_cast<uint64_t>(timeout_ms) * 1'000'000;

  // Every load outcome bumps futex_word after it publishes the state, so a
  // word that moved after `seen` means our request has been answered.
  uint32_t seen = Shared(e.futex_word).load(std::memory_order_seq_cst);
  if (std::optional<ExpertPin> pin = TryPin(layer, expert)) return std::move(*pin);
  if (absl::Status posted = PostRequest(layer, expert, RequestKind::kDemand, deadline_ns);
      !posted.ok()) {
    return posted;
  }
  while (true) {
    if (std::optional<ExpertPin> pin = TryPin(layer, expert)) return std::move(*pin);
    const uint32_t word = Shared(e.futex_word).load(std::memory_order_seq_cst);
    if (word != seen) {
      const uint32_t state = Shared(e.state).load(std::memory_order_seq_cst);
      const int32_t error = Shared(e.last_error).load(std::memory_order_acquire);
      if (error != 0 && state != static_cast<uint32_t>(ExpertState::kResident)) {
        return ErrnoStatus(error, absl::StrFormat("moetierd could not read expert %d of layer %d "
                                                  "from the model file",
                                                  expert, layer));
      }
      // Loaded, then evicted before we could pin it: ask again.
      seen = word;
      if (state == static_cast<uint32_t>(ExpertState::kOnDisk)) {
        if (absl::Status posted = PostRequest(layer, expert, RequestKind::kDemand, deadline_ns);
            !posted.ok()) {
          return posted;
        }
      }
      continue;
    }
    if (absl::Status alive = CheckDaemonAlive(); !alive.ok()) return alive;
    const uint64_t now_ns = MonotonicNowNs();
    if (now_ns >= deadline_ns) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "expert %d of layer %d was not loaded within %d ms (it is %s; the store has %d slots "
          "for %d experts): if every slot stays pinned, raise ram_budget_bytes",
          expert, layer, timeout_ms, StateName(Shared(e.state).load()), header_->n_slot,
          uint64_t{header_->n_layer} * header_->n_expert));
    }
    if (Shared(e.state).load(std::memory_order_seq_cst) ==
        static_cast<uint32_t>(ExpertState::kEvicting)) {
      // The daemon is checking pins right now; the state settles within
      // nanoseconds (back to resident, or on disk) and nobody wakes us.
      std::this_thread::yield();
      continue;
    }
    const int64_t wait_ns =
        static_cast<int64_t>(std::min<uint64_t>(deadline_ns - now_ns, kWaitSliceNs));
    FutexWait(&e.futex_word, seen, wait_ns);
  }
}

absl::Status StoreClient::Prefetch(uint32_t layer, uint32_t expert) {
  if (absl::Status ids = CheckIds(layer, expert); !ids.ok()) return ids;
  Shared(region_->status.prefetch_hints).fetch_add(1, std::memory_order_relaxed);
  if (Shared(entry(layer, expert).state).load(std::memory_order_acquire) ==
      static_cast<uint32_t>(ExpertState::kResident)) {
    return absl::OkStatus();
  }
  return PostRequest(layer, expert, RequestKind::kPrefetch, /*deadline_ns=*/0);
}

absl::Status StoreClient::PostRequest(uint32_t layer, uint32_t expert, RequestKind kind,
                                      uint64_t deadline_ns) {
  {
    std::lock_guard<std::mutex> lock(post_mutex_);
    ExpertRequest request{};
    request.layer = static_cast<uint16_t>(layer);
    request.expert = static_cast<uint16_t>(expert);
    request.kind = static_cast<uint32_t>(kind);
    request.sequence = next_sequence_++;
    while (!RingPush(region_->requests, request)) {
      // Full: the daemon drains it continuously unless it is gone.
      if (absl::Status alive = CheckDaemonAlive(); !alive.ok()) return alive;
      if (MonotonicNowNs() >= deadline_ns) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "the request ring of worker %d is full (%d entries)", worker_index_, kRingCapacity));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  Shared(header_->doorbell).fetch_add(1, std::memory_order_release);
  FutexWakeAll(&header_->doorbell);
  return absl::OkStatus();
}

void StoreClient::Heartbeat() {
  Shared(region_->status.heartbeat_ns).store(MonotonicNowNs(), std::memory_order_release);
}

size_t StoreClient::PollCompletions(std::span<ExpertCompletion> out) {
  std::lock_guard<std::mutex> lock(completion_mutex_);
  size_t n = 0;
  while (n < out.size() && RingPop(region_->completions, &out[n]) == RingPopResult::kValue) ++n;
  return n;
}

absl::Status StoreClient::CheckDaemonAlive() const {
  const DaemonPhase phase = daemon_phase();
  if (phase == DaemonPhase::kStopping) {
    return absl::UnavailableError("moetierd is shutting down");
  }
  const uint64_t beat = Shared(header_->daemon.heartbeat_ns).load(std::memory_order_acquire);
  const uint64_t now = MonotonicNowNs();
  if (now > beat && (now - beat) / 1'000'000 > static_cast<uint64_t>(daemon_silence_limit_ms_)) {
    return absl::UnavailableError(absl::StrFormat(
        "moetierd has not updated its heartbeat for %d ms (limit %d ms): it is hung or gone",
        (now - beat) / 1'000'000, daemon_silence_limit_ms_));
  }
  return absl::OkStatus();
}

}  // namespace moetier::store
