// One snapshot of everything the front door reports about the daemon: per
// tier (RAM, VRAM) resident experts and bytes, hits and misses, bytes read
// from disk and the read rate, preload progress, each worker's state and
// its device expert cache (pool size, prefetch outcomes, copy rate).
// The store's shared counters, the workers' status pages and the
// supervisor's bookkeeping are gathered here so callers never read them
// piecemeal.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "store/expert_store.h"
#include "store/store_layout.h"
#include "supervisor/worker_supervisor.h"

namespace moetier {

struct TierStats {
  uint64_t resident_experts = 0;
  uint64_t resident_bytes = 0;  // the experts' matrices
  uint64_t hits = 0;
  uint64_t misses = 0;
};

struct WorkerStats {
  uint32_t index = 0;
  std::string device;
  WorkerPhase phase = WorkerPhase::kWaiting;  // kRunning when known only from the store
  bool attached = false;        // the store holds an admitted process for this index
  pid_t pid = 0;
  uint32_t epoch = 0;
  uint32_t starts = 0;          // from the supervisor; 0 without one
  std::string last_exit;
  int64_t heartbeat_age_ms = -1;  // -1: never heartbeated
  TierStats ram;                // this worker's store acquires
  TierStats vram;               // this worker's device cache
  uint64_t prefetch_hints = 0;
  uint64_t requests_served = 0;
  // The device expert cache, as the worker reports it on its status page.
  uint64_t expert_cache_bytes = 0;   // its slot pool; 0 without a device cache
  uint64_t vram_misses_on_host = 0;  // of vram.misses, computed on host cores, not copied
  uint64_t prefetch_issued = 0;      // copies started for predicted experts
  uint64_t prefetch_used = 0;        // of those, routed to before being evicted
  uint64_t prefetch_wasted = 0;      // of those, evicted unused
  uint64_t vram_bytes_copied = 0;    // host -> device expert bytes
  uint64_t copy_busy_ns = 0;         // time with an expert copy in flight
  double copy_bytes_per_s = 0;       // CopyBytesPerS(vram_bytes_copied, copy_busy_ns)
  // The prefix cache, as the worker reports it.
  uint64_t prefix_cache_states = 0;
  uint64_t prefix_cache_bytes = 0;
  uint64_t prompt_tokens_reused = 0;
};

// The effective host -> device copy rate: bytes over the time a copy was in
// flight (not wall time, so idle stretches do not dilute it); 0 before any copy.
double CopyBytesPerS(uint64_t bytes_copied, uint64_t copy_busy_ns);

struct DaemonStats {
  uint64_t taken_ns = 0;  // CLOCK_MONOTONIC
  store::DaemonPhase phase = store::DaemonPhase::kStarting;
  store::StoreMode mode = store::StoreMode::kFullyResident;
  uint32_t n_slot = 0;
  TierStats ram;   // hits/misses: summed over the attached workers
  TierStats vram;  // summed over the workers' device caches
  // Device expert caches, summed over the attached workers.
  uint64_t expert_cache_bytes = 0;
  uint64_t vram_misses_on_host = 0;
  uint64_t prefetch_issued = 0;
  uint64_t prefetch_used = 0;
  uint64_t prefetch_wasted = 0;
  uint64_t vram_bytes_copied = 0;
  uint64_t copy_busy_ns = 0;
  uint64_t bytes_read = 0;          // from the model file, since start
  double read_bytes_per_s = 0;      // since the previous snapshot (the first: since start)
  uint64_t loads = 0;
  uint64_t load_errors = 0;
  uint64_t evictions = 0;
  uint64_t preload_experts_done = 0;
  uint64_t preload_experts_total = 0;  // 0 in cache mode
  double preload_fraction = 0;         // done / total; 1 when there is nothing to preload
  std::vector<WorkerStats> workers;    // attached or supervised indices only
};

// Keeps the previous sample so read rates are over the last interval.
// Not thread-safe; one collector per caller.
class DaemonStatsCollector {
 public:
  DaemonStatsCollector();
  // `supervisor` may be null (an in-process store); then worker states come
  // from the store's status pages alone.
  DaemonStats Collect(const ExpertStore& store, const WorkerSupervisor* supervisor);

 private:
  uint64_t start_ns_ = 0;
  uint64_t last_ns_ = 0;
  uint64_t last_bytes_read_ = 0;
};

}  // namespace moetier
