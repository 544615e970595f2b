// Statistics of expert-routing traces that decide how well an expert cache
// can do, measured per layer: how skewed expert popularity is, how many of a
// token's experts the previous token also used, and how far apart (in
// tokens) the uses of one expert are.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/routing_trace.h"

namespace moetier {

// Reuse distance buckets, in tokens: 1, 2, 3-4, 5-8, 9-16, 17-32, 33+.
inline constexpr size_t kReuseBuckets = 7;
std::string ReuseBucketName(size_t bucket);

struct LayerStats {
  // Entropy of the experts' shares of all selections, divided by
  // log(n_expert): 1 = uniform, lower = more skewed.
  double entropy = 0;
  // The same within each sequence, averaged over sequences: the skew a
  // cache sees (prompts differ in which experts they favour, so it is
  // below the pooled entropy).
  double entropy_within = 0;
  // Share of all selections that went to the most used 1/8 of the experts.
  double top_eighth_share = 0;
  // The same within each sequence (its own most used eighth), averaged.
  double top_eighth_within = 0;
  // Mean fraction of a token's experts that the previous token also used.
  double reuse_prev = 0;
  // Of all selections: the fraction whose expert was last used d tokens
  // earlier in the same sequence (by bucket), and the fraction used for the
  // first time in the sequence (cold). These add up to 1.
  std::array<double, kReuseBuckets> reuse_distance{};
  double cold = 0;
};

struct TraceStats {
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint32_t top_k = 0;
  size_t n_token = 0;
  std::vector<LayerStats> layer;
  LayerStats mean;  // mean over layers
};

// Pools `traces` (each one sequence; all of one shape). Popularity is
// counted over all of them together; reuse within each.
absl::StatusOr<TraceStats> MeasureTraceStats(const std::vector<const RoutingTrace*>& traces);

}  // namespace moetier
