// The i-quant grid types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S): their codebooks are ggml's, and DequantizeRow decodes random blocks
// bit for bit as per-element decoders written from ggml's dequantize_row_iq*
// loops do (with their float arithmetic: d * (0.5 + s) * 0.25 and so on).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gguf/tensor/half.h"
#include "gguf/tensor/iq_grid_chunks.h"
#include "gguf/tensor/iq_grids.h"
#include "gguf/tensor/quant_codec.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

// FNV-1a over a codebook's values as bytes (IQ1's -1 as 0xFF), entries in
// order: the same hash of ggml-common.h's iq2xxs_grid ... iq1s_grid tables
// read as little-endian bytes gives these constants.
template <typename Grid>
uint64_t Fnv1a(const Grid& grid) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& entry : grid) {
    for (auto v : entry) {
      h ^= static_cast<uint8_t>(v);
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

TEST(IqGridLayoutTest, CodebooksAreGgmls) {
  EXPECT_EQ(Fnv1a(kIq2XxsGrid), 0xbb4ee025b5ac6e8eull);
  EXPECT_EQ(Fnv1a(kIq2XsGrid), 0xc9b1ee61e79909bdull);
  EXPECT_EQ(Fnv1a(kIq2SGrid), 0x123edd38a3b62b90ull);
  EXPECT_EQ(Fnv1a(kIq3XxsGrid), 0xdfa5dc83d6a155d5ull);
  EXPECT_EQ(Fnv1a(kIq3SGrid), 0xfa37020c25b44829ull);
  EXPECT_EQ(Fnv1a(kIq1SGrid), 0x6703ed863501ae2eull);
}

TEST(IqGridLayoutTest, SevenSignBitsMakeAnEvenCount) {
  for (uint32_t i = 0; i < 128; ++i) {
    const uint8_t signs = IqSignsFromSevenBits(i);
    EXPECT_EQ(signs & 127, i);
    EXPECT_EQ(std::popcount(static_cast<unsigned>(signs)) % 2, 0) << i;
  }
  EXPECT_EQ(IqSignsFromSevenBits(1), 0x81);
  EXPECT_EQ(IqSignsFromSevenBits(3), 0x03);
}

uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Le32(const uint8_t* p) { return Le16(p) | (static_cast<uint32_t>(Le16(p + 2)) << 16); }
float HalfAt(const uint8_t* p) { return HalfToFloat(Le16(p)); }

// Sign j of 8 stored as 7 bits with an even count (ggml's ksigns_iq2xs).
float SevenBitSign(uint32_t seven, int j) {
  const int bit = j < 7 ? (seven >> j) & 1 : std::popcount(seven & 127) & 1;
  return bit ? -1.0f : 1.0f;
}

// Element e of one block, as ggml's loops compute it. Position in the block:
// 32-group ib, 8-group l within it, j within that.
struct Pos {
  int ib, l, j;
  explicit Pos(int e) : ib(e / 32), l((e % 32) / 8), j(e % 8) {}
};

float RefIQ2_XXS(const uint8_t* b, int e) {
  const Pos p(e);
  const uint8_t* group = b + 2 + 8 * p.ib;
  const uint32_t aux = Le32(group + 4);
  const float db = HalfAt(b) * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
  return db * kIq2XxsGrid[group[p.l]][p.j] * SevenBitSign(aux >> (7 * p.l), p.j);
}

float RefIQ2_XS(const uint8_t* b, int e) {
  const Pos p(e);
  const uint16_t q = Le16(b + 2 + 2 * (e / 8));
  const uint8_t scales = b[66 + p.ib];
  const float db =
      HalfAt(b) * (0.5f + static_cast<float>(p.l < 2 ? scales & 0xF : scales >> 4)) * 0.25f;
  return db * kIq2XsGrid[q & 511][p.j] * SevenBitSign(q >> 9, p.j);
}

float RefIQ2_S(const uint8_t* b, int e) {
  const Pos p(e);
  const uint8_t* qs = b + 2 + 4 * p.ib;
  const uint8_t* signs = b + 2 + 32 + 4 * p.ib;
  const uint8_t scales = b[74 + p.ib];
  const float db =
      HalfAt(b) * (0.5f + static_cast<float>(p.l < 2 ? scales & 0xF : scales >> 4)) * 0.25f;
  const int index = qs[p.l] | ((b[66 + p.ib] << (8 - 2 * p.l)) & 0x300);
  return db * kIq2SGrid[index][p.j] * ((signs[p.l] >> p.j) & 1 ? -1.0f : 1.0f);
}

float RefIQ3_XXS(const uint8_t* b, int e) {
  const Pos p(e);
  const uint8_t* qs = b + 2 + 8 * p.ib;
  const uint32_t aux = Le32(b + 2 + 64 + 4 * p.ib);
  const float db = HalfAt(b) * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
  const int index = qs[2 * p.l + p.j / 4];
  return db * kIq3XxsGrid[index][p.j % 4] * SevenBitSign(aux >> (7 * p.l), p.j);
}

float RefIQ3_S(const uint8_t* b, int e) {
  const Pos p(e);
  const uint8_t* qs = b + 2 + 8 * p.ib;
  const uint8_t qh = b[66 + p.ib];
  const uint8_t signs = b[74 + 4 * p.ib + p.l];
  const uint8_t scales = b[106 + p.ib / 2];
  const float db = HalfAt(b) * static_cast<float>(1 + 2 * (p.ib % 2 ? scales >> 4 : scales & 0xF));
  const int k = 2 * p.l + p.j / 4;  // index within the 32-group
  const int index = qs[k] | (((qh >> k) & 1) << 8);
  return db * kIq3SGrid[index][p.j % 4] * ((signs >> p.j) & 1 ? -1.0f : 1.0f);
}

float RefIQ1_S(const uint8_t* b, int e) {
  const Pos p(e);
  const uint16_t qh = Le16(b + 34 + 2 * p.ib);
  const float dl = HalfAt(b) * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
  const float delta = qh & 0x8000 ? -kIq1Delta : kIq1Delta;
  const int index = b[2 + 4 * p.ib + p.l] | (((qh >> (3 * p.l)) & 7) << 8);
  return dl * (kIq1SGrid[index][p.j] + delta);
}

float RefIQ1_M(const uint8_t* b, int e) {
  const Pos p(e);
  uint16_t sc[4];
  for (int w = 0; w < 4; ++w) sc[w] = Le16(b + 48 + 2 * w);
  const uint16_t d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                                ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
  const int half = p.l / 2;
  const float dl = HalfToFloat(d_bits) *
                   static_cast<float>(2 * ((sc[p.ib / 2] >> (6 * (p.ib % 2) + 3 * half)) & 7) + 1);
  const uint8_t qh = b[32 + 2 * p.ib + p.l / 2];
  const int index = b[4 * p.ib + p.l] | ((qh << (p.l % 2 ? 4 : 8)) & 0x700);
  const float delta = qh & (p.l % 2 ? 0x80 : 0x08) ? -kIq1Delta : kIq1Delta;
  return dl * (kIq1SGrid[index][p.j] + delta);
}

struct GridCase {
  TensorType type;
  int block_bytes;
  float (*ref)(const uint8_t*, int);
};

constexpr GridCase kCases[] = {
    {TensorType::kIQ2_XXS, 66, RefIQ2_XXS}, {TensorType::kIQ2_XS, 74, RefIQ2_XS},
    {TensorType::kIQ2_S, 82, RefIQ2_S},     {TensorType::kIQ3_XXS, 98, RefIQ3_XXS},
    {TensorType::kIQ3_S, 110, RefIQ3_S},    {TensorType::kIQ1_S, 50, RefIQ1_S},
    {TensorType::kIQ1_M, 56, RefIQ1_M},
};

// A finite half of magnitude 2^-20 .. 2^3, either sign.
uint16_t RandomScale(std::mt19937& rng) {
  std::uniform_int_distribution<int> exponent(-20, 3);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  return FloatToHalf(std::ldexp(mantissa(rng), exponent(rng)) * (rng() & 1 ? -1.0f : 1.0f));
}

TEST(IqGridLayoutTest, RandomBlocksDecodeAsGgmlsLoopsDo) {
  std::mt19937 rng(77);
  for (const GridCase& tc : kCases) {
    SCOPED_TRACE(TensorTypeName(tc.type));
    ASSERT_EQ(GetTensorTypeInfo(tc.type).block_bytes, tc.block_bytes);
    ASSERT_TRUE(GetTensorTypeInfo(tc.type).has_codec);
    constexpr int kBlocks = 4;
    for (int trial = 0; trial < 25; ++trial) {
      // One spare leading byte: the row starts at an odd address.
      std::vector<uint8_t> storage(1 + kBlocks * tc.block_bytes);
      for (uint8_t& v : storage) v = static_cast<uint8_t>(rng());
      uint8_t* row = storage.data() + 1;
      for (int b = 0; b < kBlocks; ++b) {
        // A finite scale (IQ1_M keeps it in the top nibbles of its scale words).
        iq_chunks::PutScaleBits(tc.type, row + b * tc.block_bytes, RandomScale(rng));
      }
      std::vector<float> out(kBlocks * 256);
      DequantizeRow(tc.type, row, out.data(), kBlocks * 256);
      for (int b = 0; b < kBlocks; ++b) {
        for (int e = 0; e < 256; ++e) {
          ASSERT_EQ(out[b * 256 + e], tc.ref(row + b * tc.block_bytes, e))
              << "block " << b << " element " << e;
        }
      }
    }
  }
}

// One IQ2_XXS group by hand: entry 1 of the codebook is 43, 8, 8, ... (ggml's
// 0x080808080808082b); sign bits 0b0000011 make values 0 and 1 negative, so
// the 8th stays positive; s = 2 gives d * 5 / 8.
TEST(IqGridLayoutTest, IQ2_XXSHandBuilt) {
  std::vector<uint8_t> blk(66, 0);
  const uint16_t d = FloatToHalf(0.5f);
  blk[0] = static_cast<uint8_t>(d & 0xFF);
  blk[1] = static_cast<uint8_t>(d >> 8);
  blk[2] = 1;  // group 0's first index
  const uint32_t aux = (2u << 28) | 0b0000011u;
  std::memcpy(blk.data() + 6, &aux, 4);
  std::vector<float> y(256);
  DequantizeRow(TensorType::kIQ2_XXS, blk.data(), y.data(), 256);
  const float unit = 0.5f * 5.0f / 8.0f;
  EXPECT_EQ(y[0], -43.0f * unit);
  EXPECT_EQ(y[1], -8.0f * unit);
  EXPECT_EQ(y[7], 8.0f * unit);
  // Index 0 (all 8s) with no sign bits for the other groups of 32-group 0.
  EXPECT_EQ(y[8], 8.0f * unit);
  // 32-group 1: scale 1, index 0.
  EXPECT_EQ(y[32], 0.5f / 8.0f * 8.0f);
}

}  // namespace
}  // namespace moetier
