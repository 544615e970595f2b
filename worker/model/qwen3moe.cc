// Every layer is attention + routed experts. Attention has a per-head RMS
// norm of q and k before NEOX rope over the whole head; the router is a
// softmax over all experts, the top k renormalized (hard-coded in
// llama.cpp, as HF's norm_topk_prob). No shared expert.
#include "model/qwen3moe.h"

namespace moetier {

absl::StatusOr<Model> LoadQwen3Moe(const ModelLoader& loader) {
  Model model;
  ModelHparams& hp = model.hparams;
  if (absl::Status s = loader.ReadCommonHparams(hp); !s.ok()) return s;
  if (absl::Status s = loader.RequireRopeOverWholeHead(hp); !s.ok()) return s;
  hp.rope_style = RopeStyle::kNeox;
  hp.qk_norm = QkNorm::kPerHead;
  hp.router.renormalize = true;
  if (absl::Status s = loader.ReadExpertCounts(hp); !s.ok()) return s;
  if (absl::Status s = loader.ReadExpertWidth(hp); !s.ok()) return s;

  ModelWeights& w = model.weights;
  if (absl::Status s = loader.ReadEmbeddingAndOutput(hp, /*output_may_be_tied=*/true, w); !s.ok()) {
    return s;
  }
  if (absl::Status s = loader.ReadAttentionMoeLayers(hp, w); !s.ok()) return s;
  return model;
}

}  // namespace moetier
