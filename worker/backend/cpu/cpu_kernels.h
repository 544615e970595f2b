// CPU matrix kernels on quantized weight blocks, chosen at run time for the
// best instruction set the processor has (scalar, AVX2, AVX-512).
//
// Weights stay in the file's encoding. Activations are prepared once per
// matrix input (QuantizeActRows) in the format the weight type pairs with,
// as llama.cpp pairs them: Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS and the i-quant
// grid types (IQ1_S/IQ1_M/IQ2_XXS/IQ2_XS/IQ2_S/IQ3_XXS/IQ3_S) with Q8_K;
// Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL/MXFP4 with Q8_0 (llama.cpp's Q8_1 for Q4_1
// and Q5_1 carries the same numbers); and F32/F16/BF16 with plain f32. For quantized weights a row
// carries, after that plane, a second one in the same format that quantizes the first one's
// rounding error, about 15 bits a value instead of 8 (8-bit activations cost llama.cpp most of its
// error against exact logits). The prepared rows are then shared by every weight row, and MatMul
// over disjoint row ranges can run on many threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cpu/kv_limits.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier::cpu {

enum class SimdLevel : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

std::string_view SimdLevelName(SimdLevel level);
absl::StatusOr<SimdLevel> ParseSimdLevel(std::string_view name);  // "scalar", "avx2", "avx512"

// The best level this processor supports.
SimdLevel BestSupportedSimdLevel();
bool SimdLevelSupported(SimdLevel level);

// The level the kernels use. Starts as BestSupportedSimdLevel(), or as the
// level named by the environment variable MOETIER_CPU_SIMD when it is set and
// supported (an unsupported or unknown name is reported on stderr once and
// ignored).
SimdLevel ActiveSimdLevel();
// Switches every kernel to `level` (tests, benchmarks). Not meant to be
// called while kernels run on other threads.
absl::Status SetSimdLevel(SimdLevel level);

enum class ActFormat { kF32, kQ8_0, kQ8_K };

// Whether MatMul handles weights of `type`: F32, F16, BF16, Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ1_S,
// IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S.
bool SupportsWeightType(TensorType type);
// Precondition for the functions below: SupportsWeightType(weight_type).
ActFormat ActFormatFor(TensorType weight_type);
// Elements per block along k that the weight type requires (1, 32 or 256).
int64_t WeightBlockElems(TensorType weight_type);
// Whether quantized activation rows carry the residual plane ("q8x2": about
// 15 bits a value, mean KL from exact logits 1e-8 instead of about 1e-2, at
// roughly half the prompt speed on few cores) or not ("q8", llama.cpp's
// formats, the default). Fixed at first use: by SetActivationsResidualPlane
// if called before, else by the environment variable MOETIER_CPU_ACTIVATIONS
// (q8 or q8x2).
bool ActivationsHaveResidualPlane();
// Chooses the format; FailedPrecondition once it is fixed otherwise.
absl::Status SetActivationsResidualPlane(bool on);
// Bytes of one prepared activation row of k values for `weight_type`
// weights; a multiple of 64. Precondition: k is a multiple of
// WeightBlockElems(weight_type).
size_t ActRowBytes(TensorType weight_type, int64_t k);

// Prepares n_rows activation rows (row m at x + m * x_stride floats) for
// `weight_type` weights; row m is written at dst + m * ActRowBytes(..).
void QuantizeActRows(TensorType weight_type, const float* x, int64_t x_stride, int64_t k,
                     int64_t n_rows, void* dst);

// For weight rows r in [r0, r1) and activation rows m in [0, n_act):
//   out[m * ldo + r] = sum_j W[r, j] * act_m[j]
// W row r starts at w + r * w_row_bytes; activation row m (prepared by
// QuantizeActRows) at act + m * act_row_bytes, which must be 64-byte
// aligned (a 64-byte aligned buffer and ActRowBytes rows are). Each weight
// block is unpacked once for up to 8 activation rows (4 on AVX2), and a tile
// of weight rows stays in cache while the rest of the batch passes over it.
void MatMul(TensorType weight_type, int64_t k, const void* w, size_t w_row_bytes, int64_t r0,
            int64_t r1, const void* act, size_t act_row_bytes, int64_t n_act, float* out,
            int64_t ldo);

// Plain f32 vector helpers at the active level.
float DotF32(const float* a, const float* b, int64_t n);
void AxpyF32(float a, const float* x, float* y, int64_t n);  // y += a * x
void ScaleF32(float a, float* y, int64_t n);                 // y *= a
// Sum of x, read with independent accumulators so that a long array runs at
// the memory's streaming rate (the bandwidth probe of the benchmark).
float SumF32(const float* x, int64_t n);
// Attention of n_q query heads sharing one KV head (see cpu_ops.h
// AttentionHeads for the layout, kernel_table.h AttendFn for `sinks`);
// `scores` holds n_q * (n_kv + 1) floats.
void AttendF32(const float* q, int n_q, const float* k, const float* v, int64_t kv_stride,
               int64_t n_kv, int head_dim, float scale, float* scores, float* out,
               const float* sinks = nullptr);
// x = softmax(x) in place, with the exponential AttendF32 uses at the level.
void SoftmaxF32(float* x, int64_t n);
// The value half of attention over stored rows of F32, F16, Q8_0 or Q4_0
// (kernel_table.h AccumulateValuesFn): out_i += sum_t weights_i[t] value_t,
// each row decoded once for the n_q heads. head_dim <= kMaxKvHeadDim, a
// multiple of 32 for Q8_0 and Q4_0.
void AccumulateKvValues(TensorType type, const uint8_t* rows, int64_t row_stride, int64_t n_rows,
                        const float* weights, int64_t w_stride, int n_q, int head_dim,
                        float* out);

}  // namespace moetier::cpu
