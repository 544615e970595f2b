// Row codecs for the tensor types moetier computes with (SPEC.md §2.2–2.3):
// F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, IQ4_XS and the i-quant grid types IQ1_S, IQ1_M, IQ2_XXS,
// IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S (iq_grid_blocks.h). Layouts are byte-exact
// with ggml's, so the bytes read from a GGUF file are the bytes these functions see.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/tensor/quant_blocks.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {

// Decodes `n_elems` elements of `type` starting at `src` into `dst`.
// Preconditions: GetTensorTypeInfo(type).has_codec; n_elems is a multiple of
// the block size. Never fails: every bit pattern decodes to some float.
void DequantizeRow(TensorType type, const void* src, float* dst, int64_t n_elems);

// Encodes `n_elems` floats into `dst`, which must hold
// TensorRowBytes(type, n_elems) bytes. Uses the scale (and min) search each
// format is designed for, as llama-quantize does without an importance matrix
// (the i-quant grid types use a plainer search: codec_iq_grids.cc).
// Preconditions as for DequantizeRow; inputs must be finite, and the block
// scales must fit a half (|x| up to about 8e6 for Q8_0, 5e5 for Q4_0, larger
// for the K types), as in ggml. Deterministic: equal inputs give equal bytes.
void QuantizeRow(TensorType type, const float* src, void* dst, int64_t n_elems);

// Q8_K activation quantizer for dot products against K-quant weights (ggml's
// rule): per 256 elements, d = v / -127 where v is the element of largest
// magnitude, qs = round-to-nearest-even(x / d) capped at 127, and bsums the
// sums of 16 consecutive qs. An all-zero block gets d = 0 and qs = 0.
// Precondition: n_elems is a multiple of 256; inputs finite.
void QuantizeRowQ8K(const float* src, BlockQ8K* dst, int64_t n_elems);

// y = d * qs. Precondition: n_elems is a multiple of 256.
void DequantizeRowQ8K(const BlockQ8K* src, float* dst, int64_t n_elems);

}  // namespace moetier
