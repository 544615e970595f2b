// Which resident expert gives up its slot when the cache needs one. The
// store owns the mechanics (pins, states); a policy only orders candidates.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

namespace moetier {

// The store's answers about a filled slot.
class VictimProbe {
 public:
  virtual ~VictimProbe() = default;
  // True if the slot's expert was acquired since the previous call for this
  // slot (the call consumes the mark).
  virtual bool Referenced(uint32_t slot) = 0;
  // Evicts the slot's expert; false (nothing changed) while it is pinned.
  virtual bool TryEvict(uint32_t slot) = 0;
};

class ReplacementPolicy {
 public:
  virtual ~ReplacementPolicy() = default;
  virtual std::string_view name() const = 0;
  // `slot` now holds an expert.
  virtual void OnFill(uint32_t slot) = 0;
  // Evicts one filled slot through the probe and returns it, or nullopt
  // when every filled slot is pinned (or none is filled).
  virtual std::optional<uint32_t> Evict(VictimProbe& probe) = 0;
};

// CLOCK (second chance): a hand sweeps the slots; a referenced slot loses
// its mark and is skipped once, a pinned one is skipped, the first
// unreferenced unpinned one is the victim.
std::unique_ptr<ReplacementPolicy> MakeClockPolicy(uint32_t n_slot);

}  // namespace moetier
