#include "model/kv_cache_types.h"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace moetier {

absl::StatusOr<TensorType> ParseKvCacheType(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (TensorType t : kKvCacheTypeChoices) {
    if (KvCacheTypeName(t) == lower) return t;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "'%s' is not a KV cache type; choose one of %s", name, KvCacheTypeList(kKvCacheTypeChoices)));
}

std::string KvCacheTypeName(TensorType type) {
  std::string name(GetTensorTypeInfo(type).name);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string KvCacheTypeList(std::span<const TensorType> types) {
  std::vector<std::string> names;
  for (TensorType t : types) names.push_back(KvCacheTypeName(t));
  return absl::StrJoin(names, ", ");
}

uint64_t KvRowBytes(TensorType type, int head_dim) {
  return static_cast<uint64_t>(TensorRowBytes(type, head_dim));
}

absl::Status CheckKvCacheTypes(const KvCacheTypes& types, int head_dim,
                               std::span<const TensorType> supported, std::string_view backend) {
  const std::pair<std::string_view, TensorType> flags[] = {{"--cache-type-k", types.k},
                                                           {"--cache-type-v", types.v}};
  for (const auto& [flag, type] : flags) {
    if (std::find(supported.begin(), supported.end(), type) == supported.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s %s: the %s backend stores the KV cache as %s only", flag,
                          KvCacheTypeName(type), backend, KvCacheTypeList(supported)));
    }
    const int64_t block = GetTensorTypeInfo(type).block_elems;
    if (head_dim % block != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s %s: its blocks hold %d values, and the model's heads have %d, not a multiple; "
          "choose f32 or f16",
          flag, KvCacheTypeName(type), block, head_dim));
    }
  }
  return absl::OkStatus();
}

}  // namespace moetier
