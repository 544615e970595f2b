#include "blocks/cpu/expert_ffn.h"

#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_ops.h"

namespace moetier {

void ComputeExpertGroup(CpuMatRunner& runner, const ExpertLayerShape& shape,
                        std::span<const ExpertRows> group, int64_t rows, const ExpertGroupIo& io,
                        ExpertActivation activation) {
  MOETIER_CPU_CHECK(2 * group.size() <= runner.max_jobs(), "expert group too large");
  const int64_t n_embd = shape.gate.cols;
  const int64_t n_ff = shape.gate.rows;
  const size_t gate_row_bytes = cpu::ActRowBytes(shape.gate.type, n_embd);
  const size_t up_row_bytes = cpu::ActRowBytes(shape.up.type, n_embd);
  MatJob* jobs = runner.jobs();
  int n_jobs = 0;
  for (const ExpertRows& e : group) {
    jobs[n_jobs++] = MakeMatJob(shape.gate, e.mats.gate, io.gate_act + e.row0 * gate_row_bytes,
                                e.rows, io.gate_out + e.row0 * n_ff);
    jobs[n_jobs++] = MakeMatJob(shape.up, e.mats.up, io.up_act + e.row0 * up_row_bytes, e.rows,
                                io.up_out + e.row0 * n_ff);
  }
  runner.Run(jobs, n_jobs, CpuPhase::kExperts);

  for (const ExpertRows& e : group) {
    cpu::AddBiasRows(e.gate_bias, io.gate_out + e.row0 * n_ff, e.rows, n_ff);
    cpu::AddBiasRows(e.up_bias, io.up_out + e.row0 * n_ff, e.rows, n_ff);
  }
  runner.ActivateRows(activation, io.gate_out, io.up_out, rows, n_ff);
  const uint8_t* down_act = runner.PrepareAct(*io.down_act, io.gate_out, rows, n_ff, shape.down.type);
  const size_t down_row_bytes = cpu::ActRowBytes(shape.down.type, n_ff);
  n_jobs = 0;
  for (const ExpertRows& e : group) {
    jobs[n_jobs++] = MakeMatJob(shape.down, e.mats.down, down_act + e.row0 * down_row_bytes,
                                e.rows, io.down_out + e.row0 * n_embd);
  }
  runner.Run(jobs, n_jobs, CpuPhase::kExperts);
  for (const ExpertRows& e : group) {
    cpu::AddBiasRows(e.down_bias, io.down_out + e.row0 * n_embd, e.rows, n_embd);
  }
}

}  // namespace moetier
