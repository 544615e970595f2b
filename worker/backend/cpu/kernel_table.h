// The per-instruction-set kernel tables behind cpu_kernels.h. Each table is
// defined in its own translation unit, compiled for its instruction set; the
// dispatcher picks one at run time. Kernels know nothing about models.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/kv_limits.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier::cpu {

inline constexpr int kMaxActTile = 8;  // activation rows one kernel call handles

// For r in [0, n_rows) and m in [0, n_act): out[m * ldo + r] = dot(weight row r,
// activation row m). Weight row r starts at w + r * w_stride; activation row m
// at act + m * act_stride, in the format its weight type pairs with
// (block_layouts.h). 1 <= n_act <= kMaxActTile; k is a multiple of the
// weight type's block size (any k for F32, F16 and BF16).
using GemmTileFn = void (*)(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows,
                            const uint8_t* act, size_t act_stride, int n_act, float* out,
                            int64_t ldo);

// Quantizes k floats into one activation row (block_layouts.h). Every level
// writes exactly the bytes of the scalar version.
using QuantizeActFn = void (*)(const float* x, int64_t k, uint8_t* dst);

// Attention of n_q query heads that share one KV head over all n_kv cached
// positions (the caller limits n_kv to apply causality): for query
// head i (row q + i * head_dim), scores over positions t < n_kv of
// scale * q_i . k_t, softmax, and out_i = sum_t p_t v_t. Key and value rows
// are at k + t * kv_stride and v + t * kv_stride; `scores` holds
// n_q * (n_kv + 1) floats of scratch. With `sinks` (n_q logits; null: none)
// head i's softmax takes sinks[i] as one more score that adds no value.
using AttendFn = void (*)(const float* q, int n_q, const float* k, const float* v,
                          int64_t kv_stride, int64_t n_kv, int head_dim, float scale, float* scores,
                          float* out, const float* sinks);

// The value half of attention over a stored KV cache: for each of n_rows
// rows of `type` (F32, F16, Q8_0 or Q4_0; row t at rows + t * row_stride,
// head_dim <= kMaxKvHeadDim values, a multiple of 32 for the block types)
// and each of n_q heads, out[i * head_dim + d] += weights[i * w_stride + t]
// * value_t[d], rows in order. Each row is decoded once for all heads.
using AccumulateValuesFn = void (*)(TensorType type, const uint8_t* rows, int64_t row_stride,
                                    int64_t n_rows, const float* weights, int64_t w_stride,
                                    int n_q, int head_dim, float* out);

struct KernelTable {
  GemmTileFn gemm_f32;
  GemmTileFn gemm_f16;
  GemmTileFn gemm_bf16;
  GemmTileFn gemm_q8_0;
  GemmTileFn gemm_q4_0;
  GemmTileFn gemm_q4_k;
  GemmTileFn gemm_q5_k;
  GemmTileFn gemm_q6_k;
  GemmTileFn gemm_q4_1;
  GemmTileFn gemm_q5_0;
  GemmTileFn gemm_q5_1;
  GemmTileFn gemm_iq4_nl;
  GemmTileFn gemm_mxfp4;
  GemmTileFn gemm_q2_k;
  GemmTileFn gemm_q3_k;
  GemmTileFn gemm_iq4_xs;
  // IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (gemm_iq_grids.h).
  // These take any n_act >= 1: they decode a block once for all the rows.
  GemmTileFn gemm_iq_grid[7];
  QuantizeActFn quantize_q8_0;
  QuantizeActFn quantize_q8_k;
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n);  // y += a * x
  void (*scale_f32)(float a, float* y, int64_t n);                 // y *= a
  float (*sum_f32)(const float* x, int64_t n);                     // with independent accumulators
  AttendFn attend_f32;
  void (*softmax_f32)(float* x, int64_t n);  // in place, normalized
  AccumulateValuesFn accumulate_kv_values;
};

extern const KernelTable kScalarKernels;
#if defined(MOETIER_CPU_X86_KERNELS)
extern const KernelTable kAvx2Kernels;    // AVX2 + FMA + F16C
extern const KernelTable kAvx512Kernels;  // AVX-512 F/BW/VL/DQ/VNNI
#endif

}  // namespace moetier::cpu
