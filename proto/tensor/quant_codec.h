// Row codecs for the tensor types moetier computes with (SPEC.md §2.2–2.3):
// F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K. Layouts are byte-exact with
// ggml's, so the bytes read from a GGUF file are the bytes these functions see.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/tensor_type.h"

namespace moetier {

// Decodes `n_elems` elements of `type` starting at `src` into `dst`.
// Preconditions: GetTensorTypeInfo(type).has_codec; n_elems is a multiple of
// the block size. Never fails: every bit pattern decodes to some float.
void DequantizeRow(TensorType type, const void* src, float* dst, int64_t n_elems);

// Encodes `n_elems` floats into `dst`, which must hold
// TensorRowBytes(type, n_elems) bytes. Uses the scale (and min) search each
// format is designed for, as llama-quantize does without an importance matrix.
// Preconditions as for DequantizeRow; inputs must be finite.
void QuantizeRow(TensorType type, const float* src, void* dst, int64_t n_elems);

}  // namespace moetier
