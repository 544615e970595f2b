// Every layer is attention + routed experts + a shared expert. Attention has
// biases on q, k and v and no q/k norm, then NEOX rope over the whole head;
// the router is a softmax over all experts whose top k are used without
// renormalization (hard-coded false in llama.cpp); the shared expert's
// SwiGLU is scaled by sigmoid(ffn_gate_inp_shexp . x) and added.
// output.weight is required.
#include "model/qwen2moe.h"

#include <optional>

#include "absl/strings/str_format.h"

namespace moetier {

absl::StatusOr<Model> LoadQwen2Moe(const ModelLoader& loader) {
  Model model;
  ModelHparams& hp = model.hparams;
  if (absl::Status s = loader.ReadCommonHparams(hp); !s.ok()) return s;
  if (absl::Status s = loader.RequireRopeOverWholeHead(hp); !s.ok()) return s;
  hp.rope_style = RopeStyle::kNeox;
  hp.qk_norm = QkNorm::kNone;
  hp.router.renormalize = false;
  if (absl::Status s = loader.ReadExpertCounts(hp); !s.ok()) return s;
  if (absl::Status s = loader.ReadExpertWidth(hp); !s.ok()) return s;
  // expert_shared_feed_forward_length, else (absent or 0) llama.cpp's
  // fallback: the dense feed_forward_length.
  const char* shared_key = loader.HasNonZero("expert_shared_feed_forward_length")
                               ? "expert_shared_feed_forward_length"
                               : "feed_forward_length";
  absl::StatusOr<std::optional<int>> n_ff_shared =
      loader.UniformPerLayer(shared_key, hp.n_layer, kMaxModelDim);
  if (!n_ff_shared.ok()) return n_ff_shared.status();
  if (!n_ff_shared->has_value()) {
    return loader.Error(absl::StrFormat("neither %s nor %s (the shared expert's width) is present",
                                        loader.Key("expert_shared_feed_forward_length"),
                                        loader.Key("feed_forward_length")));
  }
  hp.n_ff_shared = **n_ff_shared;

  ModelWeights& w = model.weights;
  if (absl::Status s = loader.ReadEmbeddingAndOutput(hp, /*output_may_be_tied=*/false, w);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = loader.ReadAttentionMoeLayers(hp, w, {.qkv_biases = true}); !s.ok()) {
    return s;
  }
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    l.ffn = FfnKind::kMoeWithSharedExpert;
    if (absl::Status s = loader.ReadSharedExpert(il, hp, l.moe); !s.ok()) return s;
  }
  return model;
}

}  // namespace moetier
