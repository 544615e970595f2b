#include "blocks/cpu/mat_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_ops.h"

namespace moetier {
namespace {

// Weight bytes a task should cover at least, so that dispatch and chunk
// bookkeeping stay small next to the kernel work.
constexpr uint64_t kMinTaskWeightBytes = 32 * 1024;
// Chunks per thread and job at most; several per thread balance uneven
// progress without stealing.
constexpr int kMaxChunksPerThread = 4;
// Element-wise work below this many values runs on the calling thread: a
// dispatch costs more than it saves (decode-sized rows).
constexpr int64_t kMinParallelElems = 32 * 1024;

}  // namespace

AlignedBytes::AlignedBytes(size_t bytes) : size_(bytes) {
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  data_ = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
  MOETIER_CPU_CHECK(data_ != nullptr, "out of memory allocating engine buffers");
  std::memset(data_, 0, rounded);
}

AlignedBytes::~AlignedBytes() { std::free(data_); }

AlignedBytes::AlignedBytes(AlignedBytes&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBytes& AlignedBytes::operator=(AlignedBytes&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

size_t MaxActRowBytes(int64_t k) {
  size_t most = 0;
  // Every type the kernels take, so that a new one cannot undersize buffers.
  for (uint32_t id = 0; id < kTensorTypeIdLimit; ++id) {
    const std::optional<TensorTypeInfo> info = LookupTensorType(id);
    if (!info.has_value() || !cpu::SupportsWeightType(info->type)) continue;
    if (k % cpu::WeightBlockElems(info->type) == 0) {
      most = std::max(most, cpu::ActRowBytes(info->type, k));
    }
  }
  return most;
}

std::string_view CpuPhaseName(CpuPhase phase) {
  switch (phase) {
    case CpuPhase::kAttentionProjections:
      return "attention projections";
    case CpuPhase::kDeltaNetProjections:
      return "DeltaNet projections";
    case CpuPhase::kRouter:
      return "router";
    case CpuPhase::kExperts:
      return "experts";
    case CpuPhase::kOutput:
      return "output projection";
    case CpuPhase::kAttention:
      return "attention";
    case CpuPhase::kExpertFetch:
      return "expert fetch";
    case CpuPhase::kDeltaNet:
      return "DeltaNet recurrence";
    case CpuPhase::kSharedExpert:
      return "shared expert";
    case CpuPhase::kDenseFfn:
      return "dense ffn";
    case CpuPhase::kOther:
      return "other";
    case CpuPhase::kCount:
      break;
  }
  return "unknown";
}

MatJob MakeMatJob(const WeightRef& w, const uint8_t* w_data, const uint8_t* act, int64_t n_act,
                  float* out) {
  return {.type = w.type,
          .k = w.cols(),
          .rows = w.rows(),
          .w = w_data,
          .w_row_bytes = w.row_bytes,
          .act = act,
          .act_row_bytes = cpu::ActRowBytes(w.type, w.cols()),
          .n_act = n_act,
          .out = out,
          .ldo = w.rows()};
}

MatJob MakeMatJob(const ExpertMatrixShape& w, const uint8_t* w_data, const uint8_t* act,
                  int64_t n_act, float* out) {
  return {.type = w.type,
          .k = w.cols,
          .rows = w.rows,
          .w = w_data,
          .w_row_bytes = w.row_bytes,
          .act = act,
          .act_row_bytes = cpu::ActRowBytes(w.type, w.cols),
          .n_act = n_act,
          .out = out,
          .ldo = w.rows};
}

CpuMatRunner::CpuMatRunner(cpu::ThreadPool& pool, size_t max_jobs)
    : pool_(pool),
      jobs_(max_jobs),
      tasks_(max_jobs * kMaxChunksPerThread * static_cast<size_t>(pool.size())) {}

double CpuMatRunner::Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void CpuMatRunner::Run(const MatJob* jobs, int n_jobs, CpuPhase phase) {
  const double start = Now();
  const int64_t max_chunks = static_cast<int64_t>(kMaxChunksPerThread) * pool_.size();
  size_t n_tasks = 0;
  for (int j = 0; j < n_jobs; ++j) {
    const MatJob& job = jobs[j];
    if (job.n_act == 0 || job.rows == 0) continue;
    const uint64_t bytes = static_cast<uint64_t>(job.rows) * job.w_row_bytes;
    int64_t chunks = static_cast<int64_t>(bytes / kMinTaskWeightBytes);
    chunks = std::clamp<int64_t>(chunks, 1, std::min<int64_t>(max_chunks, job.rows));
    // Whole groups of 16 rows keep the kernels' row loops long.
    const int64_t per_chunk = ((job.rows + chunks - 1) / chunks + 15) / 16 * 16;
    for (int64_t r0 = 0; r0 < job.rows; r0 += per_chunk) {
      MOETIER_CPU_CHECK(n_tasks < tasks_.size(), "task list too small");
      tasks_[n_tasks++] = {j, r0, std::min(job.rows, r0 + per_chunk)};
    }
  }
  pool_.ParallelFor(static_cast<int64_t>(n_tasks), [&](int64_t t, int) {
    const Task& task = tasks_[t];
    const MatJob& job = jobs[task.job];
    cpu::MatMul(job.type, job.k, job.w, job.w_row_bytes, task.r0, task.r1, job.act,
                job.act_row_bytes, job.n_act, job.out, job.ldo);
  });
  AddPhaseTime(phase, Now() - start);
}

const uint8_t* CpuMatRunner::PrepareAct(AlignedBytes& dst_buffer, const float* x, int64_t n,
                                        int64_t k, TensorType type) {
  const size_t row_bytes = cpu::ActRowBytes(type, k);
  MOETIER_CPU_CHECK(static_cast<size_t>(n) * row_bytes <= dst_buffer.size(),
                    "activation buffer too small");
  uint8_t* dst = dst_buffer.data();
  // Rows are independent; split them when there are enough to matter.
  if (n >= 2 && n * k >= kMinParallelElems) {
    pool_.ParallelForRange(n, 1, [&](int64_t begin, int64_t end, int) {
      cpu::QuantizeActRows(type, x + begin * k, k, k, end - begin, dst + begin * row_bytes);
    });
  } else {
    cpu::QuantizeActRows(type, x, k, k, n, dst);
  }
  return dst;
}

void CpuMatRunner::SiluMulRows(float* gate, const float* up, int64_t rows, int64_t row_len) {
  ActivateRows(ExpertActivation::kSwiglu, gate, up, rows, row_len);
}

void CpuMatRunner::ActivateRows(ExpertActivation activation, float* gate, const float* up,
                                int64_t rows, int64_t row_len) {
  const auto activate =
      activation == ExpertActivation::kSwigluOai ? cpu::SwigluOaiMul : cpu::SiluMul;
  if (rows * row_len >= kMinParallelElems) {
    pool_.ParallelForRange(rows, 1, [&](int64_t begin, int64_t end, int) {
      activate(gate + begin * row_len, up + begin * row_len, (end - begin) * row_len,
               gate + begin * row_len);
    });
  } else {
    activate(gate, up, rows * row_len, gate);
  }
}

}  // namespace moetier
