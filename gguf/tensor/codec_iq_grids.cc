// Codecs of the i-quant grid types (iq_grids.h, quant_blocks.h).
//
// Decoding goes through UnpackIqGridBlock, which the CPU kernels share, and
// rounds as ggml's decoders do. Encoding is simpler than ggml's (which
// searches scales against an importance matrix): each group's scale maps its
// largest magnitude onto the codebook's top level, each group of values
// rounds to the nearest levels and takes the codebook entry nearest that
// pattern (a table built once per type), and where only 7 sign bits are
// stored the value whose flip costs least gives up its sign. That is enough
// for the synthetic models the tools write; llama-quantize writes better files.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "gguf/tensor/codec_internal.h"
#include "gguf/tensor/half.h"
#include "gguf/tensor/iq_grid_blocks.h"
#include "gguf/tensor/iq_grid_chunks.h"
#include "gguf/tensor/iq_grids.h"

namespace moetier::codec_internal {
namespace {

constexpr int kValues = kQKK;

// For every pattern of per-value level indices (value j's index is digit j,
// base n_levels), the codebook entry nearest it.
template <typename T, size_t kEntries, size_t kWidth>
std::vector<uint16_t> NearestEntries(const std::array<std::array<T, kWidth>, kEntries>& grid,
                                     const std::vector<int>& levels) {
  const int n_levels = static_cast<int>(levels.size());
  int n_codes = 1;
  for (size_t j = 0; j < kWidth; ++j) n_codes *= n_levels;
  std::vector<uint16_t> nearest(static_cast<size_t>(n_codes));
  for (int code = 0; code < n_codes; ++code) {
    int value[kWidth];
    for (int j = 0, c = code; j < static_cast<int>(kWidth); ++j, c /= n_levels) {
      value[j] = levels[c % n_levels];
    }
    int best = 0;
    int best_err = -1;
    for (size_t e = 0; e < kEntries; ++e) {
      int err = 0;
      for (size_t j = 0; j < kWidth; ++j) {
        const int diff = value[j] - static_cast<int>(grid[e][j]);
        err += diff * diff;
      }
      if (best_err < 0 || err < best_err) {
        best_err = err;
        best = static_cast<int>(e);
      }
    }
    nearest[static_cast<size_t>(code)] = static_cast<uint16_t>(best);
  }
  return nearest;
}

// A codebook with its lookup: Find(t) is the entry whose values are nearest
// t[0..width) after each t[j] is rounded to the nearest level.
struct Codebook {
  std::vector<int> levels;
  std::vector<uint16_t> nearest;
  int width = 0;

