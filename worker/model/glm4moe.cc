// The first leading_dense_block_count layers have a dense SwiGLU FFN, the
// others routed experts plus expert_shared_count ungated shared experts
// (one matrix of expert_shared_count × expert_feed_forward_length rows).
// Attention has optional q/k/v biases and, in GLM-4.5 (355B) only, per-head
// q/k norms; NEOX rope turns rope.dimension_count of each head's dims (half
// in the released models). The router is a sigmoid per expert; the top k
// are chosen on sigmoid + exp_probs_b.bias, weighted by the sigmoid alone,
// renormalized when expert_weights_norm says so and scaled by
// expert_weights_scale. The FFN's norm is post_attention_norm. A file with
// expert_shared_count 0 (no released model) runs without a shared expert,
// as the model defines it; llama.cpp's graph then adds silu(x) instead. The last
// nextn_predict_layers blocks (multi-token prediction) never run in the
// main pass, so they are not read.
#include "model/glm4moe.h"

#include "absl/strings/str_format.h"

namespace moetier {
namespace {

// llama.cpp's llama_expert_gating_func_type.
constexpr uint64_t kGatingUnset = 0;
constexpr uint64_t kGatingSoftmax = 1;
constexpr uint64_t kGatingSigmoid = 2;
// Far above any released model (GLM-4.5: 1), and it keeps the width's
// product with expert_feed_forward_length in range.
constexpr uint64_t kMaxSharedExperts = 64;

absl::Status ReadRouter(const ModelLoader& loader, ModelHparams& hp) {
  const GgufMetadata& meta = loader.metadata();
  absl::StatusOr<uint64_t> gating_key =
      loader.OptionalUint("expert_gating_func", UINT32_MAX, kGatingUnset);
  if (!gating_key.ok()) return gating_key.status();
  const uint64_t gating = *gating_key;
  if (gating == kGatingUnset || gating == kGatingSigmoid) {
    hp.router.gating = RouterGating::kSigmoid;  // llama.cpp's default for glm4moe
  } else if (gating == kGatingSoftmax) {
    hp.router.gating = RouterGating::kSoftmax;
  } else {
    return loader.Unsupported(
        absl::StrFormat("%s = %d: only 1 (softmax) and 2 (sigmoid) are supported for glm4moe",
                        loader.Key("expert_gating_func"), gating));
  }
  hp.router.renormalize = false;
  if (loader.Has("expert_weights_norm")) {
    absl::StatusOr<bool> norm = meta.GetBool(loader.Key("expert_weights_norm"));
    if (!norm.ok()) return loader.Error(norm.status().message());
    hp.router.renormalize = *norm;
  }
  return loader.ReadRouterWeightsScale(hp);
}

// leading_dense_block_count and, when there are dense layers, their width.
absl::StatusOr<int> ReadDenseLayers(const ModelLoader& loader, ModelHparams& hp) {
  absl::StatusOr<int> n_dense = loader.ReadLeadingDenseCount(hp);
  if (!n_dense.ok()) return n_dense.status();
  if (*n_dense == hp.n_layer) {
    return loader.Unsupported(absl::StrFormat(
        "%s = %d makes every layer dense: moetier serves models with routed experts",
        loader.Key("leading_dense_block_count"), *n_dense));
  }
  if (*n_dense == 0) return 0;
  if (absl::Status s = loader.ReadDenseFfnWidth(hp); !s.ok()) return s;
  return *n_dense;
}

absl::Status ReadFfn(const ModelLoader& loader, const ModelHparams& hp, int il, bool dense,
                     LayerWeights& l) {
  if (dense) {
    l.ffn = FfnKind::kDense;
    return loader.ReadDenseFfn(il, hp, l.dense);
  }
  return loader.ReadSelectionBiasedMoe(il, hp, /*bias_required=*/true, l);
}

}  // namespace

absl::StatusOr<Model> LoadGlm4Moe(const ModelLoader& loader) {
  Model model;
  ModelHparams& hp = model.hparams;
  if (absl::Status s = loader.ReadCommonHparams(hp); !s.ok()) return s;
  if (loader.Has("rope.dimension_sections")) {
    return loader.Unsupported(absl::StrFormat(
        "%s is set: multi-section rope (the vision models' positions) is not supported for "
        "glm4moe",
        loader.Key("rope.dimension_sections")));
  }
  hp.rope_style = RopeStyle::kNeox;
  hp.qk_norm = loader.HasTensor("blk.0.attn_q_norm.weight") ? QkNorm::kPerHead : QkNorm::kNone;
  if (absl::Status s = loader.ReadExpertCounts(hp); !s.ok()) return s;
  if (absl::Status s = loader.ReadExpertWidth(hp); !s.ok()) return s;
  if (absl::Status s = ReadRouter(loader, hp); !s.ok()) return s;
  absl::StatusOr<uint64_t> n_shared =
      loader.OptionalUint("expert_shared_count", kMaxSharedExperts, 0);
  if (!n_shared.ok()) return n_shared.status();
  hp.n_ff_shared = static_cast<int>(*n_shared) * hp.n_ff_exp;
  absl::StatusOr<int> n_dense = ReadDenseLayers(loader, hp);
  if (!n_dense.ok()) return n_dense.status();

  ModelWeights& w = model.weights;
  if (absl::Status s = loader.ReadEmbeddingAndOutput(hp, /*output_may_be_tied=*/true, w); !s.ok()) {
    return s;
  }
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    if (absl::Status s = loader.ReadAttentionLayer(il, hp, "post_attention_norm.weight",
                                                   {.qkv_biases = true}, l);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ReadFfn(loader, hp, il, il < *n_dense, l); !s.ok()) return s;
  }
  return model;
}

}  // namespace moetier
