#include <vector>

#include "store/replacement_policy.h"
#include "base/check.h"

namespace moetier {
namespace {

class ClockPolicy : public ReplacementPolicy {
 public:
  explicit ClockPolicy(uint32_t n_slot) : filled_(n_slot, false) {}

  std::string_view name() const override { return "clock"; }

  void OnFill(uint32_t slot) override {
    MOETIER_CHECK(slot < filled_.size() && !filled_[slot]);
    filled_[slot] = true;
  }

  std::optional<uint32_t> Evict(VictimProbe& probe) override {
    const size_t n = filled_.size();
    // Two full turns: the first may only clear marks; after it, a slot that
    // is still skipped is pinned (or re-referenced meanwhile, which the
    // second turn tolerates only once).
    for (size_t step = 0; step < 2 * n + 1 && n > 0; ++step) {
      const uint32_t slot = hand_;
      hand_ = static_cast<uint32_t>((hand_ + 1) % n);
      if (!filled_[slot]) continue;
      if (probe.Referenced(slot) && step < n) continue;
      if (probe.TryEvict(slot)) {
        filled_[slot] = false;
        return slot;
      }
    }
    return std::nullopt;
  }

 private:
  std::vector<bool> filled_;
  uint32_t hand_ = 0;
};

}  // namespace

std::unique_ptr<ReplacementPolicy> MakeClockPolicy(uint32_t n_slot) {
  return std::make_unique<ClockPolicy>(n_slot);
}

}  // namespace moetier
