#include "render/format.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace moetier::client {

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  // Rounding to one decimal may reach 1024.0: move up a unit before that.
  while (value >= 1023.95 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatCount(uint64_t count) {
  if (count < 1000) return absl::StrFormat("%d", count);
  static constexpr const char* kSuffix[] = {"k", "M", "G", "T", "P", "E"};
  double value = static_cast<double>(count) / 1000.0;
  size_t unit = 0;
  while (value >= 999.95 && unit + 1 < std::size(kSuffix)) {
    value /= 1000.0;
    ++unit;
  }
  return absl::StrFormat("%.1f%s", value, kSuffix[unit]);
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  if (seconds < 60) return absl::StrFormat("%.1f s", seconds);
  const uint64_t whole = static_cast<uint64_t>(seconds);
  const uint64_t h = whole / 3600;
  const uint64_t m = (whole / 60) % 60;
  const uint64_t s = whole % 60;
  if (h == 0) return absl::StrFormat("%dm %02ds", m, s);
  return absl::StrFormat("%dh %02dm %02ds", h, m, s);
}

std::string FormatPercent(std::optional<double> fraction) {
  if (!fraction.has_value() || !std::isfinite(*fraction)) return "-";
  return absl::StrFormat("%.1f%%", *fraction * 100.0);
}

std::optional<double> HitRate(uint64_t hits, uint64_t misses) {
  const double total = static_cast<double>(hits) + static_cast<double>(misses);
  if (total == 0) return std::nullopt;
  return static_cast<double>(hits) / total;
}

}  // namespace moetier::client
