#include "store/expert_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_format.h"
#include "base/check.h"
#include "log/daemon_log.h"
#include "store/expert_store_internal.h"
#include "store/shared_futex.h"
#include "store/spsc_ring.h"
#include "util/byte_size.h"

namespace moetier {
namespace {

using expert_store_internal::kPhasePreload;
using expert_store_internal::Seconds;
using expert_store_internal::StateValue;
using store::ExpertState;
using store::Shared;

// The dense weights are copied in pieces, so the copy can be locked,
// paced and reported as it goes rather than one tensor (up to GiBs) at a time.
constexpr uint64_t kDensePieceBytes = uint64_t{8} << 20;
// Credit the limiters give, in time at the set rate: enough to keep the
// queue full between reads, too little to matter for the average.
constexpr uint64_t kThrottleBurstPerSecond = 10;  // 100 ms
constexpr std::string_view kPhaseLock = "locking the expert cache";
constexpr std::string_view kPhaseDense = "copying dense weights";

// Every start-up phase reports as often as the operator asked.
ProgressPacer PhasePacer(const ExpertStoreOptions& options, uint64_t total_bytes) {
  return ProgressPacer(total_bytes,
                       static_cast<uint64_t>(options.progress_log_interval_ms) * 1'000'000);
}

// What the file reads of start-up (dense copy, preload) may take.
ByteRateLimiter PreloadLimiter(const ExpertStoreOptions& options) {
  return ByteRateLimiter(options.preload_bytes_per_s,
                         options.preload_bytes_per_s / kThrottleBurstPerSecond);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertStore>> ExpertStore::Create(
    const ModelManifest& manifest, std::unique_ptr<IoBackend> io,
    const ExpertStoreOptions& options) {
  MOETIER_CHECK(io != nullptr);
  absl::StatusOr<SegmentPlan> plan = PlanSegment(manifest, options.ram_budget_bytes);
  if (!plan.ok()) return plan.status();
  std::unique_ptr<ExpertStore> s(new ExpertStore());
  s->manifest_ = manifest;
  s->options_ = options;
  s->plan_ = std::move(*plan);
  s->io_ = std::move(io);
  s->n_entries_ = manifest.n_layer * manifest.n_expert;

  if (!options.warm_ranks.empty() && options.warm_ranks.size() != s->n_entries_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d warm ranks for a model of %d experts", options.warm_ranks.size(), s->n_entries_));
  }
  for (const ManifestLayer& layer : manifest.layers) {
    s->reads_per_load_max_ =
        std::max(s->reads_per_load_max_, static_cast<uint32_t>(layer.sources.size()));
  }
  if (s->io_->queue_depth() < s->reads_per_load_max_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "io queue depth %d is below the %d reads one expert needs; raise io_queue_depth",
        s->io_->queue_depth(), s->reads_per_load_max_));
  }
  for (const std::string& path : manifest.shard_paths) {
    absl::StatusOr<uint32_t> index = s->io_->RegisterFile(path);
    if (!index.ok()) return index.status();
    s->file_index_.push_back(*index);
  }

  absl::StatusOr<std::unique_ptr<StoreSegment>> segment =
      StoreSegment::Create(s->plan_.segment_bytes, options.segment);
  if (!segment.ok()) return segment.status();
  s->segment_ = std::move(*segment);
  LogInfo("expert store segment created: %s (memfd), %s", FormatBytes(s->plan_.segment_bytes),
          !options.segment.lock_memory ? std::string("not locked (lock_memory is off)")
          : s->segment_->locking()
              ? absl::StrFormat("locked in RAM %s at a time as it is filled",
                                FormatBytes(s->segment_->lock_chunk_bytes()))
              : std::string("NOT locked (see the warning above)"));
  s->header_ = store::HeaderOf(s->segment_->base());
  if (absl::Status tables = s->segment_->LockThrough(s->plan_.dense_data_offset); !tables.ok()) {
    return tables;
  }
  s->WriteHeaderAndTables();
  s->entries_ = store::ExpertTableOf(s->segment_->base(), *s->header_);
  if (absl::Status dense = s->FillDenseTensors(); !dense.ok()) return dense;
  // A cache fills on demand, in no order: lock it all before serving.
  if (s->plan_.mode == store::StoreMode::kCache) {
    if (absl::Status lock = s->LockCache(); !lock.ok()) return lock;
  }

