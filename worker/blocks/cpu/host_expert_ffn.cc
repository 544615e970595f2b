#include "blocks/cpu/host_expert_ffn.h"

#include <algorithm>
#include <chrono>

#include "backend/cpu/cpu_kernels.h"
#include "base/check.h"

namespace moetier {

HostExpertFfn::HostExpertFfn(const RoutedExpertShapes& experts, int max_rows,
                             cpu::ThreadPool& pool)
    : runner_(pool, 4), max_rows_(max_rows) {
  MOETIER_CHECK(max_rows >= 1);
  const int64_t n_embd = experts.n_embd;
  const int64_t n_ff = experts.n_ff;
  const size_t rows = static_cast<size_t>(max_rows);
  act_in_ = AlignedBytes(rows * MaxActRowBytes(n_embd));
  act_in2_ = AlignedBytes(rows * MaxActRowBytes(n_embd));
  act_ff_ = AlignedBytes(rows * MaxActRowBytes(n_ff));
  gate_out_ = AlignedBytes(rows * static_cast<size_t>(n_ff) * sizeof(float));
  up_out_ = AlignedBytes(rows * static_cast<size_t>(n_ff) * sizeof(float));
}

void HostExpertFfn::Compute(const ExpertLayerShape& shape, const ExpertMatrices& expert,
                            const float* x, int n_rows, float* out) {
  MOETIER_CHECK(n_rows >= 1 && n_rows <= max_rows_);
  const int64_t n_embd = shape.gate.cols;
  const uint8_t* gate_act = runner_.PrepareAct(act_in_, x, n_rows, n_embd, shape.gate.type);
  const bool shared = cpu::ActFormatFor(shape.gate.type) == cpu::ActFormatFor(shape.up.type);
  const uint8_t* up_act =
      shared ? gate_act : runner_.PrepareAct(act_in2_, x, n_rows, n_embd, shape.up.type);
  // No biases and plain SwiGLU: the GPU worker refuses models with either
  // (CudaEngine::CheckModel).
  const ExpertRows one[1] = {{.mats = expert, .row0 = 0, .rows = n_rows}};
  ComputeExpertGroup(runner_, shape, one, n_rows,
                     {.gate_act = gate_act,
                      .up_act = up_act,
                      .gate_out = gate_out_.floats(),
                      .up_out = up_out_.floats(),
                      .down_act = &act_ff_,
                      .down_out = out},
                     ExpertActivation::kSwiglu);
}

ComputeCost MeasureHostExpertCost(HostExpertFfn& ffn, const ExpertLayerShape& shape,
                                  const ExpertMatrices& expert, int rows, int reps) {
  rows = std::clamp(rows, 2, ffn.max_rows());
  const int64_t n_embd = shape.gate.cols;
  std::vector<float> x(static_cast<size_t>(rows * n_embd));
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
