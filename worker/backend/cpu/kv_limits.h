// Limits of the kernels over stored KV cache rows, shared by the public
// interface (cpu_kernels.h) and the per-instruction-set tables.
#pragma once

namespace moetier::cpu {

// The most values one KV head's row may hold in AccumulateKvValues.
inline constexpr int kMaxKvHeadDim = 512;

}  // namespace moetier::cpu