  const uint32_t n_loads = std::max<uint32_t>(1, s->io_->queue_depth() / s->reads_per_load_max_);
  s->loads_.resize(n_loads);
  for (uint32_t i = n_loads; i > 0; --i) s->free_loads_.push_back(i - 1);
  s->books_.assign(s->n_entries_, ExpertBook{});
  s->pending_sequence_.assign(uint64_t{store::kMaxWorkers} * s->n_entries_, 0);
  s->slot_owner_.assign(s->plan_.n_slot, store::kNoSlot);
  s->slot_last_access_.assign(s->plan_.n_slot, 0);
  for (uint32_t slot = s->plan_.n_slot; slot > 0; --slot) s->free_slots_.push_back(slot - 1);
  s->demand_queue_.Reserve(s->n_entries_);
  s->prefetch_queue_.Reserve(s->n_entries_);
  s->policy_ = options.make_policy ? options.make_policy(s->plan_.n_slot)
                                   : MakeClockPolicy(s->plan_.n_slot);

  LogInfo("expert store: %s segment (%s), %d slots for %d experts of %s, %s, dense weights %s, "
          "memory %s, reads via %s",
          FormatBytes(s->plan_.segment_bytes),
          s->plan_.mode == store::StoreMode::kFullyResident ? "every expert resident"
                                                            : "RAM caches the model file",
          s->plan_.n_slot, manifest.expert_count, FormatBytes(manifest.total_expert_bytes),
          s->plan_.mode == store::StoreMode::kCache
              ? absl::StrFormat("replacement policy %s", s->policy_->name())
              : std::string("no eviction"),
          FormatBytes(manifest.dense_bytes),
          s->segment_->locked()    ? "locked"
          : s->segment_->locking() ? "locked as the preload fills it"
                                   : "NOT locked",
          s->io_->name());
  return s;
}

ExpertStore::~ExpertStore() { Stop(); }

void ExpertStore::WriteHeaderAndTables() {
  uint8_t* base = segment_->base();
  store::SegmentHeader& h = *header_;
  h.layout_version = store::kLayoutVersion;
  h.header_bytes = sizeof(store::SegmentHeader);
  h.segment_bytes = plan_.segment_bytes;
  h.model_fingerprint = manifest_.fingerprint;
  h.store_mode = static_cast<uint32_t>(plan_.mode);
  h.n_layer = manifest_.n_layer;
  h.n_expert = manifest_.n_expert;
  h.n_slot = plan_.n_slot;
  h.n_dense = static_cast<uint32_t>(manifest_.dense.size());
  h.max_workers = store::kMaxWorkers;
  h.ring_capacity = store::kRingCapacity;
  h.layer_table_offset = plan_.layer_table_offset;
  h.expert_table_offset = plan_.expert_table_offset;
  h.slot_table_offset = plan_.slot_table_offset;
  h.dense_table_offset = plan_.dense_table_offset;
  h.worker_region_offset = plan_.worker_region_offset;
  h.worker_region_stride = sizeof(store::WorkerRegion);
  h.dense_data_offset = plan_.dense_data_offset;
  h.dense_data_bytes = plan_.dense_data_bytes;
  h.slot_area_offset = plan_.slot_area_offset;
  h.slot_area_bytes = plan_.slot_area_bytes;
  h.total_expert_bytes = manifest_.total_expert_bytes;
  h.max_span_bytes = plan_.max_span_bytes;
  h.hparams = manifest_.hparams;
  h.daemon.daemon_pid = static_cast<int32_t>(getpid());
  h.daemon.heartbeat_ns = store::MonotonicNowNs();
  h.daemon.phase = static_cast<uint32_t>(store::DaemonPhase::kStarting);
  h.counters.preload_experts_total =
      plan_.mode == store::StoreMode::kFullyResident ? manifest_.expert_count : 0;

  store::LayerDesc* layers = store::LayerTableOf(base, h);
  store::ExpertEntry* entries = store::ExpertTableOf(base, h);
  for (uint32_t l = 0; l < manifest_.n_layer; ++l) {
    layers[l] = manifest_.layers[l].desc;
    for (uint32_t e = 0; e < manifest_.n_expert; ++e) {
      store::ExpertEntry& x = entries[store::ExpertIndex(l, e, manifest_.n_expert)];
      x.state = StateValue(ExpertState::kOnDisk);
      x.slot = store::kNoSlot;
      if (!manifest_.HasExperts(l)) continue;
      if (!options_.warm_ranks.empty()) {
        x.warm_rank = options_.warm_ranks[store::ExpertIndex(l, e, manifest_.n_expert)];
      }
      const ExpertPlacement p = PlaceExpert(manifest_, l, e);
      x.span_bytes = static_cast<uint32_t>(p.span_bytes);
      for (int i = 0; i < 3; ++i) x.slice_offset[i] = p.slice_offset[i];
      layers[l].max_span_bytes = std::max<uint64_t>(layers[l].max_span_bytes, p.span_bytes);
    }
  }
  store::SlotDesc* slots = store::SlotTableOf(base, h);
  for (uint32_t s = 0; s < plan_.n_slot; ++s) slots[s] = plan_.slots[s];
  store::DenseTensorEntry* dense = store::DenseTableOf(base, h);
  for (size_t i = 0; i < manifest_.dense.size(); ++i) {
    const DenseTensor& d = manifest_.dense[i];
    store::DenseTensorEntry& x = dense[i];
    std::memcpy(x.name, d.name.data(), d.name.size());  // length checked by the manifest
    x.tensor_type = static_cast<uint32_t>(d.type);
    x.n_dims = d.n_dims;
    for (int k = 0; k < 4; ++k) x.ne[k] = d.ne[k];
    x.offset = plan_.dense_offsets[i];
    x.size_bytes = d.size_bytes;
  }
  // Last: a worker that sees the magic sees everything above.
  Shared(h.magic).store(store::kSegmentMagic, std::memory_order_release);
}

absl::Status ExpertStore::FillDenseTensors() {
  const uint64_t start_ns = store::MonotonicNowNs();
  std::vector<int> fds;
  absl::Status status;
  for (const std::string& path : manifest_.shard_paths) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      status = absl::Status(absl::ErrnoToStatusCode(errno),
                            absl::StrFormat("opening %s: %s", path, std::strerror(errno)));
      break;
    }
    fds.push_back(fd);
  }
  const uint64_t total = manifest_.dense_bytes;
  ProgressPacer pacer = PhasePacer(options_, total);
  ByteRateLimiter limiter = PreloadLimiter(options_);
  uint64_t copied = 0;
  if (status.ok() && pacer.Due(0, start_ns)) ReportProgress(kPhaseDense, 0, total, start_ns, "");
  for (size_t i = 0; status.ok() && i < manifest_.dense.size(); ++i) {
    const DenseTensor& d = manifest_.dense[i];
    const uint64_t offset = plan_.dense_offsets[i];
    uint8_t* dest = segment_->base() + offset;
    uint64_t done = 0;
    while (status.ok() && done < d.size_bytes) {
      const uint64_t piece_end = std::min(d.size_bytes, done + kDensePieceBytes);
      // Locked before the copy, so these pages are never swappable.
      status = segment_->LockThrough(offset + piece_end);
      if (!status.ok()) break;
      if (const uint64_t delay = limiter.DelayNs(store::MonotonicNowNs()); delay > 0) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(delay));
      }
      limiter.Consume(piece_end - done, store::MonotonicNowNs());
      while (done < piece_end) {
        const ssize_t got = pread(fds[d.shard], dest + done, piece_end - done,
                                  static_cast<off_t>(d.file_offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
          status = absl::DataLossError(absl::StrFormat(
              "reading tensor %s (%d bytes at offset %d) from %s: %s", d.name, d.size_bytes,
              d.file_offset, manifest_.shard_paths[d.shard],
              got == 0 ? "the file ends early" : std::strerror(errno)));
          break;
        }
        done += static_cast<uint64_t>(got);
        copied += static_cast<uint64_t>(got);
      }
      if (status.ok() && pacer.Due(copied, store::MonotonicNowNs())) {
        ReportProgress(kPhaseDense, copied, total, start_ns, "");
      }
    }
  }
  for (int fd : fds) close(fd);
  if (status.ok()) {
    if (pacer.Due(total, store::MonotonicNowNs())) {
      ReportProgress(kPhaseDense, total, total, start_ns, "");
    }
    LogInfo("copied %d dense tensors (%s) into the store in %.2f s", manifest_.dense.size(),
            FormatBytes(manifest_.dense_bytes), Seconds(store::MonotonicNowNs() - start_ns));
  }
  return status;
}

