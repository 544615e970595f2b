#include "gguf/gguf_format.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier::gguf_internal {

absl::StatusOr<uint64_t> TensorSizeBytes(uint32_t type_id, std::span<const int64_t> ne) {
  const std::optional<TensorTypeInfo> info = LookupTensorType(type_id);
  if (!info.has_value()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unknown ggml type id %d (removed, or newer than this reader)", type_id));
  }
  int64_t elements = 1;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dimension ne[%d] is negative (%d)", i, ne[i]));
    }
    if (__builtin_mul_overflow(elements, ne[i], &elements)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the product of the dimensions overflows int64 at ne[%d] = %d", i, ne[i]));
    }
  }
  const int64_t ne0 = ne.empty() ? 1 : ne[0];
  if (ne0 % info->block_elems != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ne[0] = %d is not a multiple of the %s block size %d", ne0,
                        info->name, info->block_elems));
  }
  // elements / block_elems fits, so only the multiplication by block_bytes can overflow.
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(elements / info->block_elems),
                             static_cast<uint64_t>(info->block_bytes), &bytes) ||
      bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the byte size of %d %s elements overflows int64", elements, info->name));
  }
  return bytes;
}

}  // namespace moetier::gguf_internal
