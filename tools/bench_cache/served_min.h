// Belady's MIN over the experts a benchmark actually served: the most hits
// any cache with the same per-layer slot budgets could have had on that
// sequence without prefetch, for the hit rate's "ratio to MIN".
//
// A pass is one layer of one forward (a decode token, or a whole prefill
// batch): the distinct experts its tokens routed to, counted once each, as
// the worker's ExpertSlotCache counts them. A hit is an expert resident
// before its pass. MIN knows every later pass: after each pass it keeps, of
// the layer's residents and the pass's experts, the budget-many used again
// soonest. Keeping any such subset is allowed (a miss may be copied in or
// computed without a slot, and a batch's later wave may evict an earlier
// one), so this bounds every miss policy of the worker's cache (Belady's
// rule with bypass); only a cache that prefetches may pass it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/routing_hook.h"

namespace moetier {

struct ServedPass {
  uint32_t layer = 0;
  bool counted = false;           // inside the measured window
  std::vector<uint32_t> experts;  // distinct
};

struct MinTally {
  uint64_t hits = 0;      // of the counted passes' experts
  uint64_t requests = 0;  // counted passes' distinct experts
  double hit_rate() const { return requests ? static_cast<double>(hits) / requests : 0.0; }
};

// MIN from a cold cache over every pass, warm-up included (so the measured
// window starts from the state MIN's own warm-up left), hits tallied over
// the counted ones. budgets[layer] slots per layer (0: nothing cached).
MinTally ServedMin(std::span<const ServedPass> passes, std::span<const uint32_t> budgets);

// A RoutingObserver that writes down every pass while armed.
class ServedPassRecorder final : public RoutingObserver {
 public:
  absl::Status OnRouting(const RoutingBatch& batch) override;
  // Passes from now on are recorded (counted or not) until Stop.
  void Record(bool counted) {
    recording_ = true;
    counted_ = counted;
  }
  void Stop() { recording_ = false; }
  const std::vector<ServedPass>& passes() const { return passes_; }

 private:
  bool recording_ = false;
  bool counted_ = false;
  std::vector<ServedPass> passes_;
};

}  // namespace moetier
