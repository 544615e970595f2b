#include "gguf/tensor/tensor_type.h"

#include <array>
#include <cstdio>
#include <cstdlib>

namespace moetier {
namespace {

using T = TensorType;

// Sizes are ggml's type_traits (SPEC.md §2.1–2.2). Ids absent from this table
// were removed from ggml (4, 5, 31–33, 36–38) or are newer than it (40+).
constexpr std::array<TensorTypeInfo, 32> kTypes = {{
    {T::kF32, "F32", 1, 4, true},
    {T::kF16, "F16", 1, 2, true},
    {T::kQ4_0, "Q4_0", 32, 18, true},
    {T::kQ4_1, "Q4_1", 32, 20, true},
    {T::kQ5_0, "Q5_0", 32, 22, true},
    {T::kQ5_1, "Q5_1", 32, 24, true},
    {T::kQ8_0, "Q8_0", 32, 34, true},
    {T::kQ8_1, "Q8_1", 32, 36, false},
    {T::kQ2_K, "Q2_K", kQK_K, 84, true},
    {T::kQ3_K, "Q3_K", kQK_K, 110, true},
    {T::kQ4_K, "Q4_K", kQK_K, 144, true},
    {T::kQ5_K, "Q5_K", kQK_K, 176, true},
    {T::kQ6_K, "Q6_K", kQK_K, 210, true},
    {T::kQ8_K, "Q8_K", kQK_K, 292, false},
    {T::kIQ2_XXS, "IQ2_XXS", kQK_K, 66, true},
    {T::kIQ2_XS, "IQ2_XS", kQK_K, 74, true},
    {T::kIQ3_XXS, "IQ3_XXS", kQK_K, 98, true},
    {T::kIQ1_S, "IQ1_S", kQK_K, 50, true},
    {T::kIQ4_NL, "IQ4_NL", 32, 18, true},
    {T::kIQ3_S, "IQ3_S", kQK_K, 110, true},
    {T::kIQ2_S, "IQ2_S", kQK_K, 82, true},
    {T::kIQ4_XS, "IQ4_XS", kQK_K, 136, true},
    {T::kI8, "I8", 1, 1, false},
    {T::kI16, "I16", 1, 2, false},
    {T::kI32, "I32", 1, 4, false},
    {T::kI64, "I64", 1, 8, false},
    {T::kF64, "F64", 1, 8, false},
    {T::kIQ1_M, "IQ1_M", kQK_K, 56, true},
    {T::kBF16, "BF16", 1, 2, true},
    {T::kTQ1_0, "TQ1_0", kQK_K, 54, false},
    {T::kTQ2_0, "TQ2_0", kQK_K, 66, false},
    {T::kMXFP4, "MXFP4", 32, 17, true},
}};

// Ids run 0..39; a dense index keeps lookups O(1) without a hash map.
constexpr uint32_t kMaxId = 39;
static_assert(kMaxId < kTensorTypeIdLimit);

constexpr std::array<int8_t, kMaxId + 1> BuildIndex() {
  std::array<int8_t, kMaxId + 1> index{};
  for (auto& slot : index) slot = -1;
  for (size_t i = 0; i < kTypes.size(); ++i) {
    index[static_cast<uint32_t>(kTypes[i].type)] = static_cast<int8_t>(i);
  }
  return index;
}

constexpr std::array<int8_t, kMaxId + 1> kIndex = BuildIndex();

constexpr bool TableIsConsistent() {
  for (size_t i = 0; i < kTypes.size(); ++i) {
    if (static_cast<uint32_t>(kTypes[i].type) > kMaxId) return false;
    if (kTypes[i].block_elems <= 0 || kTypes[i].block_bytes <= 0) return false;
    for (size_t j = 0; j < i; ++j) {
      if (kTypes[i].type == kTypes[j].type) return false;
    }
  }
  return true;
}
static_assert(TableIsConsistent(), "duplicate or out-of-range type id in kTypes");

[[noreturn]] void Die(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: %s\n", file, line, what);
  std::fflush(stderr);
  std::abort();
}

char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

}  // namespace

std::optional<TensorTypeInfo> LookupTensorType(uint32_t type_id) {
  if (type_id > kMaxId || kIndex[type_id] < 0) return std::nullopt;
  return kTypes[static_cast<size_t>(kIndex[type_id])];
}

const TensorTypeInfo& GetTensorTypeInfo(TensorType type) {
  const auto id = static_cast<uint32_t>(type);
  if (id > kMaxId || kIndex[id] < 0) Die(__FILE__, __LINE__, "GetTensorTypeInfo: unknown TensorType");
  return kTypes[static_cast<size_t>(kIndex[id])];
}

int64_t TensorRowBytes(TensorType type, int64_t n_elems) {
  const TensorTypeInfo& info = GetTensorTypeInfo(type);
  if (n_elems < 0 || n_elems % info.block_elems != 0) {
    Die(__FILE__, __LINE__, "TensorRowBytes: element count is not a multiple of the block size");
  }
  return n_elems / info.block_elems * info.block_bytes;
}

std::optional<TensorType> ParseTensorTypeName(std::string_view name) {
  for (const TensorTypeInfo& info : kTypes) {
    if (EqualsIgnoreCase(name, info.name)) return info.type;
  }
  return std::nullopt;
}

}  // namespace moetier
