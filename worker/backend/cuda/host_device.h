// MOETIER_HOST_DEVICE: __host__ __device__ under nvcc, nothing elsewhere, for
// the plain C++ headers whose functions both the kernels and host tests
// evaluate (delta_rule.h, gemv_slices.h, expert_rows.h).
#pragma once

#if defined(__CUDACC__)
#define MOETIER_HOST_DEVICE __host__ __device__
#else
#define MOETIER_HOST_DEVICE
#endif
