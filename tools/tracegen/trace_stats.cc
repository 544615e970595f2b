#include "tracegen/trace_stats.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/str_format.h"

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

}  // namespace

absl::StatusOr<TraceStats> MeasureTraceStats(const std::vector<const RoutingTrace*>& traces) {
  if (traces.empty()) return absl::InvalidArgumentError("trace statistics: no trace");
  TraceStats st;
  st.n_layer = traces[0]->n_layer;
  st.n_expert = traces[0]->n_expert;
  st.top_k = traces[0]->top_k;
  for (const RoutingTrace* t : traces) {
    if (t->n_layer != st.n_layer || t->n_expert != st.n_expert || t->top_k != st.top_k) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "trace statistics: %s has %u layers x %u experts, top-%u; %s has %u x %u, top-%u",
          t->name, t->n_layer, t->n_expert, t->top_k, traces[0]->name, st.n_layer, st.n_expert,
          st.top_k));
    }
    st.n_token += t->n_token();
  }
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
  return st;
}

}  // namespace moetier
