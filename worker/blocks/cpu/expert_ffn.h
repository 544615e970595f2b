// Routed experts' SwiGLU on host cores, straight from their matrices in the
// model file's encoding:
//   out = down * (silu(gate * x) . (up * x))
// (gpt-oss: biases on the three products and its clamped activation,
// base/expert_activation.h)
// for a group of experts, each over its own rows, in three fused
// dispatches (every gate and up, then every down). The CPU engine's MoE
// block computes its experts with it, and a GPU worker its misses sent to
// the host (HostExpertFfn), so both give the same rows.
#pragma once

#include <cstdint>
#include <span>

#include "blocks/cpu/mat_runner.h"
#include "engine/expert_source.h"
#include "model/model.h"

namespace moetier {

// One expert of a group: its matrices, and its rows [row0, row0 + rows) of
// the group's inputs and outputs.
struct ExpertRows {
  ExpertMatrices mats;
  int64_t row0 = 0;
  int64_t rows = 0;
  // The expert's biases (n_ff, n_ff and n_embd floats) added to its gate,
  // up and down products; null: none.
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
};

// Buffers of one group computation; rows counted from the group's first row.
struct ExpertGroupIo {
  const uint8_t* gate_act = nullptr;  // inputs prepared for gate's type, ActRowBytes(gate.type, n_embd) each
  const uint8_t* up_act = nullptr;    // ... for up's type (may equal gate_act)
  float* gate_out = nullptr;          // [rows][n_ff]; ends as the activation of gate and up
  float* up_out = nullptr;            // [rows][n_ff]
  AlignedBytes* down_act = nullptr;   // room for the prepared [rows][n_ff]
  float* down_out = nullptr;          // [rows][n_embd]
};

// Computes the experts of `group` (at most runner.max_jobs() / 2) over the
// group's `rows` rows. The experts' rows must be ascending and cover
// [0, rows) without gaps.
void ComputeExpertGroup(CpuMatRunner& runner, const ExpertLayerShape& shape,
                        std::span<const ExpertRows> group, int64_t rows, const ExpertGroupIo& io,
                        ExpertActivation activation);

}  // namespace moetier
