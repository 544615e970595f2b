// LRU: per layer, a recency list of the resident experts. O(1) per reference.
#include "cache/expert_list.h"
#include "cache/policies.h"

namespace moetier {
namespace {

class LruPolicy final : public ExpertCachePolicy {
 public:
  explicit LruPolicy(const ExpertCacheShape& shape)
      : ExpertCachePolicy(shape), list_(shape.n_layer, shape.n_expert) {}

  std::string_view name() const override { return "lru"; }

 protected:
  void OnRoute(uint32_t layer, absl::Span<const uint32_t> experts, absl::Span<const float>,
               uint64_t) override {
    // Walk backwards so the router's first choice ends up most recent.
    for (size_t j = experts.size(); j > 0; --j) {
      const uint32_t e = experts[j - 1];
      if (Resident(layer, e)) list_.MoveToFront(layer, e);
    }
  }

  void OnInsert(uint32_t layer, uint32_t expert, bool) override { list_.PushFront(layer, expert); }
  void OnEvict(uint32_t layer, uint32_t expert) override { list_.Unlink(layer, expert); }

  size_t PolicyStateBytes() const override { return list_.bytes(); }

  uint32_t PickVictim(uint32_t layer) override {
    // Only protected (this step's) and pinned experts are skipped: a handful.
    for (uint32_t e = list_.tail(layer); e != ExpertRecencyLists::kEnd; e = list_.newer(layer, e)) {
      if (Evictable(layer, e)) return e;
    }
    return kNoExpert;
  }

 private:
  ExpertRecencyLists list_;
};

}  // namespace

std::unique_ptr<ExpertCachePolicy> NewLruPolicy(const ExpertCacheShape& shape) {
  return std::make_unique<LruPolicy>(shape);
}

}  // namespace moetier
