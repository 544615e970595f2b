// Every layer is attention + routed experts. q and k are RMS-normed over the
// whole projection (attn_q_norm is {n_head * head_dim}) before they are split
// into heads, then NEOX rope; the router is a softmax over all experts whose
// top k are used without renormalization (norm_topk_prob = false).
// feed_forward_length is the expert width; output.weight is required.
#include "model/olmoe.h"

#include <optional>

#include "absl/strings/str_format.h"

namespace moetier {

absl::StatusOr<Model> LoadOlmoe(const ModelLoader& loader) {
  Model model;
  ModelHparams& hp = model.hparams;
  if (absl::Status s = loader.ReadCommonHparams(hp); !s.ok()) return s;
  hp.rope_style = RopeStyle::kNeox;
  hp.qk_norm = QkNorm::kWhole;
  hp.router.renormalize = false;
  if (absl::Status s = loader.ReadExpertCounts(hp); !s.ok()) return s;
  absl::StatusOr<std::optional<int>> n_ff =
      loader.UniformPerLayer("feed_forward_length", hp.n_layer, kMaxModelDim);
  if (!n_ff.ok()) return n_ff.status();
  if (!n_ff->has_value()) {
    return loader.Error(absl::StrFormat("required key %s (the expert width) is missing",
                                        loader.Key("feed_forward_length")));
  }
  hp.n_ff_exp = **n_ff;

  ModelWeights& w = model.weights;
  if (absl::Status s = loader.ReadEmbeddingAndOutput(hp, /*output_may_be_tied=*/false, w);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = loader.ReadAttentionMoeLayers(hp, w); !s.ok()) return s;
  return model;
}

}  // namespace moetier