absl::Status ExpertStore::LockCache() {
  if (!segment_->locking()) return absl::OkStatus();
  const uint64_t start_ns = store::MonotonicNowNs();
  const uint64_t total = segment_->size();
  ProgressPacer pacer = PhasePacer(options_, total);
  if (pacer.Due(segment_->locked_bytes(), start_ns)) {
    ReportProgress(kPhaseLock, segment_->locked_bytes(), total, start_ns, "");
  }
  absl::Status status = segment_->LockThrough(total, [&](uint64_t locked) {
    if (pacer.Due(locked, store::MonotonicNowNs())) {
      ReportProgress(kPhaseLock, locked, total, start_ns, "");
    }
  });
  if (status.ok() && segment_->locked()) {
    LogInfo("locked the %s store in RAM in %.2f s", FormatBytes(total),
            Seconds(store::MonotonicNowNs() - start_ns));
  }
  return status;
}

void ExpertStore::ReportProgress(std::string_view phase, uint64_t done, uint64_t total,
                                 uint64_t start_ns, std::string_view extra) {
  const double elapsed = std::max(Seconds(store::MonotonicNowNs() - start_ns), 1e-9);
  const double percent =
      total == 0 ? 100.0 : 100.0 * static_cast<double>(done) / static_cast<double>(total);
  LogInfo("%s: %.0f%% (%s of %s), %s/s%s", absl::string_view(phase.data(), phase.size()),
          percent, FormatBytes(done), FormatBytes(total),
          FormatBytes(static_cast<uint64_t>(static_cast<double>(done) / elapsed)),
          absl::string_view(extra.data(), extra.size()));
  if (options_.on_startup_progress) options_.on_startup_progress({phase, done, total});
}

