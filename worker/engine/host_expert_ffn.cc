#include "engine/host_expert_ffn.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_ops.h"
#include "base/check.h"

namespace moetier {
namespace {

// Weight rows per task: enough work per dispatch, several tasks per thread.
constexpr int64_t kRowsPerTask = 64;

size_t MaxActRowBytes(int64_t k) {
  size_t most = 0;
  for (const TensorType t : {TensorType::kF32, TensorType::kF16, TensorType::kBF16,
                             TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_K,
                             TensorType::kQ5_K, TensorType::kQ6_K}) {
    if (cpu::SupportsWeightType(t) && k % cpu::WeightBlockElems(t) == 0) {
      most = std::max(most, cpu::ActRowBytes(t, k));
    }
  }
  return most;
}

}  // namespace

ExpertFfnShape ExpertFfnShape::ForLayer(const Qwen3MoeLayerWeights& layer) {
  ExpertFfnShape s;
  s.gate_type = layer.ffn_gate_exps.type;
  s.up_type = layer.ffn_up_exps.type;
  s.down_type = layer.ffn_down_exps.type;
  s.n_embd = layer.ffn_gate_exps.cols();
  s.n_ff = layer.ffn_gate_exps.rows();
  s.gate_row_bytes = layer.ffn_gate_exps.row_bytes;
  s.up_row_bytes = layer.ffn_up_exps.row_bytes;
  s.down_row_bytes = layer.ffn_down_exps.row_bytes;
  return s;
}

void HostExpertFfn::AlignedFree::operator()(uint8_t* p) const { std::free(p); }

HostExpertFfn::Buffer HostExpertFfn::Allocate(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 64) + 63) / 64 * 64;
  return Buffer(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
}

HostExpertFfn::HostExpertFfn(const Qwen3MoeModel& model, int max_rows, cpu::ThreadPool& pool)
    : pool_(pool), max_rows_(max_rows) {
  MOETIER_CHECK(max_rows >= 1);
  const int64_t n_embd = model.hparams.n_embd;
  const int64_t n_ff = model.hparams.n_ff_exp;
  const size_t rows = static_cast<size_t>(max_rows);
  act_in_ = Allocate(rows * MaxActRowBytes(n_embd));
  act_in2_ = Allocate(rows * MaxActRowBytes(n_embd));
  act_ff_ = Allocate(rows * MaxActRowBytes(n_ff));
  gate_out_.resize(rows * static_cast<size_t>(n_ff));
  up_out_.resize(rows * static_cast<size_t>(n_ff));
}

void HostExpertFfn::Compute(const ExpertFfnShape& s, const ExpertMatrices& expert, const float* x,
                            int n_rows, float* out) {
  MOETIER_CHECK(n_rows >= 1 && n_rows <= max_rows_);
  const size_t gate_act_bytes = cpu::ActRowBytes(s.gate_type, s.n_embd);
  const size_t up_act_bytes = cpu::ActRowBytes(s.up_type, s.n_embd);
  cpu::QuantizeActRows(s.gate_type, x, s.n_embd, s.n_embd, n_rows, act_in_.get());
  const bool shared = cpu::ActFormatFor(s.gate_type) == cpu::ActFormatFor(s.up_type);
  if (!shared) cpu::QuantizeActRows(s.up_type, x, s.n_embd, s.n_embd, n_rows, act_in2_.get());
  const uint8_t* up_act = shared ? act_in_.get() : act_in2_.get();
  float* gate = gate_out_.data();
  float* up = up_out_.data();
  // Gate and up rows in one dispatch: tasks [0, n) are gate's, [n, 2n) up's.
  const int64_t n_ff_tasks = (s.n_ff + kRowsPerTask - 1) / kRowsPerTask;
  pool_.ParallelFor(2 * n_ff_tasks, [&](int64_t task, int) {
    const bool is_up = task >= n_ff_tasks;
    const int64_t r0 = (is_up ? task - n_ff_tasks : task) * kRowsPerTask;
    const int64_t r1 = std::min(s.n_ff, r0 + kRowsPerTask);
    if (is_up) {
      cpu::MatMul(s.up_type, s.n_embd, expert.up, s.up_row_bytes, r0, r1, up_act, up_act_bytes,
                  n_rows, up, s.n_ff);
    } else {
      cpu::MatMul(s.gate_type, s.n_embd, expert.gate, s.gate_row_bytes, r0, r1, act_in_.get(),
                  gate_act_bytes, n_rows, gate, s.n_ff);
    }
  });
  cpu::SiluMul(gate, up, n_rows * s.n_ff, gate);
  const size_t down_act_bytes = cpu::ActRowBytes(s.down_type, s.n_ff);
  cpu::QuantizeActRows(s.down_type, gate, s.n_ff, s.n_ff, n_rows, act_ff_.get());
  const int64_t n_embd_tasks = (s.n_embd + kRowsPerTask - 1) / kRowsPerTask;
  pool_.ParallelFor(n_embd_tasks, [&](int64_t task, int) {
    const int64_t r0 = task * kRowsPerTask;
    const int64_t r1 = std::min(s.n_embd, r0 + kRowsPerTask);
    cpu::MatMul(s.down_type, s.n_ff, expert.down, s.down_row_bytes, r0, r1, act_ff_.get(),
                down_act_bytes, n_rows, out, s.n_embd);
  });
}

ComputeCost MeasureHostExpertCost(HostExpertFfn& ffn, const ExpertFfnShape& shape,
                                  const ExpertMatrices& expert, int rows, int reps) {
  rows = std::clamp(rows, 2, ffn.max_rows());
  std::vector<float> x(static_cast<size_t>(rows * shape.n_embd));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f;
  std::vector<float> out(x.size());
  auto best_seconds = [&](int n) {
    double best = 1e30;
    for (int r = 0; r < std::max(1, reps); ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      ffn.Compute(shape, expert, x.data(), n, out.data());
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                                .count());
    }
    return best;
  };
  const double one = best_seconds(1);
  const double many = best_seconds(rows);
  ComputeCost cost;
  cost.per_row_s = std::max(0.0, (many - one) / (rows - 1));
  cost.fixed_s = std::max(0.0, one - cost.per_row_s);
  return cost;
}

}  // namespace moetier
