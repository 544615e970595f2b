// How every CPU block runs its matrix products: activation rows prepared
// once per weight format (QuantizeActRows), then a fused dispatch of
// products split into row chunks over the thread pool, with the time
// booked to a phase of the forward pass.
//
// Results do not depend on the thread count, the chunking or the batch
// size: each output element is computed by one kernel call whose
// arithmetic is fixed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "gguf/tensor/tensor_type.h"
#include "engine/expert_source.h"
#include "model/model.h"

namespace moetier {

// A 64-byte aligned, zeroed array that is sized once.
class AlignedBytes {
 public:
  AlignedBytes() = default;
  explicit AlignedBytes(size_t bytes);
  ~AlignedBytes();
  AlignedBytes(AlignedBytes&& other) noexcept;
  AlignedBytes& operator=(AlignedBytes&& other) noexcept;
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;

  uint8_t* data() const { return data_; }
  float* floats() const { return reinterpret_cast<float*>(data_); }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The most bytes one prepared activation row of k values takes, over every
// weight type whose blocks divide k.
size_t MaxActRowBytes(int64_t k);

// Where a forward pass spends its time (wall seconds on the calling
// thread). Matrix phases cover their whole parallel dispatch; kOther is
// everything else (embedding, norms, rope, activation quantization,
// routing, combining).
enum class CpuPhase : int {
  kAttentionProjections = 0,  // attention q/k/v and output projections
  kDeltaNetProjections,       // Gated DeltaNet in (qkv, z, alpha, beta) and out projections
  kRouter,                    // router logits
  kExperts,                   // expert gate, up and down projections
  kOutput,                    // output projection
  kAttention,                 // attention over the KV cache
  kExpertFetch,   // waiting for an ExpertWeightSource (store hits, misses read from disk)
  kDeltaNet,      // Gated DeltaNet conv, recurrence and gated norm
  kSharedExpert,  // the shared expert's projections
  kDenseFfn,      // the FFN of a layer without experts (FfnKind::kDense)
  kOther,
  kCount,
};
std::string_view CpuPhaseName(CpuPhase phase);
using CpuPhaseSeconds = std::array<double, static_cast<size_t>(CpuPhase::kCount)>;

// One matrix product in a fused dispatch: out[m * ldo + r] = W row r . act
// row m, for every weight row r and activation row m < n_act.
struct MatJob {
  TensorType type = TensorType::kF32;
  int64_t k = 0;     // input length
  int64_t rows = 0;  // output rows
  const uint8_t* w = nullptr;  // row 0
  size_t w_row_bytes = 0;
  const uint8_t* act = nullptr;  // prepared activation rows
  size_t act_row_bytes = 0;
  int64_t n_act = 0;
  float* out = nullptr;
  int64_t ldo = 0;
};

// The product of a matrix (a 2-D tensor, or one expert of a 3-D one, whose
// bytes start at w_data) with n_act prepared rows; out gets one row of
// `rows` values per activation row.
MatJob MakeMatJob(const WeightRef& w, const uint8_t* w_data, const uint8_t* act, int64_t n_act,
                  float* out);
MatJob MakeMatJob(const ExpertMatrixShape& w, const uint8_t* w_data, const uint8_t* act,
                  int64_t n_act, float* out);

class CpuMatRunner {
 public:
  // Room for dispatches of up to max_jobs products. `pool` must outlive this.
  CpuMatRunner(cpu::ThreadPool& pool, size_t max_jobs);

  cpu::ThreadPool& pool() const { return pool_; }
  // Scratch for building a dispatch (max_jobs entries).
  MatJob* jobs() { return jobs_.data(); }
  size_t max_jobs() const { return jobs_.size(); }

  // Runs the jobs in one parallel dispatch; the time goes to `phase`.
  void Run(const MatJob* jobs, int n_jobs, CpuPhase phase);

  // Prepares n rows of k floats (row stride k) for weights of `type` into
  // `dst` (which holds them), split over threads when there are enough.
  const uint8_t* PrepareAct(AlignedBytes& dst, const float* x, int64_t n, int64_t k,
                            TensorType type);
  // gate = silu(gate) * up over `rows` rows of `row_len` values, split
  // over threads by whole rows when there are many values.
  void SiluMulRows(float* gate, const float* up, int64_t rows, int64_t row_len);
  // The same with the expert activation `activation` (SiluMulRows for
  // kSwiglu).
  void ActivateRows(ExpertActivation activation, float* gate, const float* up, int64_t rows,
                    int64_t row_len);

  CpuPhaseSeconds& phase_seconds() { return phase_seconds_; }
  const CpuPhaseSeconds& phase_seconds() const { return phase_seconds_; }
  void AddPhaseTime(CpuPhase phase, double seconds) {
    phase_seconds_[static_cast<size_t>(phase)] += seconds;
  }
  // Monotonic seconds, for phase timing.
  static double Now();

 private:
  struct Task {
    int32_t job;
    int64_t r0, r1;
  };

  cpu::ThreadPool& pool_;
  std::vector<MatJob> jobs_;
  std::vector<Task> tasks_;
  CpuPhaseSeconds phase_seconds_{};
};

}  // namespace moetier
