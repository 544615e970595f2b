// The heat profile: how often each expert of a model was routed to,
// decayed so that recent use counts most, kept per model fingerprint under
// the daemon's state directory so that a restart does not begin cold.
//
// File <state_directory>/heat/<fingerprint, 16 hex digits>.heat, all
// integers and floats little-endian:
//
//   0   char[8]  magic "MOETHEAT"
//   8   u32      format version (kHeatFormatVersion)
//   12  u32      header bytes (64)
//   16  u64      model fingerprint
//   24  u32      layers
//   28  u32      experts per layer
//   32  i64      saved at, Unix seconds
//   40  f64      tokens seen, decayed like the counts
//   48  f64      half-life of the decay, in tokens
//   56  u64      reserved (0)
//   64  f64      counts[layers * experts]: decayed token rows routed to
//                expert e of layer l at [l * experts + e]
//   end u64      FNV-1a 64 of every byte before it
//
// Writing goes through a temporary file, fsync and rename, so a crash
// leaves the old profile or the new one, never a mix. Reading refuses
// anything that is not exactly such a file (the checksum catches any
// changed byte); the caller then starts cold.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moetier {

inline constexpr uint32_t kHeatFormatVersion = 1;
inline constexpr size_t kHeatHeaderBytes = 64;

struct HeatProfile {
  uint64_t fingerprint = 0;
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  int64_t saved_unix_s = 0;
  double tokens = 0;
  double half_life_tokens = 0;
  std::vector<double> counts;  // [layer * n_expert + expert]

  double count(uint32_t layer, uint32_t expert) const {
    return counts[static_cast<size_t>(layer) * n_expert + expert];
  }
};

std::string EncodeHeatProfile(const HeatProfile& profile);

// The profile in `bytes`, or InvalidArgument/DataLoss saying what is wrong
// (and at which offset). Checks the format only, not which model it is for.
absl::StatusOr<HeatProfile> DecodeHeatProfile(std::string_view bytes);

// FailedPrecondition unless `profile` was made for this model and shape.
absl::Status CheckHeatProfileFits(const HeatProfile& profile, uint64_t fingerprint,
                                  uint32_t n_layer, uint32_t n_expert);

// <state_directory>/heat/<fingerprint>.heat
std::string HeatProfilePath(std::string_view state_directory, uint64_t fingerprint);

// Reads and decodes; NotFound when there is no file. Errors name the path.
absl::StatusOr<HeatProfile> ReadHeatProfile(const std::string& path);

// Writes atomically (temporary file in the same folder, fsync, rename,
// fsync of the folder), creating the folder (mode 0750) if needed. On
// error the previous file is untouched and no temporary file is left.
absl::Status WriteHeatProfile(const std::string& path, const HeatProfile& profile);

// Per expert, its place among its layer's experts by count (1: the
// hottest; ties to the lower id), 0 where the count is 0.
std::vector<uint32_t> WarmRanks(const HeatProfile& profile);

// Every expert with a count above 0, hottest first over the whole model
// (ties to the lower index): the order a RAM cache warms in.
std::vector<uint32_t> HottestFirst(const HeatProfile& profile);

}  // namespace moetier
