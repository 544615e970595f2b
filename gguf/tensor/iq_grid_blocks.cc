#include "gguf/tensor/iq_grid_blocks.h"

#include <cstring>

#include "base/check.h"
#include "gguf/tensor/half.h"
#include "gguf/tensor/iq_grids.h"
#include "gguf/tensor/quant_blocks.h"

namespace moetier {
namespace {

template <typename Block>
Block Load(const void* src) {
  Block b;
  std::memcpy(&b, src, sizeof(b));
  return b;
}

// Eight signed values: grid magnitudes with sign bit j of `signs` negating value j.
template <typename Grid>
void PutSigned8(const Grid& g0, const Grid& g1, uint8_t signs, int8_t* q) {
  constexpr int kWidth = static_cast<int>(sizeof(Grid));  // 8, or 4 when two entries make a group
  for (int j = 0; j < 8; ++j) {
    const int m = j < kWidth ? g0[j] : g1[j - kWidth];
    q[j] = static_cast<int8_t>((signs >> j) & 1 ? -m : m);
  }
}

// The same scale for both 16-value halves of 32-value group g.
void PutScale32(int g, int ls, IqGridValues* out) {
  out->scale[2 * g] = static_cast<int16_t>(ls);
  out->scale[2 * g + 1] = static_cast<int16_t>(ls);
}

void UnpackIQ2_XXS(const void* src, IqGridValues* out) {
  const auto b = Load<BlockIQ2_XXS>(src);
  out->d = HalfToFloat(b.d) * 0.125f;
  for (int g = 0; g < 8; ++g) {
    uint32_t idx;
    uint32_t signs_scale;
    std::memcpy(&idx, b.qs + 4 * g, 4);
    std::memcpy(&signs_scale, b.qs + 4 * g + 2, 4);
    PutScale32(g, 2 * static_cast<int>(signs_scale >> 28) + 1, out);
    for (int l = 0; l < 4; ++l) {
      const IqGrid8& grid = kIq2XxsGrid[(idx >> (8 * l)) & 0xFF];
      PutSigned8(grid, grid, IqSignsFromSevenBits(signs_scale >> (7 * l)), out->q + 32 * g + 8 * l);
    }
  }
}

// IQ2_XS and IQ2_S keep a scale nibble per 16 values, the low one first.
template <typename Block>
void PutNibbleScales16(const Block& b, IqGridValues* out) {
  for (int g = 0; g < 8; ++g) {
    out->scale[2 * g] = static_cast<int16_t>(2 * (b.scales[g] & 0x0F) + 1);
    out->scale[2 * g + 1] = static_cast<int16_t>(2 * (b.scales[g] >> 4) + 1);
  }
}

void UnpackIQ2_XS(const void* src, IqGridValues* out) {
  const auto b = Load<BlockIQ2_XS>(src);
  out->d = HalfToFloat(b.d) * 0.125f;
  PutNibbleScales16(b, out);
  for (int i = 0; i < 32; ++i) {
    const IqGrid8& grid = kIq2XsGrid[b.qs[i] & 511];
    PutSigned8(grid, grid, IqSignsFromSevenBits(b.qs[i] >> 9), out->q + 8 * i);
  }
}

void UnpackIQ2_S(const void* src, IqGridValues* out) {
  const auto b = Load<BlockIQ2_S>(src);
  out->d = HalfToFloat(b.d) * 0.125f;
  PutNibbleScales16(b, out);
  for (int i = 0; i < 32; ++i) {
    const int high = (b.qh[i / 4] >> (2 * (i % 4))) & 3;
    const IqGrid8& grid = kIq2SGrid[b.qs[i] | (high << 8)];
    PutSigned8(grid, grid, b.qs[32 + i], out->q + 8 * i);
  }
}

void UnpackIQ3_XXS(const void* src, IqGridValues* out) {
  const auto b = Load<BlockIQ3_XXS>(src);
  out->d = HalfToFloat(b.d) * 0.25f;
  for (int g = 0; g < 8; ++g) {
    uint32_t signs_scale;
    std::memcpy(&signs_scale, b.qs + 64 + 4 * g, 4);
    PutScale32(g, 2 * static_cast<int>(signs_scale >> 28) + 1, out);
    for (int l = 0; l < 4; ++l) {
      const uint8_t* idx = b.qs + 8 * g + 2 * l;
      PutSigned8(kIq3XxsGrid[idx[0]], kIq3XxsGrid[idx[1]],
                 IqSignsFromSevenBits(signs_scale >> (7 * l)), out->q + 32 * g + 8 * l);
    }
  }
}

void UnpackIQ3_S(const void* src, IqGridValues* out) {
  const auto b = Load<BlockIQ3_S>(src);
  out->d = HalfToFloat(b.d);
  for (int g = 0; g < 8; ++g) {
    PutScale32(g, 2 * ((b.scales[g / 2] >> (4 * (g % 2))) & 0x0F) + 1, out);
    for (int l = 0; l < 4; ++l) {
      const int i0 = 2 * l;
      const int i1 = 2 * l + 1;
      const IqGrid4& g0 = kIq3SGrid[b.qs[8 * g + i0] | (((b.qh[g] >> i0) & 1) << 8)];
      const IqGrid4& g1 = kIq3SGrid[b.qs[8 * g + i1] | (((b.qh[g] >> i1) & 1) << 8)];
      PutSigned8(g0, g1, b.signs[4 * g + l], out->q + 32 * g + 8 * l);
    }
  }
}

// Eight values 8 * (grid + delta), delta = -1/8 when `negative_delta`.
void PutIq1Group(int index, bool negative_delta, int8_t* q) {
  const std::array<int8_t, 8>& grid = kIq1SGrid[index];
  for (int j = 0; j < 8; ++j) q[j] = static_cast<int8_t>(8 * grid[j] + (negative_delta ? -1 : 1));
}

void UnpackIQ1_S(const void* src, IqGridValues* out) {
  const auto b = Load<BlockIQ1_S>(src);
  out->d = HalfToFloat(b.d) * 0.125f;
  for (int g = 0; g < 8; ++g) {
    const uint16_t qh = b.qh[g];
    PutScale32(g, 2 * ((qh >> 12) & 7) + 1, out);
    for (int l = 0; l < 4; ++l) {
      PutIq1Group(b.qs[4 * g + l] | (((qh >> (3 * l)) & 7) << 8), (qh & 0x8000) != 0,
                  out->q + 32 * g + 8 * l);
    }
  }
}

void UnpackIQ1_M(const void* src, IqGridValues* out) {
  const auto b = Load<BlockIQ1_M>(src);
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof(sc));
  const uint16_t d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                                ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
  out->d = HalfToFloat(d_bits) * 0.125f;
  for (int h = 0; h < 16; ++h) {
    out->scale[h] = static_cast<int16_t>(2 * ((sc[h / 4] >> (3 * (h % 4))) & 7) + 1);
  }
  for (int i = 0; i < 32; ++i) {
    const int nibble = (b.qh[i / 2] >> (4 * (i % 2))) & 0x0F;
    PutIq1Group(b.qs[i] | ((nibble & 7) << 8), (nibble & 8) != 0, out->q + 8 * i);
  }
}

}  // namespace

bool IsIqGridType(TensorType type) {
  switch (type) {
    case TensorType::kIQ2_XXS:
    case TensorType::kIQ2_XS:
    case TensorType::kIQ2_S:
    case TensorType::kIQ3_XXS:
    case TensorType::kIQ3_S:
    case TensorType::kIQ1_S:
    case TensorType::kIQ1_M:
      return true;
    default:
      return false;
  }
}

void UnpackIqGridBlock(TensorType type, const void* block, IqGridValues* out) {
  switch (type) {
    case TensorType::kIQ2_XXS:
      return UnpackIQ2_XXS(block, out);
    case TensorType::kIQ2_XS:
      return UnpackIQ2_XS(block, out);
    case TensorType::kIQ2_S:
      return UnpackIQ2_S(block, out);
    case TensorType::kIQ3_XXS:
      return UnpackIQ3_XXS(block, out);
    case TensorType::kIQ3_S:
      return UnpackIQ3_S(block, out);
    case TensorType::kIQ1_S:
      return UnpackIQ1_S(block, out);
    case TensorType::kIQ1_M:
      return UnpackIQ1_M(block, out);
    default:
      MOETIER_CHECK(false && "not an i-quant grid type");
  }
}

}  // namespace moetier
