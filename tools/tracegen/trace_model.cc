#include "tracegen/trace_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "absl/strings/str_format.h"
#include "base/check.h"

namespace moetier {
namespace {

constexpr uint32_t kNoExpert = UINT32_MAX;

// SplitMix64 as a sequential generator: fast, small, and the same numbers on
// every platform (std:: distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  // [0, n): the high 32 bits scaled, as in Lemire's method without the
  // rejection step (bias below 2^-32 * n, far under what statistics see).
  uint32_t Below(uint32_t n) { return static_cast<uint32_t>(((Next() >> 32) * n) >> 32); }

 private:
  uint64_t state_;
};

uint64_t MixSeed(uint64_t seed, uint64_t stream) {
  Rng r(seed ^ (stream * 0xD1B54A32D192ED03ull));
  r.Next();
  return r.Next();
}

// Vose's alias method: O(1) draws from a fixed discrete distribution.
class AliasTable {
 public:
  explicit AliasTable(const std::vector<double>& weight)
      : prob_(weight.size()), alias_(weight.size()) {
    const size_t n = weight.size();
    const double sum = std::accumulate(weight.begin(), weight.end(), 0.0);
    std::vector<double> scaled(n);
    std::vector<uint32_t> small, large;
    for (size_t i = 0; i < n; ++i) {
      scaled[i] = weight[i] * static_cast<double>(n) / sum;
      (scaled[i] < 1 ? small : large).push_back(static_cast<uint32_t>(i));
    }
    while (!small.empty() && !large.empty()) {
      const uint32_t s = small.back();
      small.pop_back();
      const uint32_t l = large.back();
      prob_[s] = scaled[s];
      alias_[s] = l;
      scaled[l] -= 1 - scaled[s];
      if (scaled[l] < 1) {
        large.pop_back();
        small.push_back(l);
      }
    }
    for (const uint32_t i : large) prob_[i] = 1, alias_[i] = i;
    for (const uint32_t i : small) prob_[i] = 1, alias_[i] = i;
  }
  uint32_t Draw(Rng& rng) const {
    const uint32_t i = rng.Below(static_cast<uint32_t>(prob_.size()));
    return rng.Uniform() < prob_[i] ? i : alias_[i];
  }

 private:
  std::vector<double> prob_;
  std::vector<uint32_t> alias_;
};

// Streams of MixSeed: the model seed's per layer are the layer index; the
// sequence seed's are offset so that equal seeds give unrelated numbers.
constexpr uint64_t kSequenceStream = uint64_t{1} << 32;
constexpr uint64_t kWeightStream = 0xFEEDull;

// The state of one layer while generating: its structure (popularity
// ranking; successors of the previous layer's experts), its popularity in
// this sequence and the experts of its last kHistoryTokens tokens.
class LayerGenerator {
 public:
  // `structure_seed` draws the ranking, `sequence_seed` the rest.
  // `prev_expert_of_rank`: the previous layer's ranking (null in a trace's
  // layer 0), from which the successors follow.
  LayerGenerator(const LayerRoutingModel& m, uint32_t n_expert, uint32_t top_k,
                 uint64_t structure_seed, uint64_t sequence_seed,
                 const std::vector<uint32_t>* prev_expert_of_rank)
      : model_(m),
        n_expert_(n_expert),
        top_k_(top_k),
        rng_(sequence_seed),
        expert_of_rank_(n_expert),
        weight_of_expert_(n_expert),
        alias_(RankWeights(m, n_expert)),
        n_successor_(prev_expert_of_rank != nullptr ? std::min(kCrossLayerSuccessors, n_expert)
                                                    : 0),
        successors_(static_cast<size_t>(n_expert) * n_successor_),
        history_(kHistoryTokens * top_k),
        chosen_(n_expert, 0) {
    Rng structure(structure_seed);
    std::iota(expert_of_rank_.begin(), expert_of_rank_.end(), 0u);
    for (uint32_t i = n_expert; i > 1; --i)
      std::swap(expert_of_rank_[i - 1], expert_of_rank_[structure.Below(i)]);
    const std::vector<double> w = RankWeights(m, n_expert);
    for (uint32_t r = 0; r < n_expert; ++r) weight_of_expert_[expert_of_rank_[r]] = w[r];
    // Successor s of every expert: one random permutation per s, so that
    // each expert is the successor of equally many.
    std::vector<uint32_t> perm(n_expert);
    for (uint32_t s = 0; s < n_successor_; ++s) {
      std::iota(perm.begin(), perm.end(), 0u);
      for (uint32_t i = n_expert; i > 1; --i) std::swap(perm[i - 1], perm[structure.Below(i)]);
      for (uint32_t i = 0; i < n_expert; ++i) {
        successors_[static_cast<size_t>(i) * n_successor_ + s] = perm[i];
      }
    }
  }

