// Every layer is attention and routed experts, as llama.cpp's openai-moe
// graph runs them (SPEC.md §3.7):
//   attention  q/k/v with biases, NEOX rope over the whole head (YaRN in the
//              released models), a learned sink logit per query head, an
//              output bias; layer il looks back only attention.sliding_window
//              positions when il % period < period - 1 (period:
//              attention.sliding_window_pattern, default 2, so the even
//              layers), the others see every position;
//   router     ffn_gate_inp with a bias; the top k of the raw logits,
//              weighted by the softmax over those k;
//   experts    gate, up and down each with a per-expert bias, and the
//              clamped SwiGLU between them (base/expert_activation.h);
//   norms      attn_norm before attention, post_attention_norm before the
//              experts.
#include "model/gpt_oss.h"

#include "absl/strings/str_format.h"

namespace moetier {
namespace {

// llama.cpp's default when attention.sliding_window_pattern is absent.
constexpr uint64_t kDefaultSlidingWindowPeriod = 2;

// Which layers slide, as llama.cpp's set_swa_pattern reads a period:
// 0 makes every layer slide, 1 none.
bool LayerSlides(int il, uint64_t period) {
  return period == 0 || static_cast<uint64_t>(il) % period < period - 1;
}

absl::Status ReadFfnBiases(const ModelLoader& loader, int il, const ModelHparams& hp,
                           MoeWeights& moe) {
  const int64_t n_expert = hp.n_expert;
  return loader.ReadLayerTensors(
      il, {{"ffn_gate_inp.bias", {n_expert, 1, 1, 1}, &moe.router_bias},
           {"ffn_gate_exps.bias", {hp.n_ff_exp, n_expert, 1, 1}, &moe.gate_exps_bias},
           {"ffn_up_exps.bias", {hp.n_ff_exp, n_expert, 1, 1}, &moe.up_exps_bias},
           {"ffn_down_exps.bias", {hp.n_embd, n_expert, 1, 1}, &moe.down_exps_bias}});
}

}  // namespace

absl::StatusOr<Model> LoadGptOss(const ModelLoader& loader) {
  Model model;
  ModelHparams& hp = model.hparams;
  if (absl::Status s = loader.ReadCommonHparams(hp); !s.ok()) return s;
  if (absl::Status s = loader.RequireRopeOverWholeHead(hp); !s.ok()) return s;
  hp.rope_style = RopeStyle::kNeox;
  hp.qk_norm = QkNorm::kNone;
  if (const RopeScalingKeys& keys = hp.rope_scaling_keys;
      keys.type == "none" && keys.factor != 0.0 && keys.factor != 1.0) {
    // llama.cpp copies the factor to the windowed layers before "none"
    // clears it for the others, so they would turn at another rate.
    return loader.Unsupported(absl::StrFormat(
        "%s is \"none\" but %s = %g: llama.cpp would scale only the sliding-window layers' "
        "rope, which moetier does not do",
        loader.Key("rope.scaling.type"), loader.Key("rope.scaling.factor"), keys.factor));
  }
  if (loader.Has("rope.freq_base_swa")) {
    absl::StatusOr<double> swa_base = loader.OptionalFloat("rope.freq_base_swa", 0.0);
    if (!swa_base.ok()) return swa_base.status();
    if (static_cast<float>(*swa_base) != hp.rope_freq_base) {
      return loader.Unsupported(
          absl::StrFormat("%s = %g differs from %s = %g: moetier rotates every layer with one base",
                          loader.Key("rope.freq_base_swa"), *swa_base, loader.Key("rope.freq_base"),
                          hp.rope_freq_base));
    }
  }
  if (absl::Status s = loader.ReadExpertCounts(hp); !s.ok()) return s;
  absl::StatusOr<int> n_ff_exp =
      loader.RequiredUniformPerLayer("expert_feed_forward_length", hp.n_layer, kMaxModelDim);
  if (!n_ff_exp.ok()) return n_ff_exp.status();
  hp.n_ff_exp = *n_ff_exp;
  hp.expert_activation = ExpertActivation::kSwigluOai;
  hp.router.gating = RouterGating::kSoftmaxOfChosen;
  hp.router.renormalize = false;
  if (absl::Status s = loader.ReadRouterWeightsScale(hp); !s.ok()) return s;

  absl::StatusOr<int> window = loader.RequiredDim("attention.sliding_window", kMaxModelDim);
  if (!window.ok()) return window.status();
  absl::StatusOr<uint64_t> period = loader.OptionalUint(
      "attention.sliding_window_pattern", kMaxModelLayers, kDefaultSlidingWindowPeriod);
  if (!period.ok()) return period.status();

  ModelWeights& w = model.weights;
  if (absl::Status s = loader.ReadEmbeddingAndOutput(hp, /*output_may_be_tied=*/false, w);
      !s.ok()) {
    return s;
  }
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    if (absl::Status s = loader.ReadAttentionLayer(il, hp, "post_attention_norm.weight",
                                                   {.qkv_biases = true, .output_bias = true}, l);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = loader.ReadLayerTensors(
            il, {{"attn_sinks.weight", {hp.n_head, 1, 1, 1}, &l.attn.sinks}});
        !s.ok()) {
      return s;
    }
    l.attention_window = LayerSlides(il, *period) ? *window : 0;
    l.ffn = FfnKind::kMoe;
    if (absl::Status s = loader.ReadRoutedExperts(il, hp, l.moe); !s.ok()) return s;
    if (absl::Status s = ReadFfnBiases(loader, il, hp, l.moe); !s.ok()) return s;
  }
  return model;
}

}  // namespace moetier
