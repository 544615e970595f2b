// Qwen3-VL's MoE language model is qwen3moe's layer plan with multi-section
// rope (IMROPE, rope.dimension_sections): for text positions (p, p, p, 0)
// the pairs of the fourth id stay at position 0. The vision tower's
// "deepstack" features are added to the first n_deepstack_layers layers'
// outputs only for image embeddings, which moetier does not take; text
// tokens have none, so that key is not needed here.
#include "model/qwen3vlmoe.h"

#include "model/qwen3moe.h"
#include "model/rope_sections.h"

namespace moetier {

absl::StatusOr<Model> LoadQwen3VlMoe(const ModelLoader& loader) {
  absl::StatusOr<Model> model = LoadQwen3Moe(loader);
  if (!model.ok()) return model.status();
  if (absl::Status s = ReadImropeSections(loader, model->hparams); !s.ok()) return s;
  return model;
}

}  // namespace moetier
