#include "cache/slot_cached_expert_source.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/check.h"

namespace moetier {
namespace {

constexpr uint64_t kAlign = 64;

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

ExpertSlotCacheOptions SlotCacheOptionsFor(const RoutedExpertShapes& shapes,
                                           const HostSlotCacheOptions& host) {
  ExpertSlotCacheOptions o = ExpertSlotGeometry(shapes, kAlign);
  o.pool_bytes = host.pool_bytes;
  o.policy = host.policy;
  o.miss_policy = host.miss_policy;
  o.prefetch = host.prefetch;
  o.static_host_layers = host.static_host_layers;
  // Both sites are the same cores here: a copy only adds its own time, so
  // miss policy auto computes every miss from the store.
  o.cost.copy_bytes_per_s = 1e10;
  o.cost.sites_overlap = false;
  return o;
}

absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> SlotCachedExpertSource::Create(
    ExpertWeightSource& inner, const RoutedExpertShapes& shapes,
    const HostSlotCacheOptions& options) {
  const ExpertSlotCacheOptions cache_options = SlotCacheOptionsFor(shapes, options);
  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> cache = ExpertSlotCache::Create(cache_options);
  if (!cache.ok()) return cache.status();
  std::vector<ExpertSlotLayout> geometry;
  for (const ExpertLayerShape& lw : shapes.layers) {
    geometry.push_back(ExpertSlotLayoutOf(lw, kAlign));
  }
  // No pool when static placement keeps every layer on the host.
  const uint64_t pool_bytes = uint64_t{(*cache)->n_slots()} * cache_options.slot_bytes;
  absl::StatusOr<uint8_t*> pool = MapPool(pool_bytes);
  if (!pool.ok()) return pool.status();
  auto source = std::unique_ptr<SlotCachedExpertSource>(new SlotCachedExpertSource(
      inner, *std::move(cache), std::move(geometry), *pool, pool_bytes));
  if (absl::Status s = source->FillInitialSlots(); !s.ok()) return s;
  return source;
}

absl::StatusOr<uint8_t*> SlotCachedExpertSource::MapPool(uint64_t bytes) {
  if (bytes == 0) return nullptr;
  void* pool = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pool == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "expert cache: cannot allocate the %.1f MiB slot pool: %s", bytes / 1048576.0,
        std::strerror(errno)));
  }
  // Advice only: without transparent huge pages the pool works on 4 KiB pages.
  (void)madvise(pool, bytes, MADV_HUGEPAGE);
  return static_cast<uint8_t*>(pool);
}

absl::StatusOr<uint64_t> SlotCachedExpertSource::ResizeExpertCache(uint64_t pool_bytes) {
  MOETIER_CHECK(!inner_held_);  // between engine calls
  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> cache =
      ResizedExpertSlotCache(*cache_, pool_bytes);
  if (!cache.ok()) return cache.status();
  if ((*cache)->n_slots() == cache_->n_slots()) return pool_bytes_;
  const uint64_t new_bytes = uint64_t{(*cache)->n_slots()} * (*cache)->options().slot_bytes;
  absl::StatusOr<uint8_t*> pool = MapPool(new_bytes);
  if (!pool.ok()) return pool.status();
  if (pool_ != nullptr) munmap(pool_, pool_bytes_);
  pool_ = *pool;
  pool_bytes_ = new_bytes;
  cache_ = *std::move(cache);
  route_layer_ = -1;  // the routing seen belongs to the old cache's pass
  return pool_bytes_;
}

SlotCachedExpertSource::SlotCachedExpertSource(ExpertWeightSource& inner,
                                               std::unique_ptr<ExpertSlotCache> cache,
                                               std::vector<ExpertSlotLayout> geometry, uint8_t* pool,
                                               uint64_t pool_bytes)
    : inner_(inner),
      cache_(std::move(cache)),
      geometry_(std::move(geometry)),
      pool_(pool),
      pool_bytes_(pool_bytes) {
  const size_t n = cache_->options().n_expert;
  route_rows_.assign(n, 0);
  rows_.assign(n, 0);
  placements_.assign(n, {});
  inner_ids_.assign(n, 0);
  inner_index_.assign(n, 0);
  inner_mats_.assign(n, {});
  fills_.assign(n, {});
}

SlotCachedExpertSource::~SlotCachedExpertSource() {
  if (inner_held_) inner_.Release(held_layer_);
  if (pool_ != nullptr) munmap(pool_, pool_bytes_);
}

ExpertMatrices SlotCachedExpertSource::SlotMatrices(int layer, int32_t slot) const {
  const ExpertSlotLayout& g = geometry_[layer];
  const uint8_t* base = pool_ + static_cast<uint64_t>(slot) * cache_->options().slot_bytes;
  return {base, base + g.up_offset, base + g.down_offset};
}

void SlotCachedExpertSource::CopyIntoSlot(int layer, int32_t slot, const ExpertMatrices& from) {
  const ExpertSlotLayout& g = geometry_[layer];
  const ExpertMatrices to = SlotMatrices(layer, slot);
  const uint64_t start = NowNs();
  std::memcpy(const_cast<uint8_t*>(to.gate), from.gate, g.gate_bytes);
  std::memcpy(const_cast<uint8_t*>(to.up), from.up, g.up_bytes);
  std::memcpy(const_cast<uint8_t*>(to.down), from.down, g.down_bytes);
  copy_busy_ns_ += NowNs() - start;
}

