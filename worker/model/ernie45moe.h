// ernie4_5-moe: ERNIE-4.5-21B-A3B, ERNIE-4.5-300B-A47B (llama.cpp's
// LLM_ARCH_ERNIE4_5_MOE).
#pragma once

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/model_loader.h"

namespace moetier {

absl::StatusOr<Model> LoadErnie45Moe(const ModelLoader& loader);

}  // namespace moetier
