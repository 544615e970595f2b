// Matrix products for the weight types without integer kernels of their own:
// Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K and IQ4_XS. A tile of weight
// rows is decoded to f32 with the file codec (gguf/tensor/quant_codec.h) and
// dotted with plain f32 activations at the active SIMD level, so these types
// give the fp32 reference's values up to summation order, at the cost of a
// decode per weight row per call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/tensor/tensor_type.h"

namespace moetier::cpu {

// Whether `type` is computed by decoding (the types above).
bool IsDecodedWeightType(TensorType type);

// For weight rows r in [r0, r1) and f32 activation rows m in [0, n_act):
//   out[m * ldo + r] = sum_j decode(W row r)[j] * act_m[j]
// W row r at w + r * w_row_bytes, activation row m at act + m * act_row_bytes.
// Preconditions: IsDecodedWeightType(type); k a multiple of its block size.
void DecodedWeightMatMul(TensorType type, int64_t k, const uint8_t* w, size_t w_row_bytes,
                         int64_t r0, int64_t r1, const uint8_t* act, size_t act_row_bytes,
                         int64_t n_act, float* out, int64_t ldo);

}  // namespace moetier::cpu
