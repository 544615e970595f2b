#include "cache/expert_slot_cache.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/check.h"

namespace moetier {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Layers from `first` on that have routed experts (expert_bytes 0: a layer
// without experts, FfnKind::kDense, which never routes).
uint32_t ExpertLayers(const ExpertSlotCacheOptions& o, uint32_t first = 0) {
  uint32_t n = 0;
  for (uint32_t l = first; l < o.n_layer && l < o.expert_bytes.size(); ++l) {
    n += o.expert_bytes[l] != 0 ? 1 : 0;
  }
  return n;
}

absl::Status ValidateFields(const ExpertSlotCacheOptions& o) {
  if (o.n_layer == 0 || o.n_expert == 0 || o.top_k == 0 || o.top_k > o.n_expert) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "expert cache: bad model shape (%u layers, %u experts, top-%u)", o.n_layer, o.n_expert,
        o.top_k));
  }
  if (o.expert_bytes.size() != o.n_layer) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "expert cache: %u expert sizes for %u layers", o.expert_bytes.size(), o.n_layer));
  }
  for (uint32_t l = 0; l < o.n_layer; ++l) {
    if (o.expert_bytes[l] > o.slot_bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "expert cache: layer %u's experts (%u bytes) do not fit a slot of %u bytes", l,
          o.expert_bytes[l], o.slot_bytes));
    }
  }
  if (ExpertLayers(o) == 0) {
    return absl::InvalidArgumentError("expert cache: no layer has routed experts");
  }
  if (o.static_host_layers > static_cast<int>(o.n_layer)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--n-cpu-moe %d is more than the model's %u MoE layers", o.static_host_layers, o.n_layer));
  }
  if (o.miss_policy == MissPolicy::kAuto && !(o.cost.copy_bytes_per_s > 0)) {
    return absl::InvalidArgumentError("expert cache: miss policy auto needs a measured copy rate");
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t MinDynamicPoolBytes(const ExpertSlotCacheOptions& options) {
  return uint64_t{ExpertLayers(options)} * options.top_k * options.slot_bytes;
}

uint64_t FullPoolBytes(const ExpertSlotCacheOptions& options) {
  return uint64_t{ExpertLayers(options)} * options.n_expert * options.slot_bytes;
}

uint64_t StaticPoolBytes(const ExpertSlotCacheOptions& options, int host_layers) {
  const uint32_t first = static_cast<uint32_t>(std::max(host_layers, 0));
  return uint64_t{ExpertLayers(options, first)} * options.n_expert * options.slot_bytes;
}

absl::StatusOr<std::unique_ptr<ExpertSlotCache>> ExpertSlotCache::Create(
    const ExpertSlotCacheOptions& options) {
  if (absl::Status s = ValidateFields(options); !s.ok()) return s;
  const uint32_t expert_layers = ExpertLayers(options);
  const uint64_t max_slots = uint64_t{expert_layers} * options.n_expert;
  const uint64_t slots = std::min(options.pool_bytes / options.slot_bytes, max_slots);
  if (options.static_host_layers >= 0) {
    const uint64_t need = StaticPoolBytes(options, options.static_host_layers);
    if (options.pool_bytes < need) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "expert cache: static placement with --n-cpu-moe %d keeps %u layers' experts on the "
          "device and needs %.0f MiB; the cache has %.0f MiB",
          options.static_host_layers,
          ExpertLayers(options, static_cast<uint32_t>(options.static_host_layers)), need / kMiB,
          options.pool_bytes / kMiB));
    }
    auto cache = std::unique_ptr<ExpertSlotCache>(
        new ExpertSlotCache(options, static_cast<uint32_t>(need / options.slot_bytes)));
    return cache;
  }
  if (options.pool_bytes < MinDynamicPoolBytes(options)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "expert cache: %.0f MiB holds %u slots of %.2f MiB; the cache needs at least top_k = %u "
        "slots per layer, %u in all: %.0f MiB",
        options.pool_bytes / kMiB, slots, options.slot_bytes / kMiB, options.top_k,
        expert_layers * options.top_k, MinDynamicPoolBytes(options) / kMiB));
  }
  auto cache = std::unique_ptr<ExpertSlotCache>(
      new ExpertSlotCache(options, static_cast<uint32_t>(slots)));
  // Even shares among the layers with experts; the remainder goes one slot
  // each to the first of them.
  ExpertCacheShape shape;
  shape.n_layer = options.n_layer;
  shape.n_expert = options.n_expert;
  shape.top_k = options.top_k;
  shape.slot_budget.assign(options.n_layer, 0);
  uint64_t remainder = slots % expert_layers;
  for (uint32_t l = 0; l < options.n_layer; ++l) {
    if (options.expert_bytes[l] == 0) continue;
    shape.slot_budget[l] = static_cast<uint32_t>(slots / expert_layers) + (remainder > 0 ? 1 : 0);
    if (remainder > 0) --remainder;
  }
  absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> policy =
      MakeExpertCachePolicy(options.policy, shape);
  if (!policy.ok()) return policy.status();
  cache->policy_ = *std::move(policy);
  return cache;
}

