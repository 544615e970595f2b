// One routed expert's SwiGLU feed-forward on host cores, straight from its
// matrices in the model file's encoding (a store slot), for rows of fp32
// activations. A GPU worker computes the cache misses its cost model sends
// to the host with it, while the device computes the hits; it runs the CPU
// MoE block's own expert computation (blocks/cpu/expert_ffn.h), so the
// rows come out exactly as the CPU engine computes them for experts
// without biases and with plain SwiGLU, the only ones a GPU worker runs.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "blocks/cpu/expert_ffn.h"
#include "blocks/cpu/mat_runner.h"
#include "cache/miss_cost_model.h"
#include "engine/expert_source.h"

namespace moetier {

class HostExpertFfn {
 public:
  // Scratch for up to `max_rows` rows of an expert of any layer of
  // `experts`. `pool` (not owned) runs the products; it must outlive this.
  HostExpertFfn(const RoutedExpertShapes& experts, int max_rows, cpu::ThreadPool& pool);
  HostExpertFfn(const HostExpertFfn&) = delete;
  HostExpertFfn& operator=(const HostExpertFfn&) = delete;

  // x: n_rows (1..max_rows) rows of n_embd floats; out: n_rows rows of
  // n_embd floats (may not alias x).
  void Compute(const ExpertLayerShape& shape, const ExpertMatrices& expert, const float* x,
               int n_rows, float* out);

  int max_rows() const { return max_rows_; }

 private:
  CpuMatRunner runner_;
  int max_rows_;
  AlignedBytes act_in_;   // prepared x rows for gate
  AlignedBytes act_in2_;  // prepared x rows for up when its format differs from gate's
  AlignedBytes act_ff_;   // prepared silu(gate) . up rows
  AlignedBytes gate_out_, up_out_;
};

// The host's cost of one expert of `shape` (fixed part and per row), timed
// on `expert` with 1 and `rows` rows, best of `reps`: the cost model's
// input for the host side (cache/miss_cost_model.h).
ComputeCost MeasureHostExpertCost(HostExpertFfn& ffn, const ExpertLayerShape& shape,
                                  const ExpertMatrices& expert, int rows, int reps);

}  // namespace moetier