  int Find(const float* t) const {
    int code = 0;
    for (int j = width - 1; j >= 0; --j) {
      int best = 0;
      for (int l = 1; l < static_cast<int>(levels.size()); ++l) {
        if (std::fabs(t[j] - static_cast<float>(levels[l])) <
            std::fabs(t[j] - static_cast<float>(levels[best]))) {
          best = l;
        }
      }
      code = code * static_cast<int>(levels.size()) + best;
    }
    return nearest[static_cast<size_t>(code)];
  }
};

template <typename T, size_t kEntries, size_t kWidth>
Codebook MakeCodebook(const std::array<std::array<T, kWidth>, kEntries>& grid,
                      std::vector<int> levels) {
  Codebook book;
  book.nearest = NearestEntries(grid, levels);
  book.levels = std::move(levels);
  book.width = static_cast<int>(kWidth);
  return book;
}

const Codebook& Iq2XxsBook() {
  static const Codebook book = MakeCodebook(kIq2XxsGrid, {8, 25, 43});
  return book;
}
const Codebook& Iq2XsBook() {
  static const Codebook book = MakeCodebook(kIq2XsGrid, {8, 25, 43});
  return book;
}
const Codebook& Iq2SBook() {
  static const Codebook book = MakeCodebook(kIq2SGrid, {8, 25, 43});
  return book;
}
const Codebook& Iq3XxsBook() {
  static const Codebook book = MakeCodebook(kIq3XxsGrid, {4, 12, 20, 28, 36, 44, 52, 62});
  return book;
}
const Codebook& Iq3SBook() {
  static const Codebook book = MakeCodebook(kIq3SGrid, {1, 3, 5, 7, 9, 11, 13, 15});
  return book;
}
const Codebook& Iq1Book() {
  static const Codebook book = MakeCodebook(kIq1SGrid, {-1, 0, 1});
  return book;
}

// The block scale and the per-group scales (2s + 1) for groups of
// `group` values: a group's largest magnitude lands near `top`, the largest
// level in the units of q (IqGridValues).
struct Scales {
  uint16_t d_half = 0;
  float d = 0.0f;  // as decoded: the half times the type's factor
  int s[16] = {};
};

Scales FitScales(const float* x, int group, int max_s, float top, float factor) {
  const int n_groups = kValues / group;
  float want[16];
  float largest = 0.0f;
  for (int g = 0; g < n_groups; ++g) {
    float m = 0.0f;
    for (int j = 0; j < group; ++j) m = std::max(m, std::fabs(x[g * group + j]));
    want[g] = m / top;
    largest = std::max(largest, want[g]);
  }
  Scales sc;
  if (!(largest > kTinyRange)) return sc;
  sc.d_half = SuperBlockScale(largest / factor, static_cast<float>(2 * max_s + 1));
  sc.d = HalfToFloat(sc.d_half) * factor;
  for (int g = 0; g < n_groups; ++g) {
    sc.s[g] = sc.d > 0.0f ? RoundClamp((want[g] / sc.d - 1.0f) * 0.5f, 0, max_s) : 0;
  }
  return sc;
}

// |x[j]| in the units of a codebook level for values scaled by `unit`.
void Magnitudes(const float* x, int n, float unit, float* t) {
  for (int j = 0; j < n; ++j) t[j] = unit > 0.0f ? std::fabs(x[j]) / unit : 0.0f;
}

// Sign bits of 8 values; with `even`, the value whose flip costs least
// (smallest |x| times its level) is flipped when the count is odd.
uint8_t SignBits(const float* x, const int* level, bool even) {
  uint32_t bits = 0;
  for (int j = 0; j < 8; ++j) bits |= (x[j] < 0.0f ? 1u : 0u) << j;
  if (even && (std::popcount(bits) & 1)) {
    int cheapest = 0;
    for (int j = 1; j < 8; ++j) {
      if (std::fabs(x[j]) * level[j] < std::fabs(x[cheapest]) * level[cheapest]) cheapest = j;
    }
    bits ^= 1u << cheapest;
  }
  return static_cast<uint8_t>(bits);
}

// One group of 8 values against an 8-wide codebook: the entry and the sign byte.
template <size_t kEntries>
int EncodeGroup8(const float* x, float unit, const Codebook& book,
                 const std::array<IqGrid8, kEntries>& grid, bool even_signs, uint8_t* signs) {
  float t[8];
  Magnitudes(x, 8, unit, t);
  const int entry = book.Find(t);
  int level[8];
  for (int j = 0; j < 8; ++j) level[j] = grid[entry][j];
  *signs = SignBits(x, level, even_signs);
  return entry;
}

// One group of 8 values against a 4-wide codebook: two entries, one sign byte.
template <size_t kEntries>
void EncodeGroup8Of4(const float* x, float unit, const Codebook& book,
                     const std::array<IqGrid4, kEntries>& grid, bool even_signs, int* entries,
                     uint8_t* signs) {
  float t[8];
  Magnitudes(x, 8, unit, t);
  entries[0] = book.Find(t);
  entries[1] = book.Find(t + 4);
  int level[8];
  for (int j = 0; j < 4; ++j) {
    level[j] = grid[entries[0]][j];
    level[4 + j] = grid[entries[1]][j];
  }
  *signs = SignBits(x, level, even_signs);
}

template <typename Block>
void Store(const Block& block, void* dst, int64_t b) {
  std::memcpy(static_cast<uint8_t*>(dst) + b * sizeof(Block), &block, sizeof(Block));
}

void EncodeIQ2_XXS(const float* x, BlockIQ2_XXS* block) {
  const Scales sc = FitScales(x, 32, 15, 43.0f, 0.125f);
  block->d = sc.d_half;
  for (int g = 0; g < 8; ++g) {
    const float unit = sc.d * static_cast<float>(2 * sc.s[g] + 1);
    uint8_t idx[4];
    uint32_t signs_scale = static_cast<uint32_t>(sc.s[g]) << 28;
    for (int l = 0; l < 4; ++l) {
      uint8_t signs;
      idx[l] = static_cast<uint8_t>(
          EncodeGroup8(x + 32 * g + 8 * l, unit, Iq2XxsBook(), kIq2XxsGrid, true, &signs));
      signs_scale |= static_cast<uint32_t>(signs & 127) << (7 * l);
    }
    std::memcpy(block->qs + 4 * g, idx, 4);
    std::memcpy(block->qs + 4 * g + 2, &signs_scale, 4);
  }
}

template <typename Block>
void PutScaleNibbles16(const Scales& sc, Block* block) {
  for (int g = 0; g < 8; ++g) {
    block->scales[g] = static_cast<uint8_t>(sc.s[2 * g] | (sc.s[2 * g + 1] << 4));
  }
}

void EncodeIQ2_XS(const float* x, BlockIQ2_XS* block) {
  const Scales sc = FitScales(x, 16, 15, 43.0f, 0.125f);
  block->d = sc.d_half;
  PutScaleNibbles16(sc, block);
  for (int i = 0; i < 32; ++i) {
    const float unit = sc.d * static_cast<float>(2 * sc.s[i / 2] + 1);
    uint8_t signs;
    const int entry = EncodeGroup8(x + 8 * i, unit, Iq2XsBook(), kIq2XsGrid, true, &signs);
    block->qs[i] = static_cast<uint16_t>(entry | ((signs & 127) << 9));
  }
}

void EncodeIQ2_S(const float* x, BlockIQ2_S* block) {
  const Scales sc = FitScales(x, 16, 15, 43.0f, 0.125f);
  block->d = sc.d_half;
  PutScaleNibbles16(sc, block);
  for (int i = 0; i < 32; ++i) {
    const float unit = sc.d * static_cast<float>(2 * sc.s[i / 2] + 1);
    uint8_t signs;
    const int entry = EncodeGroup8(x + 8 * i, unit, Iq2SBook(), kIq2SGrid, false, &signs);
    block->qs[i] = static_cast<uint8_t>(entry & 0xFF);
    block->qs[32 + i] = signs;
    block->qh[i / 4] = static_cast<uint8_t>(block->qh[i / 4] | ((entry >> 8) << (2 * (i % 4))));
  }
}

void EncodeIQ3_XXS(const float* x, BlockIQ3_XXS* block) {
  const Scales sc = FitScales(x, 32, 15, 62.0f, 0.25f);
  block->d = sc.d_half;
  for (int g = 0; g < 8; ++g) {
    const float unit = sc.d * static_cast<float>(2 * sc.s[g] + 1);
    uint32_t signs_scale = static_cast<uint32_t>(sc.s[g]) << 28;
    for (int l = 0; l < 4; ++l) {
      int entries[2];
      uint8_t signs;
      EncodeGroup8Of4(x + 32 * g + 8 * l, unit, Iq3XxsBook(), kIq3XxsGrid, true, entries, &signs);
      block->qs[8 * g + 2 * l] = static_cast<uint8_t>(entries[0]);
      block->qs[8 * g + 2 * l + 1] = static_cast<uint8_t>(entries[1]);
      signs_scale |= static_cast<uint32_t>(signs & 127) << (7 * l);
    }
    std::memcpy(block->qs + 64 + 4 * g, &signs_scale, 4);
  }
}

void EncodeIQ3_S(const float* x, BlockIQ3_S* block) {
  const Scales sc = FitScales(x, 32, 15, 15.0f, 1.0f);
  block->d = sc.d_half;
  for (int g = 0; g < 8; ++g) {
    block->scales[g / 2] = static_cast<uint8_t>(block->scales[g / 2] | (sc.s[g] << (4 * (g % 2))));
    const float unit = sc.d * static_cast<float>(2 * sc.s[g] + 1);
    for (int l = 0; l < 4; ++l) {
      int entries[2];
      EncodeGroup8Of4(x + 32 * g + 8 * l, unit, Iq3SBook(), kIq3SGrid, false, entries,
                      &block->signs[4 * g + l]);
      for (int e = 0; e < 2; ++e) {
        block->qs[8 * g + 2 * l + e] = static_cast<uint8_t>(entries[e] & 0xFF);
        block->qh[g] = static_cast<uint8_t>(block->qh[g] | ((entries[e] >> 8) << (2 * l + e)));
      }
    }
  }
}

// IQ1: 8 values against the signed codebook with delta +1/8 or -1/8 (q
// units: 8 * grid ± 1); returns the entry and adds its squared error.
int EncodeIq1Group(const float* x, float unit, bool negative_delta, float* err) {
  const float shift = negative_delta ? -1.0f : 1.0f;
  float t[8];
  for (int j = 0; j < 8; ++j) t[j] = unit > 0.0f ? (x[j] / unit - shift) / 8.0f : 0.0f;
  const int entry = Iq1Book().Find(t);
  for (int j = 0; j < 8; ++j) {
    const float decoded = unit * (8.0f * kIq1SGrid[entry][j] + shift);
    *err += (x[j] - decoded) * (x[j] - decoded);
  }
  return entry;
}

void EncodeIQ1_S(const float* x, BlockIQ1_S* block) {
  const Scales sc = FitScales(x, 32, 7, 9.0f, 0.125f);
  block->d = sc.d_half;
  for (int g = 0; g < 8; ++g) {
    const float unit = sc.d * static_cast<float>(2 * sc.s[g] + 1);
    int entries[2][4];
    float err[2] = {0.0f, 0.0f};
    for (int neg = 0; neg < 2; ++neg) {
      for (int l = 0; l < 4; ++l) {
        entries[neg][l] = EncodeIq1Group(x + 32 * g + 8 * l, unit, neg == 1, &err[neg]);
      }
    }
    const int neg = err[1] < err[0] ? 1 : 0;
    uint32_t qh = static_cast<uint32_t>(sc.s[g]) << 12 | static_cast<uint32_t>(neg) << 15;
    for (int l = 0; l < 4; ++l) {
      block->qs[4 * g + l] = static_cast<uint8_t>(entries[neg][l] & 0xFF);
      qh |= static_cast<uint32_t>(entries[neg][l] >> 8) << (3 * l);
    }
    block->qh[g] = static_cast<uint16_t>(qh);
  }
}

void EncodeIQ1_M(const float* x, BlockIQ1_M* block) {
  const Scales sc = FitScales(x, 16, 7, 9.0f, 0.125f);
  uint16_t words[4] = {0, 0, 0, 0};
  for (int h = 0; h < 16; ++h)
    words[h / 4] = static_cast<uint16_t>(words[h / 4] | (sc.s[h] << (3 * (h % 4))));
  std::memcpy(block->scales, words, sizeof(words));
  iq_chunks::PutScaleBits(TensorType::kIQ1_M, reinterpret_cast<uint8_t*>(block), sc.d_half);
  for (int i = 0; i < 32; ++i) {
    const float unit = sc.d * static_cast<float>(2 * sc.s[i / 2] + 1);
    float err[2] = {0.0f, 0.0f};
    const int entry_pos = EncodeIq1Group(x + 8 * i, unit, false, &err[0]);
    const int entry_neg = EncodeIq1Group(x + 8 * i, unit, true, &err[1]);
    const bool neg = err[1] < err[0];
    const int entry = neg ? entry_neg : entry_pos;
    block->qs[i] = static_cast<uint8_t>(entry & 0xFF);
    const int nibble = (entry >> 8) | (neg ? 8 : 0);
    block->qh[i / 2] = static_cast<uint8_t>(block->qh[i / 2] | (nibble << (4 * (i % 2))));
  }
}

template <typename Block, void (*kEncode)(const float*, Block*)>
void QuantizeBlocks(const float* src, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    Block block;
    std::memset(&block, 0, sizeof(block));
    kEncode(src + b * kValues, &block);
    Store(block, dst, b);
  }
}

}  // namespace

