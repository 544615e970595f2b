#include "backend/cpu/decoded_weight_gemm.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_kernels.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier::cpu {
namespace {

// Decoded rows per tile: 64 KiB of f32 stays in L2 while every activation row
// passes over it, so activations come from memory once per tile, not per row.
constexpr int64_t kDecodedTileFloats = 16 * 1024;

}  // namespace

bool IsDecodedWeightType(TensorType type) {
  switch (type) {
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kIQ4_NL:
    case TensorType::kMXFP4:
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

void DecodedWeightMatMul(TensorType type, int64_t k, const uint8_t* w, size_t w_row_bytes,
                         int64_t r0, int64_t r1, const uint8_t* act, size_t act_row_bytes,
                         int64_t n_act, float* out, int64_t ldo) {
  MOETIER_CPU_CHECK(IsDecodedWeightType(type) && k % GetTensorTypeInfo(type).block_elems == 0,
                    "not a decoded weight type, or k is not whole blocks");
  const int64_t tile_rows = std::max<int64_t>(1, kDecodedTileFloats / k);
  thread_local std::vector<float> decoded;
  decoded.resize(static_cast<size_t>(std::min(tile_rows, r1 - r0) * k));
  for (int64_t r = r0; r < r1; r += tile_rows) {
    const int64_t nr = std::min(tile_rows, r1 - r);
    for (int64_t i = 0; i < nr; ++i) {
      DequantizeRow(type, w + (r + i) * w_row_bytes, decoded.data() + i * k, k);
    }
    for (int64_t m = 0; m < n_act; ++m) {
      const float* a = reinterpret_cast<const float*>(act + m * act_row_bytes);
      float* o = out + m * ldo + r;
      for (int64_t i = 0; i < nr; ++i) o[i] = DotF32(decoded.data() + i * k, a, k);
    }
  }
}

}  // namespace moetier::cpu
