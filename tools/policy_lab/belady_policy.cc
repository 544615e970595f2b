#include "policy_lab/belady_policy.h"

#include <algorithm>
#include <vector>

#include "base/check.h"
#include "cache/layer_heaps.h"

namespace moetier {
namespace {

constexpr uint64_t kNever = UINT64_MAX;

class BeladyPolicy final : public ExpertCachePolicy {
 public:
  BeladyPolicy(const ExpertCacheShape& shape, const RoutingTrace& trace)
      : ExpertCachePolicy(shape), trace_(trace), heap_(shape.n_layer, shape.n_expert) {
    MOETIER_CHECK(trace.n_layer == shape.n_layer && trace.n_expert == shape.n_expert &&
                  trace.top_k == shape.top_k);
    // Occurrence lists: the tokens at which each (layer, expert) is routed,
    // in order, with a cursor that only moves forward.
    const size_t cells = static_cast<size_t>(shape.n_layer) * shape.n_expert;
    std::vector<uint32_t> count(cells, 0);
    for (size_t t = 0; t < trace.n_token(); ++t) {
      for (uint32_t l = 0; l < shape.n_layer; ++l) {
        for (const uint32_t e : trace.Experts(t, l)) ++count[Index(l, e)];
      }
    }
    begin_.assign(cells + 1, 0);
    for (size_t i = 0; i < cells; ++i) begin_[i + 1] = begin_[i] + count[i];
    tokens_.resize(begin_[cells]);
    cursor_.assign(begin_.begin(), begin_.end() - 1);
    std::vector<size_t> fill(begin_.begin(), begin_.end() - 1);
    for (size_t t = 0; t < trace.n_token(); ++t) {
      for (uint32_t l = 0; l < shape.n_layer; ++l) {
        for (const uint32_t e : trace.Experts(t, l)) tokens_[fill[Index(l, e)]++] = t;
      }
    }
  }

  std::string_view name() const override { return "min"; }

 protected:
  void OnRoute(uint32_t layer, absl::Span<const uint32_t> experts, absl::Span<const float>,
               uint64_t now) override {
    const uint64_t token = now - 1;
    MOETIER_CHECK(token < trace_.n_token());
    const absl::Span<const uint32_t> want = trace_.Experts(token, layer);
    MOETIER_CHECK(std::equal(experts.begin(), experts.end(), want.begin(), want.end()));
    for (const uint32_t e : experts) {
      if (heap_[layer].contains(e)) heap_[layer].Update(e, Key(NextUse(layer, e, token + 1)));
    }
  }

  void OnInsert(uint32_t layer, uint32_t expert, bool) override {
    // step(layer) is the token after the latest Route: the next use of an
    // expert admitted for the current token, and the token a prefetch is
    // for. Either way the next use counts from there.
    heap_[layer].Push(expert, Key(NextUse(layer, expert, step(layer))));
  }

  void OnEvict(uint32_t layer, uint32_t expert) override { heap_[layer].Erase(expert); }

  uint32_t PickVictim(uint32_t layer) override {
    return heap_.Victim(layer, [&](uint32_t e) { return Evictable(layer, e); });
  }

  // The whole trace's future, which no online policy has; shown anyway.
  size_t PolicyStateBytes() const override {
    return VectorBytes(begin_) + VectorBytes(cursor_) + VectorBytes(tokens_) + heap_.bytes();
  }

  bool PrefetchWorthVictim(uint32_t layer, uint32_t expert, uint32_t victim) override {
    // Prefetches are offered before the layer's next Route, i.e. for token
    // step(layer).
    return NextUse(layer, expert, step(layer)) < NextUse(layer, victim, step(layer));
  }

 private:
  // Min-heap on minus the next use: the furthest comes out first.
  static HeapKey Key(uint64_t next_use) {
    return HeapKey{next_use == kNever ? -1e300 : -static_cast<double>(next_use), 0};
  }

  // The first token >= `from` that routes `expert` at `layer`, or kNever.
  // `from` never decreases per (layer, expert) over a replay.
  uint64_t NextUse(uint32_t layer, uint32_t expert, uint64_t from) {
    const size_t i = Index(layer, expert);
    size_t& c = cursor_[i];
    while (c < begin_[i + 1] && tokens_[c] < from) ++c;
    return c < begin_[i + 1] ? tokens_[c] : kNever;
  }

  const RoutingTrace& trace_;
  std::vector<size_t> begin_;  // [layer][expert] -> first entry in tokens_
  std::vector<size_t> cursor_;
  std::vector<uint64_t> tokens_;
  LayerHeaps heap_;
};

}  // namespace

std::unique_ptr<ExpertCachePolicy> MakeBeladyPolicy(const ExpertCacheShape& shape,
                                                    const RoutingTrace& trace) {
  return std::make_unique<BeladyPolicy>(shape, trace);
}

}  // namespace moetier
