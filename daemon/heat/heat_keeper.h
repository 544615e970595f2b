// The daemon's live heat profile: starts from the saved one (heat_profile.h)
// when it fits the model, takes in the workers' routed counts from the
// store, decays them by the tokens they stand for, and saves the result.
//
// A missing, corrupt or foreign profile is never fatal: the daemon logs
// why and starts cold, and the next save replaces the bad file.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "heat/heat_profile.h"

namespace moetier {

// Long enough that a burst of one kind of prompt does not wipe out what
// the model is usually asked; short enough that a change of use shows
// within an hour of steady serving.
inline constexpr double kDefaultHeatHalfLifeTokens = 65536;

struct HeatKeeperOptions {
  // Empty: nothing is loaded or saved (the counts are still kept).
  std::string state_directory;
  uint64_t fingerprint = 0;
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint32_t top_k = 1;  // token rows per token and layer
  double half_life_tokens = kDefaultHeatHalfLifeTokens;
  // Unix seconds; the wall clock when unset.
  std::function<int64_t()> now_unix_s;
};

class HeatKeeper {
 public:
  explicit HeatKeeper(HeatKeeperOptions options);

  // The saved profile the daemon started from, when one fitted.
  const std::optional<HeatProfile>& started_from() const { return started_from_; }
  // Empty without a state directory.
  const std::string& path() const { return path_; }
  // Where the profile came from and how saving goes, one line, e.g.
  // "loaded from /var/lib/moetier/heat/0123456789abcdef.heat (saved
  // 2026-12-03 10:00:00 UTC, 5120 tokens); saved 40 s ago". Thread-safe.
  std::string Describe() const;

  // Takes in the store's routed totals (ExpertEntry.routed, one per expert,
  // [layer * n_expert + expert], counting up from 0 at the daemon's start):
  // the older counts decay by the tokens the new rows amount to, then the
  // new rows are added. Thread-safe.
  void Absorb(std::span<const uint64_t> routed_totals);

  // The profile as it stands. Thread-safe.
  HeatProfile Current() const;

  // Writes Current() to path() (a no-op without a state directory or
  // before the first routed token); the outcome shows in Describe().
  // Thread-safe.
  absl::Status Save();

 private:
  int64_t Now() const;

  HeatKeeperOptions options_;
  std::string path_;
  std::string origin_;
  std::optional<HeatProfile> started_from_;
  mutable std::mutex mutex_;
  HeatProfile current_;                 // guarded by mutex_
  std::vector<uint64_t> last_totals_;   // guarded by mutex_
  int64_t last_save_unix_s_ = 0;        // guarded by mutex_; 0: never
  std::string last_save_error_;         // guarded by mutex_
};

}  // namespace moetier
