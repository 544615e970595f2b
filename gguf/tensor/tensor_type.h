// ggml tensor types: ids, block geometry and names (SPEC.md §2.1–2.2).
// The ids are the on-disk values of GGUF tensor infos and never change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace moetier {

enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

inline constexpr int64_t kQK_K = 256;  // elements per K-quant super-block

// Every known id is below this; a loop over 0..limit-1 with LookupTensorType
// visits each type once.
inline constexpr uint32_t kTensorTypeIdLimit = 64;

struct TensorTypeInfo {
  TensorType type;
  std::string_view name;   // as ggml spells it: "F32", "Q4_K", ...
  int64_t block_elems;     // elements per block (1 for plain floats)
  int64_t block_bytes;     // bytes per block
  bool has_codec;          // moetier can dequantize and quantize it
};

// Geometry of a known ggml type id, or nullopt for ids this reader does not
// know (removed ids, ids newer than this table).
std::optional<TensorTypeInfo> LookupTensorType(uint32_t type_id);

// Geometry of a known type. Precondition: `type` is a listed enumerator.
const TensorTypeInfo& GetTensorTypeInfo(TensorType type);

inline std::string_view TensorTypeName(TensorType type) { return GetTensorTypeInfo(type).name; }

// Bytes of `n_elems` consecutive elements. Precondition: n_elems is a
// multiple of the block size.
int64_t TensorRowBytes(TensorType type, int64_t n_elems);

// Parses "q4_k", "Q4_K", "f32" ... into a type; nullopt when unknown.
std::optional<TensorType> ParseTensorTypeName(std::string_view name);

}  // namespace moetier
