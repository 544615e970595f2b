// qwen35moe: Qwen3.5-35B-A3B and Qwen3.6-35B-A3B (SPEC.md §3.3–3.4, §3.9).
#pragma once

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/model_loader.h"

namespace moetier {

absl::StatusOr<Model> LoadQwen35Moe(const ModelLoader& loader);

}  // namespace moetier
