#include "store/expert_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_format.h"
#include "log/daemon_log.h"
#include "store/shared_futex.h"
#include "store/spsc_ring.h"
#include "base/check.h"
#include "util/byte_size.h"

namespace moetier {
namespace {

using store::ExpertState;
using store::Shared;

constexpr uint8_t kQueuedDemand = 1;
constexpr uint8_t kQueuedPrefetch = 2;
constexpr int kSourceDemand = 0;
constexpr int kSourcePrefetch = 1;
constexpr int kSourcePreload = 2;
constexpr int kSourceWarm = 3;
// How long the service thread waits for reads before it looks at the rings
// again, and how long it sleeps when there is nothing to do.
constexpr int64_t kIoPollNs = 500'000;
constexpr int64_t kStalledWaitNs = 1'000'000;
constexpr int64_t kIdleWaitNs = 50'000'000;
constexpr uint32_t kUserDataReadBits = 2;  // user_data = load << 2 | read
// The dense weights are copied in pieces, so the copy can be locked,
// paced and reported as it goes rather than one tensor (up to GiBs) at a time.
constexpr uint64_t kDensePieceBytes = uint64_t{8} << 20;
// Credit the limiters give, in time at the set rate: enough to keep the
// queue full between reads, too little to matter for the average.
constexpr uint64_t kThrottleBurstPerSecond = 10;  // 100 ms
constexpr std::string_view kPhaseLock = "locking the expert cache";
constexpr std::string_view kPhaseDense = "copying dense weights";
constexpr std::string_view kPhasePreload = "preloading experts";

uint32_t State(store::ExpertEntry& e) { return Shared(e.state).load(std::memory_order_seq_cst); }
constexpr uint32_t StateValue(ExpertState s) { return static_cast<uint32_t>(s); }

double Seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }
double GiB(double bytes) { return bytes / static_cast<double>(uint64_t{1} << 30); }

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

class ExpertStore::Probe : public VictimProbe {
 public:
  explicit Probe(ExpertStore* store) : store_(store) {}
  bool Referenced(uint32_t slot) override {
    const uint32_t owner = store_->slot_owner_[slot];
    MOETIER_CHECK(owner != store::kNoSlot);
    store::ExpertEntry& e = store_->entry(owner);
    const uint64_t access = Shared(e.hits).load(std::memory_order_relaxed) +
                            Shared(e.misses).load(std::memory_order_relaxed);
    if (access == store_->slot_last_access_[slot]) return false;
    store_->slot_last_access_[slot] = access;
    return true;
  }
  bool TryEvict(uint32_t slot) override { return store_->TryEvictSlot(slot); }

