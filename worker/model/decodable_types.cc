#include "model/decodable_types.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {
namespace {

struct Undecodable {
  int64_t tensor_count = 0;
  std::string example;  // the first such tensor in file order
};

// Tensors named "*.scale" scale another tensor's products in llama.cpp.
absl::Status CheckNoSeparateWeightScales(const GgufModel& gguf) {
  int count = 0;
  std::string example;
  for (const GgufTensorInfo& tensor : gguf.tensors()) {
    if (!absl::EndsWith(tensor.name, ".scale")) continue;
    if (count++ == 0) example = tensor.name;
  }
  if (count == 0) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrFormat(
      "%s: %d tensor%s such as '%s' scale another tensor's weights (llama.cpp multiplies the "
      "product by them, as NVFP4 files need); moetier does not apply such scales, so it refuses "
      "the file rather than compute wrong logits",
      gguf.shards().front()->path(), count, count == 1 ? "" : "s", example));
}

}  // namespace

std::string SupportedTypeNames() {
  std::vector<std::string> names;
  for (uint32_t id = 0; id < kTensorTypeIdLimit; ++id) {
    const std::optional<TensorTypeInfo> info = LookupTensorType(id);
    if (info.has_value() && info->has_codec) names.emplace_back(info->name);
  }
  return absl::StrJoin(names, ", ");
}

absl::Status CheckDecodableTypes(const GgufModel& gguf) {
  // Keyed by id so the message lists types in a stable order.
  std::map<uint32_t, Undecodable> undecodable;
  for (const GgufTensorInfo& tensor : gguf.tensors()) {
    // The reader refused unknown ids, so every type here has an entry.
    if (GetTensorTypeInfo(tensor.type).has_codec) continue;
    Undecodable& u = undecodable[static_cast<uint32_t>(tensor.type)];
    if (u.tensor_count++ == 0) u.example = tensor.name;
  }
  if (undecodable.empty()) return CheckNoSeparateWeightScales(gguf);
  const std::string listed = absl::StrJoin(
      undecodable, ", ", [](std::string* out, const std::pair<const uint32_t, Undecodable>& e) {
        absl::StrAppendFormat(out, "%s (%d tensor%s, e.g. '%s')",
                              TensorTypeName(static_cast<TensorType>(e.first)),
                              e.second.tensor_count, e.second.tensor_count == 1 ? "" : "s",
                              e.second.example);
      });
  return absl::UnimplementedError(absl::StrFormat(
      "%s: tensor types moetier cannot decode: %s; supported types: %s. Re-quantize the model "
      "to Q4_K_M or Q8_0 with llama.cpp's llama-quantize (from the original F16/BF16 weights, "
      "or with --allow-requantize from this file)",
      gguf.shards().front()->path(), listed, SupportedTypeNames()));
}

}  // namespace moetier
