// Multi-section rope (IMROPE) as Qwen3.5 and Qwen3-VL files describe it
// with rope.dimension_sections, for text positions: which rotary pairs turn
// by the token's position and which stay at position 0 (SPEC.md §3.4).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "model/model.h"
#include "model/model_loader.h"

namespace moetier {

// IMROPE's sector rule for text positions (p, p, p, 0): pair i of n_rot / 2
// lies in sector s = i mod sum(sections); sectors 3k, 3k+1, 3k+2 below
// 3 * sections[0], [1], [2] take a position id equal to p, every other
// sector the fourth id, 0.
std::vector<uint8_t> ImropePairUsesPosition(int n_rot, const std::vector<int64_t>& sections);

// The required <arch>.rope.dimension_sections (four non-negative values, one
// of the first three positive, whose sum is no larger than the head size, as
// ggml requires) into hp.rope_pair_uses_position; needs hp.n_rot and
// hp.head_dim.
absl::Status ReadImropeSections(const ModelLoader& loader, ModelHparams& hp);

}  // namespace moetier
