#include "cpu_phase_report.h"

#include <cstdio>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moetier {

void PrintPhases(const char* what, const CpuPhaseSeconds& seconds, const std::string& label) {
  double total = 0.0;
  for (double s : seconds) total += s;
  if (!(total > 0.0)) return;
  std::printf("%s time by phase:", what);
  for (int p = 0; p < static_cast<int>(CpuPhase::kCount); ++p) {
    std::printf("%s %s %.1f%%", p == 0 ? "" : ",",
                std::string(CpuPhaseName(static_cast<CpuPhase>(p))).c_str(),
                100.0 * seconds[p] / total);
  }
  std::printf("%s\n", label.c_str());
  const auto share = [&](std::initializer_list<CpuPhase> phases) {
    double s = 0.0;
    for (CpuPhase p : phases) s += seconds[static_cast<size_t>(p)];
    return 100.0 * s / total;
  };
  const auto name = [](CpuPhase p) { return std::string(CpuPhaseName(p)); };
  std::string line;
  const auto group = [&](const char* title, std::initializer_list<CpuPhase> phases) {
    if (share(phases) <= 0.0) return;
    absl::StrAppendFormat(&line, "%s%s %.1f%% (", line.empty() ? "" : "; ", title, share(phases));
    bool first = true;
    for (CpuPhase p : phases) {
      absl::StrAppendFormat(&line, "%s%s %.1f%%", first ? "" : ", ", name(p), share({p}));
      first = false;
    }
    line += ")";
  };
  group("DeltaNet", {CpuPhase::kDeltaNetProjections, CpuPhase::kDeltaNet});
  group("attention", {CpuPhase::kAttentionProjections, CpuPhase::kAttention});
  group("experts", {CpuPhase::kRouter, CpuPhase::kExpertFetch, CpuPhase::kExperts});
  for (CpuPhase p :
       {CpuPhase::kSharedExpert, CpuPhase::kDenseFfn, CpuPhase::kOutput, CpuPhase::kOther}) {
    if (share({p}) > 0.0) absl::StrAppendFormat(&line, "; %s %.1f%%", name(p), share({p}));
  }
  std::printf("%s time by block: %s%s\n", what, line.c_str(), label.c_str());
}

}  // namespace moetier
