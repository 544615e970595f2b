// olmoe: OLMoE-1B-7B (SPEC.md §3.6).
#pragma once

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/model_loader.h"

namespace moetier {

absl::StatusOr<Model> LoadOlmoe(const ModelLoader& loader);

}  // namespace moetier
