// The Qwen3-Next layer plan (model/deltanet_hybrid.h) with Qwen3.5's
// choices: IMROPE over the first rope.dimension_count dims, which for text
// is NEOX with some pairs held at position 0 as rope.dimension_sections
// says; separate ssm_beta and ssm_alpha projections; and value heads in
// tiled order: v-head j reads k-head j mod H_k.
#include "model/qwen35moe.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/deltanet_hybrid.h"

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

absl::Status ReadRopeSections(const ModelLoader& loader, ModelHparams& hp) {
  absl::StatusOr<std::vector<int64_t>> sections = loader.IntArray("rope.dimension_sections");
  if (!sections.ok()) return sections.status();
  if (sections->empty()) {
    return loader.Error(
        absl::StrFormat("required key %s is missing (the multi-section rope of qwen35moe needs it)",
                        loader.Key("rope.dimension_sections")));
  }
  int64_t section_sum = 0;
  for (int64_t s : *sections) {
    if (s < 0) break;
    section_sum += s;
  }
  if (sections->size() != 4 || section_sum <= 0 ||
      std::any_of(sections->begin(), sections->end(), [](int64_t s) { return s < 0; })) {
    return loader.Error(
        absl::StrFormat("%s = [%s] must be 4 non-negative values with a positive sum",
                        loader.Key("rope.dimension_sections"), absl::StrJoin(*sections, ", ")));
  }
  hp.rope_pair_uses_position = ImropePairUsesPosition(hp.n_rot, *sections);
  return absl::OkStatus();
}

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
                                     .read_rope = &ReadRopeSections,
                                     .read_projections = &ReadSeparateProjections});
}

}  // namespace moetier
