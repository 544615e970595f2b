// qwen3moe: Qwen3-30B-A3B, Qwen3-235B-A22B (SPEC.md §3.0–3.1).
#pragma once

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/model_loader.h"

namespace moetier {

absl::StatusOr<Model> LoadQwen3Moe(const ModelLoader& loader);

}  // namespace moetier
