#include "model/deltanet_hybrid.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace moetier {
namespace {

absl::Status ReadDeltaNetParams(const ModelLoader& loader, DeltaNetParams& dn) {
  absl::StatusOr<int> v = loader.RequiredDim("ssm.conv_kernel", 64);
  if (!v.ok()) return v.status();
  dn.conv_kernel = *v;
  v = loader.RequiredDim("ssm.state_size", kMaxModelDim);
  if (!v.ok()) return v.status();
  dn.d_k = *v;
  v = loader.RequiredDim("ssm.group_count", kMaxModelDim);
  if (!v.ok()) return v.status();
  dn.n_k_heads = *v;
  v = loader.RequiredDim("ssm.time_step_rank", kMaxModelDim);
  if (!v.ok()) return v.status();
  dn.n_v_heads = *v;
  v = loader.RequiredDim("ssm.inner_size", kMaxModelDim);
  if (!v.ok()) return v.status();
  if (*v % dn.n_v_heads != 0 || dn.n_v_heads % dn.n_k_heads != 0) {
    return loader.Error(
        absl::StrFormat("%s = %d must be a multiple of %s = %d, itself a multiple of %s = %d",
                        loader.Key("ssm.inner_size"), *v, loader.Key("ssm.time_step_rank"),
                        dn.n_v_heads, loader.Key("ssm.group_count"), dn.n_k_heads));
  }
  dn.d_v = *v / dn.n_v_heads;
  return absl::OkStatus();
}

// Which layers are recurrent: an explicit per-layer list, else every layer
// but each interval-th.
absl::StatusOr<std::vector<bool>> RecurrentLayers(const ModelLoader& loader, int n_layer) {
  absl::StatusOr<int> interval = loader.OptionalDim("full_attention_interval", kMaxModelLayers, 4);
  if (!interval.ok()) return interval.status();
  std::vector<bool> recurrent(static_cast<size_t>(n_layer));
  for (int il = 0; il < n_layer; ++il) recurrent[il] = (il + 1) % *interval != 0;
  absl::StatusOr<std::vector<int64_t>> listed = loader.IntArray("attention.recurrent_layers");
  if (!listed.ok()) return listed.status();
  if (!listed->empty()) {
    if (static_cast<int>(listed->size()) < n_layer) {
      return loader.Error(absl::StrFormat("%s has %d values for %d layers",
                                          loader.Key("attention.recurrent_layers"), listed->size(),
                                          n_layer));
    }
    for (int il = 0; il < n_layer; ++il) recurrent[il] = (*listed)[il] != 0;
  }
  return recurrent;
}

absl::Status ReadDeltaNetLayer(const ModelLoader& loader, const DeltaNetHybridLayout& layout,
                               int il, const ModelHparams& hp, DeltaNetWeights& d,
                               ModelWeights& w) {
  if (absl::Status s = layout.read_projections(loader, il, hp, d, w); !s.ok()) return s;
  const DeltaNetParams& dn = hp.deltanet;
  const int64_t h_v = dn.n_v_heads;
  return loader.ReadLayerTensors(
      il, {{"ssm_conv1d.weight", {dn.conv_kernel, dn.conv_dim(), 1, 1}, &d.conv},
           {"ssm_dt.bias", {h_v, 1, 1, 1}, &d.dt_bias},
           {"ssm_a", {h_v, 1, 1, 1}, &d.a},
           {"ssm_norm.weight", {dn.d_v, 1, 1, 1}, &d.norm},
           {"ssm_out.weight", {dn.value_dim(), hp.n_embd, 1, 1}, &d.out}});
}

}  // namespace

absl::StatusOr<Model> LoadDeltaNetHybrid(const ModelLoader& loader,
                                         const DeltaNetHybridLayout& layout) {
  Model model;
  ModelHparams& hp = model.hparams;
  if (absl::Status s = loader.ReadCommonHparams(hp); !s.ok()) return s;
  hp.rope_style = RopeStyle::kNeox;
  hp.qk_norm = QkNorm::kPerHead;
  hp.router.renormalize = true;
  if (loader.Has("attention.scale")) {
    hp.attention_scale =
        static_cast<float>(loader.metadata().GetFloatOr(loader.Key("attention.scale"), 0.0));
  }
  if (layout.read_projections == nullptr) {
    return absl::InternalError("a Gated DeltaNet hybrid without its projection reader");
  }
  if (layout.read_rope != nullptr) {
    if (absl::Status s = layout.read_rope(loader, hp); !s.ok()) return s;
  }

  if (absl::Status s = loader.ReadExpertCounts(hp); !s.ok()) return s;
  absl::StatusOr<int> n_ff = loader.RequiredDim("expert_feed_forward_length", kMaxModelDim);
  if (!n_ff.ok()) return n_ff.status();
  hp.n_ff_exp = *n_ff;
  absl::StatusOr<int> n_ff_shared =
      loader.RequiredDim("expert_shared_feed_forward_length", kMaxModelDim);
  if (!n_ff_shared.ok()) return n_ff_shared.status();
  hp.n_ff_shared = *n_ff_shared;

  if (absl::Status s = ReadDeltaNetParams(loader, hp.deltanet); !s.ok()) return s;
  hp.deltanet.v_heads_tiled = layout.v_heads_tiled;
  absl::StatusOr<std::vector<bool>> recurrent = RecurrentLayers(loader, hp.n_layer);
  if (!recurrent.ok()) return recurrent.status();

  ModelWeights& w = model.weights;
  if (absl::Status s = loader.ReadEmbeddingAndOutput(hp, /*output_may_be_tied=*/true, w); !s.ok()) {
    return s;
  }
  const int64_t n_embd = hp.n_embd;
  w.layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers[il];
    l.mixer = (*recurrent)[il] ? MixerKind::kGatedDeltaNet : MixerKind::kGatedAttention;
    l.ffn = FfnKind::kMoeWithSharedExpert;
    absl::StatusOr<WeightRef> norm = loader.LayerTensor(il, "attn_norm.weight", {n_embd, 1, 1, 1});
    if (!norm.ok()) return norm.status();
    l.attn_norm = *std::move(norm);
    if ((*recurrent)[il]) {
      if (absl::Status s = ReadDeltaNetLayer(loader, layout, il, hp, l.deltanet, w); !s.ok()) {
        return s;
      }
    } else if (absl::Status s = loader.ReadAttention(il, hp, l.attn, {.gated_q = true}); !s.ok()) {
      return s;
    }
    norm = loader.LayerTensor(il, "post_attention_norm.weight", {n_embd, 1, 1, 1});
    if (!norm.ok()) return norm.status();
    l.ffn_norm = *std::move(norm);
    if (absl::Status s = loader.ReadRoutedExperts(il, hp, l.moe); !s.ok()) return s;
    if (absl::Status s = loader.ReadSharedExpert(il, hp, l.moe); !s.ok()) return s;
  }
  return model;
}

}  // namespace moetier