  const std::vector<uint32_t>& expert_of_rank() const { return expert_of_rank_; }

  // The next token starts a new sequence: no history; the same base
  // popularity, with this sequence's noise. Allocates (once per sequence).
  void StartSequence() {
    tokens_ = 0;
    if (model_.popularity_noise > 0) {
      const std::vector<double> base = RankWeights(model_, n_expert_);
      for (uint32_t r = 0; r < n_expert_; ++r) {
        weight_of_expert_[expert_of_rank_[r]] =
            base[r] * std::exp(model_.popularity_noise * Normal());
      }
      std::vector<double> by_rank(n_expert_);
      for (uint32_t r = 0; r < n_expert_; ++r) by_rank[r] = weight_of_expert_[expert_of_rank_[r]];
      alias_ = AliasTable(by_rank);
    }
  }

  // Writes the next token's top_k experts to `out`; `prev` holds this
  // token's experts at the previous layer (null in layer 0).
  void Next(const uint32_t* prev, uint32_t* out) {
    const bool cross = prev != nullptr && n_successor_ > 0 && model_.cross_layer_prob > 0;
    for (uint32_t j = 0; j < top_k_; ++j) {
      uint32_t e = kNoExpert;
      if (tokens_ > 0 && rng_.Uniform() < model_.reuse_prob) e = FromHistory();
      // The cross-layer term takes its share of the fresh draws only, so
      // that it leaves the token-to-token reuse as it was.
      if (e == kNoExpert && cross && rng_.Uniform() < model_.cross_layer_prob) {
        e = FromPreviousLayer(prev);
      }
      if (e == kNoExpert) e = DrawFromPopularity(rng_);
      chosen_[e] = 1;
      out[j] = e;
    }
    uint32_t* slot = &history_[(tokens_ % kHistoryTokens) * top_k_];
    for (uint32_t j = 0; j < top_k_; ++j) {
      slot[j] = out[j];
      chosen_[out[j]] = 0;
    }
    ++tokens_;
  }

 private:
  static std::vector<double> RankWeights(const LayerRoutingModel& m, uint32_t n) {
    std::vector<double> w(n);
    const double shift = m.zipf_shift * n;
    for (uint32_t r = 0; r < n; ++r)
      w[r] = std::pow(static_cast<double>(r + 1) + shift, -m.zipf_exponent);
    return w;
  }

  // Standard normal (Box-Muller).
  double Normal() {
    const double u1 = 1.0 - rng_.Uniform();  // (0, 1]
    const double u2 = rng_.Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
  }

