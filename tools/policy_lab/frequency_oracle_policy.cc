#include "policy_lab/frequency_oracle_policy.h"

#include <vector>

#include "base/check.h"
#include "cache/layer_heaps.h"

namespace moetier {
namespace {

class FrequencyOraclePolicy final : public ExpertCachePolicy {
 public:
  FrequencyOraclePolicy(const ExpertCacheShape& shape, const RoutingTrace& trace)
      : ExpertCachePolicy(shape),
        count_(static_cast<size_t>(shape.n_layer) * shape.n_expert, 0),
        last_step_(count_.size(), 0),
        heap_(shape.n_layer, shape.n_expert) {
    MOETIER_CHECK(trace.n_layer == shape.n_layer && trace.n_expert == shape.n_expert &&
                  trace.top_k == shape.top_k);
    for (size_t t = 0; t < trace.n_token(); ++t) {
      for (uint32_t l = 0; l < shape.n_layer; ++l) {
        for (const uint32_t e : trace.Experts(t, l)) ++count_[Index(l, e)];
      }
    }
  }

  std::string_view name() const override { return "freq-oracle"; }

 protected:
  void OnRoute(uint32_t layer, absl::Span<const uint32_t> experts, absl::Span<const float>,
               uint64_t now) override {
    for (const uint32_t e : experts) {
      last_step_[Index(layer, e)] = now;
      if (heap_[layer].contains(e)) heap_[layer].Update(e, Key(layer, e));
    }
  }

  void OnInsert(uint32_t layer, uint32_t expert, bool) override {
    heap_[layer].Push(expert, Key(layer, expert));
  }

  void OnEvict(uint32_t layer, uint32_t expert) override { heap_[layer].Erase(expert); }

  uint32_t PickVictim(uint32_t layer) override {
    return heap_.Victim(layer, [&](uint32_t e) { return Evictable(layer, e); });
  }

  size_t PolicyStateBytes() const override {
    return VectorBytes(count_) + VectorBytes(last_step_) + heap_.bytes();
  }

 private:
  HeapKey Key(uint32_t layer, uint32_t expert) const {
    const size_t i = Index(layer, expert);
    return HeapKey{static_cast<double>(count_[i]), last_step_[i]};
  }

  std::vector<uint32_t> count_;      // [layer][expert]: routes in the whole trace
  std::vector<uint64_t> last_step_;  // [layer][expert]
  LayerHeaps heap_;
};

}  // namespace

std::unique_ptr<ExpertCachePolicy> MakeFrequencyOraclePolicy(const ExpertCacheShape& shape,
                                                             const RoutingTrace& trace) {
  return std::make_unique<FrequencyOraclePolicy>(shape, trace);
}

}  // namespace moetier
