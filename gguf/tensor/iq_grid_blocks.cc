#include "gguf/tensor/iq_grid_blocks.h"

#include <cstring>

#include "base/check.h"
#include "gguf/tensor/half.h"
#include "gguf/tensor/iq_grid_chunks.h"

namespace moetier {
namespace {

template <TensorType kType>
void Unpack(const uint8_t* blk, IqGridValues* out) {
  out->d = HalfToFloat(iq_chunks::ScaleBits(kType, blk)) * iq_chunks::ScaleFactor(kType);
  for (int c = 0; c < 8; ++c) {
    iq_chunks::Chunk chunk;
    iq_chunks::Decode<kType>(blk, c, &chunk);
    out->scale[2 * c] = chunk.scale[0];
    out->scale[2 * c + 1] = chunk.scale[1];
    for (int l = 0; l < 4; ++l) {
      // Magnitudes negated where the mask byte is 0xFF: (v ^ 0xFF) + 1 = 256 - v
      // carries into no neighbouring byte because codebook magnitudes are >= 1.
      const uint64_t mask = chunk.negative[l];
      const uint64_t q = (chunk.words[l] ^ mask) + (mask & 0x0101010101010101ull);
      std::memcpy(out->q + 32 * c + 8 * l, &q, 8);
    }
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
  const auto* blk = static_cast<const uint8_t*>(block);
  switch (type) {
    case TensorType::kIQ2_XXS:
      return Unpack<TensorType::kIQ2_XXS>(blk, out);
    case TensorType::kIQ2_XS:
      return Unpack<TensorType::kIQ2_XS>(blk, out);
    case TensorType::kIQ2_S:
      return Unpack<TensorType::kIQ2_S>(blk, out);
    case TensorType::kIQ3_XXS:
      return Unpack<TensorType::kIQ3_XXS>(blk, out);
    case TensorType::kIQ3_S:
      return Unpack<TensorType::kIQ3_S>(blk, out);
    case TensorType::kIQ1_S:
      return Unpack<TensorType::kIQ1_S>(blk, out);
    case TensorType::kIQ1_M:
      return Unpack<TensorType::kIQ1_M>(blk, out);
    default:
      MOETIER_CHECK(false && "not an i-quant grid type");
  }
}

}  // namespace moetier
