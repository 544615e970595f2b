#include "blocks/cpu/cpu_batch.h"

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_ops.h"

namespace moetier {

CpuBatch::CpuBatch(int64_t n_embd, int max_batch, CpuMatRunner& runner)
    : n_embd_(n_embd),
      max_batch_(max_batch),
      runner_(runner),
      x_(static_cast<size_t>(max_batch) * n_embd * sizeof(float)),
      xn_(static_cast<size_t>(max_batch) * n_embd * sizeof(float)),
      scratch_(static_cast<size_t>(max_batch) * n_embd * sizeof(float)) {
  for (Prepared& p : prepared_) {
    p.bytes = AlignedBytes(static_cast<size_t>(max_batch) * MaxActRowBytes(n_embd));
  }
}

void CpuBatch::NormRows(int first, int count, const float* w, float eps) {
  for (int i = 0; i < count; ++i) {
    cpu::RmsNorm(x() + (first + i) * n_embd_, w, n_embd_, eps, xn() + i * n_embd_);
  }
  ForgetInputs();
}

void CpuBatch::NormRowList(std::span<const int> rows, const float* w, float eps) {
  for (size_t i = 0; i < rows.size(); ++i) {
    cpu::RmsNorm(x() + rows[i] * n_embd_, w, n_embd_, eps, xn() + i * n_embd_);
  }
  ForgetInputs();
}

const uint8_t* CpuBatch::PrepareInput(int n, TensorType type) {
  // One buffer per format: the format alone decides the bytes.
  Prepared& p = prepared_[static_cast<size_t>(cpu::ActFormatFor(type))];
  if (!p.fresh) {
    runner_.PrepareAct(p.bytes, xn(), n, n_embd_, type);
    p.fresh = true;
  }
  return p.bytes.data();
}

void CpuBatch::ForgetInputs() {
  for (Prepared& p : prepared_) p.fresh = false;
}

uint64_t CpuBatch::allocated_bytes() const {
  uint64_t bytes = x_.size() + xn_.size() + scratch_.size();
  for (const Prepared& p : prepared_) bytes += p.bytes.size();
  return bytes;
}

}  // namespace moetier
