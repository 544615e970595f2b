// Every layer is attention + routed experts. No q/k norm; rope is NORM
// (adjacent pairs), because the converter permuted the q and k rows of each
// head, over the whole head (llama.cpp requires rope.dimension_count ==
// head_dim). The router is a softmax over all experts, the top k
// renormalized; feed_forward_length is the expert width. A file converted
// from a Llama 3 may carry rope_freqs.weight, per-pair divisors of the rope
// angles. A llama file without experts is a dense model, which moetier does
// not serve.
#include "model/llama.h"

#include <cmath>
#include <optional>

#include "absl/strings/str_format.h"

namespace moetier {

absl::StatusOr<Model> LoadLlamaMoe(const ModelLoader& loader) {
  Model model;
  ModelHparams& hp = model.hparams;
  if (absl::Status s = loader.ReadCommonHparams(hp); !s.ok()) return s;
  if (hp.n_rot != hp.head_dim) {
    return loader.Error(absl::StrFormat("%s = %d must equal the head size %d",
                                        loader.Key("rope.dimension_count"), hp.n_rot,
                                        hp.head_dim));
  }
  hp.rope_style = RopeStyle::kNorm;
  if (loader.HasTensor("rope_freqs.weight")) {
    absl::StatusOr<WeightRef> factors = loader.Tensor("rope_freqs.weight", {hp.n_rot / 2, 1, 1, 1});
    if (!factors.ok()) return factors.status();
    hp.rope_freq_factors = DecodedValues(*factors);
    for (size_t i = 0; i < hp.rope_freq_factors.size(); ++i) {
      const float f = hp.rope_freq_factors[i];
      if (!std::isfinite(f) || f <= 0.0f) {
        return loader.Error(absl::StrFormat(
            "tensor 'rope_freqs.weight': factor %d is %g; each must be finite and positive", i, f));
      }
    }
  }
  hp.qk_norm = QkNorm::kNone;
  hp.router.renormalize = true;
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
  if (absl::Status s = loader.ReadEmbeddingAndOutput(hp, /*output_may_be_tied=*/true, w); !s.ok()) {
    return s;
  }
  if (absl::Status s = loader.ReadAttentionMoeLayers(hp, w); !s.ok()) return s;
  return model;
}

}  // namespace moetier