ExpertSlotCache::ExpertSlotCache(const ExpertSlotCacheOptions& options, uint32_t n_slots)
    : options_(options),
      n_slots_(n_slots),
      prefetched_unused_(static_cast<size_t>(options.n_layer) * options.n_expert, 0),
      miss_index_(options.n_expert),
      miss_costs_(options.n_expert),
      miss_on_host_(new bool[options.n_expert]),
      scratch_(options.n_expert) {
  pinned_.reserve(options.n_expert);
  routed_.reserve(options.top_k);
  if (is_static()) {
    // Static slots, layer after layer of those on the device with experts.
    static_slot_base_.assign(options.n_layer, -1);
    int32_t next = 0;
    for (uint32_t l = static_cast<uint32_t>(options.static_host_layers); l < options.n_layer; ++l) {
      if (options.expert_bytes[l] == 0) continue;
      static_slot_base_[l] = next;
      next += static_cast<int32_t>(options.n_expert);
    }
  }
}

uint32_t ExpertSlotCache::max_group() const {
  if (is_static()) return options_.n_expert;
  uint32_t smallest = options_.n_expert;
  for (uint32_t l = 0; l < options_.n_layer; ++l) {
    if (options_.expert_bytes[l] != 0) smallest = std::min(smallest, policy_->slot_budget(l));
  }
  return smallest;
}

uint32_t ExpertSlotCache::slot_budget(uint32_t layer) const {
  if (is_static()) return static_slot_base_[layer] < 0 ? 0 : options_.n_expert;
  return policy_->slot_budget(layer);
}

std::string ExpertSlotCache::Describe() const {
  const double pool_mib = static_cast<double>(n_slots_) * options_.slot_bytes / kMiB;
  if (is_static()) {
    return absl::StrFormat(
        "expert cache: static placement, experts of layers 0-%d on the host, of layers %d-%u in "
        "%u slots (%.0f MiB)",
        options_.static_host_layers - 1, options_.static_host_layers, options_.n_layer - 1,
        n_slots_, pool_mib);
  }
  uint32_t fewest = options_.n_expert;
  uint32_t most = 0;
  for (uint32_t l = 0; l < options_.n_layer; ++l) {
    if (options_.expert_bytes[l] == 0) continue;
    fewest = std::min(fewest, policy_->slot_budget(l));
    most = std::max(most, policy_->slot_budget(l));
  }
  return absl::StrFormat(
      "expert cache: %u slots of %.2f MiB (%.0f MiB, %.1f%% of all experts), %u-%u per layer, "
      "policy %s, misses %s, prefetch %s",
      n_slots_, options_.slot_bytes / kMiB, pool_mib,
      100.0 * n_slots_ / (static_cast<double>(ExpertLayers(options_)) * options_.n_expert), fewest,
      most, policy_->name(), MissPolicyName(options_.miss_policy),
      options_.prefetch ? "on" : "off");
}

std::vector<SlotFill> ExpertSlotCache::InitialFills() {
  std::vector<SlotFill> fills;
  if (!is_static()) return fills;
  for (uint32_t l = 0; l < options_.n_layer; ++l) {
    if (static_slot_base_[l] < 0) continue;
    for (uint32_t e = 0; e < options_.n_expert; ++e) {
      fills.push_back({l, e, static_slot_base_[l] + static_cast<int32_t>(e)});
      stats_.bytes_filled += options_.expert_bytes[l];
    }
  }
  return fills;
}

