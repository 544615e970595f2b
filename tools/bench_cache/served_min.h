// Belady's MIN over the experts a benchmark actually served: the most hits
// any demand-filled cache with the same per-layer slot budgets could have
// had on that sequence, for the hit rate's "ratio to MIN".
//
// A pass is one layer of one forward (a decode token, or a whole prefill
// batch): the distinct experts its tokens routed to, counted once each, as
// the worker's ExpertSlotCache counts them. MIN knows every later pass;
// for each miss it evicts, among the layer's residents not used by the
// current pass, the one used again furthest in the future, or keeps the
// newcomer out when it is itself the furthest (bypass). That is optimal for
// hits per layer (Belady 1966, with bypass: a cache need not admit).
// Without prefetch: a cache that prefetches may beat it.
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
