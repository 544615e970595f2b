// Adaptive LRFU. No single LRFU lambda suits every layer and every model:
// layers with strongly skewed routing want LFU-like memory, layers whose
// experts drift with the text want LRU-like recency. Each layer therefore
// runs shadow caches (expert ids only, no data) under four lambdas, with the
// layer's budget and the same Route-then-admit protocol as the real cache,
// and counts their hits with exponential forgetting. The real cache evicts
// by the lambda whose shadow currently leads; it keeps a heap per lambda
// over its residents, so switching costs nothing.
#include <array>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "cache/indexed_heap.h"
#include "cache/policies.h"

namespace moetier {
namespace {

// From LFU-like (score half-life 64 steps) to LRU (lambda 1: one reference
// now outweighs any number of older ones).
constexpr std::array<double, 4> kLambdas = {1.0 / 64, 1.0 / 16, 1.0 / 4, 1.0};
constexpr size_t kNumLambdas = kLambdas.size();
// Lambda followed until the shadows have evidence.
constexpr size_t kInitialChoice = 1;
// Shadow hits are forgotten with this half-life, in steps, so a layer can
// change its mind when the text changes.
constexpr double kShadowHalfLife = 128.0;

class AdaptiveLrfuPolicy final : public ExpertCachePolicy {
 public:
  explicit AdaptiveLrfuPolicy(const ExpertCacheShape& shape)
      : ExpertCachePolicy(shape),
        decay_(std::exp2(-1.0 / kShadowHalfLife)),
        choice_(shape.n_layer, kInitialChoice),
        shadow_score_(shape.n_layer) {
    const size_t cells = static_cast<size_t>(shape.n_layer) * shape.n_expert;
    for (size_t j = 0; j < kNumLambdas; ++j) {
      score_[j].resize(cells);
      shadow_resident_[j].assign(cells, 0);
      shadow_count_[j].assign(shape.n_layer, 0);
      real_heap_[j].reserve(shape.n_layer);
      shadow_heap_[j].reserve(shape.n_layer);
      for (uint32_t l = 0; l < shape.n_layer; ++l) {
        real_heap_[j].emplace_back(shape.n_expert);
        shadow_heap_[j].emplace_back(shape.n_expert);
      }
    }
    for (auto& s : shadow_score_) s.fill(0.0);
    scratch_.reserve(shape.n_expert);
  }

  std::string_view name() const override { return "adaptive"; }

 protected:
  void OnRoute(uint32_t layer, absl::Span<const uint32_t> experts, absl::Span<const float>,
               uint64_t now) override {
    std::array<double, kNumLambdas>& shadow_score = shadow_score_[layer];
    for (size_t j = 0; j < kNumLambdas; ++j) {
      uint32_t hits = 0;
      for (const uint32_t e : experts) {
        const size_t i = Index(layer, e);
        LrfuScore& s = score_[j][i];
        s.Reference(now, kLambdas[j]);
        if (real_heap_[j][layer].contains(e)) real_heap_[j][layer].Update(e, Key(s));
        if (shadow_resident_[j][i]) {
          ++hits;
          shadow_heap_[j][layer].Update(e, Key(s));
        }
      }
      shadow_score[j] = shadow_score[j] * decay_ + hits;
      AdmitToShadow(j, layer, experts);
    }
    // Switch only on a strict lead, so ties keep the current choice.
    size_t best = choice_[layer];
    for (size_t j = 0; j < kNumLambdas; ++j) {
      if (shadow_score[j] > shadow_score[best]) best = j;
    }
    choice_[layer] = best;
  }

  void OnInsert(uint32_t layer, uint32_t expert, bool) override {
    const size_t i = Index(layer, expert);
    for (size_t j = 0; j < kNumLambdas; ++j) real_heap_[j][layer].Push(expert, Key(score_[j][i]));
  }

  void OnEvict(uint32_t layer, uint32_t expert) override {
    for (size_t j = 0; j < kNumLambdas; ++j) real_heap_[j][layer].Erase(expert);
  }

  size_t PolicyStateBytes() const override {
    size_t bytes = VectorBytes(choice_) + VectorBytes(shadow_score_) + VectorBytes(scratch_);
    for (size_t j = 0; j < kNumLambdas; ++j) {
      bytes += VectorBytes(score_[j]) + VectorBytes(shadow_resident_[j]) +
               VectorBytes(shadow_count_[j]) + HeapBytes(real_heap_[j]) + HeapBytes(shadow_heap_[j]);
    }
    return bytes;
  }

  uint32_t PickVictim(uint32_t layer) override {
    const uint32_t v = real_heap_[choice_[layer]][layer].TopWhere(
        [&](uint32_t e) { return Evictable(layer, e); }, scratch_);
    return v == IndexedMinHeap::kAbsent ? kNoExpert : v;
  }

 private:
  static HeapKey Key(const LrfuScore& s) { return HeapKey{s.RankKey(), s.last_step}; }

  // The shadow cache of lambda j takes this step's misses, evicting by its
  // own scores but never one of this step's experts.
  void AdmitToShadow(size_t j, uint32_t layer, absl::Span<const uint32_t> experts) {
    IndexedMinHeap& heap = shadow_heap_[j][layer];
    const uint32_t budget = slot_budget(layer);
    for (const uint32_t e : experts) {
      const size_t i = Index(layer, e);
      if (shadow_resident_[j][i]) continue;
      if (shadow_count_[j][layer] >= budget) {
        const uint32_t v =
            heap.TopWhere([&](uint32_t x) { return !RoutedNow(layer, x); }, scratch_);
        // budget >= top_k, so a full shadow always holds a non-routed expert.
        MOETIER_CHECK(v != IndexedMinHeap::kAbsent);
        heap.Erase(v);
        shadow_resident_[j][Index(layer, v)] = 0;
        --shadow_count_[j][layer];
      }
      heap.Push(e, Key(score_[j][i]));
      shadow_resident_[j][i] = 1;
      ++shadow_count_[j][layer];
    }
  }

  const double decay_;
  std::vector<size_t> choice_;  // per layer: index into kLambdas
  std::vector<std::array<double, kNumLambdas>> shadow_score_;
  std::array<std::vector<LrfuScore>, kNumLambdas> score_;           // [layer][expert]
  std::array<std::vector<uint8_t>, kNumLambdas> shadow_resident_;   // [layer][expert]
  std::array<std::vector<uint32_t>, kNumLambdas> shadow_count_;     // per layer
  std::array<std::vector<IndexedMinHeap>, kNumLambdas> real_heap_;  // per layer
  std::array<std::vector<IndexedMinHeap>, kNumLambdas> shadow_heap_;
  std::vector<std::pair<uint32_t, HeapKey>> scratch_;
};

}  // namespace

std::unique_ptr<ExpertCachePolicy> NewAdaptiveLrfuPolicy(const ExpertCacheShape& shape) {
  return std::make_unique<AdaptiveLrfuPolicy>(shape);
}

}  // namespace moetier
