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
  const int64_t n_embd = hp.n_embd;
  w.layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers[il];
    l.mixer = MixerKind::kAttention;
    l.ffn = FfnKind::kMoe;
    absl::StatusOr<WeightRef> norm = loader.LayerTensor(il, "attn_norm.weight", {n_embd, 1, 1, 1});
    if (!norm.ok()) return norm.status();
    l.attn_norm = *std::move(norm);
    if (absl::Status s = loader.ReadAttention(il, hp, l.attn); !s.ok()) return s;
    norm = loader.LayerTensor(il, "ffn_norm.weight", {n_embd, 1, 1, 1});
    if (!norm.ok()) return norm.status();
    l.ffn_norm = *std::move(norm);
    if (absl::Status s = loader.ReadRoutedExperts(il, hp, l.moe); !s.ok()) return s;
  }
  return model;
}

}  // namespace moetier