std::optional<std::string> ExpertStore::startup_failure() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return startup_failure_;
}

uint64_t ExpertStore::service_heartbeat_ns() const {
  return Shared(header_->daemon.heartbeat_ns).load(std::memory_order_acquire);
}

void ExpertStore::FailStartup(const absl::Status& status) {
  LogError("giving up the preload: %s", status.message());
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    startup_failure_ = std::string(status.message());
  }
  preloading_ = false;
  SetPhase(store::DaemonPhase::kStopping);
}

bool ExpertStore::LockPreloadSlot(uint32_t slot) {
  const store::SlotDesc& desc = plan_.slots[slot];
  absl::Status status = segment_->LockThrough(desc.offset + desc.capacity_bytes);
  if (!status.ok()) FailStartup(status);
  return status.ok();
}

void ExpertStore::Start() {
  MOETIER_CHECK(!running_.load());
  if (plan_.mode == store::StoreMode::kFullyResident) {
    preloading_ = true;
    preload_start_ns_ = store::MonotonicNowNs();
    preload_pacer_.emplace(PhasePacer(options_, manifest_.total_expert_bytes));
    preload_limiter_.emplace(PreloadLimiter(options_));
    SetPhase(store::DaemonPhase::kPreloading);
    LogInfo("preloading %d experts (%s)%s", manifest_.expert_count,
            FormatBytes(manifest_.total_expert_bytes),
            options_.preload_bytes_per_s == 0
                ? std::string()
                : absl::StrFormat(" at most %s/s (preload_bytes_per_s)",
                                  FormatBytes(options_.preload_bytes_per_s)));
    if (preload_pacer_->Due(0, preload_start_ns_)) {
      ReportProgress(kPhasePreload, 0, manifest_.total_expert_bytes, preload_start_ns_, "");
    }
  } else {
    SetPhase(store::DaemonPhase::kReady);
    if (!options_.warm_order.empty()) {
      warming_.store(true);
      warm_start_ns_ = store::MonotonicNowNs();
      LogInfo("warming the expert cache: the %d hottest experts of the heat profile first, "
              "while requests are served",
              std::min<size_t>(options_.warm_order.size(), plan_.n_slot));
    }
  }
  running_.store(true);
  service_ = std::thread([this] { ServiceLoop(); });
}