std::vector<SlotFill> ExpertSlotCache::WarmFills(std::span<const uint32_t> warm_rank) {
  std::vector<SlotFill> fills;
  if (is_static() || warm_rank.empty()) return fills;
  const uint32_t n_expert = options_.n_expert;
  MOETIER_CHECK(warm_rank.size() == static_cast<size_t>(options_.n_layer) * n_expert);
  std::vector<uint32_t> ranked;
  for (uint32_t l = 0; l < options_.n_layer; ++l) {
    ranked.clear();
    for (uint32_t e = 0; e < n_expert; ++e) {
      if (warm_rank[Index(l, e)] > 0 && !policy_->Resident(l, e)) ranked.push_back(e);
    }
    std::sort(ranked.begin(), ranked.end(), [&](uint32_t a, uint32_t b) {
      return warm_rank[Index(l, a)] < warm_rank[Index(l, b)];
    });
    const uint32_t room = policy_->slot_budget(l) - std::min(policy_->slot_budget(l),
                                                             policy_->resident_count(l));
    const size_t n = std::min<size_t>(ranked.size(), room);
    for (size_t i = n; i-- > 0;) {
      const SlotGrant grant = policy_->Admit(l, ranked[i]);
      // A free slot is always granted; nothing is evicted for a guess.
      MOETIER_CHECK(grant.slot != kNoSlot && grant.evicted_layer == kNoLayer);
      fills.push_back({l, ranked[i], grant.slot});
      ++stats_.warm_fills;
      stats_.bytes_filled += options_.expert_bytes[l];
    }
  }
  return fills;
}

void ExpertSlotCache::Route(uint32_t layer, std::span<const int32_t> topk_ids) {
  MOETIER_CHECK(layer < options_.n_layer && topk_ids.size() % options_.top_k == 0);
  if (is_static()) return;
  for (size_t t = 0; t < topk_ids.size(); t += options_.top_k) {
    routed_.clear();
    for (uint32_t j = 0; j < options_.top_k; ++j) {
      const uint32_t e = static_cast<uint32_t>(topk_ids[t + j]);
      MOETIER_CHECK(e < options_.n_expert);
      if (std::find(routed_.begin(), routed_.end(), e) == routed_.end()) routed_.push_back(e);
    }
    policy_->Route(layer, routed_);
  }
  // Place pins what it places; a batch's experts come in waves of at most
  // the layer's budget, which the last token's protection would block.
  if (topk_ids.size() > options_.top_k) policy_->EndProtection(layer);
}

void ExpertSlotCache::NoteEviction(const SlotGrant& grant) {
  if (grant.evicted_layer == kNoLayer) return;
  ++stats_.evictions;
  uint8_t& unused = prefetched_unused_[Index(grant.evicted_layer, grant.evicted_expert)];
  if (unused) {
    ++stats_.prefetch_wasted;
    unused = 0;
  }
}

void ExpertSlotCache::Place(uint32_t layer, std::span<const int32_t> experts,
                            std::span<const uint32_t> rows, std::span<ExpertPlacement> out) {
  MOETIER_CHECK(layer < options_.n_layer && experts.size() <= options_.n_expert &&
                rows.size() == experts.size() && out.size() >= experts.size());
  MOETIER_CHECK(pinned_.empty());  // the previous Place was released
  pinned_layer_ = layer;
  if (is_static()) {
    const bool on_host = static_slot_base_[layer] < 0;
    for (size_t i = 0; i < experts.size(); ++i) {
      const uint32_t e = static_cast<uint32_t>(experts[i]);
      MOETIER_CHECK(e < options_.n_expert);
      if (on_host) {
        out[i] = {ExpertSite::kHost, kNoSlot, false};
        ++stats_.misses;
        ++stats_.misses_on_host;
      } else {
        out[i] = {ExpertSite::kSlot, static_slot_base_[layer] + static_cast<int32_t>(e), false};
        ++stats_.hits;
      }
    }
    return;
  }
  size_t n_miss = 0;
  for (size_t i = 0; i < experts.size(); ++i) {
    const uint32_t e = static_cast<uint32_t>(experts[i]);
    MOETIER_CHECK(e < options_.n_expert);
    const int32_t slot = policy_->Lookup(layer, e);
    if (slot == kNoSlot) {
      miss_index_[n_miss] = static_cast<uint32_t>(i);
      miss_costs_[n_miss] = {options_.expert_bytes[layer], rows[i]};
      ++n_miss;
      continue;
    }
    ++stats_.hits;
    uint8_t& unused = prefetched_unused_[Index(layer, e)];
    if (unused) {
      ++stats_.prefetch_used;
      unused = 0;
    }
    policy_->Pin(layer, e);
    pinned_.push_back(e);
    out[i] = {ExpertSite::kSlot, slot, false};
  }
  if (n_miss == 0) return;
  stats_.misses += n_miss;
  std::span<bool> on_host(miss_on_host_.get(), n_miss);
  switch (options_.miss_policy) {
    case MissPolicy::kCopy:
      std::fill(on_host.begin(), on_host.end(), false);
      break;
    case MissPolicy::kHost:
      std::fill(on_host.begin(), on_host.end(), true);
      break;
    case MissPolicy::kAuto:
      AssignMisses(options_.cost, std::span(miss_costs_).first(n_miss), on_host, scratch_);
      break;
  }
  for (size_t m = 0; m < n_miss; ++m) {
    const uint32_t i = miss_index_[m];
    const uint32_t e = static_cast<uint32_t>(experts[i]);
    SlotGrant grant;
    if (!on_host[m]) grant = policy_->Admit(layer, e);
    if (grant.slot == kNoSlot) {
      ++stats_.misses_on_host;
      out[i] = {ExpertSite::kHost, kNoSlot, false};
      continue;
    }
    NoteEviction(grant);
    ++stats_.demand_fills;
    stats_.bytes_filled += options_.expert_bytes[layer];
    policy_->Pin(layer, e);
    pinned_.push_back(e);
    out[i] = {ExpertSite::kSlot, grant.slot, true};
  }
}

