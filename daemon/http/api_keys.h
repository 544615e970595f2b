// The API keys that unlock the HTTP front door, read from api_keys_file:
// one key per line; blank lines and lines starting with '#' are ignored.
// The file holds secrets, so one that other users may read is refused.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace moetier {

class ApiKeys {
 public:
  ApiKeys() = default;  // none: every request is let in
  explicit ApiKeys(std::vector<std::string> keys) : keys_(std::move(keys)) {}

  // FAILED_PRECONDITION naming the path when the file cannot be read, is
  // readable or writable by others than its owner and group, or holds no
  // key; INVALID_ARGUMENT (with the line number) for a key with spaces or
  // control characters in it.
  static absl::StatusOr<ApiKeys> Load(const std::string& path);

  bool empty() const { return keys_.empty(); }

  // Whether an Authorization header value ("Bearer <key>") names one of the
  // keys. Compared in time independent of where the first difference is.
  bool Accepts(std::string_view authorization_header) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace moetier