  uint32_t FromHistory() {
    const size_t max_d = std::min<size_t>(tokens_, kHistoryTokens);
    size_t d = 1;
    while (d < max_d && rng_.Uniform() < model_.reuse_tail) ++d;
    const uint32_t* slot = &history_[((tokens_ - d) % kHistoryTokens) * top_k_];
    // Uniform among that token's experts not chosen yet.
    uint32_t free = 0;
    for (uint32_t j = 0; j < top_k_; ++j) free += chosen_[slot[j]] ? 0 : 1;
    if (free == 0) return kNoExpert;
    uint32_t pick = rng_.Below(free);
    for (uint32_t j = 0; j < top_k_; ++j) {
      if (chosen_[slot[j]]) continue;
      if (pick-- == 0) return slot[j];
    }
    return kNoExpert;
  }

  // One of the successors of the token's experts at the previous layer,
  // not chosen yet, drawn in proportion to this layer's popularity (so that
  // following the previous layer changes which experts meet, not how
  // popular each is); none if all are chosen.
  uint32_t FromPreviousLayer(const uint32_t* prev) {
    const uint32_t m = n_successor_;
    double total = 0;
    for (uint32_t j = 0; j < top_k_; ++j) {
      for (uint32_t s = 0; s < m; ++s) {
        const uint32_t e = successors_[prev[j] * m + s];
        // chosen_ marks an expert once even if it succeeds several.
        if (!chosen_[e]) total += weight_of_expert_[e];
      }
    }
    if (total <= 0) return kNoExpert;
    double u = rng_.Uniform() * total;
    uint32_t last = kNoExpert;
    for (uint32_t j = 0; j < top_k_; ++j) {
      for (uint32_t s = 0; s < m; ++s) {
        const uint32_t e = successors_[prev[j] * m + s];
        if (chosen_[e]) continue;
        last = e;
        u -= weight_of_expert_[e];
        if (u < 0) return e;
      }
    }
    return last;
  }

  // From the current popularity, among the experts not in chosen_.
  uint32_t DrawFromPopularity(Rng& rng) {
    // Rejection of already chosen experts; with at most k - 1 of them that
    // rarely repeats, unless the skew is extreme: then draw exactly.
    for (int attempt = 0; attempt < 32; ++attempt) {
      const uint32_t e = expert_of_rank_[alias_.Draw(rng)];
      if (!chosen_[e]) return e;
    }
    double total = 0;
    for (uint32_t e = 0; e < n_expert_; ++e) total += chosen_[e] ? 0 : weight_of_expert_[e];
    double u = rng.Uniform() * total;
    uint32_t last = kNoExpert;
    for (uint32_t e = 0; e < n_expert_; ++e) {
      if (chosen_[e]) continue;
      last = e;
      u -= weight_of_expert_[e];
      if (u < 0) return e;
    }
    MOETIER_CHECK(last != kNoExpert);
    return last;
  }

  const LayerRoutingModel model_;
  const uint32_t n_expert_;
  const uint32_t top_k_;
  Rng rng_;
  std::vector<uint32_t> expert_of_rank_;
  std::vector<double> weight_of_expert_;
  AliasTable alias_;
  const uint32_t n_successor_;      // per expert; 0 in a trace's layer 0
  std::vector<uint32_t> successors_;  // [expert at the previous layer][n_successor_]
  std::vector<uint32_t> history_;  // ring of kHistoryTokens tokens x top_k
  std::vector<uint8_t> chosen_;    // by this token so far
  size_t tokens_ = 0;
};

// The model of layer `l` of `n_layer` from a model with other layer count.
const LayerRoutingModel& ModelFor(const RoutingModel& model, uint32_t l, uint32_t n_layer) {
  const size_t i = static_cast<size_t>(l) * model.layer.size() / n_layer;
  return model.layer[std::min(i, model.layer.size() - 1)];
}

}  // namespace

