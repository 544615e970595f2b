// The layer plan Qwen3-Next and Qwen3.5/3.6 share (SPEC.md §3.3–3.4): three
// of every four layers (full_attention_interval, default 4, or the
// per-layer attention.recurrent_layers) are Gated DeltaNet layers with a
// recurrent state, the others gated full attention (q and a sigmoid output
// gate interleaved per head in attn_q, per-head q/k norm, NEOX rope over the
// first rope.dimension_count dims). Every layer's FFN is softmax top-k
// routed experts, renormalised, plus a shared expert gated by a sigmoid.
//
// What the converter already did in both: attention and FFN norms are
// stored as 1 + w (ssm_norm raw), ssm_a as -exp(A_log); block_count counts
// MTP layers, which never run in the main pass.
//
// The architectures differ in how a value head finds its key head, in how
// the DeltaNet input projections are laid out and in the rope: each passes
// what is its own.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/model_loader.h"

namespace moetier {

struct DeltaNetHybridLayout {
  // DeltaNetParams::v_heads_tiled.
  bool v_heads_tiled = true;
  // Reads the architecture's rope keys beyond the common ones (may be null).
  absl::Status (*read_rope)(const ModelLoader& loader, ModelHparams& hp) = nullptr;
  // Fills layer il's qkv, z, beta and alpha (the other DeltaNet tensors are
  // named alike in every file); regrouped rows go to w.regrouped.
  absl::Status (*read_projections)(const ModelLoader& loader, int il, const ModelHparams& hp,
                                   DeltaNetWeights& out, ModelWeights& w) = nullptr;
};

absl::StatusOr<Model> LoadDeltaNetHybrid(const ModelLoader& loader,
                                         const DeltaNetHybridLayout& layout);

}  // namespace moetier
