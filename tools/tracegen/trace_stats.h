// Statistics of expert-routing traces that decide how well an expert cache
// can do, measured per layer: how skewed expert popularity is, how many of a
// token's experts the previous token also used, how far apart (in tokens)
// the uses of one expert are, and how well a layer's experts are predicted
// from the previous layer's experts of the same token.
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
  // Cross-layer correlation from the previous layer to this one (see
  // MeasureCrossLayer); zero in layer 0, where has_cross_layer is false.
  bool has_cross_layer = false;
  double cross_layer_hit = 0;           // co-occurrence predictor, real pairing
  double cross_layer_hit_shuffled = 0;  // the same, layer rows shuffled
  double cross_layer_lift = 0;          // hit - shuffled
};

struct TraceStats {
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint32_t top_k = 0;
  size_t n_token = 0;
  std::vector<LayerStats> layer;
  // Mean over layers; the cross-layer fields: mean over layer pairs.
  LayerStats mean;
};

// Pools `traces` (each one sequence; all of one shape). Popularity is
// counted over all of them together; reuse within each. Without
// `cross_layer` the cross-layer fields are left out (they cost the most).
absl::StatusOr<TraceStats> MeasureTraceStats(const std::vector<const RoutingTrace*>& traces,
                                             bool cross_layer = true);

// How predictable layer `layer`'s experts are from layer `layer - 1`'s of
// the same token. The predictor: a co-occurrence table counts, over tokens,
// how often expert i at layer - 1 and expert j at layer were chosen
// together; i's most frequent successor is the j of its largest count. For
// a token with experts A at layer - 1 the prediction is the k experts at
// `layer` ranked by: how many of A have them as most frequent successor,
// then the summed counts from A, then popularity at `layer`, then the lower
// id. `hit` is the mean fraction of the token's real experts at `layer`
// that were predicted.
//
// Against overfitting (real traces have 64 tokens: a table fitted to the
// token it predicts would see pairs that occur once) the table is estimated
// on one half of every sequence and measured on the other, both ways
// (two-fold). Halves rather than leave-one-out: neighbouring tokens share
// experts in both layers (token-to-token reuse), so a table that holds a
// token's neighbours would learn that token's own pairs from them.
//
// `hit_shuffled` is the same predictor after the rows of `layer` were
// shuffled among the tokens of the same half sequence (mean of
// kCrossLayerShuffles shuffles, a fixed seed): the pairing is gone, the
// popularity in each half stays. What the predictor gains over popularity
// alone is `lift` = hit - hit_shuffled, ~0 when the layers are independent.
// The lift grows with the tokens the table learns from; compare traces of
// equal lengths (as --calibrate does).
inline constexpr size_t kCrossLayerShuffles = 4;
// The co-occurrence table is n_expert^2 counts; wider layers are not
// measured (has_cross_layer stays false).
inline constexpr uint32_t kCrossLayerMaxExperts = 4096;

struct CrossLayerStats {
  double hit = 0;
  double hit_shuffled = 0;
  double lift() const { return hit - hit_shuffled; }
};

// `layer` in [1, n_layer); traces of one shape.
absl::StatusOr<CrossLayerStats> MeasureCrossLayer(const std::vector<const RoutingTrace*>& traces,
                                                  uint32_t layer);

}  // namespace moetier
