// Matrix kernels for the i-quant grid types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S) against Q8_K activation rows, as llama.cpp pairs
// them. One portable kernel serves every instruction-set level: each weight
// block is unpacked once to 8-bit values (gguf/tensor/iq_grid_blocks.h) for
// all activation rows of the call, and the inner products are plain int8 loops
// the compiler vectorizes.
#pragma once

#include "backend/cpu/kernel_table.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier::cpu {

// The GemmTileFn for `type` (IsIqGridType), nullptr for other types.
GemmTileFn IqGridGemmTile(TensorType type);

}  // namespace moetier::cpu
