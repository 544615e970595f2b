// The i-quant grid types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S) unpacked to small integers. Every one of them decodes as
// y[e] = (d * scale[e / 16]) * q[e], so one integer dot product against
// 8-bit activations serves all seven, and the float decoder rounds exactly as
// ggml's does (the factors folded into d and q are powers of two).
#pragma once

#include <cstdint>

#include "gguf/tensor/tensor_type.h"

namespace moetier {

inline constexpr int kIqGridScaleGroup = 16;  // values sharing one scale

struct IqGridValues {
  float d = 0.0f;       // the block scale times the type's factor (1/8, 1/4 or 1)
  int16_t scale[16]{};  // 2s + 1 of the 16-value group
  int8_t q[256]{};      // grid value with its sign; IQ1: 8 * (grid + delta)
};

bool IsIqGridType(TensorType type);

// Unpacks one block of `type` (IsIqGridType) from its file bytes (no
// alignment needed). Every bit pattern is a valid block.
void UnpackIqGridBlock(TensorType type, const void* block, IqGridValues* out);

}  // namespace moetier
