// MOETIER_HOST_DEVICE: __host__ __device__ under nvcc, nothing elsewhere, for
// the plain C++ headers whose functions both the CUDA kernels and the host
// code evaluate (base/rope_angles.h, and delta_rule.h, gemv_slices.h
// and expert_rows.h beside the kernels), so that each formula is written once.
#pragma once

#if defined(__CUDACC__)
#define MOETIER_HOST_DEVICE __host__ __device__
#else
#define MOETIER_HOST_DEVICE
#endif
