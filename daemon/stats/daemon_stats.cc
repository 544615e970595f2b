#include "stats/daemon_stats.h"

#include <time.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace moetier {
namespace {

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Experts and bytes a worker reports resident in its device memory.
void CountVram(const store::WorkerStatusPage& page, const ModelManifest& manifest,
               TierStats* out) {
  for (uint32_t l = 0; l < manifest.n_layer && l < store::kMaxLayers; ++l) {
    const uint64_t expert_bytes = manifest.layers[l].desc.expert_bytes;
    const uint32_t first = l * store::kMaxExpertsPerLayer;
    for (uint32_t e = 0; e < manifest.n_expert; e += 64) {
      const uint32_t bit = first + e;
      uint64_t word = page.vram_residency[bit / 64];
      // kMaxExpertsPerLayer is a multiple of 64, so a layer's bits start a word;
      // drop the bits past n_expert in its last word.
      const uint32_t valid = std::min<uint32_t>(64, manifest.n_expert - e);
      if (valid < 64) word &= (uint64_t{1} << valid) - 1;
      const uint64_t n = static_cast<uint64_t>(std::popcount(word));
      out->resident_experts += n;
      out->resident_bytes += n * expert_bytes;
    }
  }
}

}  // namespace

double CopyBytesPerS(uint64_t bytes_copied, uint64_t copy_busy_ns) {
  if (copy_busy_ns == 0) return 0;
  return static_cast<double>(bytes_copied) * 1e9 / static_cast<double>(copy_busy_ns);
}

DaemonStatsCollector::DaemonStatsCollector() : start_ns_(MonotonicNs()), last_ns_(start_ns_) {}

DaemonStats DaemonStatsCollector::Collect(const ExpertStore& store,
                                          const WorkerSupervisor* supervisor) {
  DaemonStats s;
  s.taken_ns = MonotonicNs();
  s.phase = store.phase();
  s.mode = store.mode();
  s.n_slot = store.n_slot();
  const store::StoreCounters c = store.counters();
  s.ram.resident_experts = c.resident_experts;
  s.ram.resident_bytes = store.ResidentExpertBytes();
  s.bytes_read = c.bytes_read;
  s.loads = c.loads;
  s.load_errors = c.load_errors;
  s.evictions = c.evictions;
  s.preload_experts_done = c.preload_experts_done;
  s.preload_experts_total = c.preload_experts_total;
  s.preload_fraction = c.preload_experts_total == 0
                           ? 1.0
                           : static_cast<double>(c.preload_experts_done) /
                                 static_cast<double>(c.preload_experts_total);
  const uint64_t interval_ns = s.taken_ns - last_ns_;
  if (interval_ns > 0) {
    s.read_bytes_per_s = static_cast<double>(c.bytes_read - last_bytes_read_) * 1e9 /
                         static_cast<double>(interval_ns);
  }
  last_ns_ = s.taken_ns;
  last_bytes_read_ = c.bytes_read;

  std::vector<WorkerSnapshot> supervised;
  if (supervisor != nullptr) supervised = supervisor->Snapshot();
  for (uint32_t i = 0; i < store::kMaxWorkers; ++i) {
    const store::WorkerStatusPage page = store.WorkerStatus(i);
    const bool attached = page.attach_state == static_cast<uint32_t>(store::WorkerAttachState::kAttached);
    const WorkerSnapshot* sup = nullptr;
    for (const WorkerSnapshot& w : supervised) {
      if (w.index == i) sup = &w;
    }
    if (!attached && sup == nullptr) continue;
    WorkerStats w;
    w.index = i;
    w.attached = attached;
    if (sup != nullptr) {
      w.device = sup->device;
      w.phase = sup->phase;
      w.pid = sup->pid;
      w.epoch = sup->epoch;
      w.starts = sup->starts;
      w.last_exit = sup->last_exit;
    } else {
      w.device = std::string(page.device, strnlen(page.device, sizeof(page.device)));
      w.phase = WorkerPhase::kRunning;
      w.pid = page.pid;
      w.epoch = page.epoch;
    }
    if (attached) {
      if (page.heartbeat_ns != 0 && page.heartbeat_ns <= s.taken_ns) {
        w.heartbeat_age_ms = static_cast<int64_t>((s.taken_ns - page.heartbeat_ns) / 1000000);
      }
      w.ram.hits = page.ram_hits;
      w.ram.misses = page.ram_misses;
      w.vram.hits = page.vram_hits;
      w.vram.misses = page.vram_misses;
      w.prefetch_hints = page.prefetch_hints;
      w.requests_served = page.requests_served;
      w.expert_cache_bytes = page.expert_cache_bytes;
      w.vram_misses_on_host = page.misses_computed_on_host;
      w.prefetch_issued = page.prefetch_issued;
      w.prefetch_used = page.prefetch_used;
      w.prefetch_wasted = page.prefetch_wasted;
      w.vram_bytes_copied = page.vram_bytes_copied;
      w.copy_busy_ns = page.copy_busy_ns;
      w.copy_bytes_per_s = CopyBytesPerS(w.vram_bytes_copied, w.copy_busy_ns);
      w.prefix_cache_states = page.prefix_cache_states;
      w.prefix_cache_bytes = page.prefix_cache_bytes;
      w.prompt_tokens_reused = page.prompt_tokens_reused;
      CountVram(page, store.manifest(), &w.vram);
      s.ram.hits += w.ram.hits;
      s.ram.misses += w.ram.misses;
      s.vram.hits += w.vram.hits;
      s.vram.misses += w.vram.misses;
      s.vram.resident_experts += w.vram.resident_experts;
      s.vram.resident_bytes += w.vram.resident_bytes;
      s.expert_cache_bytes += w.expert_cache_bytes;
      s.vram_misses_on_host += w.vram_misses_on_host;
      s.prefetch_issued += w.prefetch_issued;
      s.prefetch_used += w.prefetch_used;
      s.prefetch_wasted += w.prefetch_wasted;
      s.vram_bytes_copied += w.vram_bytes_copied;
      s.copy_busy_ns += w.copy_busy_ns;
    }
    s.workers.push_back(std::move(w));
  }
  return s;
}

}  // namespace moetier
