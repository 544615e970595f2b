#include "model/architectures.h"

#include <array>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/decodable_types.h"
#include "model/ernie45moe.h"
#include "model/glm4moe.h"
#include "model/gpt_oss.h"
#include "model/llama.h"
#include "model/model_loader.h"
#include "model/olmoe.h"
#include "model/qwen2moe.h"
#include "model/qwen35moe.h"
#include "model/qwen3moe.h"
#include "model/qwen3next.h"
#include "model/qwen3vlmoe.h"

namespace moetier {
namespace {

constexpr std::array<Architecture, 10> kArchitectures = {{
    {"qwen3moe", "Qwen3-30B-A3B, Qwen3-235B-A22B", &LoadQwen3Moe},
    {"qwen35moe", "Qwen3.5-35B-A3B, Qwen3.6-35B-A3B", &LoadQwen35Moe},
    {"qwen3vlmoe", "Qwen3-VL-30B-A3B, Qwen3-VL-235B-A22B (text)", &LoadQwen3VlMoe},
    {"qwen3next", "Qwen3-Next-80B-A3B", &LoadQwen3Next},
    {"qwen2moe", "Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B", &LoadQwen2Moe},
    {"llama", "Mixtral-8x7B and other llama models with routed experts", &LoadLlamaMoe},
    {"olmoe", "OLMoE-1B-7B", &LoadOlmoe},
    {"glm4moe", "GLM-4.5-Air, GLM-4.5, GLM-4.6, GLM-4.7", &LoadGlm4Moe},
    {"ernie4_5-moe", "ERNIE-4.5-21B-A3B, ERNIE-4.5-300B-A47B", &LoadErnie45Moe},
    {"gpt-oss", "gpt-oss-20b, gpt-oss-120b", &LoadGptOss},
}};

}  // namespace

std::span<const Architecture> SupportedArchitectures() { return kArchitectures; }

std::string SupportedArchitectureList() {
  return absl::StrJoin(kArchitectures, ", ", [](std::string* out, const Architecture& a) {
    absl::StrAppend(out, std::string(a.name), " (", std::string(a.description), ")");
  });
}

absl::StatusOr<Model> LoadModel(const GgufModel& gguf) {
  const std::string& path = gguf.shards().front()->path();
  absl::StatusOr<std::string> arch = gguf.metadata().GetString("general.architecture");
  if (!arch.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", arch.status().message()));
  for (const Architecture& a : kArchitectures) {
    if (a.name != *arch) continue;
    if (absl::Status types = CheckDecodableTypes(gguf); !types.ok()) return types;
    return a.load(ModelLoader(gguf, absl::string_view(a.name.data(), a.name.size())));
  }
  return absl::UnimplementedError(absl::StrFormat(
      "%s: unsupported model architecture '%s' (general.architecture); this build runs %s",
      path, *arch, SupportedArchitectureList()));
}

absl::Status CheckModelFile(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(path);
  if (!gguf.ok()) return gguf.status();
  return LoadModel(**gguf).status();
}

}  // namespace moetier