void ExpertStore::Stop() {
  if (service_.joinable()) {
    stop_.store(true);
    Shared(header_->doorbell).fetch_add(1, std::memory_order_release);
    store::FutexWakeAll(&header_->doorbell);
    service_.join();
  }
  if (header_ != nullptr) SetPhase(store::DaemonPhase::kStopping);
  ready_cv_.notify_all();
}

store::DaemonPhase ExpertStore::phase() const {
  return static_cast<store::DaemonPhase>(
      Shared(header_->daemon.phase).load(std::memory_order_acquire));
}

void ExpertStore::SetPhase(store::DaemonPhase phase) {
  {
    std::lock_guard<std::mutex> lock(ready_mutex_);
    Shared(header_->daemon.phase).store(static_cast<uint32_t>(phase), std::memory_order_release);
  }
  ready_cv_.notify_all();
}

bool ExpertStore::WaitUntilReady(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(ready_mutex_);
  return ready_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] {
    const store::DaemonPhase p = phase();
    return p == store::DaemonPhase::kReady || p == store::DaemonPhase::kStopping;
  }) && phase() == store::DaemonPhase::kReady;
}

store::StoreCounters ExpertStore::counters() const {
  store::StoreCounters out{};
  const uint64_t* from = &header_->counters.loads;
  uint64_t* to = &out.loads;
  for (size_t i = 0; i < sizeof(store::StoreCounters) / sizeof(uint64_t); ++i) {
    to[i] = Shared(const_cast<uint64_t&>(from[i])).load(std::memory_order_relaxed);
  }
  return out;
}

uint64_t ExpertStore::ResidentExpertBytes() const {
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < n_entries_; ++i) {
    const uint32_t state = Shared(entries_[i].state).load(std::memory_order_relaxed);
    if (state == static_cast<uint32_t>(store::ExpertState::kResident)) {
      bytes += manifest_.layers[i / manifest_.n_expert].desc.expert_bytes;
    }
  }
  return bytes;
}

std::vector<uint64_t> ExpertStore::RoutedTotals() const {
  std::vector<uint64_t> totals(n_entries_);
  for (uint32_t i = 0; i < n_entries_; ++i) {
    totals[i] = Shared(entries_[i].routed).load(std::memory_order_relaxed);
  }
  return totals;
}

std::vector<ExpertStore::ExpertUse> ExpertStore::ExpertUses() const {
  std::vector<ExpertUse> uses(n_entries_);
  for (uint32_t i = 0; i < n_entries_; ++i) {
    store::ExpertEntry& e = entries_[i];
    uses[i].resident = Shared(e.state).load(std::memory_order_relaxed) ==
                       static_cast<uint32_t>(store::ExpertState::kResident);
    uses[i].routed = Shared(e.routed).load(std::memory_order_relaxed);
  }
  return uses;
}

store::WorkerStatusPage ExpertStore::WorkerStatus(uint32_t index) const {
  MOETIER_CHECK(index < store::kMaxWorkers);
  store::WorkerStatusPage& page = store::WorkerRegionOf(segment_->base(), *header_, index)->status;
  store::WorkerStatusPage out;
  // The page is written concurrently by the worker and the service thread;
  // copy it word by word through atomics so no read tears.
  static_assert(sizeof(store::WorkerStatusPage) % sizeof(uint64_t) == 0);
  const uint64_t* from = reinterpret_cast<const uint64_t*>(&page);
  uint64_t* to = reinterpret_cast<uint64_t*>(&out);
  for (size_t i = 0; i < sizeof(store::WorkerStatusPage) / sizeof(uint64_t); ++i) {
    to[i] = Shared(const_cast<uint64_t&>(from[i])).load(std::memory_order_relaxed);
  }
  return out;
}

