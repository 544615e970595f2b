// qwen3next: Qwen3-Next-80B-A3B (SPEC.md §3.3, §3.9).
#pragma once

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/model_loader.h"

namespace moetier {

absl::StatusOr<Model> LoadQwen3Next(const ModelLoader& loader);

}  // namespace moetier
