#include "row_trace_replay.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace moetier {
namespace {

// How far apart rows that share a trace start in it.
constexpr uint64_t kRowOffsetTokens = 131;

}  // namespace

absl::StatusOr<RowTraceReplay> RowTraceReplay::Create(std::vector<RoutingTrace> traces,
                                                      const ModelHparams& hp) {
  if (traces.empty()) return absl::InvalidArgumentError("no routing trace to replay");
  for (const RoutingTrace& t : traces) {
    if (t.n_layer != static_cast<uint32_t>(hp.n_layer) ||
        t.n_expert != static_cast<uint32_t>(hp.n_expert) ||
        t.top_k != static_cast<uint32_t>(hp.n_expert_used)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "routing trace %s is %d layers x %d experts, top-%d; the model is %d x %d, top-%d",
          t.name, t.n_layer, t.n_expert, t.top_k, hp.n_layer, hp.n_expert, hp.n_expert_used));
    }
    if (t.n_token() == 0) {
      return absl::InvalidArgumentError(absl::StrFormat("routing trace %s has no tokens", t.name));
    }
  }
  return RowTraceReplay(std::move(traces));
}

absl::Status RowTraceReplay::Override(const RoutingBatch& batch, std::span<int32_t> experts) {
  if (batch.layer <= last_layer_) ++pass_;
  last_layer_ = batch.layer;
  const size_t k = static_cast<size_t>(batch.top_k);
  for (size_t r = 0; r < static_cast<size_t>(batch.n_tokens); ++r) {
    const RoutingTrace& trace = traces_[r % traces_.size()];
    const uint64_t start = (r / traces_.size()) * kRowOffsetTokens;
    const size_t token = static_cast<size_t>((start + pass_) % trace.n_token());
    const auto chosen = trace.Experts(token, static_cast<uint32_t>(batch.layer));
    for (size_t j = 0; j < k; ++j) experts[r * k + j] = static_cast<int32_t>(chosen[j]);
  }
  return absl::OkStatus();
}

}  // namespace moetier
