// qwen3vlmoe: the language model of Qwen3-VL-30B-A3B and Qwen3-VL-235B-A22B,
// for text.
#pragma once

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/model_loader.h"

namespace moetier {

absl::StatusOr<Model> LoadQwen3VlMoe(const ModelLoader& loader);

}  // namespace moetier