 private:
  ExpertStore* store_;
};

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

// --- the service thread --------------------------------------------------------

void ExpertStore::ServiceLoop() {
  while (true) {
    RunCommands();
    if (stop_.load()) break;
    const uint32_t bell = Shared(header_->doorbell).load(std::memory_order_acquire);
    DrainRequests();
    const bool stalled = StartLoads();
    if (io_->in_flight() > 0) ReapReads(kIoPollNs);
    Shared(header_->daemon.heartbeat_ns).store(store::MonotonicNowNs(), std::memory_order_release);
    if (preloading_) LogPreloadProgress(false);
    if (io_->in_flight() == 0) {
      const bool preload_more =
          preloading_ && preload_cursor_ < n_entries_ && preload_delay_ns_ == 0;
      const bool more = !stalled && (!demand_queue_.empty() || !prefetch_queue_.empty() ||
                                     preload_more || warming_.load(std::memory_order_relaxed));
      const int64_t wait_ns =
          stalled ? kStalledWaitNs
                  : std::min<int64_t>(kIdleWaitNs, preload_delay_ns_ > 0
                                                       ? static_cast<int64_t>(preload_delay_ns_)
                                                       : kIdleWaitNs);
      if (!more) store::FutexWait(&header_->doorbell, bell, wait_ns);
    }
  }
  // Readers fail fast from here on; reads in flight still write into slots.
  SetPhase(store::DaemonPhase::kStopping);
  while (io_->in_flight() > 0) ReapReads(10'000'000);
  // Commands posted until now run here; later ones run on their caller.
  std::vector<std::function<void()>> rest;
  {
    std::lock_guard<std::mutex> lock(command_mutex_);
    running_.store(false);
    rest.swap(commands_);
  }
  for (auto& command : rest) command();
  {
    std::lock_guard<std::mutex> lock(command_mutex_);
    commands_done_ += rest.size();
  }
  command_cv_.notify_all();
}

void ExpertStore::DrainRequests() {
  for (uint32_t w = 0; w < store::kMaxWorkers; ++w) {
    if (!workers_[w].admitted) continue;
    store::WorkerRegion* region = store::WorkerRegionOf(segment_->base(), *header_, w);
    store::ExpertRequest request;
    // Bounded per round so one busy worker cannot starve the others.
    for (uint32_t i = 0; i < store::kRingCapacity; ++i) {
      const store::RingPopResult r = store::RingPop(region->requests, &request);
      if (r == store::RingPopResult::kEmpty) break;
      if (r == store::RingPopResult::kCorrupt) {
        LogWarning("worker %d corrupted its request ring (head %d, tail %d); dropping its "
                   "pending requests",
                   w, region->requests.head, region->requests.tail);
        store::RingSkipAll(region->requests);
        Bump(region->status.requests_rejected);
        Bump(header_->counters.requests_rejected);
        break;
      }
      HandleRequest(w, request);
    }
  }
}

void ExpertStore::HandleRequest(uint32_t worker, const store::ExpertRequest& request) {
  store::WorkerRegion* region = store::WorkerRegionOf(segment_->base(), *header_, worker);
  const bool demand = request.kind == static_cast<uint32_t>(store::RequestKind::kDemand);
  const bool prefetch = request.kind == static_cast<uint32_t>(store::RequestKind::kPrefetch);
  if (request.layer >= manifest_.n_layer || request.expert >= manifest_.n_expert ||
      !manifest_.HasExperts(request.layer) || (!demand && !prefetch)) {
    Bump(region->status.requests_rejected);
    Bump(header_->counters.requests_rejected);
    return;
  }
  Bump(region->status.requests_served);
  const uint32_t x =
      static_cast<uint32_t>(store::ExpertIndex(request.layer, request.expert, manifest_.n_expert));
  store::ExpertEntry& e = entry(x);
  if (demand) {
    Bump(header_->counters.demand_requests);
  } else {
    Bump(header_->counters.prefetch_requests);
    Bump(e.prefetch_hints);
  }
  ExpertBook& book = books_[x];
  pending_sequence_[uint64_t{worker} * n_entries_ + x] = request.sequence;
  const uint32_t state = State(e);
  if (state == StateValue(ExpertState::kResident)) {
    PushCompletion(worker, x, 0, Shared(e.slot).load(std::memory_order_relaxed));
    return;
  }
  book.waiting_workers |= 1u << worker;
  if (state == StateValue(ExpertState::kLoading)) return;
  if (demand && !(book.queued & kQueuedDemand)) {
    book.queued |= kQueuedDemand;
    demand_queue_.push(x);
  } else if (prefetch && !(book.queued & (kQueuedDemand | kQueuedPrefetch))) {
    book.queued |= kQueuedPrefetch;
    prefetch_queue_.push(x);
  }
}

bool ExpertStore::NextExpert(uint32_t* expert, int* source) {
  // Stale queue entries (already loading or resident) are dropped here.
  auto from = [&](FixedQueue& queue, uint8_t flag, int which) {
    while (!queue.empty()) {
      const uint32_t x = queue.front();
      if (State(entry(x)) == StateValue(ExpertState::kOnDisk) && books_[x].load < 0) {
        *expert = x;
        *source = which;
        return true;
      }
      books_[x].queued &= static_cast<uint8_t>(~flag);
      queue.pop();
    }
    return false;
  };
  if (from(demand_queue_, kQueuedDemand, kSourceDemand)) return true;
  if (from(prefetch_queue_, kQueuedPrefetch, kSourcePrefetch)) return true;
  // A warm start takes free slots only: it never evicts what demand read.
  while (warming_.load(std::memory_order_relaxed)) {
    if (warm_cursor_ >= options_.warm_order.size() || free_slots_.empty()) {
      FinishWarmStart();
      break;
    }
    const uint32_t x = options_.warm_order[warm_cursor_];
    if (x < n_entries_ && manifest_.HasExperts(x / manifest_.n_expert) &&
        State(entry(x)) == StateValue(ExpertState::kOnDisk) && books_[x].load < 0) {
      *expert = x;
      *source = kSourceWarm;
      return true;
    }
    ++warm_cursor_;
  }
  while (preloading_ && preload_cursor_ < n_entries_) {
    const uint32_t x = preload_cursor_;
    if (manifest_.HasExperts(x / manifest_.n_expert) &&
        State(entry(x)) == StateValue(ExpertState::kOnDisk) && books_[x].load < 0) {
      *expert = x;
      *source = kSourcePreload;
      return true;
    }
    ++preload_cursor_;
  }
  return false;
}

bool ExpertStore::StartLoads() {
  preload_delay_ns_ = 0;
  while (!free_loads_.empty() &&
         io_->in_flight() + reads_per_load_max_ <= io_->queue_depth()) {
    uint32_t x = 0;
    int source = 0;
    if (!NextExpert(&x, &source)) break;
    // The warm start keeps half the queue free, so that a demand read
    // arriving meanwhile does not wait behind a full queue of guesses.
    if (source == kSourceWarm &&
        io_->in_flight() + reads_per_load_max_ > std::max(reads_per_load_max_,
                                                          io_->queue_depth() / 2)) {
      break;
    }
    if (source == kSourcePreload) {
      preload_delay_ns_ = preload_limiter_->DelayNs(store::MonotonicNowNs());
      if (preload_delay_ns_ > 0) break;
    }
    const std::optional<uint32_t> slot = AcquireSlot(x);
    if (!slot.has_value()) {
      if (!stalled_) Bump(header_->counters.stalls_all_pinned);
      stalled_ = true;
      return true;
    }
    stalled_ = false;
    if (source == kSourceDemand) {
      books_[x].queued &= static_cast<uint8_t>(~kQueuedDemand);
      demand_queue_.pop();
    } else if (source == kSourcePrefetch) {
      books_[x].queued &= static_cast<uint8_t>(~kQueuedPrefetch);
      prefetch_queue_.pop();
    } else if (source == kSourceWarm) {
      ++warm_cursor_;
    } else {
      if (!LockPreloadSlot(*slot)) break;
      preload_limiter_->Consume(entry(x).span_bytes, store::MonotonicNowNs());
      ++preload_cursor_;
    }
    BeginLoad(x, *slot, source);
  }
  return false;
}

std::optional<uint32_t> ExpertStore::AcquireSlot(uint32_t expert) {
  if (plan_.mode == store::StoreMode::kFullyResident) {
    const uint32_t slot = plan_.home_slot[expert];
    MOETIER_CHECK(slot != store::kNoSlot && slot_owner_[slot] == store::kNoSlot);
    return slot;
  }
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  Probe probe(this);
  return policy_->Evict(probe);
}

bool ExpertStore::TryEvictSlot(uint32_t slot) {
  const uint32_t x = slot_owner_[slot];
  MOETIER_CHECK(x != store::kNoSlot);
  store::ExpertEntry& e = entry(x);
  MOETIER_CHECK(State(e) == StateValue(ExpertState::kResident));
  // seq_cst store, then seq_cst pin loads: pairs with the worker's seq_cst
  // pin increment followed by its seq_cst state load (store_layout.h).
  Shared(e.state).store(StateValue(ExpertState::kEvicting), std::memory_order_seq_cst);
  for (uint32_t w = 0; w < store::kMaxWorkers; ++w) {
    if (Shared(e.pins[w]).load(std::memory_order_seq_cst) != 0) {
      Shared(e.state).store(StateValue(ExpertState::kResident), std::memory_order_seq_cst);
      return false;
    }
  }
  Shared(e.slot).store(store::kNoSlot, std::memory_order_relaxed);
  Shared(e.state).store(StateValue(ExpertState::kOnDisk), std::memory_order_seq_cst);
  Bump(e.evictions);
  Bump(header_->counters.evictions);
  Shared(header_->counters.resident_experts).fetch_sub(1, std::memory_order_relaxed);
  slot_owner_[slot] = store::kNoSlot;
  return true;
}

void ExpertStore::FinishWarmStart() {
  warming_.store(false, std::memory_order_relaxed);
  const store::StoreCounters c = counters();
  LogInfo("warm start: %d reads of the heat profile's hottest experts issued in %.1f s%s",
          c.warm_loads,
          Seconds(store::MonotonicNowNs() - warm_start_ns_),
          free_slots_.empty() && warm_cursor_ < options_.warm_order.size()
              ? " (every slot taken; the colder rest waits for demand)"
              : "");
}

void ExpertStore::BeginLoad(uint32_t x, uint32_t slot, int source) {
  // Speculative loads (hints, the warm start) have to earn their first
  // reference; see FinishLoad.
  const bool prefetch = source == kSourcePrefetch || source == kSourceWarm;
  MOETIER_CHECK(!free_loads_.empty());
  const uint32_t li = free_loads_.back();
  free_loads_.pop_back();
  Load& load = loads_[li];
  load = Load{};
  load.expert = x;
  load.slot = slot;
  load.prefetch = prefetch;
  load.placement = PlaceExpert(manifest_, x / manifest_.n_expert, x % manifest_.n_expert);
  load.reads_pending = load.placement.n_reads;
  books_[x].load = static_cast<int32_t>(li);
  slot_owner_[slot] = x;
  Shared(entry(x).state).store(StateValue(ExpertState::kLoading), std::memory_order_seq_cst);
  if (source == kSourcePrefetch) Bump(header_->counters.prefetch_loads);
  if (source == kSourceWarm) Bump(header_->counters.warm_loads);
  const store::SlotDesc& slot_desc = plan_.slots[slot];
  MOETIER_CHECK(slot_desc.capacity_bytes >= load.placement.span_bytes);
  // Straight into the slot: nobody reads it before it is published.
  uint8_t* dest = segment_->base() + slot_desc.offset;
  for (uint32_t i = 0; i < load.placement.n_reads; ++i) {
    const FileRange& range = load.placement.reads[i];
    ReadRequest read;
    read.file = file_index_[range.shard];
    read.offset = range.offset;
    read.length = range.size;
    read.dest = dest + load.placement.read_slot_offset[i];
    read.user_data = (uint64_t{li} << kUserDataReadBits) | i;
    io_->Submit(read);
  }
}

void ExpertStore::ReapReads(int64_t timeout_ns) {
  ReadCompletion done[64];
  const size_t n = io_->Reap(done, timeout_ns);
  for (size_t k = 0; k < n; ++k) {
    const uint32_t li = static_cast<uint32_t>(done[k].user_data >> kUserDataReadBits);
    const uint32_t i = static_cast<uint32_t>(done[k].user_data & ((1u << kUserDataReadBits) - 1));
    MOETIER_CHECK(li < loads_.size() && i < loads_[li].placement.n_reads);
    Load& load = loads_[li];
    const FileRange& range = load.placement.reads[i];
    const uint64_t needed = load.placement.needed_bytes[i];
    const uint32_t layer = load.expert / manifest_.n_expert;
    const uint32_t expert = load.expert % manifest_.n_expert;
    if (done[k].error != 0) {
      LogWarning("reading expert %d of layer %d (%d bytes at offset %d of %s): %s", expert, layer,
                 range.size, range.offset, manifest_.shard_paths[range.shard],
                 std::strerror(done[k].error));
      if (load.error == 0) load.error = done[k].error;
    } else if (done[k].bytes < needed) {
      LogWarning("reading expert %d of layer %d: %s ends at offset %d, before the expert's "
                 "bytes up to offset %d",
                 expert, layer, manifest_.shard_paths[range.shard],
                 range.offset + done[k].bytes, range.offset + needed);
      if (load.error == 0) load.error = EIO;
    }
    MOETIER_CHECK(load.reads_pending > 0);
    if (--load.reads_pending == 0) FinishLoad(li);
  }
  const IoStats stats = io_->stats();
  Shared(header_->counters.reads_submitted).store(stats.reads_submitted, std::memory_order_relaxed);
  Shared(header_->counters.short_reads).store(stats.short_reads, std::memory_order_relaxed);
}

void ExpertStore::FinishLoad(uint32_t li) {
  Load& load = loads_[li];
  const uint32_t x = load.expert;
  store::ExpertEntry& e = entry(x);
  const store::LayerDesc& desc = manifest_.layers[x / manifest_.n_expert].desc;
  if (load.error == 0) {
    // The seq_cst store of kResident publishes the bytes the reads wrote.
    Shared(e.slot).store(load.slot, std::memory_order_relaxed);
    Shared(e.last_error).store(0, std::memory_order_relaxed);
    Bump(e.loads);
    Shared(e.state).store(StateValue(ExpertState::kResident), std::memory_order_seq_cst);
    policy_->OnFill(load.slot);
    // A demand load counts as a first reference (the waiter is about to pin
    // it); a speculative one has to earn it.
    slot_last_access_[load.slot] =
        load.prefetch ? Shared(e.hits).load(std::memory_order_relaxed) +
                            Shared(e.misses).load(std::memory_order_relaxed)
                      : ~uint64_t{0};
    Bump(header_->counters.loads);
    Bump(header_->counters.bytes_read, desc.expert_bytes);
    Bump(header_->counters.resident_experts);
    if (plan_.mode == store::StoreMode::kFullyResident) {
      Bump(header_->counters.preload_experts_done);
    }
  } else {
    slot_owner_[load.slot] = store::kNoSlot;
    if (plan_.mode == store::StoreMode::kCache) free_slots_.push_back(load.slot);
    Shared(e.last_error).store(load.error, std::memory_order_relaxed);
    Bump(e.load_errors);
    Bump(header_->counters.load_errors);
    Shared(e.state).store(StateValue(ExpertState::kOnDisk), std::memory_order_seq_cst);
  }
  Shared(e.futex_word).fetch_add(1, std::memory_order_seq_cst);
  store::FutexWakeAll(&e.futex_word);
  books_[x].load = -1;
  AnswerWaiters(x, load.error, load.error == 0 ? load.slot : store::kNoSlot);
  free_loads_.push_back(li);
}

void ExpertStore::AnswerWaiters(uint32_t x, int error, uint32_t slot) {
  uint32_t waiting = books_[x].waiting_workers;
  books_[x].waiting_workers = 0;
  while (waiting != 0) {
    const uint32_t w = static_cast<uint32_t>(__builtin_ctz(waiting));
    waiting &= waiting - 1;
    PushCompletion(w, x, error, slot);
  }
}

void ExpertStore::PushCompletion(uint32_t worker, uint32_t x, int error, uint32_t slot) {
  if (!workers_[worker].admitted) return;
  store::WorkerRegion* region = store::WorkerRegionOf(segment_->base(), *header_, worker);
  store::ExpertCompletion c{};
  c.sequence = pending_sequence_[uint64_t{worker} * n_entries_ + x];
  c.layer = static_cast<uint16_t>(x / manifest_.n_expert);
  c.expert = static_cast<uint16_t>(x % manifest_.n_expert);
  c.error = error;
  c.slot = slot;
  if (!store::RingPush(region->completions, c)) Bump(region->status.completions_dropped);
}

void ExpertStore::LogPreloadProgress(bool final) {
  const store::StoreCounters c = counters();
  const uint64_t now = store::MonotonicNowNs();
  const bool all_attempted = preload_cursor_ >= n_entries_ && demand_queue_.empty() &&
                             free_loads_.size() == loads_.size();
  if (all_attempted) final = true;
  const uint64_t total = manifest_.total_expert_bytes;
  const uint64_t done = std::min(total, c.bytes_read);
  if (!final) {
    if (!preload_pacer_->Due(done, now)) return;
    const double elapsed = std::max(Seconds(now - preload_start_ns_), 1e-9);
    const double rate = static_cast<double>(done) / elapsed;  // bytes/s
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
    ReportProgress(kPhasePreload, done, total, preload_start_ns_,
                   absl::StrFormat(", ETA %.0f s, %s locked", eta,
                                   FormatBytes(segment_->locked_bytes())));
    return;
  }
  // Whatever lies past the last slot read (nothing, or slots of experts
  // that failed) is locked too before the store counts as ready.
  if (absl::Status lock = segment_->LockThrough(segment_->size()); !lock.ok()) {
    FailStartup(lock);
    return;
  }
  preloading_ = false;
  const double elapsed = std::max(Seconds(now - preload_start_ns_), 1e-9);
  const double rate = static_cast<double>(c.bytes_read) / elapsed;
  if (preload_pacer_->Due(total, now)) {
    ReportProgress(kPhasePreload, done, total, preload_start_ns_,
                   absl::StrFormat(", %s locked", FormatBytes(segment_->locked_bytes())));
  }
  if (c.load_errors > 0) {
    LogWarning("preload finished: %d of %d experts resident, %d could not be read (see the "
               "warnings above); they are retried when a worker asks for them",
               c.resident_experts, manifest_.expert_count, c.load_errors);
  } else {
    LogInfo("preload finished: all %d experts resident, %s in %.2f s (%.2f GiB/s), memory %s",
            manifest_.expert_count, FormatBytes(c.bytes_read), elapsed, GiB(rate),
            segment_->locked() ? "locked" : "NOT locked");
  }
  SetPhase(store::DaemonPhase::kReady);
}

}  // namespace moetier
