// ExpertStore's service thread: worker requests from the rings, expert
// loads through the I/O backend, slot eviction, the warm start and the
// preload with its progress lines. Creation, start-up and the status the
// other threads read are in expert_store.cc.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/check.h"
#include "log/daemon_log.h"
#include "store/expert_store.h"
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

uint32_t State(store::ExpertEntry& e) { return Shared(e.state).load(std::memory_order_seq_cst); }
double GiB(double bytes) { return bytes / static_cast<double>(uint64_t{1} << 30); }

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
        LogWarning(
            "worker %d corrupted its request ring (head %d, tail %d); dropping its "
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
  while (!free_loads_.empty() && io_->in_flight() + reads_per_load_max_ <= io_->queue_depth()) {
    uint32_t x = 0;
    int source = 0;
    if (!NextExpert(&x, &source)) break;
    // The warm start keeps half the queue free, so that a demand read
    // arriving meanwhile does not wait behind a full queue of guesses.
    if (source == kSourceWarm && io_->in_flight() + reads_per_load_max_ >
                                     std::max(reads_per_load_max_, io_->queue_depth() / 2)) {
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
          c.warm_loads, Seconds(store::MonotonicNowNs() - warm_start_ns_),
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
      LogWarning(
          "reading expert %d of layer %d: %s ends at offset %d, before the expert's "
          "bytes up to offset %d",
          expert, layer, manifest_.shard_paths[range.shard], range.offset + done[k].bytes,
          range.offset + needed);
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
    slot_last_access_[load.slot] = load.prefetch
                                       ? Shared(e.hits).load(std::memory_order_relaxed) +
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
  const bool all_attempted =
      preload_cursor_ >= n_entries_ && demand_queue_.empty() && free_loads_.size() == loads_.size();
  if (all_attempted) final = true;
  const uint64_t total = manifest_.total_expert_bytes;
  const uint64_t done = std::min(total, c.bytes_read);
  if (!final) {
    if (!preload_pacer_->Due(done, now)) return;
    const double elapsed = std::max(Seconds(now - preload_start_ns_), 1e-9);
    const double rate = static_cast<double>(done) / elapsed;  // bytes/s
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
    ReportProgress(
        kPhasePreload, done, total, preload_start_ns_,
        absl::StrFormat(", ETA %.0f s, %s locked", eta, FormatBytes(segment_->locked_bytes())));
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
    LogWarning(
        "preload finished: %d of %d experts resident, %d could not be read (see the "
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
