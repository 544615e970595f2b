// A stand-in for the next layer's router when routing comes from a trace:
// the trace knows which experts a layer will take, a real predictor (the
// next layer's router applied to the current hidden state) gets most of
// them right. The stand-in is the truth with each expert, with probability
// 1 - accuracy, replaced by a wrong one (uniform among the experts neither
// chosen nor already predicted). A pure function of (seed, token, layer),
// so that every policy, and the lab and a worker replaying the same trace,
// see the same predictions. Real predictor accuracy needs real weights;
// figures made with this say which accuracy they assumed.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace moetier {

// Writes truth.size() distinct ids below n_expert into `out`: `truth` (the
// experts the layer will take, distinct) degraded to `accuracy` in [0, 1].
void DegradedPrediction(absl::Span<const uint32_t> truth, uint32_t n_expert, double accuracy,
                        uint64_t seed, uint64_t token, uint32_t layer, std::vector<uint32_t>& out);

}  // namespace moetier
