// The Qwen3-Next layer plan (model/deltanet_hybrid.h) with Qwen3.5's
// choices: IMROPE over the first rope.dimension_count dims, which for text
// is NEOX with some pairs held at position 0 as rope.dimension_sections
// says; separate ssm_beta and ssm_alpha projections; and value heads in
// tiled order: v-head j reads k-head j mod H_k.
#include "model/qwen35moe.h"

#include "model/deltanet_hybrid.h"
#include "model/rope_sections.h"

namespace moetier {
namespace {

absl::Status ReadSeparateProjections(const ModelLoader& loader, int il, const ModelHparams& hp,
                                     DeltaNetWeights& d, ModelWeights&) {
  const DeltaNetParams& dn = hp.deltanet;
  const int64_t n_embd = hp.n_embd;
  return loader.ReadLayerTensors(il,
                                 {{"attn_qkv.weight", {n_embd, dn.conv_dim(), 1, 1}, &d.qkv},
                                  {"attn_gate.weight", {n_embd, dn.value_dim(), 1, 1}, &d.z},
                                  {"ssm_beta.weight", {n_embd, dn.n_v_heads, 1, 1}, &d.beta},
                                  {"ssm_alpha.weight", {n_embd, dn.n_v_heads, 1, 1}, &d.alpha}});
}

}  // namespace

absl::StatusOr<Model> LoadQwen35Moe(const ModelLoader& loader) {
  return LoadDeltaNetHybrid(loader, {.v_heads_tiled = true,
                                     .read_rope = &ReadImropeSections,
                                     .read_projections = &ReadSeparateProjections});
}

}  // namespace moetier
