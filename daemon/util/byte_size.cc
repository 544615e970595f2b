#include "util/byte_size.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace moetier {

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.*f %s", value < 10.0 ? 2 : 1, value, kUnits[unit]);
}

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  auto invalid = [&]() {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s' is not a byte size; write e.g. 8GiB, 512MiB, 1.5GiB, 20GB or 1073741824", text));
  };
  std::string_view s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  size_t digits = 0;
  bool seen_point = false;
  while (digits < s.size() && (std::isdigit(static_cast<unsigned char>(s[digits])) ||
                                (s[digits] == '.' && !seen_point))) {
    seen_point |= s[digits] == '.';
    ++digits;
  }
  if (digits == 0 || (digits == 1 && s[0] == '.')) return invalid();
  std::string_view number = s.substr(0, digits);
  std::string_view unit = s.substr(digits);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  const std::string lower = absl::AsciiStrToLower(std::string(unit));
  double multiplier = 0;
  if (lower.empty() || unit == "B") {
    multiplier = 1;
  } else {
    static const struct {
      const char* name;
      double multiplier;
    } kUnits[] = {
        {"k", 1024.0}, {"kib", 1024.0}, {"kb", 1e3},
        {"m", 1048576.0}, {"mib", 1048576.0}, {"mb", 1e6},
        {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
        {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
    };
    for (const auto& u : kUnits) {
      if (lower == u.name) multiplier = u.multiplier;
    }
  }
  if (multiplier == 0) return invalid();
  const std::string number_text(number);
  if (!seen_point && multiplier == 1) {
    errno = 0;
    char* end = nullptr;
    const unsigned long long value = std::strtoull(number_text.c_str(), &end, 10);
    if (errno == ERANGE || *end != '\0') return invalid();
    return static_cast<uint64_t>(value);
  }
  const double value = std::strtod(number_text.c_str(), nullptr) * multiplier;
  if (!std::isfinite(value) || value >= 18446744073709551615.0) {
    return absl::OutOfRangeError(absl::StrFormat("byte size '%s' does not fit in 64 bits", text));
  }
  return static_cast<uint64_t>(value + 0.5);
}

}  // namespace moetier
