// The checks every engine makes of a model before computing with it: its
// hyperparameters are consistent, its layer plan uses only blocks the
// engine has, and every tensor the plan reads is present, has the shape the
// hyperparameters give, is whole blocks, and has a type the backend's
// kernels compute with. Messages name the tensor and what to do.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "gguf/tensor/tensor_type.h"
#include "model/model.h"

namespace moetier {

struct BackendWeightSupport {
  std::string_view backend;         // "cpu", "CUDA", ...
  bool (*matrix_type)(TensorType);  // types its matrix kernels read
  std::string_view type_list;       // the same, for messages
  std::string_view alternative;     // what to do instead, for messages
  // Blocks it implements.
  bool (*mixer)(MixerKind);
  bool (*ffn)(FfnKind);
};

absl::Status CheckModelForBackend(const Model& model, const BackendWeightSupport& support);

// The sizes every engine accepts: a context within the model's training
// length, 1..1024 sequences and 1..batch_limit tokens a forward pass.
absl::Status CheckEngineSizes(const ModelHparams& hp, int max_ctx, int max_sequences, int max_batch,
                              int batch_limit);

}  // namespace moetier
