#include "tracegen/trace_stats.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"

namespace moetier {

std::string ReuseBucketName(size_t bucket) {
  static constexpr const char* kNames[kReuseBuckets] = {"1",    "2",     "3-4", "5-8",
                                                        "9-16", "17-32", "33+"};
  return bucket < kReuseBuckets ? kNames[bucket] : "?";
}

namespace {

double NormalizedEntropy(const std::vector<uint64_t>& count) {
  uint64_t total = 0;
  for (const uint64_t c : count) total += c;
  if (total == 0 || count.size() < 2) return 0;
  double h = 0;
  for (const uint64_t c : count) {
    if (c == 0) continue;
    const double p = static_cast<double>(c) / total;
    h -= p * std::log(p);
  }
  return h / std::log(static_cast<double>(count.size()));
}

// Share of the counts held by the largest eighth of them.
double TopEighthShare(const std::vector<uint64_t>& count) {
  std::vector<uint64_t> sorted = count;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const size_t eighth = std::max<size_t>(1, sorted.size() / 8);
  uint64_t top = 0, total = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    total += sorted[i];
    if (i < eighth) top += sorted[i];
  }
  return total == 0 ? 0 : static_cast<double>(top) / total;
}

size_t BucketOf(uint64_t d) {
  if (d <= 1) return 0;
  if (d == 2) return 1;
  if (d <= 4) return 2;
  if (d <= 8) return 3;
  if (d <= 16) return 4;
  if (d <= 32) return 5;
  return 6;
}

void AddScaled(LayerStats& into, const LayerStats& s, double w) {
  into.entropy += w * s.entropy;
  into.entropy_within += w * s.entropy_within;
  into.top_eighth_share += w * s.top_eighth_share;
  into.top_eighth_within += w * s.top_eighth_within;
  into.reuse_prev += w * s.reuse_prev;
  for (size_t b = 0; b < kReuseBuckets; ++b) into.reuse_distance[b] += w * s.reuse_distance[b];
  into.cold += w * s.cold;
}

// SplitMix64 step: the baseline's shuffles are the same on every platform.
uint64_t NextRandom(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The co-occurrence predictor of MeasureCrossLayer, with its buffers
// allocated once for all layer pairs.
class CrossLayerMeter {
 public:
  CrossLayerMeter(uint32_t n_expert, uint32_t top_k)
      : n_(n_expert),
        k_(top_k),
        table_(static_cast<size_t>(n_expert) * n_expert),
        popularity_(n_expert),
        votes_(n_expert),
        top_successor_(n_expert),
        top_votes_(n_expert),
        order_(n_expert),
        is_real_(n_expert) {}

  CrossLayerStats Measure(const std::vector<const RoutingTrace*>& traces, uint32_t layer) {
    // row_of[s][t]: the token whose experts at `layer` are paired with token
    // t's at layer - 1 in sequence s. Real: itself; baseline: a shuffle
    // within t's half of the sequence.
    std::vector<std::vector<uint32_t>> row_of(traces.size());
    for (size_t s = 0; s < traces.size(); ++s) {
      row_of[s].resize(traces[s]->n_token());
      std::iota(row_of[s].begin(), row_of[s].end(), 0u);
    }
    CrossLayerStats out;
    out.hit = HitRate(traces, layer, row_of);
    uint64_t rng = 0x243F6A8885A308D3ull ^ (uint64_t{layer} << 32);
    for (size_t r = 0; r < kCrossLayerShuffles; ++r) {
      for (std::vector<uint32_t>& rows : row_of) {
        const size_t half = rows.size() / 2;
        Shuffle(rows.data(), half, rng);
        Shuffle(rows.data() + half, rows.size() - half, rng);
      }
      out.hit_shuffled += HitRate(traces, layer, row_of) / kCrossLayerShuffles;
    }
    return out;
  }

 private:
  static void Shuffle(uint32_t* v, size_t n, uint64_t& rng) {
    for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[NextRandom(rng) % i]);
  }

  // Two-fold: learn the table on one half of every sequence, predict the
  // other half, then the other way round.
  double HitRate(const std::vector<const RoutingTrace*>& traces, uint32_t layer,
                 const std::vector<std::vector<uint32_t>>& row_of) {
    uint64_t hits = 0;
    uint64_t predicted = 0;
    for (int fold = 0; fold < 2; ++fold) {
      std::fill(table_.begin(), table_.end(), 0);
      std::fill(popularity_.begin(), popularity_.end(), 0);
      for (size_t s = 0; s < traces.size(); ++s) {
        const auto [begin, end] = Half(traces[s]->n_token(), fold);
        for (size_t t = begin; t < end; ++t) {
          const absl::Span<const uint32_t> next = traces[s]->Experts(row_of[s][t], layer);
          for (const uint32_t i : traces[s]->Experts(t, layer - 1)) {
            uint32_t* row = &table_[static_cast<size_t>(i) * n_];
            for (const uint32_t j : next) ++row[j];
          }
          for (const uint32_t j : next) ++popularity_[j];
        }
      }
      FindTopSuccessors();
      for (size_t s = 0; s < traces.size(); ++s) {
        const auto [begin, end] = Half(traces[s]->n_token(), 1 - fold);
        for (size_t t = begin; t < end; ++t) {
          hits += PredictedHits(traces[s]->Experts(t, layer - 1),
                                traces[s]->Experts(row_of[s][t], layer));
          ++predicted;
        }
      }
    }
    return predicted == 0 ? 0 : static_cast<double>(hits) / (static_cast<double>(predicted) * k_);
  }

  // Tokens [begin, end) of half `which` (0: the first) of a sequence of n;
  // sequences of one token have no pair of halves.
  static std::pair<size_t, size_t> Half(size_t n, int which) {
    if (n < 2) return {0, 0};
    return which == 0 ? std::pair<size_t, size_t>{0, n / 2} : std::pair<size_t, size_t>{n / 2, n};
  }

  // Each expert's most frequent successor in the learned table (ties: the
  // more popular, then the lower id).
  void FindTopSuccessors() {
    for (uint32_t i = 0; i < n_; ++i) {
      const uint32_t* row = &table_[static_cast<size_t>(i) * n_];
      uint32_t best = 0;
      for (uint32_t j = 1; j < n_; ++j) {
        if (row[j] > row[best] || (row[j] == row[best] && popularity_[j] > popularity_[best])) {
          best = j;
        }
      }
      top_successor_[i] = best;
    }
  }

  uint32_t PredictedHits(absl::Span<const uint32_t> prev, absl::Span<const uint32_t> real) {
    std::fill(votes_.begin(), votes_.end(), 0);
    std::fill(top_votes_.begin(), top_votes_.end(), 0);
    for (const uint32_t i : prev) {
      const uint32_t* row = &table_[static_cast<size_t>(i) * n_];
      for (uint32_t j = 0; j < n_; ++j) votes_[j] += row[j];
      ++top_votes_[top_successor_[i]];
    }
    // First the experts that are the most frequent successor of one of
    // `prev` (a one-to-one mapping is found exactly, whereas summed counts
    // drown it in the pairs that co-occurrence within layer - 1 brings),
    // then summed counts, popularity, the id.
    std::iota(order_.begin(), order_.end(), 0u);
    std::nth_element(order_.begin(), order_.begin() + (k_ - 1), order_.end(),
                     [&](uint32_t a, uint32_t b) {
                       if (top_votes_[a] != top_votes_[b]) return top_votes_[a] > top_votes_[b];
                       if (votes_[a] != votes_[b]) return votes_[a] > votes_[b];
                       if (popularity_[a] != popularity_[b]) {
                         return popularity_[a] > popularity_[b];
                       }
                       return a < b;
                     });
    for (const uint32_t j : real) is_real_[j] = 1;
    uint32_t hits = 0;
    for (uint32_t r = 0; r < k_; ++r) hits += is_real_[order_[r]];
    for (const uint32_t j : real) is_real_[j] = 0;
    return hits;
  }

  const uint32_t n_;
  const uint32_t k_;
  std::vector<uint32_t> table_;  // [expert at layer - 1][expert at layer]
  std::vector<uint64_t> popularity_;
  std::vector<uint64_t> votes_;
  std::vector<uint32_t> top_successor_;
  std::vector<uint32_t> top_votes_;
  std::vector<uint32_t> order_;
  std::vector<uint8_t> is_real_;
};

absl::Status CheckOneShape(const std::vector<const RoutingTrace*>& traces, const char* what) {
  if (traces.empty()) return absl::InvalidArgumentError(absl::StrFormat("%s: no trace", what));
  const RoutingTrace& first = *traces[0];
  for (const RoutingTrace* t : traces) {
    if (t->n_layer != first.n_layer || t->n_expert != first.n_expert ||
        t->top_k != first.top_k) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s has %u layers x %u experts, top-%u; %s has %u x %u, top-%u", what, t->name,
          t->n_layer, t->n_expert, t->top_k, first.name, first.n_layer, first.n_expert,
          first.top_k));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CrossLayerStats> MeasureCrossLayer(const std::vector<const RoutingTrace*>& traces,
                                                  uint32_t layer) {
  if (absl::Status s = CheckOneShape(traces, "cross-layer statistics"); !s.ok()) return s;
  const RoutingTrace& first = *traces[0];
  if (layer == 0 || layer >= first.n_layer) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cross-layer statistics: layer %u is not in [1, %u)", layer, first.n_layer));
  }
  if (first.n_expert > kCrossLayerMaxExperts || first.top_k == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cross-layer statistics: %u experts, top-%u (measured up to %u experts, top-k >= 1)",
        first.n_expert, first.top_k, kCrossLayerMaxExperts));
  }
  return CrossLayerMeter(first.n_expert, first.top_k).Measure(traces, layer);
}