absl::Status RoutingModel::Validate() const {
  if (layer.empty()) return absl::InvalidArgumentError("routing model: no layers");
  for (size_t l = 0; l < layer.size(); ++l) {
    const LayerRoutingModel& m = layer[l];
    if (!(m.zipf_exponent >= 0 && m.zipf_exponent <= kMaxZipfExponent) ||
        !(m.zipf_shift >= 0 && m.zipf_shift <= kMaxZipfShift) ||
        !(m.popularity_noise >= 0 && m.popularity_noise <= kMaxPopularityNoise) ||
        !(m.reuse_prob >= 0 && m.reuse_prob <= 1) || !(m.reuse_tail >= 0 && m.reuse_tail < 1) ||
        !(m.cross_layer_prob >= 0 && m.cross_layer_prob <= 1)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "routing model layer %u: zipf exponent %g (want [0, %g]), zipf shift %g (want [0, %g]), "
          "popularity noise %g (want [0, %g]), reuse prob %g (want [0, 1]), reuse tail %g (want "
          "[0, 1)), cross-layer prob %g (want [0, 1])",
          l, m.zipf_exponent, kMaxZipfExponent, m.zipf_shift, kMaxZipfShift, m.popularity_noise,
          kMaxPopularityNoise, m.reuse_prob, m.reuse_tail, m.cross_layer_prob));
    }
  }
  return absl::OkStatus();
}

std::string RoutingModel::ToString() const {
  std::string out =
      "layer  zipf_exponent  zipf_shift  popularity_noise  reuse_prob  reuse_tail  "
      "cross_layer_prob\n";
  for (size_t l = 0; l < layer.size(); ++l) {
    absl::StrAppendFormat(&out, "%5u  %13.3f  %10.3f  %16.3f  %10.3f  %10.3f  %16.3f\n", l,
                          layer[l].zipf_exponent, layer[l].zipf_shift, layer[l].popularity_noise,
                          layer[l].reuse_prob, layer[l].reuse_tail, layer[l].cross_layer_prob);
  }
  return out;
}

absl::StatusOr<std::vector<RoutingTrace>> GenerateSequences(const RoutingModel& model,
                                                            const GenerateOptions& opt,
                                                            const std::vector<size_t>& lengths) {
  if (absl::Status s = model.Validate(); !s.ok()) return s;
  if (opt.n_layer == 0 || opt.n_layer > kTraceMaxLayers || opt.n_expert == 0 ||
      opt.n_expert > kTraceMaxExperts || opt.top_k == 0 || opt.top_k > opt.n_expert) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "generate: layers %u (1..%u), experts %u (1..%u), top-k %u (1..experts) out of range",
        opt.n_layer, kTraceMaxLayers, opt.n_expert, kTraceMaxExperts, opt.top_k));
  }
  constexpr size_t kMaxSelections = size_t{1} << 28;  // 1 GiB of ids
  const size_t per_token = static_cast<size_t>(opt.n_layer) * opt.top_k;
  size_t total = 0;
  for (const size_t n : lengths) {
    if (n == 0 || n > kMaxSelections / per_token - total) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "generate: a sequence of %u tokens is empty or makes more than %u selections in all", n,
          kMaxSelections));
    }
    total += n;
  }
  std::vector<LayerGenerator> gens;
  gens.reserve(opt.n_layer);
  for (uint32_t l = 0; l < opt.n_layer; ++l) {
    gens.emplace_back(ModelFor(model, l, opt.n_layer), opt.n_expert, opt.top_k,
                      MixSeed(opt.model_seed, l), MixSeed(opt.seed, kSequenceStream + l),
                      l == 0 ? nullptr : &gens[l - 1].expert_of_rank());
  }
  Rng weight_rng(MixSeed(opt.seed, kWeightStream));
  std::vector<RoutingTrace> out;
  out.reserve(lengths.size());
  for (size_t s = 0; s < lengths.size(); ++s) {
    RoutingTrace trace;
    trace.name = lengths.size() == 1 ? opt.name : absl::StrFormat("%s#%u", opt.name, s);
    trace.n_layer = opt.n_layer;
    trace.n_expert = opt.n_expert;
    trace.top_k = opt.top_k;
    trace.experts.resize(lengths[s] * per_token);
    for (LayerGenerator& g : gens) g.StartSequence();
    for (size_t t = 0; t < lengths[s]; ++t) {
      uint32_t* token = &trace.experts[t * per_token];
      for (uint32_t l = 0; l < opt.n_layer; ++l) {
        gens[l].Next(l == 0 ? nullptr : token + (l - 1) * opt.top_k, token + l * opt.top_k);
      }
    }
    if (opt.weights) {
      // Softmax-like decay over the rank with a little per-token jitter.
      trace.weights.resize(trace.experts.size());
      for (size_t i = 0; i < trace.experts.size(); i += opt.top_k) {
        double sum = 0;
        for (uint32_t j = 0; j < opt.top_k; ++j) {
          const double w = std::exp(-0.35 * j) * (0.9 + 0.2 * weight_rng.Uniform());
          trace.weights[i + j] = static_cast<float>(w);
          sum += w;
        }
        // Jitter may break the order; restore it so the first is the largest.
        std::sort(trace.weights.begin() + static_cast<ptrdiff_t>(i),
                  trace.weights.begin() + static_cast<ptrdiff_t>(i + opt.top_k), std::greater<>());
        for (uint32_t j = 0; j < opt.top_k; ++j) {
          trace.weights[i + j] = static_cast<float>(trace.weights[i + j] / sum);
        }
      }
    }
    out.push_back(std::move(trace));
  }
  return out;
}