absl::Status SlotCachedExpertSource::FillFromInner(int layer, std::span<const SlotFill> fills) {
  const size_t group = static_cast<size_t>(std::max(1, inner_.max_experts_held()));
  for (size_t g0 = 0; g0 < fills.size(); g0 += group) {
    const size_t count = std::min(group, fills.size() - g0);
    for (size_t i = 0; i < count; ++i) inner_ids_[i] = static_cast<int32_t>(fills[g0 + i].expert);
    absl::Status s = inner_.Acquire(layer, std::span<const int32_t>(inner_ids_.data(), count),
                                    std::span<ExpertMatrices>(inner_mats_.data(), count));
    if (!s.ok()) {
      if (!cache_->is_static()) {
        for (size_t i = g0; i < fills.size(); ++i) cache_->Discard(fills[i].layer, fills[i].expert);
      }
      return s;
    }
    for (size_t i = 0; i < count; ++i) CopyIntoSlot(layer, fills[g0 + i].slot, inner_mats_[i]);
    inner_.Release(layer);
  }
  return absl::OkStatus();
}

absl::Status SlotCachedExpertSource::FillInitialSlots() {
  // Static placement's slots must all be filled; the warm start is a guess,
  // and an expert it cannot read is left to demand.
  const std::vector<SlotFill> fills[2] = {
      cache_->InitialFills(),
      cache_->WarmFills(
          WarmRanksOf(inner_, cache_->options().n_layer, cache_->options().n_expert))};
  for (const bool warm : {false, true}) {
    const std::vector<SlotFill>& f = fills[warm ? 1 : 0];
    size_t begin = 0;
    while (begin < f.size()) {
      size_t end = begin;
      while (end < f.size() && f[end].layer == f[begin].layer) ++end;
      const int layer = static_cast<int>(f[begin].layer);
      if (absl::Status s =
              FillFromInner(layer, std::span<const SlotFill>(f.data() + begin, end - begin));
          !s.ok()) {
        if (!warm) {
          return absl::Status(s.code(), absl::StrFormat(
                                            "expert cache: filling layer %d's slots: %s", layer,
                                            s.message()));
        }
        std::fprintf(stderr, "expert cache: warm start of layer %d cut short: %s\n", layer,
                     std::string(s.message()).c_str());
      }
      begin = end;
    }
  }
  return absl::OkStatus();
}

void SlotCachedExpertSource::Route(int layer, std::span<const int32_t> topk_ids) {
  std::fill(route_rows_.begin(), route_rows_.end(), 0);
  for (const int32_t e : topk_ids) ++route_rows_[static_cast<size_t>(e)];
  route_layer_ = layer;
  cache_->Route(static_cast<uint32_t>(layer), topk_ids);
  inner_.Route(layer, topk_ids);
}

absl::Status SlotCachedExpertSource::Acquire(int layer, std::span<const int32_t> experts,
                                             std::span<ExpertMatrices> out) {
  MOETIER_CHECK(!inner_held_ && experts.size() <= rows_.size() && out.size() >= experts.size());
  const bool routed = route_layer_ == layer;
  for (size_t i = 0; i < experts.size(); ++i) {
    rows_[i] = routed ? std::max<uint32_t>(1, route_rows_[static_cast<size_t>(experts[i])]) : 1;
  }
  cache_->Place(static_cast<uint32_t>(layer), experts, std::span(rows_).first(experts.size()),
                placements_);
  // The host copies needed: experts computed from them, and fills.
  size_t n_inner = 0;
  for (size_t i = 0; i < experts.size(); ++i) {
    const ExpertPlacement& p = placements_[i];
    if (p.site == ExpertSite::kHost || p.fill) {
      inner_ids_[n_inner] = experts[i];
      inner_index_[n_inner] = static_cast<int32_t>(i);
      ++n_inner;
    } else {
      out[i] = SlotMatrices(layer, p.slot);
    }
  }
  if (n_inner == 0) return absl::OkStatus();
  absl::Status s = inner_.Acquire(layer, std::span<const int32_t>(inner_ids_.data(), n_inner),
                                  std::span<ExpertMatrices>(inner_mats_.data(), n_inner));
  if (!s.ok()) {
    cache_->Release(static_cast<uint32_t>(layer));
    for (size_t i = 0; i < experts.size(); ++i) {
      if (placements_[i].fill) {
        cache_->Discard(static_cast<uint32_t>(layer), static_cast<uint32_t>(experts[i]));
      }
    }
    return s;
  }
  inner_held_ = true;
  held_layer_ = layer;
  for (size_t j = 0; j < n_inner; ++j) {
    const size_t i = static_cast<size_t>(inner_index_[j]);
    const ExpertPlacement& p = placements_[i];
    if (p.fill) {
      CopyIntoSlot(layer, p.slot, inner_mats_[j]);
      out[i] = SlotMatrices(layer, p.slot);
    } else {
      out[i] = inner_mats_[j];
    }
  }
  return absl::OkStatus();
}

void SlotCachedExpertSource::Release(int layer) {
  if (inner_held_) {
    inner_.Release(layer);
    inner_held_ = false;
  }
  cache_->Release(static_cast<uint32_t>(layer));
}

int SlotCachedExpertSource::max_experts_held() const {
  return std::min(inner_.max_experts_held(), static_cast<int>(cache_->max_group()));
}

bool SlotCachedExpertSource::wants_prefetch() const {
  return cache_->options().prefetch && !cache_->is_static();
}

absl::Status SlotCachedExpertSource::Prefetch(int layer, std::span<const int32_t> experts) {
  const size_t n = cache_->Prefetch(static_cast<uint32_t>(layer), experts, fills_);
  if (n == 0) return absl::OkStatus();
  return FillFromInner(layer, std::span<const SlotFill>(fills_.data(), n));
}

}  // namespace moetier
