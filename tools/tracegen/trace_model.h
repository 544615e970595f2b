// A parametric model of MoE routing, per layer, and the generator built on
// it. Fitted to real traces (FitRoutingModel), it produces traces of any
// shape, e.g. Qwen3-30B-A3B's 48 layers x 128 experts, top-8.
//
// Per layer and token, each of the k selections is made in turn:
//   * with probability reuse_prob (from the second token on) it repeats an
//     expert of an earlier token: the distance d >= 1 is geometric,
//     P(d) = (1 - reuse_tail) * reuse_tail^(d - 1) (capped at the tokens so
//     far and at kHistoryTokens), and the expert is one of token t - d's,
//     uniformly, that this token has not chosen yet;
//   * otherwise (or if that token has none left), with probability
//     cross_layer_prob (from the second layer on) it follows the previous
//     layer: a successor of one of the token's experts there, among those
//     not chosen yet, in proportion to this layer's popularity (so it
//     changes which experts meet more than how popular each is). The
//     successors are a fixed random mapping per layer pair, one random
//     permutation per successor (kCrossLayerSuccessors), drawn with the
//     model's structure. It takes its share of the fresh draws only, so the
//     token-to-token reuse stays what reuse_prob makes it;
//   * otherwise (or if those are all chosen) it draws from the layer's
//     popularity, excluding experts already chosen: the expert of
//     popularity rank r (1-based; a random permutation per layer and model
//     seed) has weight (r + zipf_shift * n_expert)^-zipf_exponent
//     (Zipf-Mandelbrot; the shift flattens the head, so skew can sit in a
//     tail of rarely used experts, as in real routers), times a per-sequence
//     factor exp(popularity_noise * N(0, 1)) per expert, drawn at each
//     sequence start: prompts on different topics favour different experts.
// Popularity gives the skew, reuse the token-to-token locality and the
// shape of the reuse-distance distribution, the successors the correlation
// between consecutive layers of one token.
//
// Two seeds: the model seed draws the model's structure (the popularity
// ranking of each layer, the successor mappings): which model it is. The
// sequence seed draws the sequences (per-sequence popularity noise and
// every selection): which prompt. Same model seed, other sequence seed: the
// same experts are hot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/routing_trace.h"
#include "tracegen/trace_stats.h"

namespace moetier {

inline constexpr size_t kHistoryTokens = 64;
// Successors per expert of the cross-layer mapping. One: with two, the fit
// to the granite traces ended with cross_layer_prob = 1 in most layers and
// still a mean lift of 0.14 against the real 0.19 (k = 8 of 32 experts then
// have up to 16 successors, which narrows the next layer down too little).
inline constexpr uint32_t kCrossLayerSuccessors = 1;

inline constexpr double kMaxZipfExponent = 16;
inline constexpr double kMaxZipfShift = 4;
inline constexpr double kMaxPopularityNoise = 4;

struct LayerRoutingModel {
  double zipf_exponent = 0;     // in [0, kMaxZipfExponent]; 0 = uniform
  double zipf_shift = 0;        // in [0, kMaxZipfShift], times the expert count
  double popularity_noise = 0;  // in [0, kMaxPopularityNoise]
  double reuse_prob = 0;        // in [0, 1]
  double reuse_tail = 0;        // in [0, 1)
  double cross_layer_prob = 0;  // in [0, 1]; ignored in a trace's layer 0
};

struct RoutingModel {
  // One entry per modelled layer. A trace with another layer count uses
  // entry floor(l * size / n_layer) for its layer l.
  std::vector<LayerRoutingModel> layer;
  absl::Status Validate() const;
  std::string ToString() const;  // one line per layer
};

struct GenerateOptions {
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint32_t top_k = 0;
  size_t n_token = 0;
  uint64_t seed = 1;        // the sequences drawn
  uint64_t model_seed = 1;  // the model's structure (rankings, successors)
  // Router weights: decreasing with the rank in the top-k, renormalised to
  // add up to 1 (as after softmax, top-k and renormalisation).
  bool weights = false;
  std::string name = "generated";
};

// One sequence of opt.n_token tokens.
absl::StatusOr<RoutingTrace> GenerateTrace(const RoutingModel& model, const GenerateOptions& opt);
// Several sequences of the given lengths (opt.n_token is ignored) from one
// model instance: the same popularity ranking and successors, history reset
// at each start, as several prompts to one model.
absl::StatusOr<std::vector<RoutingTrace>> GenerateSequences(const RoutingModel& model,
                                                            const GenerateOptions& opt,
                                                            const std::vector<size_t>& lengths);

// The model fitted to the decode traces of shared/traces/granite-3.0-1b-a400m
// (moetier-tracegen --print-model on them), built in so that the generator
// is calibrated without the files at hand.
RoutingModel DefaultRoutingModel();

// Fits one LayerRoutingModel per layer of `traces` (each one sequence, all
// of one shape) by simulation: the popularity exponent to the entropy
// within a sequence (what a cache sees), the shift (from a grid) to the share
// of a sequence's most used eighth of the experts, the per-sequence noise to
// the entropy over all sequences; then reuse_tail from a grid and reuse_prob by bisection so that
// the reuse of the previous token's experts matches and the reuse-distance
// distribution is closest. Then, on the whole model (a layer's lift depends
// on how its predecessor was generated), every layer's cross_layer_prob at
// once by bisection to the cross-layer lift (measured on simulated groups of
// sequences as long and as many as the real ones: the lift depends on the
// tokens its predictor learns from), then reuse_prob and the exponent again
// (following the previous layer brings that layer's reuse and skew along),
// then cross_layer_prob again. Deterministic for a given seed.
// `sim_tokens`: tokens per simulation (more: steadier fit, slower).
absl::StatusOr<RoutingModel> FitRoutingModel(const std::vector<const RoutingTrace*>& traces,
                                             uint64_t seed, size_t sim_tokens = 3000);

}  // namespace moetier