absl::StatusOr<RoutingTrace> GenerateTrace(const RoutingModel& model, const GenerateOptions& opt) {
  absl::StatusOr<std::vector<RoutingTrace>> seqs = GenerateSequences(model, opt, {opt.n_token});
  if (!seqs.ok()) return seqs.status();
  return std::move((*seqs)[0]);
}

namespace {

// Statistics of every layer of `model`, generated from one model instance
// as `groups` repetitions of the real sequence lengths (the same
// popularity, as in the real traces). With `want_lift`, the cross-layer
// fields too: measured per group of as many sequences as the real ones and
// averaged, since the lift depends on the tokens its predictor learns from.
std::vector<LayerStats> Simulate(const RoutingModel& model, uint32_t n_expert, uint32_t top_k,
                                 const std::vector<size_t>& real_lengths, size_t groups,
                                 uint64_t seed, bool want_lift) {
  GenerateOptions opt;
  opt.n_layer = static_cast<uint32_t>(model.layer.size());
  opt.n_expert = n_expert;
  opt.top_k = top_k;
  opt.seed = seed;
  opt.model_seed = seed;
  std::vector<size_t> lengths;
  for (size_t g = 0; g < groups; ++g) {
    lengths.insert(lengths.end(), real_lengths.begin(), real_lengths.end());
  }
  absl::StatusOr<std::vector<RoutingTrace>> seqs = GenerateSequences(model, opt, lengths);
  MOETIER_CHECK(seqs.ok());
  std::vector<const RoutingTrace*> ptrs;
  for (const RoutingTrace& t : *seqs) ptrs.push_back(&t);
  absl::StatusOr<TraceStats> st = MeasureTraceStats(ptrs, /*cross_layer=*/false);
  MOETIER_CHECK(st.ok());
  std::vector<LayerStats> out = st->layer;
  if (want_lift) {
    const size_t per_group = real_lengths.size();
    for (size_t g = 0; g < groups; ++g) {
      const std::vector<const RoutingTrace*> group(ptrs.begin() + g * per_group,
                                                   ptrs.begin() + (g + 1) * per_group);
      absl::StatusOr<TraceStats> gs = MeasureTraceStats(group);
      MOETIER_CHECK(gs.ok());
      for (uint32_t l = 1; l < opt.n_layer; ++l) {
        out[l].has_cross_layer = gs->layer[l].has_cross_layer;
        out[l].cross_layer_lift += gs->layer[l].cross_layer_lift / static_cast<double>(groups);
      }
    }
  }
  return out;
}

// Bisection on one parameter of every layer at once: each step simulates
// the whole model and moves each layer's interval by its own statistic. A
// layer's statistics depend mostly on its own parameters (the cross-layer
// term couples it to the previous layer), so the intervals close together.
void BisectAllLayers(RoutingModel& model, uint32_t first_layer, double lo, double hi,
                     int iterations, double LayerRoutingModel::*param,
                     // True if the simulated statistic of layer l is below
                     // the real one and grows with the parameter, or above it
                     // and falls with it: the parameter must go up.
                     const std::function<bool(const LayerStats& sim, uint32_t l)>& go_up,
                     const std::function<std::vector<LayerStats>(const RoutingModel&)>& simulate) {
  const size_t n = model.layer.size();
  std::vector<double> low(n, lo), high(n, hi);
  for (int it = 0; it < iterations; ++it) {
    for (size_t l = first_layer; l < n; ++l) model.layer[l].*param = (low[l] + high[l]) / 2;
    const std::vector<LayerStats> sim = simulate(model);
    for (uint32_t l = first_layer; l < n; ++l) {
      (go_up(sim[l], l) ? low[l] : high[l]) = model.layer[l].*param;
    }
  }
  for (size_t l = first_layer; l < n; ++l) model.layer[l].*param = (low[l] + high[l]) / 2;
}

// The cross-layer term of layers 1.., fitted on the whole model (a layer's
// lift depends on how its predecessor was generated, so layers are not fitted
// one by one): cross_layer_prob to the lift; then, as following the previous
// layer brings that layer's reuse along, reuse_prob to the previous-token
// reuse and the exponent to the entropy within a sequence; then the
// cross-layer term again.
void FitCrossLayer(const TraceStats& real, const std::vector<size_t>& real_lengths, size_t groups,
                   uint64_t seed, RoutingModel& model) {
  const uint32_t n = real.n_expert;
  const uint32_t k = real.top_k;
  const uint64_t chain_seed = MixSeed(seed, 0xC405Full);
  auto with_lift = [&](const RoutingModel& m) {
    return Simulate(m, n, k, real_lengths, groups, chain_seed, /*want_lift=*/true);
  };
  auto without_lift = [&](const RoutingModel& m) {
    return Simulate(m, n, k, real_lengths, groups, chain_seed, /*want_lift=*/false);
  };
  auto fit_cross = [&]() {
    BisectAllLayers(
        model, 1, 0, 1, 10, &LayerRoutingModel::cross_layer_prob,
        [&](const LayerStats& s, uint32_t l) {
          return s.cross_layer_lift < real.layer[l].cross_layer_lift;
        },
        with_lift);
  };
  fit_cross();
  BisectAllLayers(
      model, 1, 0, 1, 12, &LayerRoutingModel::reuse_prob,
      [&](const LayerStats& s, uint32_t l) { return s.reuse_prev < real.layer[l].reuse_prev; },
      without_lift);
  BisectAllLayers(
      model, 1, 0, kMaxZipfExponent, 16, &LayerRoutingModel::zipf_exponent,
      [&](const LayerStats& s, uint32_t l) {
        return s.entropy_within > real.layer[l].entropy_within;
      },
      without_lift);
  fit_cross();
}

double DistanceError(const LayerStats& a, const LayerStats& b) {
  double err = std::abs(a.cold - b.cold);
  for (size_t i = 0; i < kReuseBuckets; ++i)
    err += std::abs(a.reuse_distance[i] - b.reuse_distance[i]);
  return err;
}

}  // namespace

