// gpt-oss: gpt-oss-20b, gpt-oss-120b (llama.cpp's LLM_ARCH_OPENAI_MOE).
#pragma once

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/model_loader.h"

namespace moetier {

absl::StatusOr<Model> LoadGptOss(const ModelLoader& loader);

}  // namespace moetier
