#include "cache/prefetch_prediction.h"

#include <algorithm>

namespace moetier {
namespace {

uint64_t Mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

void DegradedPrediction(absl::Span<const uint32_t> truth, uint32_t n_expert, double accuracy,
                        uint64_t seed, uint64_t token, uint32_t layer, std::vector<uint32_t>& out) {
  out.assign(truth.begin(), truth.end());
  uint64_t state = Mix(seed ^ Mix(token * 0x9E3779B97F4A7C15ull + layer));
  auto next = [&state]() {
    state += 0x9E3779B97F4A7C15ull;
    return Mix(state);
  };
  const uint32_t k = static_cast<uint32_t>(truth.size());
  if (k >= n_expert) return;  // nothing wrong to predict
  for (uint32_t j = 0; j < k; ++j) {
    const double u = static_cast<double>(next() >> 11) * 0x1.0p-53;
    if (u < accuracy) continue;
    for (;;) {
      const uint32_t cand = static_cast<uint32_t>(next() % n_expert);
      if (std::find(truth.begin(), truth.end(), cand) != truth.end()) continue;
      if (std::find(out.begin(), out.end(), cand) != out.end()) continue;
      out[j] = cand;
      break;
    }
  }
}

}  // namespace moetier
