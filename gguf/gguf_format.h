// Facts about the GGUF byte layout that the reader and the writer share
// (SPEC.md §1). Internal to moetier_gguf.
#pragma once

#include "base/check.h"
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "gguf/gguf_value.h"

// The format is little-endian and both sides copy fields with memcpy.
static_assert(std::endian::native == std::endian::little,
              "moetier's GGUF code assumes a little-endian host");

// Broken invariants (API misuse) abort with file and line.

namespace moetier::gguf_internal {

inline constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
inline constexpr uint32_t kMinVersion = 2;
inline constexpr uint32_t kMaxVersion = 3;
// llama.cpp refuses longer strings; it also bounds what a hostile length can make us allocate.
inline constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
inline constexpr std::string_view kAlignmentKey = "general.alignment";

inline bool IsValidValueType(uint32_t id) { return id < kGgufValueTypeCount; }

// Bytes of one scalar on disk; 0 for STRING and ARRAY, whose size varies.
inline uint64_t ScalarBytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

// The fewest bytes one array element can take: strings carry a u64 length.
inline uint64_t MinElementBytes(GgufValueType type) {
  return type == GgufValueType::kString ? 8 : ScalarBytes(type);
}

inline bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

inline uint64_t AlignUp(uint64_t x, uint64_t alignment) {
  return x + (alignment - x % alignment) % alignment;
}

// Byte size of a tensor of ggml type `type_id` with dims `ne` (ne[0] first),
// validated as llama.cpp does: known type, dims >= 0, ne[0] a multiple of the
// block size, no overflow. The error text says what is wrong, without a
// location; callers add the file and offset.
absl::StatusOr<uint64_t> TensorSizeBytes(uint32_t type_id, std::span<const int64_t> ne);

}  // namespace moetier::gguf_internal