absl::StatusOr<TraceStats> MeasureTraceStats(const std::vector<const RoutingTrace*>& traces,
                                             bool cross_layer) {
  if (absl::Status s = CheckOneShape(traces, "trace statistics"); !s.ok()) return s;
  TraceStats st;
  st.n_layer = traces[0]->n_layer;
  st.n_expert = traces[0]->n_expert;
  st.top_k = traces[0]->top_k;
  for (const RoutingTrace* t : traces) st.n_token += t->n_token();
  st.layer.resize(st.n_layer);
  std::vector<uint64_t> count(st.n_expert);
  std::vector<uint64_t> seq_count(st.n_expert);
  std::vector<uint64_t> last(st.n_expert);  // token + 1 of the last use; 0 = none
  std::vector<uint8_t> prev(st.n_expert);
  for (uint32_t l = 0; l < st.n_layer; ++l) {
    LayerStats& ls = st.layer[l];
    std::fill(count.begin(), count.end(), 0);
    uint64_t selections = 0;
    uint64_t pairs = 0;  // consecutive token pairs
    double reuse_sum = 0;
    std::array<uint64_t, kReuseBuckets> bucket{};
    uint64_t cold = 0;
    double within_sum = 0;
    double top_within_sum = 0;
    for (const RoutingTrace* t : traces) {
      std::fill(last.begin(), last.end(), 0);
      std::fill(seq_count.begin(), seq_count.end(), 0);
      for (size_t tok = 0; tok < t->n_token(); ++tok) {
        uint32_t shared = 0;
        for (const uint32_t e : t->Experts(tok, l)) {
          ++count[e];
          ++seq_count[e];
          ++selections;
          if (last[e] == 0) {
            ++cold;
          } else {
            const uint64_t d = tok + 1 - last[e];
            ++bucket[BucketOf(d)];
            if (d == 1) ++shared;
          }
          last[e] = tok + 1;
        }
        if (tok > 0) {
          ++pairs;
          reuse_sum += static_cast<double>(shared) / st.top_k;
        }
      }
      within_sum += NormalizedEntropy(seq_count);
      top_within_sum += TopEighthShare(seq_count);
    }
    ls.entropy = NormalizedEntropy(count);
    ls.entropy_within = within_sum / static_cast<double>(traces.size());
    ls.top_eighth_share = TopEighthShare(count);
    ls.top_eighth_within = top_within_sum / static_cast<double>(traces.size());
    ls.reuse_prev = pairs == 0 ? 0 : reuse_sum / pairs;
    for (size_t b = 0; b < kReuseBuckets; ++b) {
      ls.reuse_distance[b] = static_cast<double>(bucket[b]) / selections;
    }
    ls.cold = static_cast<double>(cold) / selections;
    AddScaled(st.mean, ls, 1.0 / st.n_layer);
  }
  if (cross_layer && st.n_layer > 1 && st.n_expert <= kCrossLayerMaxExperts && st.top_k > 0) {
    CrossLayerMeter meter(st.n_expert, st.top_k);
    const double per_pair = 1.0 / (st.n_layer - 1);
    for (uint32_t l = 1; l < st.n_layer; ++l) {
      LayerStats& ls = st.layer[l];
      const CrossLayerStats c = meter.Measure(traces, l);
      ls.has_cross_layer = true;
      ls.cross_layer_hit = c.hit;
      ls.cross_layer_hit_shuffled = c.hit_shuffled;
      ls.cross_layer_lift = c.lift();
      st.mean.has_cross_layer = true;
      st.mean.cross_layer_hit += per_pair * c.hit;
      st.mean.cross_layer_hit_shuffled += per_pair * c.hit_shuffled;
      st.mean.cross_layer_lift += per_pair * c.lift();
    }
  }
  return st;
}

}  // namespace moetier
