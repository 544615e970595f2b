#include "http/api_keys.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_format.h"

namespace moetier {
namespace {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // The length is not secret (keys are typically of one fixed length); the
  // content is, so every byte is looked at.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

std::string_view StripSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool StartsWithBearer(std::string_view header) {
  constexpr std::string_view kBearer = "bearer ";
  if (header.size() <= kBearer.size()) return false;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    const char c = header[i];
    if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != kBearer[i]) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("api_keys_file %s: cannot be read (%s)", path, strerror(errno)));
  }
  if ((st.st_mode & S_IRWXO) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "api_keys_file %s: other users may access it (mode %04o); chmod o-rwx it", path,
        st.st_mode & 07777));
  }
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrFormat("api_keys_file %s: cannot be opened", path));
  }
  std::vector<std::string> keys;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    std::string_view key = StripSpaces(line);
    if (key.empty() || key.front() == '#') continue;
    for (char c : key) {
      if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "api_keys_file %s line %d: a key may not hold spaces or control characters", path,
            line_number));
      }
    }
    keys.emplace_back(key);
  }
  if (keys.empty()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("api_keys_file %s holds no key", path));
  }
  return ApiKeys(std::move(keys));
}

bool ApiKeys::Accepts(std::string_view header) const {
  if (keys_.empty()) return true;
  if (!StartsWithBearer(header)) return false;
  const std::string_view given = StripSpaces(header.substr(7));
  bool accepted = false;
  for (const std::string& key : keys_) accepted |= ConstantTimeEquals(given, key);
  return accepted;
}

}  // namespace moetier
