#include "fake_status.h"

#include <cmath>

namespace moetier::http_test {
namespace {

void SetTier(v1::TierCounters* t, uint64_t experts, uint64_t bytes, uint64_t hits,
             uint64_t misses) {
  t->set_resident_experts(experts);
  t->set_resident_bytes(bytes);
  t->set_hits(hits);
  t->set_misses(misses);
}

}  // namespace

v1::Status FakeStatus(uint64_t tick) {
  constexpr uint64_t kExpertBytes = 3u << 20;
  v1::Status s;
  s.set_model_path("/models/qwen3-30b-a3b-q4_k_m.gguf");
  s.set_architecture("qwen3moe");
  s.set_n_layer(kFakeLayers);
  s.set_n_expert(kFakeExperts);
  s.set_n_expert_used(8);
  s.set_n_vocab(151936);
  s.set_store_mode("cache");
  s.set_ram_budget_bytes(uint64_t{8} << 30);
  s.set_expert_bytes_total(kExpertBytes * kFakeLayers * kFakeExperts);
  s.set_preload_fraction(1.0);
  s.set_bytes_read_from_disk((uint64_t{5} << 30) + tick * (uint64_t{64} << 20));
  s.set_read_bytes_per_s(640e6 + 10e6 * static_cast<double>(tick % 7));
  s.set_evictions(1200 + 3 * tick);
  s.set_uptime_s(3600.5 + static_cast<double>(tick));

  uint64_t vram_experts = 0;
  uint64_t ram_experts = 0;
  for (uint32_t l = 0; l < kFakeLayers; ++l) {
    v1::LayerResidency* layer = s.add_layers();
    for (uint32_t e = 0; e < kFakeExperts; ++e) {
      // A band of hot experts that drifts across the layers as tick moves.
      const double phase = static_cast<double>(e + 2 * l + tick) * 0.35;
      const float heat = static_cast<float>(0.5 + 0.5 * std::sin(phase));
      const uint32_t slot = (e * 7 + l * 3 + static_cast<uint32_t>(tick)) % 10;
      const v1::ExpertTier tier = slot < 3   ? v1::EXPERT_TIER_VRAM
                                  : slot < 8 ? v1::EXPERT_TIER_RAM
                                             : v1::EXPERT_TIER_DISK;
      if (tier == v1::EXPERT_TIER_VRAM) ++vram_experts;
      if (tier != v1::EXPERT_TIER_DISK) ++ram_experts;
      layer->add_tier(tier);
      layer->add_heat(heat);
    }
  }
  s.set_ram_used_bytes(ram_experts * kExpertBytes);
  SetTier(s.mutable_ram(), ram_experts, ram_experts * kExpertBytes, 90000 + 40 * tick,
          4000 + 3 * tick);
  SetTier(s.mutable_vram(), vram_experts, vram_experts * kExpertBytes, 50000 + 30 * tick,
          9000 + 5 * tick);

  v1::WorkerStatus* cpu = s.add_workers();
  cpu->set_index(0);
  cpu->set_device("cpu");
  cpu->set_state("ready");
  cpu->set_pid(4101);
  cpu->set_heartbeat_age_ms(120);
  SetTier(cpu->mutable_ram(), ram_experts, ram_experts * kExpertBytes, 40000 + 15 * tick,
          2000 + tick);
  cpu->set_requests_served(310 + tick / 3);
  cpu->set_tokens_per_s(11.5 + 0.25 * static_cast<double>(tick % 5));
  cpu->set_prefetch_hints(8000 + 11 * tick);

  v1::WorkerStatus* gpu = s.add_workers();
  gpu->set_index(1);
  gpu->set_device("cuda:0");
  gpu->set_state("ready");
  gpu->set_restarts(1);
  gpu->set_pid(4102);
  gpu->set_last_exit("signal 9 (killed)");
  gpu->set_heartbeat_age_ms(80);
  SetTier(gpu->mutable_ram(), ram_experts, ram_experts * kExpertBytes, 50000 + 25 * tick,
          2000 + 2 * tick);
  SetTier(gpu->mutable_vram(), vram_experts, vram_experts * kExpertBytes, 50000 + 30 * tick,
          9000 + 5 * tick);
  gpu->set_expert_cache_bytes(uint64_t{6} << 30);
  gpu->set_bytes_copied((uint64_t{20} << 30) + tick * (uint64_t{48} << 20));
  gpu->set_prefetch_hints(12000 + 13 * tick);
  gpu->set_prefetch_issued(6000 + 9 * tick);
  gpu->set_prefetch_used(4500 + 7 * tick);
  gpu->set_prefetch_wasted(1400 + 2 * tick);
  gpu->set_copy_bytes_per_s(11.8e9);
  gpu->set_requests_served(920 + tick / 2);
  gpu->set_tokens_per_s(42.0 + static_cast<double>(tick % 9));
  gpu->set_max_ctx(32768);

  v1::QueueStatus* q = s.mutable_queue();
  q->set_queued_requests(static_cast<uint32_t>(tick % 4));
  q->set_active_requests(1 + static_cast<uint32_t>(tick % 3));
  q->set_max_queued_requests(64);
  q->set_max_active_sequences(4);
  q->set_requests_completed(1230 + tick);
  q->set_requests_rejected(7);
  q->set_requests_cancelled(12);
  return s;
}

}  // namespace moetier::http_test
