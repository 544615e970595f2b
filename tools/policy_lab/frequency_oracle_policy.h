// A reference between the online policies and MIN: LFU with the exact
// frequencies of the whole trace, future included (evict the resident
// expert the trace routes least often; ties go to the least recent). It
// knows which experts a sequence favours but not when it uses them, so
//   online frequency policies  <=  this  <=  MIN   (in practice)
// splits the gap to MIN into learning the popularity (left) and knowing the
// timing (right), which no frequency estimate can close.
#pragma once

#include <memory>

#include "cache/expert_cache_policy.h"
#include "cache/routing_trace.h"

namespace moetier {

// `trace` must outlive the policy and be the trace replayed through it.
std::unique_ptr<ExpertCachePolicy> MakeFrequencyOraclePolicy(const ExpertCacheShape& shape,
                                                             const RoutingTrace& trace);

}  // namespace moetier
