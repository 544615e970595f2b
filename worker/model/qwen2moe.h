// qwen2moe: Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B (SPEC.md §3.2).
#pragma once

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/model_loader.h"

namespace moetier {

absl::StatusOr<Model> LoadQwen2Moe(const ModelLoader& loader);

}  // namespace moetier
