#include "backend/cpu/kernels_iq_grids.h"

#include <cstddef>
#include <cstdint>

#include "backend/cpu/block_layouts.h"
#include "gguf/tensor/iq_grid_blocks.h"

namespace moetier::cpu {
namespace {

// Σ over the block of scale[g] · Σ_{e in g} q[e]·a[e].
int32_t BlockDot(const IqGridValues& w, const int8_t* a) {
  int32_t total = 0;
  for (int g = 0; g < kQK_K / kIqGridScaleGroup; ++g) {
    const int8_t* q = w.q + g * kIqGridScaleGroup;
    const int8_t* x = a + g * kIqGridScaleGroup;
    int32_t s = 0;
    for (int j = 0; j < kIqGridScaleGroup; ++j) s += q[j] * x[j];
    total += w.scale[g] * s;
  }
  return total;
}

template <TensorType kType>
void GemmIqGrid(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                size_t act_stride, int n_act, float* out, int64_t ldo) {
  const int64_t block_bytes = GetTensorTypeInfo(kType).block_bytes;
  const int64_t n_blocks = k / kQK_K;
  IqGridValues unpacked;
  for (int64_t r = 0; r < n_rows; ++r) {
    float sum[kMaxActTile] = {};
    const uint8_t* row = w + r * w_stride;
    for (int64_t b = 0; b < n_blocks; ++b) {
      UnpackIqGridBlock(kType, row + b * block_bytes, &unpacked);
      for (int m = 0; m < n_act; ++m) {
        const Q8KRow a = Q8KRowAt(act + m * act_stride, k);
        sum[m] += a.d[b] * unpacked.d * static_cast<float>(BlockDot(unpacked, a.qs + b * kQK_K));
      }
    }
    for (int m = 0; m < n_act; ++m) out[m * ldo + r] = sum[m];
  }
}

}  // namespace

GemmTileFn IqGridGemmTile(TensorType type) {
  switch (type) {
    case TensorType::kIQ2_XXS:
      return GemmIqGrid<TensorType::kIQ2_XXS>;
    case TensorType::kIQ2_XS:
      return GemmIqGrid<TensorType::kIQ2_XS>;
    case TensorType::kIQ2_S:
      return GemmIqGrid<TensorType::kIQ2_S>;
    case TensorType::kIQ3_XXS:
      return GemmIqGrid<TensorType::kIQ3_XXS>;
    case TensorType::kIQ3_S:
      return GemmIqGrid<TensorType::kIQ3_S>;
    case TensorType::kIQ1_S:
      return GemmIqGrid<TensorType::kIQ1_S>;
    case TensorType::kIQ1_M:
      return GemmIqGrid<TensorType::kIQ1_M>;
    default:
      return nullptr;
  }
}

}  // namespace moetier::cpu
