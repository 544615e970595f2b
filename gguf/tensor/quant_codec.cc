#include "gguf/tensor/quant_codec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gguf/tensor/codec_internal.h"
#include "gguf/tensor/half.h"
#include "gguf/tensor/iq_grid_blocks.h"

namespace moetier {

namespace ci = codec_internal;

namespace {

int64_t CheckedBlockCount(TensorType type, int64_t n_elems) {
  const TensorTypeInfo& info = GetTensorTypeInfo(type);
  MOETIER_CHECK(info.has_codec);
  MOETIER_CHECK(n_elems >= 0 && n_elems % info.block_elems == 0);
  return n_elems / info.block_elems;
}

}  // namespace

void DequantizeRow(TensorType type, const void* src, float* dst, int64_t n_elems) {
  const int64_t n_blocks = CheckedBlockCount(type, n_elems);
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n_elems) * sizeof(float));
      return;
    case TensorType::kF16:
      for (int64_t i = 0; i < n_elems; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, sizeof(h));
        dst[i] = HalfToFloat(h);
      }
      return;
    case TensorType::kBF16:
      for (int64_t i = 0; i < n_elems; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, sizeof(h));
        dst[i] = Bf16ToFloat(h);
      }
      return;
    case TensorType::kQ8_0:
      ci::DequantizeQ8_0(src, dst, n_blocks);
      return;
    case TensorType::kQ4_0:
      ci::DequantizeQ4_0(src, dst, n_blocks);
      return;
    case TensorType::kQ4_K:
      ci::DequantizeQ4_K(src, dst, n_blocks);
      return;
    case TensorType::kQ5_K:
      ci::DequantizeQ5_K(src, dst, n_blocks);
      return;
    case TensorType::kQ6_K:
      ci::DequantizeQ6_K(src, dst, n_blocks);
      return;
    case TensorType::kQ4_1:
      ci::DequantizeQ4_1(src, dst, n_blocks);
      return;
    case TensorType::kQ5_0:
      ci::DequantizeQ5_0(src, dst, n_blocks);
      return;
    case TensorType::kQ5_1:
      ci::DequantizeQ5_1(src, dst, n_blocks);
      return;
    case TensorType::kQ2_K:
      ci::DequantizeQ2_K(src, dst, n_blocks);
      return;
    case TensorType::kQ3_K:
      ci::DequantizeQ3_K(src, dst, n_blocks);
      return;
    case TensorType::kIQ4_NL:
      ci::DequantizeIQ4_NL(src, dst, n_blocks);
      return;
    case TensorType::kIQ4_XS:
      ci::DequantizeIQ4_XS(src, dst, n_blocks);
      return;
    case TensorType::kMXFP4:
      ci::DequantizeMXFP4(src, dst, n_blocks);
      return;
    default:
      if (IsIqGridType(type)) return ci::DequantizeIqGrid(type, src, dst, n_blocks);
      break;
  }
  MOETIER_CHECK(false && "has_codec type without a decoder");
}

void QuantizeRow(TensorType type, const float* src, void* dst, int64_t n_elems) {
  const int64_t n_blocks = CheckedBlockCount(type, n_elems);
  auto* bytes = static_cast<uint8_t*>(dst);
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n_elems) * sizeof(float));
      return;
    case TensorType::kF16:
      for (int64_t i = 0; i < n_elems; ++i) {
        const uint16_t h = FloatToHalf(src[i]);
        std::memcpy(bytes + 2 * i, &h, sizeof(h));
      }
      return;
    case TensorType::kBF16:
      for (int64_t i = 0; i < n_elems; ++i) {
        const uint16_t h = FloatToBf16(src[i]);
        std::memcpy(bytes + 2 * i, &h, sizeof(h));
      }
      return;
    case TensorType::kQ8_0:
      ci::QuantizeQ8_0(src, dst, n_blocks);
      return;
    case TensorType::kQ4_0:
      ci::QuantizeQ4_0(src, dst, n_blocks);
      return;
    case TensorType::kQ4_K:
      ci::QuantizeQ4_K(src, dst, n_blocks);
      return;
    case TensorType::kQ5_K:
      ci::QuantizeQ5_K(src, dst, n_blocks);
      return;
    case TensorType::kQ6_K:
      ci::QuantizeQ6_K(src, dst, n_blocks);
      return;
    case TensorType::kQ4_1:
      ci::QuantizeQ4_1(src, dst, n_blocks);
      return;
    case TensorType::kQ5_0:
      ci::QuantizeQ5_0(src, dst, n_blocks);
      return;
    case TensorType::kQ5_1:
      ci::QuantizeQ5_1(src, dst, n_blocks);
      return;
    case TensorType::kQ2_K:
      ci::QuantizeQ2_K(src, dst, n_blocks);
      return;
    case TensorType::kQ3_K:
      ci::QuantizeQ3_K(src, dst, n_blocks);
      return;
    case TensorType::kIQ4_NL:
      ci::QuantizeIQ4_NL(src, dst, n_blocks);
      return;
    case TensorType::kIQ4_XS:
      ci::QuantizeIQ4_XS(src, dst, n_blocks);
      return;
    case TensorType::kMXFP4:
      ci::QuantizeMXFP4(src, dst, n_blocks);
      return;
    default:
      if (IsIqGridType(type)) return ci::QuantizeIqGrid(type, src, dst, n_blocks);
      break;
  }
  MOETIER_CHECK(false && "has_codec type without an encoder");
}

void QuantizeRowQ8K(const float* src, BlockQ8K* dst, int64_t n_elems) {
  MOETIER_CHECK(n_elems >= 0 && n_elems % kQKK == 0);
  const int64_t n_blocks = n_elems / kQKK;
  for (int64_t b = 0; b < n_blocks; ++b, src += kQKK) {
    BlockQ8K& out = dst[b];
    const float extreme = ci::FindSignedExtreme(src, kQKK).value;
    if (extreme == 0.0f) {
      out.d = 0.0f;
      std::memset(out.qs, 0, sizeof(out.qs));
      std::memset(out.bsums, 0, sizeof(out.bsums));
      continue;
    }
    // The extreme element lands on -127; +128 does not exist, so the cap at
    // 127 only matters for rounding noise on the opposite side.
    const float iscale = -127.0f / extreme;
    for (int e = 0; e < kQKK; ++e) {
      out.qs[e] = static_cast<int8_t>(ci::RoundClamp(iscale * src[e], -128, 127));
    }
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int e = 0; e < 16; ++e) sum += out.qs[16 * g + e];
      out.bsums[g] = static_cast<int16_t>(sum);
    }
    out.d = 1.0f / iscale;
  }
}

void DequantizeRowQ8K(const BlockQ8K* src, float* dst, int64_t n_elems) {
  MOETIER_CHECK(n_elems >= 0 && n_elems % kQKK == 0);
  const int64_t n_blocks = n_elems / kQKK;
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQKK) {
    for (int e = 0; e < kQKK; ++e) dst[e] = src[b].d * static_cast<float>(src[b].qs[e]);
  }
}

}  // namespace moetier
