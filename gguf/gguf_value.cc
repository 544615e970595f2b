#include "gguf/gguf_value.h"

#include <utility>

namespace moetier {

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "UINT8";
    case GgufValueType::kInt8:
      return "INT8";
    case GgufValueType::kUint16:
      return "UINT16";
    case GgufValueType::kInt16:
      return "INT16";
    case GgufValueType::kUint32:
      return "UINT32";
    case GgufValueType::kInt32:
      return "INT32";
    case GgufValueType::kFloat32:
      return "FLOAT32";
    case GgufValueType::kBool:
      return "BOOL";
    case GgufValueType::kString:
      return "STRING";
    case GgufValueType::kArray:
      return "ARRAY";
    case GgufValueType::kUint64:
      return "UINT64";
    case GgufValueType::kInt64:
      return "INT64";
    case GgufValueType::kFloat64:
      return "FLOAT64";
  }
  return "UNKNOWN";
}

size_t GgufArray::size() const {
  return std::visit([](const auto& v) { return v.size(); }, elements);
}

GgufValue GgufValue::StringArray(std::vector<std::string> v) {
  return Array({GgufValueType::kString, std::move(v)});
}

GgufValue GgufValue::Int32Array(std::vector<int32_t> v) {
  return Array({GgufValueType::kInt32, std::vector<int64_t>(v.begin(), v.end())});
}

GgufValue GgufValue::Float32Array(std::vector<float> v) {
  return Array({GgufValueType::kFloat32, std::vector<double>(v.begin(), v.end())});
}

GgufValue GgufValue::Uint32Array(std::vector<uint32_t> v) {
  return Array({GgufValueType::kUint32, std::vector<uint64_t>(v.begin(), v.end())});
}

}  // namespace moetier
