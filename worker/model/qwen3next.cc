// The Qwen3-Next layer plan (model/deltanet_hybrid.h) with Qwen3-Next's own
// choices: plain NEOX rope over the first rope.dimension_count dims, value
// heads in grouped order (v-head j reads k-head j / (H_v / H_k)), and two
// projections that interleave per key head what the engines read as
// separate matrices, regrouped here once at load:
//   - ssm_ba {n_embd, 2 H_v}: per key head g, the r = H_v / H_k beta rows of
//     its value heads, then their r alpha rows;
//   - ssm_in {n_embd, 2 key_dim + 2 value_dim}, in files converted before
//     attn_qkv and attn_gate existed: per key head g, q_g (d_k rows), k_g
//     (d_k), v_g (r d_v), z_g (r d_v), instead of flat q, k, v and z.
#include "model/qwen3next.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/deltanet_hybrid.h"

namespace moetier {
namespace {

std::string BlockName(int il, const char* suffix) { return absl::StrCat("blk.", il, ".", suffix); }

// Row indices of `count` consecutive rows starting at `first` in each of the
// n_k_heads groups of `group_rows` rows.
std::vector<int64_t> RowsOfEachGroup(const DeltaNetParams& dn, int64_t group_rows, int64_t first,
                                     int64_t count) {
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(dn.n_k_heads * count));
  for (int64_t g = 0; g < dn.n_k_heads; ++g) {
    for (int64_t i = 0; i < count; ++i) rows.push_back(g * group_rows + first + i);
  }
  return rows;
}

absl::Status ReadInterleavedProjections(const ModelLoader& loader, int il, const ModelHparams& hp,
                                        DeltaNetWeights& d, ModelWeights& w) {
  const DeltaNetParams& dn = hp.deltanet;
  const int64_t n_embd = hp.n_embd;
  const int64_t r = dn.n_v_heads / dn.n_k_heads;
  const std::string qkv_name = BlockName(il, "attn_qkv.weight");
  const std::string ssm_in_name = BlockName(il, "ssm_in.weight");
  if (loader.HasTensor(qkv_name)) {
    if (absl::Status s = loader.ReadLayerTensors(
            il, {{"attn_qkv.weight", {n_embd, dn.conv_dim(), 1, 1}, &d.qkv},
                 {"attn_gate.weight", {n_embd, dn.value_dim(), 1, 1}, &d.z}});
        !s.ok()) {
      return s;
    }
  } else if (loader.HasTensor(ssm_in_name)) {
    absl::StatusOr<WeightRef> in =
        loader.LayerTensor(il, "ssm_in.weight", {n_embd, dn.conv_dim() + dn.value_dim(), 1, 1});
    if (!in.ok()) return in.status();
    const int64_t group = 2 * dn.d_k + 2 * r * dn.d_v;
    std::vector<int64_t> qkv_rows = RowsOfEachGroup(dn, group, 0, dn.d_k);
    for (int64_t row : RowsOfEachGroup(dn, group, dn.d_k, dn.d_k)) qkv_rows.push_back(row);
    for (int64_t row : RowsOfEachGroup(dn, group, 2 * dn.d_k, r * dn.d_v)) qkv_rows.push_back(row);
    absl::StatusOr<WeightRef> qkv =
        ModelLoader::GatherRows(*in, qkv_rows, ssm_in_name + " (q, k, v rows)", w);
    if (!qkv.ok()) return qkv.status();
    d.qkv = *std::move(qkv);
    absl::StatusOr<WeightRef> z = ModelLoader::GatherRows(
        *in, RowsOfEachGroup(dn, group, 2 * dn.d_k + r * dn.d_v, r * dn.d_v),
        ssm_in_name + " (z rows)", w);
    if (!z.ok()) return z.status();
    d.z = *std::move(z);
  } else {
    return loader.Error(
        absl::StrFormat("Gated DeltaNet layer %d has neither %s (with %s) nor the legacy %s", il,
                        qkv_name, BlockName(il, "attn_gate.weight"), ssm_in_name));
  }
  absl::StatusOr<WeightRef> ba =
      loader.LayerTensor(il, "ssm_ba.weight", {n_embd, 2 * dn.n_v_heads, 1, 1});
  if (!ba.ok()) return ba.status();
  const std::string ba_name = BlockName(il, "ssm_ba.weight");
  absl::StatusOr<WeightRef> beta =
      ModelLoader::GatherRows(*ba, RowsOfEachGroup(dn, 2 * r, 0, r), ba_name + " (beta rows)", w);
  if (!beta.ok()) return beta.status();
  d.beta = *std::move(beta);
  absl::StatusOr<WeightRef> alpha =
      ModelLoader::GatherRows(*ba, RowsOfEachGroup(dn, 2 * r, r, r), ba_name + " (alpha rows)", w);
  if (!alpha.ok()) return alpha.status();
  d.alpha = *std::move(alpha);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Model> LoadQwen3Next(const ModelLoader& loader) {
  return LoadDeltaNetHybrid(loader, {.v_heads_tiled = false,
                                     .read_rope = nullptr,
                                     .read_projections = &ReadInterleavedProjections});
}

}  // namespace moetier
