#include "frontdoor/status_report.h"

#include <algorithm>
#include <cmath>

#include "store/shared_futex.h"

namespace moetier {
namespace {

const char* PhaseName(WorkerPhase phase, bool ready) {
  switch (phase) {
    case WorkerPhase::kWaiting:
      return "waiting";
    case WorkerPhase::kStarting:
      return "starting";
    case WorkerPhase::kRunning:
      return ready ? "ready" : "loading";
    case WorkerPhase::kStopped:
      return "stopped";
  }
  return "unknown";
}

void Fill(const TierStats& from, v1::TierCounters* to) {
  to->set_resident_experts(from.resident_experts);
  to->set_resident_bytes(from.resident_bytes);
  to->set_hits(from.hits);
  to->set_misses(from.misses);
}

}  // namespace

StatusReporter::StatusReporter(const DaemonConfig& config, const ExpertStore* store,
                               const WorkerSupervisor* supervisor,
                               const RequestScheduler* scheduler)
    : config_(config),
      store_(store),
      supervisor_(supervisor),
      scheduler_(scheduler),
      start_ns_(store::MonotonicNowNs()),
      last_ns_(start_ns_) {}

v1::Status StatusReporter::Build() {
  std::lock_guard<std::mutex> lock(mutex_);
  const DaemonStats stats = collector_.Collect(*store_, supervisor_);
  const SchedulerSnapshot queue = scheduler_->Snapshot();
  const ModelManifest& manifest = store_->manifest();
  const store::ModelHparams& hp = manifest.hparams;
  const uint32_t n_layer = hp.n_layer;
  const uint32_t n_expert = hp.n_expert;

  v1::Status out;
  out.set_model_path(config_.model_path());
  out.set_architecture(hp.architecture);
  out.set_n_layer(n_layer);
  out.set_n_expert(n_expert);
  out.set_n_expert_used(hp.n_expert_used);
  out.set_n_vocab(hp.n_vocab);
  out.set_store_mode(stats.mode == store::StoreMode::kFullyResident ? "fully resident" : "cache");
  out.set_ram_budget_bytes(store_->segment_bytes());
  out.set_ram_used_bytes(stats.ram.resident_bytes);
  out.set_expert_bytes_total(manifest.total_expert_bytes);
  out.set_preload_fraction(stats.preload_fraction);
  out.set_bytes_read_from_disk(stats.bytes_read);
  out.set_read_bytes_per_s(stats.read_bytes_per_s);
  out.set_evictions(stats.evictions);
  Fill(stats.ram, out.mutable_ram());
  Fill(stats.vram, out.mutable_vram());
  const uint64_t now = store::MonotonicNowNs();
  out.set_uptime_s((now - start_ns_) / 1e9);
  if (heat_keeper_ != nullptr) out.set_heat_profile(heat_keeper_->Describe());

  // Heat: an exponentially decaying count of the token rows routed to each
  // expert (store acquires would miss what a worker's cache keeps).
  const std::vector<ExpertStore::ExpertUse> uses = store_->ExpertUses();
  if (last_routed_.size() != uses.size()) {
    last_routed_.assign(uses.size(), 0);
    heat_.assign(uses.size(), 0.0);
  }
  const double dt = (now - last_ns_) / 1e9;
  const double decay = std::exp2(-dt / kHeatHalfLifeS);
  last_ns_ = now;
  double hottest = 0;
  for (size_t i = 0; i < uses.size(); ++i) {
    const uint64_t fresh = uses[i].routed - std::min(uses[i].routed, last_routed_[i]);
    last_routed_[i] = uses[i].routed;
    heat_[i] = heat_[i] * decay + static_cast<double>(fresh);
    hottest = std::max(hottest, heat_[i]);
  }
  // VRAM residency: the union over the workers' status pages.
  std::vector<store::WorkerStatusPage> pages;
  for (const WorkerStats& w : stats.workers) {
    if (w.attached) pages.push_back(store_->WorkerStatus(w.index));
  }
  for (uint32_t l = 0; l < n_layer; ++l) {
    v1::LayerResidency* layer = out.add_layers();
    if (!manifest.HasExperts(l)) continue;  // a dense layer: nothing to place
    for (uint32_t e = 0; e < n_expert; ++e) {
      const size_t i = static_cast<size_t>(l) * n_expert + e;
      bool in_vram = false;
      const uint32_t bit = store::ResidencyBit(l, e);
      for (const store::WorkerStatusPage& p : pages) {
        if ((p.vram_residency[bit / 64] >> (bit % 64)) & 1u) in_vram = true;
      }
      layer->add_tier(in_vram            ? v1::EXPERT_TIER_VRAM
                      : uses[i].resident ? v1::EXPERT_TIER_RAM
                                         : v1::EXPERT_TIER_DISK);
      layer->add_heat(hottest > 0 ? static_cast<float>(heat_[i] / hottest) : 0.0f);
    }
  }

  for (const WorkerStats& w : stats.workers) {
    v1::WorkerStatus* ws = out.add_workers();
    const SchedulerWorkerInfo* sched = nullptr;
    for (const SchedulerWorkerInfo& s : queue.workers) {
      if (s.index == w.index) sched = &s;
    }
    ws->set_index(w.index);
    ws->set_device(w.device);
    ws->set_state(PhaseName(w.phase, sched != nullptr && sched->ready));
    ws->set_restarts(w.starts > 0 ? w.starts - 1 : 0);
    ws->set_pid(w.pid);
    ws->set_last_exit(w.last_exit);
    ws->set_heartbeat_age_ms(w.heartbeat_age_ms);
    Fill(w.ram, ws->mutable_ram());
    Fill(w.vram, ws->mutable_vram());
    ws->set_expert_cache_bytes(w.expert_cache_bytes);
    ws->set_bytes_copied(w.vram_bytes_copied);
    ws->set_prefetch_hints(w.prefetch_hints);
    ws->set_misses_on_host(w.vram_misses_on_host);
    ws->set_prefetch_issued(w.prefetch_issued);
    ws->set_prefetch_used(w.prefetch_used);
    ws->set_prefetch_wasted(w.prefetch_wasted);
    ws->set_copy_bytes_per_s(w.copy_bytes_per_s);
    ws->set_prefix_cache_states(static_cast<uint32_t>(w.prefix_cache_states));
    ws->set_prefix_cache_bytes(w.prefix_cache_bytes);
    ws->set_prompt_tokens_reused(w.prompt_tokens_reused);
    if (sched != nullptr) ws->set_requests_served(sched->requests_served);
    if (sched != nullptr) ws->set_tokens_per_s(sched->last_decode_tokens_per_s);
    if (sched != nullptr && sched->ready) {
      ws->set_max_ctx(sched->max_ctx);
      ws->set_kv_bytes_per_token(sched->kv_bytes_per_token);
      ws->set_recurrent_state_bytes(sched->recurrent_state_bytes);
      ws->set_kv_type_k(sched->kv_type_k);
      ws->set_kv_type_v(sched->kv_type_v);
      ws->set_running_requests(sched->running);
      ws->set_max_sequences(sched->max_sequences);
      ws->set_prefix_cache_budget_bytes(sched->prefix_cache_budget_bytes);
    }
  }

  v1::QueueStatus* q = out.mutable_queue();
  q->set_queued_requests(queue.queued);
  q->set_active_requests(queue.active);
  q->set_max_queued_requests(scheduler_->limits().max_queued_requests);
  q->set_max_active_sequences(scheduler_->limits().max_active_sequences);
  q->set_requests_completed(queue.completed);
  q->set_requests_rejected(queue.rejected);
  q->set_requests_cancelled(queue.cancelled);
  return out;
}

}  // namespace moetier
