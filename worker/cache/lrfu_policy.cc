// LRFU (Lee et al., "LRFU: a spectrum of policies that subsumes the LRU and
// LFU policies", IEEE ToC 2001), per layer: a min-heap of the resident
// experts by score. Scores of evicted experts are kept, so an expert that
// comes back returns with its history (MoE routing is skewed per layer; the
// popular experts keep coming back).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cache/layer_heaps.h"
#include "cache/policies.h"

namespace moetier {

void LrfuScore::Reference(uint64_t now, double lambda) {
  const double base = lambda * static_cast<double>(now);
  if (last_step == 0) {
    key = base;  // log2(1)
  } else {
    // log2(1 + 2^(key - base)); key <= base because now >= last_step.
    key = base + std::log2(1.0 + std::exp2(key - base));
  }
  last_step = now;
}

double LrfuScore::RankKey() const {
  return last_step == 0 ? -std::numeric_limits<double>::infinity() : key;
}

namespace {

class LrfuPolicy final : public ExpertCachePolicy {
 public:
  LrfuPolicy(const ExpertCacheShape& shape, double lambda, std::string_view name)
      : ExpertCachePolicy(shape),
        lambda_(lambda),
        name_(name),
        score_(static_cast<size_t>(shape.n_layer) * shape.n_expert),
        heap_(shape.n_layer, shape.n_expert) {}

  std::string_view name() const override { return name_; }

 protected:
  void OnRoute(uint32_t layer, absl::Span<const uint32_t> experts, absl::Span<const float>,
               uint64_t now) override {
    for (const uint32_t e : experts) {
      LrfuScore& s = score_[Index(layer, e)];
      s.Reference(now, lambda_);
      if (heap_[layer].contains(e)) heap_[layer].Update(e, Key(s));
    }
  }

  void OnInsert(uint32_t layer, uint32_t expert, bool) override {
    heap_[layer].Push(expert, Key(score_[Index(layer, expert)]));
  }

  void OnEvict(uint32_t layer, uint32_t expert) override { heap_[layer].Erase(expert); }

  size_t PolicyStateBytes() const override {
    return VectorBytes(score_) + heap_.bytes();
  }

  uint32_t PickVictim(uint32_t layer) override {
    return heap_.Victim(layer, [&](uint32_t e) { return Evictable(layer, e); });
  }

 private:
  static HeapKey Key(const LrfuScore& s) { return HeapKey{s.RankKey(), s.last_step}; }

  const double lambda_;
  const std::string name_;
  std::vector<LrfuScore> score_;  // [layer][expert], resident or not
  LayerHeaps heap_;
};

}  // namespace

std::unique_ptr<ExpertCachePolicy> NewLrfuPolicy(const ExpertCacheShape& shape, double lambda,
                                                 std::string_view name) {
  return std::make_unique<LrfuPolicy>(shape, lambda, name);
}

}  // namespace moetier
