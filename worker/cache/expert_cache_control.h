// Resizing a worker's expert cache at run time (`moetier budget`). Its own
// header, included by cache/expert_slot_cache.h, so that the worker's control
// server can take one without the cache's types (the daemon's store has an
// ExpertPlacement of its own, and tests link both).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace moetier {

// Implemented by whatever owns the cache and its slot memory, called by the
// worker's control server between engine calls, never while the engine
// holds experts.
//
// A resize builds a new ExpertSlotCache (dynamic placement, same policies)
// and a new slot pool, and only then frees the old ones: a resize that fails
// leaves the old cache working as before. The new cache starts empty and
// refills on demand; the counters continue
// (ExpertSlotCache::ContinueCountsOf). A size that gives the same number of
// slots keeps the cache as it is. The helpers live in
// cache/expert_slot_cache.h: ResizedExpertSlotCache, MinDynamicPoolBytes.
class ExpertCacheControl {
 public:
  virtual ~ExpertCacheControl() = default;
  // Returns the pool in effect: pool_bytes rounded down to whole slots, at
  // most FullPoolBytes. Errors: INVALID_ARGUMENT for 0 (a restart without a
  // cache flag removes the cache) or less than MinDynamicPoolBytes (the
  // message names it); FAILED_PRECONDITION for static placement, whose size
  // --n-cpu-moe fixes; RESOURCE_EXHAUSTED when the new pool cannot be
  // allocated.
  virtual absl::StatusOr<uint64_t> ResizeExpertCache(uint64_t pool_bytes) = 0;
};

}  // namespace moetier