absl::StatusOr<RoutingModel> FitRoutingModel(const std::vector<const RoutingTrace*>& traces,
                                             uint64_t seed, size_t sim_tokens) {
  absl::StatusOr<TraceStats> real = MeasureTraceStats(traces);
  if (!real.ok()) return real.status();
  const uint32_t n = real->n_expert;
  const uint32_t k = real->top_k;
  // Simulate groups of sequences as long and as many as the real ones,
  // enough groups for stable statistics (~sim_tokens tokens).
  std::vector<size_t> real_lengths;
  for (const RoutingTrace* t : traces) real_lengths.push_back(std::max<size_t>(2, t->n_token()));
  const size_t real_tokens = std::accumulate(real_lengths.begin(), real_lengths.end(), size_t{0});
  const size_t groups = std::max<size_t>(1, (sim_tokens + real_tokens - 1) / real_tokens);
  RoutingModel model;
  model.layer.resize(real->n_layer);
  for (uint32_t l = 0; l < real->n_layer; ++l) {
    const LayerStats& want = real->layer[l];
    LayerRoutingModel m;
    const uint64_t layer_seed = MixSeed(seed, l);
    auto simulate = [&]() {
      RoutingModel one;
      one.layer = {m};
      return Simulate(one, n, k, real_lengths, groups, layer_seed, /*want_lift=*/false)[0];
    };
    auto fit_exponent = [&]() {
      double lo = 0, hi = kMaxZipfExponent;
      for (int it = 0; it < 16; ++it) {
        m.zipf_exponent = (lo + hi) / 2;
        // More skew, lower entropy.
        if (simulate().entropy_within > want.entropy_within) {
          lo = m.zipf_exponent;
        } else {
          hi = m.zipf_exponent;
        }
      }
      m.zipf_exponent = (lo + hi) / 2;
    };
    // The shape of the popularity curve: for each shift the exponent that
    // gives the entropy, and of those the one whose head (top 1/8 share) is
    // closest.
    {
      double best_err = 1e300;
      LayerRoutingModel best = m;
      for (const double shift : {0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2}) {
        m.zipf_shift = shift;
        fit_exponent();
        const double err = std::abs(simulate().top_eighth_within - want.top_eighth_within);
        if (err < best_err) best_err = err, best = m;
      }
      m = best;
    }
    // Per-sequence noise skews each sequence without skewing the pooled
    // popularity; with the exponent refitted to the entropy within a
    // sequence, more noise means a flatter base and a higher pooled entropy.
    auto fit_noise = [&]() {
      double lo = 0, hi = kMaxPopularityNoise;
      for (int it = 0; it < 10; ++it) {
        m.popularity_noise = (lo + hi) / 2;
        fit_exponent();
        if (simulate().entropy < want.entropy) {
          lo = m.popularity_noise;
        } else {
          hi = m.popularity_noise;
        }
      }
      m.popularity_noise = (lo + hi) / 2;
      fit_exponent();
    };
    if (traces.size() > 1) fit_noise();
    auto fit_reuse_prob = [&]() {
      double lo = 0, hi = 1;
      for (int it = 0; it < 12; ++it) {
        m.reuse_prob = (lo + hi) / 2;
        if (simulate().reuse_prev < want.reuse_prev) {
          lo = m.reuse_prob;
        } else {
          hi = m.reuse_prob;
        }
      }
      m.reuse_prob = (lo + hi) / 2;
    };
    double best_err = 1e300;
    LayerRoutingModel best = m;
    for (int g = 0; g <= 8; ++g) {
      m.reuse_tail = 0.1 * g;
      fit_reuse_prob();
      const double err = DistanceError(simulate(), want);
      if (err < best_err) best_err = err, best = m;
    }
    m = best;
    // Reuse concentrates a sequence on fewer experts; refit the exponent.
    fit_exponent();
    model.layer[l] = m;
  }
  if (real->n_layer > 1 && real->mean.has_cross_layer) FitCrossLayer(*real, real_lengths, groups, seed, model);
  return model;
}

RoutingModel DefaultRoutingModel() {
  RoutingModel m;
  m.layer = {
#include "tracegen/default_model.inc"
  };
  return m;
}

}  // namespace moetier
