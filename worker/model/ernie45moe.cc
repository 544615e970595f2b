// Layer il has routed experts when il >= leading_dense_block_count (absent:
// 0) and (il + 1) is a multiple of interleave_moe_layer_step, else a dense
// SwiGLU of feed_forward_length. (llama.cpp's loader wants expert tensors in
// every layer from leading_dense_block_count on while its graph skips them
// where the step says, adding silu(x) there instead; every released ERNIE-4.5
// has step 1, and a file laid out that way is refused here, naming the dense
// tensor the skipped layer lacks.) The router is a softmax over all experts
// whose top k are chosen on the probabilities plus exp_probs_b.bias (where
// the file has it), weighted by the probabilities renormalized; a shared
// expert of expert_shared_feed_forward_length (0 or absent: none) is added
// ungated.
// Attention has optional q/k/v biases and no q/k norm; rope is NORM
// (adjacent pairs) over the whole head, which llama.cpp's graph asserts.
#include "model/ernie45moe.h"

#include "absl/strings/str_format.h"

namespace moetier {
namespace {

struct LayerPlan {
  int leading_dense = 0;
  int moe_step = 1;
  bool routed(int il) const { return il >= leading_dense && (il + 1) % moe_step == 0; }
};

absl::StatusOr<LayerPlan> ReadLayerPlan(const ModelLoader& loader, ModelHparams& hp) {
  LayerPlan plan;
  absl::StatusOr<int> step = loader.RequiredDim("interleave_moe_layer_step", kMaxModelLayers);
  if (!step.ok()) return step.status();
  plan.moe_step = *step;
  absl::StatusOr<int> lead = loader.ReadLeadingDenseCount(hp);
  if (!lead.ok()) return lead.status();
  plan.leading_dense = *lead;
  bool any_routed = false;
  bool any_dense = false;
  for (int il = 0; il < hp.n_layer; ++il) {
    any_routed = any_routed || plan.routed(il);
    any_dense = any_dense || !plan.routed(il);
  }
  if (!any_routed) {
    return loader.Unsupported(absl::StrFormat(
        "%s = %d and %s = %d leave no layer with experts: moetier serves models with routed "
        "experts",
        loader.Key("leading_dense_block_count"), plan.leading_dense,
        loader.Key("interleave_moe_layer_step"), plan.moe_step));
  }
  if (any_dense) {
    if (absl::Status s = loader.ReadDenseFfnWidth(hp); !s.ok()) return s;
  }
  return plan;
}

}  // namespace

absl::StatusOr<Model> LoadErnie45Moe(const ModelLoader& loader) {
  Model model;
  ModelHparams& hp = model.hparams;
  if (loader.Has("nextn_predict_layers")) {
    // ReadCommonHparams would leave those blocks out; llama.cpp reads no
    // such key here and runs every block, and no converter writes one.
    return loader.Unsupported(absl::StrFormat(
        "%s is set, but ernie4_5-moe has no multi-token-prediction blocks to leave out",
        loader.Key("nextn_predict_layers")));
  }
  if (absl::Status s = loader.ReadCommonHparams(hp); !s.ok()) return s;
  if (absl::Status s = loader.RequireRopeOverWholeHead(hp); !s.ok()) return s;
  hp.rope_style = RopeStyle::kNorm;
  hp.qk_norm = QkNorm::kNone;
  if (absl::Status s = loader.ReadExpertCounts(hp); !s.ok()) return s;
  absl::StatusOr<int> n_ff_exp =
      loader.RequiredUniformPerLayer("expert_feed_forward_length", hp.n_layer, kMaxModelDim);
  if (!n_ff_exp.ok()) return n_ff_exp.status();
  hp.n_ff_exp = *n_ff_exp;
  // llama.cpp hard-codes the gating and reads no expert_weights_scale for
  // this architecture: the renormalized weights are used as they are.
  hp.router.gating = RouterGating::kSoftmax;
  hp.router.renormalize = true;
  hp.router.weights_scale = 1.0f;
  // Absent or 0: no shared expert.
  absl::StatusOr<uint64_t> n_ff_shared =
      loader.OptionalUint("expert_shared_feed_forward_length", kMaxModelDim, 0);
  if (!n_ff_shared.ok()) return n_ff_shared.status();
  hp.n_ff_shared = static_cast<int>(*n_ff_shared);
  absl::StatusOr<LayerPlan> plan = ReadLayerPlan(loader, hp);
  if (!plan.ok()) return plan.status();

  ModelWeights& w = model.weights;
  if (absl::Status s = loader.ReadEmbeddingAndOutput(hp, /*output_may_be_tied=*/true, w); !s.ok()) {
    return s;
  }
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    if (absl::Status s =
            loader.ReadAttentionLayer(il, hp, "ffn_norm.weight", {.qkv_biases = true}, l);
        !s.ok()) {
      return s;
    }
    if (plan->routed(il)) {
      if (absl::Status s = loader.ReadSelectionBiasedMoe(il, hp, /*bias_required=*/false, l);
          !s.ok()) {
        return s;
      }
    } else {
      if (il >= plan->leading_dense &&
          loader.HasTensor(absl::StrFormat("blk.%d.ffn_gate_inp.weight", il)) &&
          !loader.HasTensor(absl::StrFormat("blk.%d.ffn_gate.weight", il))) {
        return loader.Unsupported(absl::StrFormat(
            "layer %d has expert tensors, but %s = %d makes it a dense layer and it has no "
            "dense FFN (llama.cpp's layout for a step above 1, whose skipped layers it runs as "
            "silu(x)); every released ERNIE-4.5 has step 1",
            il, loader.Key("interleave_moe_layer_step"), plan->moe_step));
      }
      l.ffn = FfnKind::kDense;
      if (absl::Status s = loader.ReadDenseFfn(il, hp, l.dense); !s.ok()) return s;
    }
  }
  return model;
}

}  // namespace moetier
