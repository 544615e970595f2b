// Learning from the optimum on the recent past, after Hawkeye (Jain and
// Lin, "Back to the Future: Leveraging Belady's Algorithm for Improved Cache
// Replacement", ISCA 2016). Per layer, OPTgen reconstructs online what
// Belady's MIN would have done over the last few dozen steps: an occupancy
// count per step of the intervals MIN keeps. When an expert comes back, the
// interval since its previous use fits (every step in it below the layer's
// budget) if MIN would have kept it, and then occupies those steps.
//
// What is learned from those labels: a saturating counter per (layer,
// expert), up when MIN would have kept it, down when not. In a CPU cache the
// counter belongs to the instruction that loaded the line; here the expert
// itself is the signature, since routing is skewed per expert and
// persistent. The victim is the resident expert with the lowest counter,
// then the lowest LRFU score (the recency-frequency rank of lrfu).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cache/layer_heaps.h"
#include "cache/policies.h"

namespace moetier {
namespace {

// Steps of history kept per layer; a window never exceeds it.
constexpr uint32_t kRingSteps = 256;
// OPTgen looks back this many times the steps the cache turns over in
// (budget / top_k): long enough for MIN's choices to show, short enough to
// follow the text.
constexpr uint32_t kWindowPerTurnover = 4;
constexpr uint32_t kMinWindow = 8;
constexpr uint8_t kCounterMax = 7;
constexpr uint8_t kCounterStart = 4;
constexpr double kTieBreakLambda = 0.1;
// The counter dominates the key: LRFU keys stay below lambda * steps, far
// under this for any run (2^40 steps).
constexpr double kCounterWeight = 0x1.0p36;

class OptGenPolicy final : public ExpertCachePolicy {
 public:
  explicit OptGenPolicy(const ExpertCacheShape& shape)
      : ExpertCachePolicy(shape),
        occupancy_(static_cast<size_t>(shape.n_layer) * kRingSteps, 0),
        last_use_(static_cast<size_t>(shape.n_layer) * shape.n_expert, 0),
        counter_(last_use_.size(), kCounterStart),
        score_(last_use_.size()),
        heap_(shape.n_layer, shape.n_expert) {}

  std::string_view name() const override { return "optgen"; }

 protected:
  void OnRoute(uint32_t layer, absl::Span<const uint32_t> experts, absl::Span<const float>,
               uint64_t now) override {
    uint32_t* occupancy = &occupancy_[static_cast<size_t>(layer) * kRingSteps];
    occupancy[now % kRingSteps] = 0;
    const uint32_t budget = slot_budget(layer);
    const uint64_t window = std::clamp<uint64_t>(
        static_cast<uint64_t>(kWindowPerTurnover) * budget / shape_.top_k, kMinWindow, kRingSteps);
    for (const uint32_t e : experts) {
      const size_t i = Index(layer, e);
      const uint64_t previous = last_use_[i];
      if (previous != 0) {
        bool kept = now - previous < window;
        for (uint64_t t = previous; kept && t < now; ++t) {
          kept = occupancy[t % kRingSteps] < budget;
        }
        if (kept) {
          for (uint64_t t = previous; t < now; ++t) ++occupancy[t % kRingSteps];
          counter_[i] = std::min<uint8_t>(kCounterMax, counter_[i] + 1);
        } else if (counter_[i] > 0) {
          --counter_[i];
        }
      }
      last_use_[i] = now;
      score_[i].Reference(now, kTieBreakLambda);
      if (heap_[layer].contains(e)) heap_[layer].Update(e, Key(i));
    }
  }

  void OnInsert(uint32_t layer, uint32_t expert, bool) override {
    heap_[layer].Push(expert, Key(Index(layer, expert)));
  }

  void OnEvict(uint32_t layer, uint32_t expert) override { heap_[layer].Erase(expert); }

  uint32_t PickVictim(uint32_t layer) override {
    return heap_.Victim(layer, [&](uint32_t e) { return Evictable(layer, e); });
  }

  size_t PolicyStateBytes() const override {
    return VectorBytes(occupancy_) + VectorBytes(last_use_) + VectorBytes(counter_) +
           VectorBytes(score_) + heap_.bytes();
  }

 private:
  HeapKey Key(size_t i) const {
    return HeapKey{counter_[i] * kCounterWeight + score_[i].RankKey(), score_[i].last_step};
  }

  std::vector<uint32_t> occupancy_;  // [layer][step % kRingSteps]
  std::vector<uint64_t> last_use_;   // [layer][expert]: step of the last Route, 0 = never
  std::vector<uint8_t> counter_;     // [layer][expert]: how often MIN kept it, 0..kCounterMax
  std::vector<LrfuScore> score_;     // [layer][expert]
  LayerHeaps heap_;
};

}  // namespace

std::unique_ptr<ExpertCachePolicy> NewOptGenPolicy(const ExpertCacheShape& shape) {
  return std::make_unique<OptGenPolicy>(shape);
}

}  // namespace moetier
