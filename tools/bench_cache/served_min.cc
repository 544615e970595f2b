#include "served_min.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <utility>

#include "base/check.h"

namespace moetier {
namespace {

constexpr size_t kNever = std::numeric_limits<size_t>::max();

uint64_t Key(uint32_t layer, uint32_t expert) { return uint64_t{layer} << 32 | expert; }

}  // namespace

MinTally ServedMin(std::span<const ServedPass> passes, std::span<const uint32_t> budgets) {
  // next[i][j]: the next pass (of the same layer) using passes[i].experts[j].
  std::vector<std::vector<size_t>> next(passes.size());
  std::unordered_map<uint64_t, size_t> seen_at;
  for (size_t i = passes.size(); i-- > 0;) {
    const ServedPass& p = passes[i];
    next[i].resize(p.experts.size());
    for (size_t j = 0; j < p.experts.size(); ++j) {
      const uint64_t key = Key(p.layer, p.experts[j]);
      const auto it = seen_at.find(key);
      next[i][j] = it == seen_at.end() ? kNever : it->second;
      seen_at[key] = i;
    }
  }
  // Per layer: each resident's next use.
  std::vector<std::unordered_map<uint32_t, size_t>> residents(budgets.size());
  std::vector<std::pair<size_t, uint32_t>> candidates;  // (next use, expert)
  MinTally tally;
  for (size_t i = 0; i < passes.size(); ++i) {
    const ServedPass& p = passes[i];
    MOETIER_CHECK(p.layer < budgets.size());
    auto& resident = residents[p.layer];
    if (p.counted) tally.requests += p.experts.size();
    for (size_t j = 0; j < p.experts.size(); ++j) {
      auto [it, added] = resident.try_emplace(p.experts[j], next[i][j]);
      if (!added) {
        if (p.counted) ++tally.hits;
        it->second = next[i][j];
      }
    }
    const uint32_t budget = budgets[p.layer];
    if (resident.size() <= budget) continue;
    // Keep the ones used again soonest. Ties do not matter: experts with
    // the same next use are both requested then, and free to keep again.
    candidates.clear();
    for (const auto& [expert, next_use] : resident) candidates.push_back({next_use, expert});
    std::nth_element(candidates.begin(), candidates.begin() + budget, candidates.end());
    for (size_t c = budget; c < candidates.size(); ++c) resident.erase(candidates[c].second);
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