void DequantizeIqGrid(TensorType type, const void* src, float* dst, int64_t n_blocks) {
  const int64_t block_bytes = GetTensorTypeInfo(type).block_bytes;
  const auto* bytes = static_cast<const uint8_t*>(src);
  IqGridValues v;
  for (int64_t b = 0; b < n_blocks; ++b, dst += kValues) {
    UnpackIqGridBlock(type, bytes + b * block_bytes, &v);
    for (int e = 0; e < kValues; ++e) {
      // d times the scale first, as ggml rounds it.
      dst[e] =
          (v.d * static_cast<float>(v.scale[e / kIqGridScaleGroup])) * static_cast<float>(v.q[e]);
    }
  }
}

void QuantizeIqGrid(TensorType type, const float* src, void* dst, int64_t n_blocks) {
  switch (type) {
    case TensorType::kIQ2_XXS:
      return QuantizeBlocks<BlockIQ2_XXS, EncodeIQ2_XXS>(src, dst, n_blocks);
    case TensorType::kIQ2_XS:
      return QuantizeBlocks<BlockIQ2_XS, EncodeIQ2_XS>(src, dst, n_blocks);
    case TensorType::kIQ2_S:
      return QuantizeBlocks<BlockIQ2_S, EncodeIQ2_S>(src, dst, n_blocks);
    case TensorType::kIQ3_XXS:
      return QuantizeBlocks<BlockIQ3_XXS, EncodeIQ3_XXS>(src, dst, n_blocks);
    case TensorType::kIQ3_S:
      return QuantizeBlocks<BlockIQ3_S, EncodeIQ3_S>(src, dst, n_blocks);
    case TensorType::kIQ1_S:
      return QuantizeBlocks<BlockIQ1_S, EncodeIQ1_S>(src, dst, n_blocks);
    case TensorType::kIQ1_M:
      return QuantizeBlocks<BlockIQ1_M, EncodeIQ1_M>(src, dst, n_blocks);
    default:
      MOETIER_CHECK(false && "not an i-quant grid type");
  }
}

}  // namespace moetier::codec_internal
