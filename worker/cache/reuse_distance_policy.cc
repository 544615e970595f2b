// Reuse distance: each expert's next use is predicted as its last use plus
// its usual reuse distance (an exponential moving average of its past
// distances, in steps of its layer; for an expert without history, the
// layer's average). The victim is the expert predicted furthest in the future
// (Belady's rule on predictions), except that an expert overdue by more than
// twice its usual distance goes first: its prediction has failed, and
// without that rule an expert that stopped being routed would keep an early
// prediction forever.
#include <vector>

#include "cache/expert_list.h"
#include "cache/layer_heaps.h"
#include "cache/policies.h"

namespace moetier {
namespace {

// Weight of the newest distance in the moving averages.
constexpr double kDistanceAlpha = 0.5;
constexpr double kLayerAlpha = 0.05;
// Overdue when the age exceeds this many usual distances.
constexpr double kOverdueFactor = 2.0;

class ReuseDistancePolicy final : public ExpertCachePolicy {
 public:
  explicit ReuseDistancePolicy(const ExpertCacheShape& shape)
      : ExpertCachePolicy(shape),
        last_(static_cast<size_t>(shape.n_layer) * shape.n_expert, 0),
        distance_(last_.size(), 0.0),
        expected_(last_.size(), 0.0),
        // Uniform routing reuses an expert every n_expert / top_k steps.
        layer_distance_(shape.n_layer,
                        static_cast<double>(shape.n_expert) / static_cast<double>(shape.top_k)),
        list_(shape.n_layer, shape.n_expert),
        heap_(shape.n_layer, shape.n_expert) {}

  std::string_view name() const override { return "reuse"; }

 protected:
  void OnRoute(uint32_t layer, absl::Span<const uint32_t> experts, absl::Span<const float>,
               uint64_t now) override {
    for (size_t j = experts.size(); j > 0; --j) {
      const uint32_t e = experts[j - 1];
      const size_t i = Index(layer, e);
      if (last_[i] != 0) {
        const double d = static_cast<double>(now - last_[i]);
        distance_[i] =
            distance_[i] == 0 ? d : (1 - kDistanceAlpha) * distance_[i] + kDistanceAlpha * d;
        layer_distance_[layer] = (1 - kLayerAlpha) * layer_distance_[layer] + kLayerAlpha * d;
      }
      last_[i] = now;
      expected_[i] = distance_[i] != 0 ? distance_[i] : layer_distance_[layer];
      if (heap_[layer].contains(e)) {
        heap_[layer].Update(e, Key(i));
        list_.MoveToFront(layer, e);
      }
    }
  }

  void OnInsert(uint32_t layer, uint32_t expert, bool) override {
    heap_[layer].Push(expert, Key(Index(layer, expert)));
    list_.PushFront(layer, expert);
  }

  void OnEvict(uint32_t layer, uint32_t expert) override {
    heap_[layer].Erase(expert);
    list_.Unlink(layer, expert);
  }

  size_t PolicyStateBytes() const override {
    return VectorBytes(last_) + VectorBytes(distance_) + VectorBytes(expected_) +
           VectorBytes(layer_distance_) + list_.bytes() + heap_.bytes();
  }

  uint32_t PickVictim(uint32_t layer) override {
    const double now = static_cast<double>(step(layer));
    for (uint32_t e = list_.tail(layer); e != ExpertRecencyLists::kEnd; e = list_.newer(layer, e)) {
      if (!Evictable(layer, e)) continue;
      const size_t i = Index(layer, e);
      // Never routed (prefetched only): nothing predicts it will be used.
      if (last_[i] == 0) return e;
      if (now - static_cast<double>(last_[i]) > kOverdueFactor * expected_[i]) return e;
      break;  // the oldest evictable one is not overdue
    }
    return heap_.Victim(layer, [&](uint32_t e) { return Evictable(layer, e); });
  }

 private:
  // Min-heap on minus the predicted next use: the furthest comes out first.
  HeapKey Key(size_t i) const {
    const double next_use = static_cast<double>(last_[i]) + expected_[i];
    return HeapKey{last_[i] == 0 ? -1e300 : -next_use, last_[i]};
  }

  std::vector<uint64_t> last_;    // [layer][expert]: step of last reference, 0 = never
  std::vector<double> distance_;  // [layer][expert]: average reuse distance, 0 = unknown
  std::vector<double> expected_;  // [layer][expert]: distance predicted at the last reference
  std::vector<double> layer_distance_;
  ExpertRecencyLists list_;
  LayerHeaps heap_;
};

}  // namespace

std::unique_ptr<ExpertCachePolicy> NewReuseDistancePolicy(const ExpertCacheShape& shape) {
  return std::make_unique<ReuseDistancePolicy>(shape);
}

}  // namespace moetier
