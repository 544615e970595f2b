// One routed expert's SwiGLU feed-forward on host cores, straight from its
// matrices in the model file's encoding (a store slot):
//   out = down * (silu(gate * x) . (up * x))
// with the CPU backend's kernels, for rows of fp32 activations. A GPU
// worker computes the cache misses its cost model sends to the host with
// it, while the device computes the hits; the rows come out exactly as the
// CPU engine computes them (the same kernels, each row on its own).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "cache/miss_cost_model.h"
#include "engine/expert_source.h"
#include "model/qwen3moe_model.h"

namespace moetier {

// Types and sizes of one layer's expert matrices.
struct ExpertFfnShape {
  TensorType gate_type = TensorType::kF32;
  TensorType up_type = TensorType::kF32;
  TensorType down_type = TensorType::kF32;
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  uint64_t gate_row_bytes = 0;  // bytes of one row of n_embd weights
  uint64_t up_row_bytes = 0;
  uint64_t down_row_bytes = 0;  // bytes of one row of n_ff weights

  static ExpertFfnShape ForLayer(const Qwen3MoeLayerWeights& layer);
};

class HostExpertFfn {
 public:
  // Scratch for up to `max_rows` rows of an expert of `model` (every layer).
  // `pool` (not owned) runs the products; it must outlive this.
  HostExpertFfn(const Qwen3MoeModel& model, int max_rows, cpu::ThreadPool& pool);
  HostExpertFfn(const HostExpertFfn&) = delete;
  HostExpertFfn& operator=(const HostExpertFfn&) = delete;

  // x: n_rows (1..max_rows) rows of n_embd floats; out: n_rows rows of
  // n_embd floats (may not alias x).
  void Compute(const ExpertFfnShape& shape, const ExpertMatrices& expert, const float* x,
               int n_rows, float* out);

  int max_rows() const { return max_rows_; }

 private:
  struct AlignedFree {
    void operator()(uint8_t* p) const;
  };
  using Buffer = std::unique_ptr<uint8_t, AlignedFree>;
  static Buffer Allocate(size_t bytes);

  cpu::ThreadPool& pool_;
  int max_rows_;
  Buffer act_in_;   // prepared x rows (one format at a time)
  Buffer act_in2_;  // prepared x rows for up when its format differs from gate's
  Buffer act_ff_;   // prepared silu(gate) . up rows
  std::vector<float> gate_out_, up_out_;
};

// The host's cost of one expert of `shape` (fixed part and per row), timed
// on `expert` with 1 and `rows` rows, best of `reps`: the cost model's
// input for the host side (cache/miss_cost_model.h).
ComputeCost MeasureHostExpertCost(HostExpertFfn& ffn, const ExpertFfnShape& shape,
                                  const ExpertMatrices& expert, int rows, int reps);

}  // namespace moetier
