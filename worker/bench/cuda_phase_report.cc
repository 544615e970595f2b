#include "cuda_phase_report.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moetier {

std::string CudaPhaseLine(const char* what, const CudaPhaseSeconds& seconds, double wall_s,
                          int tokens) {
  std::vector<std::pair<double, CudaPhase>> phases;
  double timed = 0.0;
  for (size_t i = 0; i < kCudaPhaseCount; ++i) {
    timed += seconds[i];
    if (seconds[i] > 0.0) phases.emplace_back(seconds[i], static_cast<CudaPhase>(i));
  }
  std::sort(phases.begin(), phases.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  const double wall = std::max(wall_s, timed);
  const double per_token_ms = 1e3 / std::max(tokens, 1);
  std::string line = absl::StrFormat(
      "%s device time by phase (%d tokens, %.1f ms wall, eager launches):", what, tokens,
      wall_s * 1e3);
  if (!(wall > 0.0)) return line + " nothing timed";
  const char* sep = " ";
  for (const auto& [s, phase] : phases) {
    absl::StrAppendFormat(&line, "%s%s %.1f%% (%.3f ms/token)", sep, CudaPhaseName(phase),
                          100.0 * s / wall, s * per_token_ms);
    sep = ", ";
  }
  absl::StrAppendFormat(&line, "%shost outside the passes %.1f%% (%.3f ms/token)", sep,
                        100.0 * (wall - timed) / wall, (wall - timed) * per_token_ms);
  return line;
}

}  // namespace moetier