void ExpertStore::Bump(uint64_t& counter, uint64_t by) {
  Shared(counter).fetch_add(by, std::memory_order_relaxed);
}

// --- commands from other threads ---------------------------------------------

void ExpertStore::RunOnServiceThread(std::function<void()> command) {
  std::unique_lock<std::mutex> lock(command_mutex_);
  if (!running_.load()) {
    lock.unlock();
    command();
    return;
  }
  commands_.push_back(std::move(command));
  const uint64_t ticket = ++commands_posted_;
  Shared(header_->doorbell).fetch_add(1, std::memory_order_release);
  store::FutexWakeAll(&header_->doorbell);
  command_cv_.wait(lock, [&] { return commands_done_ >= ticket; });
}

void ExpertStore::RunCommands() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(command_mutex_);
    if (commands_.empty()) return;
    batch.swap(commands_);
  }
  for (auto& command : batch) command();
  {
    std::lock_guard<std::mutex> lock(command_mutex_);
    commands_done_ += batch.size();
  }
  command_cv_.notify_all();
}

uint32_t ExpertStore::AdmitWorker(uint32_t index, int32_t pid, std::string_view device) {
  MOETIER_CHECK(index < store::kMaxWorkers && device.size() < store::kDeviceNameBytes);
  uint32_t epoch = 0;
  RunOnServiceThread([&] {
    ReleaseWorkerNow(index);
    store::WorkerStatusPage& page =
        store::WorkerRegionOf(segment_->base(), *header_, index)->status;
    // Counters and residency belong to the process: a new one starts at zero.
    std::memset(reinterpret_cast<uint8_t*>(&page) + offsetof(store::WorkerStatusPage, device), 0,
                sizeof(page) - offsetof(store::WorkerStatusPage, device));
    std::memcpy(page.device, device.data(), device.size());
    page.pid = pid;
    page.epoch = ++workers_[index].epoch;
    page.admitted_ns = store::MonotonicNowNs();
    Shared(page.heartbeat_ns).store(page.admitted_ns, std::memory_order_relaxed);
    Shared(page.attach_state)
        .store(static_cast<uint32_t>(store::WorkerAttachState::kAttached),
               std::memory_order_release);
    workers_[index].admitted = true;
    epoch = page.epoch;
  });
  return epoch;
}

void ExpertStore::ReleaseWorker(uint32_t index) {
  MOETIER_CHECK(index < store::kMaxWorkers);
  RunOnServiceThread([&] { ReleaseWorkerNow(index); });
}

void ExpertStore::ReleaseWorkerNow(uint32_t index) {
  store::WorkerRegion* region = store::WorkerRegionOf(segment_->base(), *header_, index);
  Shared(region->status.attach_state)
      .store(static_cast<uint32_t>(store::WorkerAttachState::kVacant), std::memory_order_release);
  workers_[index].admitted = false;
  uint64_t dropped = 0;
  const uint32_t bit = 1u << index;
  for (uint32_t x = 0; x < n_entries_; ++x) {
    dropped += Shared(entries_[x].pins[index]).exchange(0, std::memory_order_acq_rel);
    books_[x].waiting_workers &= ~bit;
  }
  store::RingReset(region->requests);
  store::RingReset(region->completions);
  if (dropped > 0) LogInfo("dropped %d expert pins left by worker %d", dropped, index);
}

uint64_t ExpertStore::WorkerHeartbeatNs(uint32_t index) const {
  MOETIER_CHECK(index < store::kMaxWorkers);
  return Shared(store::WorkerRegionOf(segment_->base(), *header_, index)->status.heartbeat_ns)
      .load(std::memory_order_acquire);
}

}  // namespace moetier
