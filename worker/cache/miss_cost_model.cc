#include "cache/miss_cost_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "base/check.h"

namespace moetier {

std::string_view MissPolicyName(MissPolicy policy) {
  switch (policy) {
    case MissPolicy::kCopy:
      return "copy";
    case MissPolicy::kHost:
      return "cpu";
    case MissPolicy::kAuto:
      return "auto";
  }
  return "?";
}

absl::StatusOr<MissPolicy> ParseMissPolicy(std::string_view name) {
  for (const MissPolicy p : {MissPolicy::kCopy, MissPolicy::kHost, MissPolicy::kAuto}) {
    if (name == MissPolicyName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown miss policy \"%s\": expected copy, cpu or auto", std::string(name)));
}

double MissCostModel::CopySeconds(uint64_t bytes) const {
  return copy_bytes_per_s > 0 ? static_cast<double>(bytes) / copy_bytes_per_s : INFINITY;
}

std::string MissCostModel::ToString() const {
  return absl::StrFormat(
      "copy %.2f GB/s; host expert %.1f us + %.2f us/row; device expert %.1f us + %.2f us/row; %s",
      copy_bytes_per_s / 1e9, host.fixed_s * 1e6, host.per_row_s * 1e6, device.fixed_s * 1e6,
      device.per_row_s * 1e6, sites_overlap ? "host and device overlap" : "host and device share cores");
}

void AssignMisses(const MissCostModel& model, std::span<const MissCost> misses,
                  std::span<bool> on_host, std::span<uint32_t> scratch) {
  const size_t m = misses.size();
  MOETIER_CHECK(on_host.size() >= m && scratch.size() >= m);
  auto host_s = [&](size_t i) { return model.host.Seconds(misses[i].rows); };
  auto copy_s = [&](size_t i) {
    return model.CopySeconds(misses[i].bytes) + model.device.Seconds(misses[i].rows);
  };
  if (!(model.copy_bytes_per_s > 0)) {  // nothing can be copied
    for (size_t i = 0; i < m; ++i) on_host[i] = true;
    return;
  }
  if (!model.sites_overlap) {
    for (size_t i = 0; i < m; ++i) on_host[i] = host_s(i) < copy_s(i);
    return;
  }
  double copy_total = 0;
  for (size_t i = 0; i < m; ++i) {
    on_host[i] = false;
    copy_total += copy_s(i);
    scratch[i] = static_cast<uint32_t>(i);
  }
  // Cheapest on the host relative to its copy first; equal ratios by index.
  auto ratio = [&](uint32_t i) {
    const double c = copy_s(i);
    return c > 0 ? host_s(i) / c : INFINITY;
  };
  std::sort(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(m),
            [&](uint32_t a, uint32_t b) {
              const double ra = ratio(a), rb = ratio(b);
              return ra != rb ? ra < rb : a < b;
            });
  double host_total = 0;
  for (size_t n = 0; n < m; ++n) {
    const uint32_t i = scratch[n];
    const double moved_host = host_total + host_s(i);
    const double moved_copy = copy_total - copy_s(i);
    if (std::max(moved_host, moved_copy) >= std::max(host_total, copy_total)) break;
    on_host[i] = true;
    host_total = moved_host;
    copy_total = moved_copy;
  }
}

}  // namespace moetier
