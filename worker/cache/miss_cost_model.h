// Where a cache miss is cheapest to compute: copy the expert into a device
// slot and compute it there, or compute it on host cores straight from the
// pinned store (DESIGN.md, "One decode step", step 3).
//
// The model is fed with rates measured at start-up: the host-to-device copy
// rate, and per-expert compute times on each side as a fixed cost plus a
// cost per routed token row. For one layer's misses it picks the split that
// minimizes the layer's finishing time:
// - when the two sides run concurrently (a GPU worker: host threads compute
//   their misses while the copy engine and the GPU handle the others), the
//   larger of the host total and the copy-plus-device total;
// - when they share the same cores (the CPU worker), their sum, so each miss
//   simply goes where it costs less.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace moetier {

// What a worker does with a routed expert that is not in its cache;
// flag values copy, cpu and auto.
enum class MissPolicy {
  kCopy,  // copy into a slot (evicting by policy), compute there
  kHost,  // compute on host cores from the store; only prefetch fills the cache
  kAuto,  // per miss, whichever MissCostModel says finishes the layer sooner
};

std::string_view MissPolicyName(MissPolicy policy);
absl::StatusOr<MissPolicy> ParseMissPolicy(std::string_view name);

// Per expert: seconds = fixed + per_row * rows.
struct ComputeCost {
  double fixed_s = 0;
  double per_row_s = 0;
  double Seconds(uint32_t rows) const { return fixed_s + per_row_s * rows; }
};

struct MissCostModel {
  double copy_bytes_per_s = 0;  // measured host -> slot copy rate; > 0
  ComputeCost host;             // one expert on the host's threads
  ComputeCost device;           // one expert in a slot, on the device
  bool sites_overlap = true;    // host and device work proceed at the same time

  double CopySeconds(uint64_t bytes) const;
  std::string ToString() const;
};

// One miss of a layer: its bytes to copy and the token rows routed to it.
struct MissCost {
  uint64_t bytes = 0;
  uint32_t rows = 0;
};

// Decides each miss: on_host[i] = true puts misses[i] on the host. The split
// is greedy: misses start on the copy side and move to the host in order of
// increasing host-to-copy cost ratio while that lowers the layer's finishing
// time. Deterministic; ties keep the lower index on the copy side. O(m log m)
// for m misses; `scratch` must hold m entries (no allocation).
void AssignMisses(const MissCostModel& model, std::span<const MissCost> misses,
                  std::span<bool> on_host, std::span<uint32_t> scratch);

}  // namespace moetier
