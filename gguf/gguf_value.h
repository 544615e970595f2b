// GGUF metadata values (SPEC.md §1.3): the 13 value types, arrays included.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace moetier {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

inline constexpr uint32_t kGgufValueTypeCount = 13;

std::string_view GgufValueTypeName(GgufValueType type);

// An array's elements, stored in the narrowest C++ type that holds the
// on-disk type without loss. Arrays of arrays are not representable: the
// reader rejects them, as llama.cpp does.
struct GgufArray {
  GgufValueType element_type = GgufValueType::kUint8;
  std::variant<std::vector<int64_t>,      // every signed integer type
               std::vector<uint64_t>,     // every unsigned integer type
               std::vector<double>,       // FLOAT32 and FLOAT64
               std::vector<bool>,         // BOOL
               std::vector<std::string>>  // STRING
      elements;

  size_t size() const;
  bool operator==(const GgufArray&) const = default;
};

// One metadata value. `type` is the on-disk type; `data` holds it widened.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  std::variant<int64_t, uint64_t, double, bool, std::string, GgufArray> data;

  static GgufValue Uint8(uint8_t v) { return {GgufValueType::kUint8, uint64_t{v}}; }
  static GgufValue Int8(int8_t v) { return {GgufValueType::kInt8, int64_t{v}}; }
  static GgufValue Uint16(uint16_t v) { return {GgufValueType::kUint16, uint64_t{v}}; }
  static GgufValue Int16(int16_t v) { return {GgufValueType::kInt16, int64_t{v}}; }
  static GgufValue Uint32(uint32_t v) { return {GgufValueType::kUint32, uint64_t{v}}; }
  static GgufValue Int32(int32_t v) { return {GgufValueType::kInt32, int64_t{v}}; }
  static GgufValue Uint64(uint64_t v) { return {GgufValueType::kUint64, v}; }
  static GgufValue Int64(int64_t v) { return {GgufValueType::kInt64, v}; }
  static GgufValue Float32(float v) { return {GgufValueType::kFloat32, double{v}}; }
  static GgufValue Float64(double v) { return {GgufValueType::kFloat64, v}; }
  static GgufValue Bool(bool v) { return {GgufValueType::kBool, v}; }
  static GgufValue String(std::string v) { return {GgufValueType::kString, std::move(v)}; }
  static GgufValue StringArray(std::vector<std::string> v);
  static GgufValue Int32Array(std::vector<int32_t> v);
  static GgufValue Float32Array(std::vector<float> v);
  static GgufValue Uint32Array(std::vector<uint32_t> v);
  // Any array; `elements` must be the variant alternative `element_type` maps to.
  static GgufValue Array(GgufArray array) { return {GgufValueType::kArray, std::move(array)}; }

  // Same on-disk type and same value (floats compare as doubles).
  bool operator==(const GgufValue&) const = default;
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

}  // namespace moetier
