// glm4moe: GLM-4.5-Air, GLM-4.5, GLM-4.6, GLM-4.7 (SPEC.md §3.0; llama.cpp's
// LLM_ARCH_GLM4_MOE).
#pragma once

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/model_loader.h"

namespace moetier {

absl::StatusOr<Model> LoadGlm4Moe(const ModelLoader& loader);

}  // namespace moetier
