// llama with routed experts: Mixtral-8x7B and kin (SPEC.md §3.5).
#pragma once

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/model_loader.h"

namespace moetier {

absl::StatusOr<Model> LoadLlamaMoe(const ModelLoader& loader);

}  // namespace moetier
