// The concrete policies behind MakeExpertCachePolicy (expert_cache_policy.h
// documents what each does). Internal to the library.
#pragma once

#include <memory>

#include "cache/expert_cache_policy.h"

namespace moetier {

std::unique_ptr<ExpertCachePolicy> NewLruPolicy(const ExpertCacheShape& shape);
// `lambda` in (0, 1]: an expert's score halves every 1 / lambda steps.
std::unique_ptr<ExpertCachePolicy> NewLrfuPolicy(const ExpertCacheShape& shape, double lambda,
                                                 std::string_view name);
std::unique_ptr<ExpertCachePolicy> NewReuseDistancePolicy(const ExpertCacheShape& shape);
std::unique_ptr<ExpertCachePolicy> NewAdaptiveLrfuPolicy(const ExpertCacheShape& shape);
std::unique_ptr<ExpertCachePolicy> NewOptGenPolicy(const ExpertCacheShape& shape);

// Combined recency-frequency value of one expert in LRFU, kept in the log
// domain so that it never needs rescaling: value(t) = 2^(key - lambda * t).
// Every reference adds 1 to the value; between references it decays by
// 2^-lambda per step. Ordering experts by key orders them by value at any
// common time t.
struct LrfuScore {
  double key = 0;
  uint64_t last_step = 0;  // 0: never referenced

  void Reference(uint64_t now, double lambda);
  // Ranks never-referenced experts (prefetched ones) below all others.
  double RankKey() const;
};

}  // namespace moetier
