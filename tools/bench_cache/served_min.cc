#include "served_min.h"

#include <algorithm>
#include <limits>
#include <set>
#include <unordered_map>
#include <utility>

#include "base/check.h"

namespace moetier {
namespace {

constexpr size_t kNever = std::numeric_limits<size_t>::max();

uint64_t Key(uint32_t layer, uint32_t expert) { return uint64_t{layer} << 32 | expert; }
// Expert ids are below 2^16 (store_layout.h allows 512).
uint64_t Use(size_t pass, uint32_t expert) { return uint64_t{pass} << 16 | expert; }

}  // namespace

MinTally ServedMin(std::span<const ServedPass> passes, std::span<const uint32_t> budgets) {
  // next_after[(q, e)]: the pass after q (same layer) that uses e again.
  std::unordered_map<uint64_t, size_t> next_after;
  std::unordered_map<uint64_t, size_t> seen_at;
  for (size_t i = passes.size(); i-- > 0;) {
    const ServedPass& p = passes[i];
    for (const uint32_t e : p.experts) {
      const uint64_t key = Key(p.layer, e);
      const auto it = seen_at.find(key);
      next_after[Use(i, e)] = it == seen_at.end() ? kNever : it->second;
      seen_at[key] = i;
    }
  }
  auto next_of = [&](size_t q, uint32_t e) { return next_after.at(Use(q, e)); };
  // Whether e's uses from pass qa on come before f's from qb on: the first
  // use that differs decides (ties of the next use matter when a batch
  // outnumbers the slots), then the id.
  auto sooner = [&](std::pair<size_t, uint32_t> a, std::pair<size_t, uint32_t> b) {
    auto [qa, ea] = a;
    auto [qb, eb] = b;
    while (qa == qb && qa != kNever) {
      qa = next_of(qa, ea);
      qb = next_of(qb, eb);
    }
    return qa != qb ? qa < qb : ea < eb;
  };
  // Per layer: residents by next use (the furthest last), and each one's.
  const size_t n_layer = budgets.size();
  using Order = std::set<std::pair<size_t, uint32_t>, decltype(sooner)>;
  std::vector<Order> by_next(n_layer, Order(sooner));
  std::vector<std::unordered_map<uint32_t, size_t>> next_use(n_layer);
  std::vector<std::pair<size_t, uint32_t>> in_use;  // this pass's residents
  std::vector<std::pair<size_t, uint32_t>> misses;  // (next use, expert)
  MinTally tally;
  for (size_t i = 0; i < passes.size(); ++i) {
    const ServedPass& p = passes[i];
    MOETIER_CHECK(p.layer < n_layer);
    Order& order = by_next[p.layer];
    auto& use_of = next_use[p.layer];
    const uint32_t budget = budgets[p.layer];
    in_use.clear();
    misses.clear();
    if (p.counted) tally.requests += p.experts.size();
    // Hits first: what this pass uses is not a victim for its own misses.
    for (const uint32_t e : p.experts) {
      const size_t next = next_of(i, e);
      const auto it = use_of.find(e);
      if (it == use_of.end()) {
        misses.push_back({next, e});
        continue;
      }
      if (p.counted) ++tally.hits;
      order.erase({it->second, e});
      it->second = next;
      in_use.push_back({next, e});
    }
    // Then the misses, the soonest used again first (which matters only
    // when a batch routes to more experts than the layer has slots).
    std::sort(misses.begin(), misses.end(), sooner);
    for (const auto& [next, e] : misses) {
      if (order.size() + in_use.size() >= budget) {
        // Every slot is used by this pass: computed without a slot.
        if (order.empty()) continue;
        const auto victim = std::prev(order.end());
        use_of.erase(victim->second);
        order.erase(victim);
      }
      use_of[e] = next;
      in_use.push_back({next, e});
    }
    order.insert(in_use.begin(), in_use.end());
  }
  return tally;
}

absl::Status ServedPassRecorder::OnRouting(const RoutingBatch& batch) {
  if (!recording_) return absl::OkStatus();
  ServedPass pass;
  pass.layer = static_cast<uint32_t>(batch.layer);
  pass.counted = counted_;
  for (const int32_t e : batch.experts) pass.experts.push_back(static_cast<uint32_t>(e));
  std::sort(pass.experts.begin(), pass.experts.end());
  pass.experts.erase(std::unique(pass.experts.begin(), pass.experts.end()), pass.experts.end());
  passes_.push_back(std::move(pass));
  return absl::OkStatus();
}

}  // namespace moetier