void ExpertSlotCache::Release(uint32_t layer) {
  if (pinned_.empty()) return;
  MOETIER_CHECK(layer == pinned_layer_);
  for (const uint32_t e : pinned_) policy_->Unpin(layer, e);
  pinned_.clear();
}

size_t ExpertSlotCache::Prefetch(uint32_t layer, std::span<const int32_t> experts,
                                 std::span<SlotFill> fills) {
  MOETIER_CHECK(layer < options_.n_layer && fills.size() >= experts.size());
  if (is_static() || !options_.prefetch) return 0;
  size_t n = 0;
  for (const int32_t id : experts) {
    const uint32_t e = static_cast<uint32_t>(id);
    MOETIER_CHECK(e < options_.n_expert);
    // Resident ones go to the policy too: it protects them from the
    // prefetches that follow (the lab measures the policies so).
    const SlotGrant grant = policy_->Prefetch(layer, e);
    if (grant.slot == kNoSlot) continue;
    NoteEviction(grant);
    prefetched_unused_[Index(layer, e)] = 1;
    ++stats_.prefetch_issued;
    stats_.bytes_filled += options_.expert_bytes[layer];
    fills[n++] = {layer, e, grant.slot};
  }
  return n;
}

void ExpertSlotCache::Discard(uint32_t layer, uint32_t expert) {
  MOETIER_CHECK(!is_static() && policy_->Resident(layer, expert));
  policy_->Evict(layer, expert);
  prefetched_unused_[Index(layer, expert)] = 0;
}

void ExpertSlotCache::ContinueCountsOf(const ExpertSlotCache& replaced) {
  MOETIER_CHECK(pinned_.empty());
  stats_ = replaced.stats_;
  for (const uint8_t unused : replaced.prefetched_unused_) stats_.prefetch_wasted += unused;
}

absl::StatusOr<std::unique_ptr<ExpertSlotCache>> ResizedExpertSlotCache(
    const ExpertSlotCache& current, uint64_t pool_bytes) {
  const ExpertSlotCacheOptions& o = current.options();
  if (current.is_static()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "expert cache: static placement (--n-cpu-moe %d) gives every expert of the other "
        "layers its own slot, so --n-cpu-moe fixes the cache's size (%.1f MiB); restart the "
        "worker with another --n-cpu-moe, or with --expert-cache-mib alone for a resizable cache",
        o.static_host_layers, uint64_t{current.n_slots()} * o.slot_bytes / kMiB));
  }
  const uint64_t min_bytes = MinDynamicPoolBytes(o);
  const uint64_t min_mib = (min_bytes + (1 << 20) - 1) >> 20;
  if (pool_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "expert cache: 0 MiB would remove the cache, which a running worker cannot do; restart "
        "the worker without --expert-cache-mib to run without one, or give at least %u MiB",
        min_mib));
  }
  if (pool_bytes < min_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "expert cache: %.1f MiB holds %u slots of %.2f MiB; the cache needs at least top_k = %u "
        "slots per layer, %u in all: give at least %u MiB",
        pool_bytes / kMiB, pool_bytes / o.slot_bytes, o.slot_bytes / kMiB, o.top_k,
        min_bytes / o.slot_bytes, min_mib));
  }
  ExpertSlotCacheOptions options = o;
  options.pool_bytes = pool_bytes;
  absl::StatusOr<std::unique_ptr<ExpertSlotCache>> cache = ExpertSlotCache::Create(options);
  if (!cache.ok()) return cache.status();
  (*cache)->ContinueCountsOf(current);
  return cache;
}

bool ExpertSlotCache::Resident(uint32_t layer, uint32_t expert) const {
  if (is_static()) return static_slot_base_[layer] >= 0;
  return policy_->Resident(layer, expert);
}

}  // namespace moetier
