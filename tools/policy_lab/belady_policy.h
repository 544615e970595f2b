// Belady's MIN, the offline optimum: knowing the whole trace, evict the
// expert whose next use is furthest away. Run through the same
// ExpertCachePolicy protocol as the online policies (Route, then one Admit
// per miss), so it counts hits exactly as they are counted.
//
// With k experts arriving together per step, evicting the furthest next use
// among the experts not routed in this step is still optimal: it minimises
// misses, and so copies, over all policies, prefetching or not (prefetching
// never needs fewer copies than demand paging under MIN).
//
// Offered prefetches (ExpertCachePolicy::Prefetch) are taken when the
// offered expert is used before the victim would be, i.e. by the same rule.
// That makes "MIN with prefetch" the optimal residency under the same
// predictions; a reference, not a bound proven over every prefetch schedule.
#pragma once

#include <memory>

#include "cache/expert_cache_policy.h"
#include "cache/routing_trace.h"

namespace moetier {

// The policy replays `trace` (which must outlive it): the i-th Route of a
// layer must be token i of the trace at that layer.
std::unique_ptr<ExpertCachePolicy> MakeBeladyPolicy(const ExpertCacheShape& shape,
                                                    const RoutingTrace& trace);

}  // namespace moetier
