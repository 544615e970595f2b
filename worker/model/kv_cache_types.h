// How a sequence's KV cache stores its keys and values: one row of head_dim
// values per KV head and position, in a ggml encoding (llama.cpp's
// --cache-type-k / --cache-type-v values). F32 is exact and the default;
// F16 halves the bytes, Q8_0 (34 bytes per 32 values) and Q4_0 (18 bytes
// per 32) cut them to about a quarter and an eighth, at the price of the
// rounding of keys and values that the attention then reads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {

struct KvCacheTypes {
  TensorType k = TensorType::kF32;
  TensorType v = TensorType::kF32;
  bool operator==(const KvCacheTypes&) const = default;
};

// Every type a KV cache can be stored as, in the order the help lists them.
inline constexpr TensorType kKvCacheTypeChoices[] = {TensorType::kF32, TensorType::kF16,
                                                     TensorType::kQ8_0, TensorType::kQ4_0};

// "f32", "f16", "q8_0", "q4_0" (either case); InvalidArgument naming the
// choices otherwise.
absl::StatusOr<TensorType> ParseKvCacheType(std::string_view name);
// The lower-case name ParseKvCacheType reads.
std::string KvCacheTypeName(TensorType type);
// "f32, f16" ...: the names of `types`, for messages.
std::string KvCacheTypeList(std::span<const TensorType> types);

// Bytes of one cached row of head_dim values.
uint64_t KvRowBytes(TensorType type, int head_dim);

// OK when a backend supporting `supported` can store `types` for heads of
// head_dim values; otherwise InvalidArgument naming the flag, the type, and
// what the backend supports or why the head does not fit the type's blocks.
absl::Status CheckKvCacheTypes(const KvCacheTypes& types, int head_dim,
                               std::span<const TensorType> supported, std::string_view backend);

}  // namespace moetier
