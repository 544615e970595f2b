// Routing replayed per batch row, for batches of several sequences: each
// row of a forward pass follows a routing stream of its own, so that the
// experts a batch's tokens share are those that concurrent requests of a
// real workload would share (different sequences of one model's traces),
// not the near-uniform choice of a random-weight router.
//
// Row r follows trace r % T (of the T given), starting (r / T) x 131 tokens
// in, and takes the next token of its stream at every pass; row r of a
// decode step is sequence r, so a decoding sequence keeps its stream.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/routing_trace.h"
#include "engine/routing_hook.h"
#include "model/model.h"

namespace moetier {

class RowTraceReplay final : public RoutingOverride {
 public:
  // Fails unless every trace has the model's MoE layer count, expert count
  // and top-k, naming the trace and what differs.
  static absl::StatusOr<RowTraceReplay> Create(std::vector<RoutingTrace> traces,
                                               const ModelHparams& hp);

  absl::Status Override(const RoutingBatch& batch, std::span<int32_t> experts) override;
  bool routes_rows_alone() const override { return true; }

 private:
  explicit RowTraceReplay(std::vector<RoutingTrace> traces) : traces_(std::move(traces)) {}

  std::vector<RoutingTrace> traces_;
  uint64_t pass_ = 0;      // passes begun so far
  int last_layer_ = 1 << 30;  // the layer of the last call: a lower one begins a pass
};

}  // namespace moetier
