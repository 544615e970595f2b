// A hybrid: three of every four layers (full_attention_interval, default 4)
// are Gated DeltaNet layers with a recurrent state, every fourth is gated
// full attention (q and a sigmoid output gate interleaved per head in
// attn_q, per-head q/k norm, IMROPE over the first rope.dimension_count
// dims, which for text is NEOX with some pairs held at position 0 as
// rope.dimension_sections says). Every layer's FFN is softmax top-k routed
// experts, renormalised, plus a shared expert gated by a sigmoid. The value
// heads are in tiled order: v-head j reads k-head j mod H_k.
//
// What the converter already did: attention and FFN norms are stored as
// 1 + w (ssm_norm raw), ssm_a as -exp(A_log); block_count counts MTP layers,
// which never run in the main pass.
#include "model/qwen35moe.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace moetier {
namespace {

// IMROPE's sector rule for text positions (p, p, p, 0): pair i of n_rot / 2
// lies in sector s = i mod sum(sections); sectors 3k, 3k+1, 3k+2 below
// 3 * sections[0], [1], [2] take a position id equal to p, every other
// sector the fourth id, 0.
std::vector<uint8_t> ImropePairUsesPosition(int n_rot, const std::vector<int64_t>& sections) {
  int64_t total = 0;
  for (int64_t s : sections) total += s;
  std::vector<uint8_t> uses(static_cast<size_t>(n_rot / 2), 0);
  for (int i = 0; i < n_rot / 2; ++i) {
    const int64_t s = i % total;
    uses[static_cast<size_t>(i)] = (s % 3 == 0 && s < 3 * sections[0]) ||
                                   (s % 3 == 1 && s < 3 * sections[1]) ||
                                   (s % 3 == 2 && s < 3 * sections[2]);
  }
  return uses;
}

}  // namespace

absl::StatusOr<Model> LoadQwen35Moe(const ModelLoader& loader) {
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
  absl::StatusOr<std::vector<int64_t>> sections = loader.IntArray("rope.dimension_sections");
  if (!sections.ok()) return sections.status();
  if (sections->empty()) {
    return loader.Error(absl::StrFormat(
        "required key %s is missing (the multi-section rope of qwen35moe needs it)",
        loader.Key("rope.dimension_sections")));
  }
  int64_t section_sum = 0;
  for (int64_t s : *sections) {
    if (s < 0) break;
    section_sum += s;
  }
  if (sections->size() != 4 || section_sum <= 0 ||
      std::any_of(sections->begin(), sections->end(), [](int64_t s) { return s < 0; })) {
    return loader.Error(absl::StrFormat(
        "%s = [%s] must be 4 non-negative values with a positive sum",
        loader.Key("rope.dimension_sections"), absl::StrJoin(*sections, ", ")));
  }
  hp.rope_pair_uses_position = ImropePairUsesPosition(hp.n_rot, *sections);

  if (absl::Status s = loader.ReadExpertCounts(hp); !s.ok()) return s;
  absl::StatusOr<int> n_ff = loader.RequiredDim("expert_feed_forward_length", kMaxModelDim);
  if (!n_ff.ok()) return n_ff.status();
  hp.n_ff_exp = *n_ff;
  absl::StatusOr<int> n_ff_shared =
      loader.RequiredDim("expert_shared_feed_forward_length", kMaxModelDim);
  if (!n_ff_shared.ok()) return n_ff_shared.status();
  hp.n_ff_shared = *n_ff_shared;

  DeltaNetParams& dn = hp.deltanet;
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
    return loader.Error(absl::StrFormat(
        "%s = %d must be a multiple of %s = %d, itself a multiple of %s = %d",
        loader.Key("ssm.inner_size"), *v, loader.Key("ssm.time_step_rank"), dn.n_v_heads,
        loader.Key("ssm.group_count"), dn.n_k_heads));
  }
  dn.d_v = *v / dn.n_v_heads;
  dn.v_heads_tiled = true;

  // Which layers are recurrent: an explicit per-layer list, else every
  // layer but each interval-th.
  absl::StatusOr<int> interval = loader.OptionalDim("full_attention_interval", kMaxModelLayers, 4);
  if (!interval.ok()) return interval.status();
  std::vector<bool> recurrent(static_cast<size_t>(hp.n_layer));
  for (int il = 0; il < hp.n_layer; ++il) recurrent[il] = (il + 1) % *interval != 0;
  absl::StatusOr<std::vector<int64_t>> listed = loader.IntArray("attention.recurrent_layers");
  if (!listed.ok()) return listed.status();
  if (!listed->empty()) {
    if (static_cast<int>(listed->size()) < hp.n_layer) {
      return loader.Error(absl::StrFormat("%s has %d values for %d layers",
                                          loader.Key("attention.recurrent_layers"),
                                          listed->size(), hp.n_layer));
    }
    for (int il = 0; il < hp.n_layer; ++il) recurrent[il] = (*listed)[il] != 0;
  }

  ModelWeights& w = model.weights;
  if (absl::Status s = loader.ReadEmbeddingAndOutput(hp, /*output_may_be_tied=*/true, w); !s.ok()) {
    return s;
  }
  const int64_t n_embd = hp.n_embd;
  w.layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers[il];
    l.mixer = recurrent[il] ? MixerKind::kGatedDeltaNet : MixerKind::kGatedAttention;
    l.ffn = FfnKind::kMoeWithSharedExpert;
    absl::StatusOr<WeightRef> norm = loader.LayerTensor(il, "attn_norm.weight", {n_embd, 1, 1, 1});
    if (!norm.ok()) return norm.status();
    l.attn_norm = *std::move(norm);
    if (recurrent[il]) {
      DeltaNetWeights& d = l.deltanet;
      const int64_t conv_dim = dn.conv_dim();
      const int64_t value_dim = dn.value_dim();
      const int64_t h_v = dn.n_v_heads;
      struct Want {
        const char* name;
        std::array<int64_t, 4> ne;
        WeightRef* out;
      };
      for (const Want& t : {Want{"attn_qkv.weight", {n_embd, conv_dim, 1, 1}, &d.qkv},
                            Want{"attn_gate.weight", {n_embd, value_dim, 1, 1}, &d.z},
                            Want{"ssm_conv1d.weight", {dn.conv_kernel, conv_dim, 1, 1}, &d.conv},
                            Want{"ssm_dt.bias", {h_v, 1, 1, 1}, &d.dt_bias},
                            Want{"ssm_a", {h_v, 1, 1, 1}, &d.a},
                            Want{"ssm_beta.weight", {n_embd, h_v, 1, 1}, &d.beta},
                            Want{"ssm_alpha.weight", {n_embd, h_v, 1, 1}, &d.alpha},
                            Want{"ssm_norm.weight", {dn.d_v, 1, 1, 1}, &d.norm},
                            Want{"ssm_out.weight", {value_dim, n_embd, 1, 1}, &d.out}}) {
        absl::StatusOr<WeightRef> r = loader.LayerTensor(il, t.name, t.ne);
        if (!r.ok()) return r.status();
        *t.out = *std::move(r);
      }
    } else {
      if (absl::Status s = loader.ReadAttention(il, hp, l.attn, /*gated_q=*/true); !s.ok()) {
        return s;
      }
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
