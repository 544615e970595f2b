// The activations one batch of tokens flows through in a CPU engine,
// shared by all its blocks: the residual stream x, the normed input of the
// current sublayer xn, and a scratch row per token. xn is prepared for
// matrix products at most once per activation format between norms, so
// matrices reading the same input (q/k/v; router/gate/up) share the work.
//
// Blocks follow the pre-norm residual form: each reads x, norms it into xn
// with its own weight, and adds its output into x.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "blocks/cpu/mat_runner.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {

// The rows [row0, row0 + n) of a batch: one sequence's tokens at positions
// pos0, pos0 + 1, ... A batch holds one span per sequence it runs; blocks
// that keep per-sequence state (attention's KV cache, DeltaNet's recurrent
// state) run each span against its own sequence's state, and everything
// else runs over all rows at once.
struct CpuRowSpan {
  int row0 = 0;
  int n = 0;
  int pos0 = 0;
};

class CpuBatch {
 public:
  // Buffers for max_batch rows of n_embd values. `runner` must outlive this.
  CpuBatch(int64_t n_embd, int max_batch, CpuMatRunner& runner);
  CpuBatch(const CpuBatch&) = delete;
  CpuBatch& operator=(const CpuBatch&) = delete;

  int64_t n_embd() const { return n_embd_; }
  int max_batch() const { return max_batch_; }
  CpuMatRunner& runner() const { return runner_; }

  float* x() const { return x_.floats(); }              // [max_batch][n_embd]
  float* xn() const { return xn_.floats(); }            // [max_batch][n_embd]
  float* row_scratch() const { return scratch_.floats(); }  // [max_batch][n_embd]

  // xn row i = RMSNorm(x row first + i; w) for i < count; prepared inputs
  // are forgotten.
  void NormRows(int first, int count, const float* w, float eps);
  // xn row i = RMSNorm(x row rows[i]; w); prepared inputs are forgotten.
  void NormRowList(std::span<const int> rows, const float* w, float eps);
  // The first n rows of xn prepared for `type` weights, prepared at most
  // once per format between norms.
  const uint8_t* PrepareInput(int n, TensorType type);
  // xn changed other than through NormRows: prepared copies are stale.
  void ForgetInputs();

  uint64_t allocated_bytes() const;

 private:
  struct Prepared {
    AlignedBytes bytes;
    bool fresh = false;
  };

  const int64_t n_embd_;
  const int max_batch_;
  CpuMatRunner& runner_;
  AlignedBytes x_, xn_, scratch_;
  // One buffer per activation format, so that matrices of different types
  // can share one input.
  std::array<Prepared, 3> prepared_;
};

}  // namespace moetier
