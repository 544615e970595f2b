// Byte layouts of the quant blocks: DequantizeRow against per-element decoders
// written directly from the SPEC.md §2.3 formulas, on hand-built blocks with
// values worked out by hand and on random blocks.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gguf/tensor/half.h"
#include "gguf/tensor/quant_codec.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
float HalfAt(const uint8_t* p) { return HalfToFloat(Le16(p)); }
void PutHalf(uint8_t* p, float v) {
  const uint16_t h = FloatToHalf(v);
  p[0] = static_cast<uint8_t>(h & 0xFF);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// --- per-element decoders (element e of one block) --------------------------

float RefQ8_0(const uint8_t* b, int e) {
  return HalfAt(b) * static_cast<float>(static_cast<int8_t>(b[2 + e]));
}

float RefQ4_0(const uint8_t* b, int e) {
  const uint8_t byte = b[2 + e % 16];
  const int nib = e < 16 ? (byte & 0xF) : (byte >> 4);
  return HalfAt(b) * static_cast<float>(nib - 8);
}

// The "in words" description of get_scale_min_k4.
void RefScaleMin(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    const int k = j - 4;
    *sc = (s[8 + k] & 0x0F) | ((s[k] >> 6) << 4);
    *m = (s[8 + k] >> 4) | ((s[4 + k] >> 6) << 4);
  }
}

float RefQ4_K(const uint8_t* b, int e) {
  const uint8_t* qs = b + 16;
  const int c = e / 64;
  const int half = (e % 64) / 32;
  const int l = e % 32;
  const int nib = half ? (qs[32 * c + l] >> 4) : (qs[32 * c + l] & 0xF);
  int sc;
  int m;
  RefScaleMin(b + 4, e / 32, &sc, &m);
  return HalfAt(b) * static_cast<float>(sc) * static_cast<float>(nib) -
         HalfAt(b + 2) * static_cast<float>(m);
}

float RefQ5_K(const uint8_t* b, int e) {
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  const int c = e / 64;
  const int half = (e % 64) / 32;
  const int l = e % 32;
  const int nib = half ? (qs[32 * c + l] >> 4) : (qs[32 * c + l] & 0xF);
  const int q = nib + 16 * ((qh[l] >> (2 * c + half)) & 1);
  int sc;
  int m;
  RefScaleMin(b + 4, e / 32, &sc, &m);
  return HalfAt(b) * static_cast<float>(sc) * static_cast<float>(q) -
         HalfAt(b + 2) * static_cast<float>(m);
}

float RefQ6_K(const uint8_t* b, int e) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const int h = e / 128;
  const int m = (e % 128) / 32;
  const int l = e % 32;
  // m = 0: low nibble of ql[64h+l]; m = 1: low nibble of ql[64h+32+l];
  // m = 2: high nibble of ql[64h+l]; m = 3: high nibble of ql[64h+32+l]
  // (SPEC.md §2.3 "in other words", which is ggml's layout; the preceding
  // "m∈{0,2}" shorthand in the SPEC contradicts it and is a typo for m < 2).
  const uint8_t lbyte = ql[64 * h + 32 * (m & 1) + l];
  const int lo = (m < 2) ? (lbyte & 0xF) : (lbyte >> 4);
  const int hi = (qh[32 * h + l] >> (2 * m)) & 3;
  const int q = (lo | (hi << 4)) - 32;
  return HalfAt(b + 208) * static_cast<float>(scales[e / 16]) * static_cast<float>(q);
}

// --- the types beyond Q4_0 and the common K-quants ---------------------------

int Nibble32(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 0xF : qs[e - 16] >> 4; }
int FifthBit32(const uint8_t* qh, int e) {
  const uint32_t bits = static_cast<uint32_t>(qh[0]) | (static_cast<uint32_t>(qh[1]) << 8) |
                        (static_cast<uint32_t>(qh[2]) << 16) | (static_cast<uint32_t>(qh[3]) << 24);
  return static_cast<int>((bits >> e) & 1);
}
constexpr int kIq4Table[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                               1,    13,   25,  38,  53,  69,  89,  113};
constexpr int kMxfp4Table[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float RefQ4_1(const uint8_t* b, int e) {
  return HalfAt(b) * static_cast<float>(Nibble32(b + 4, e)) + HalfAt(b + 2);
}

float RefQ5_0(const uint8_t* b, int e) {
  const int q = Nibble32(b + 6, e) | (FifthBit32(b + 2, e) << 4);
  return HalfAt(b) * static_cast<float>(q - 16);
}

float RefQ5_1(const uint8_t* b, int e) {
  const int q = Nibble32(b + 8, e) | (FifthBit32(b + 4, e) << 4);
  return HalfAt(b) * static_cast<float>(q) + HalfAt(b + 2);
}

float RefIQ4_NL(const uint8_t* b, int e) {
  return HalfAt(b) * static_cast<float>(kIq4Table[Nibble32(b + 2, e)]);
}

float RefMXFP4(const uint8_t* b, int e) {
  return static_cast<float>(kMxfp4Table[Nibble32(b + 1, e)]) * std::ldexp(1.0f, b[0] - 128);
}

float RefQ2_K(const uint8_t* b, int e) {
  const uint8_t* qs = b + 16;
  const int h = e / 128;
  const int j = (e % 128) / 32;
  const int q = (qs[32 * h + e % 32] >> (2 * j)) & 3;
  const int sc = b[e / 16];
  return HalfAt(b + 80) * static_cast<float>(sc & 0xF) * static_cast<float>(q) -
         HalfAt(b + 82) * static_cast<float>(sc >> 4);
}

// The SPEC's table of the 16 six-bit Q3_K scales, row by row.
int RefQ3Scale(const uint8_t* s, int index) {
  const int k = index % 4;
  switch (index / 4) {
    case 0:
      return (s[k] & 0xF) | ((s[8 + k] & 3) << 4);
    case 1:
      return (s[4 + k] & 0xF) | (((s[8 + k] >> 2) & 3) << 4);
    case 2:
      return (s[k] >> 4) | (((s[8 + k] >> 4) & 3) << 4);
    default:
      return (s[4 + k] >> 4) | (((s[8 + k] >> 6) & 3) << 4);
  }
}

float RefQ3_K(const uint8_t* b, int e) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const int h = e / 128;
  const int j = (e % 128) / 32;
  const int l = e % 32;
  const int q2 = (qs[32 * h + l] >> (2 * j)) & 3;
  const int hb = (hmask[l] >> (4 * h + j)) & 1;
  const int q = q2 - (hb ? 0 : 4);
  return HalfAt(b + 108) * static_cast<float>(RefQ3Scale(b + 96, e / 16) - 32) *
         static_cast<float>(q);
}

float RefIQ4_XS(const uint8_t* b, int e) {
  const int ib = e / 32;
  const int scales_h = Le16(b + 2);
  const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
  const float dl = HalfAt(b) * static_cast<float>(ls - 32);
  return dl * static_cast<float>(kIq4Table[Nibble32(b + 8 + 16 * ib, e % 32)]);
}

struct TypeCase {
  TensorType type;
  int block_elems;
  int block_bytes;
  float (*ref)(const uint8_t*, int);
  std::vector<int> half_offsets;  // fields holding halves
};

std::vector<TypeCase> Cases() {
  return {
      {TensorType::kQ8_0, 32, 34, RefQ8_0, {0}},
      {TensorType::kQ4_0, 32, 18, RefQ4_0, {0}},
      {TensorType::kQ4_K, 256, 144, RefQ4_K, {0, 2}},
      {TensorType::kQ5_K, 256, 176, RefQ5_K, {0, 2}},
      {TensorType::kQ6_K, 256, 210, RefQ6_K, {208}},
      {TensorType::kQ4_1, 32, 20, RefQ4_1, {0, 2}},
      {TensorType::kQ5_0, 32, 22, RefQ5_0, {0}},
      {TensorType::kQ5_1, 32, 24, RefQ5_1, {0, 2}},
      {TensorType::kIQ4_NL, 32, 18, RefIQ4_NL, {0}},
      {TensorType::kMXFP4, 32, 17, RefMXFP4, {}},
      {TensorType::kQ2_K, 256, 84, RefQ2_K, {80, 82}},
      {TensorType::kQ3_K, 256, 110, RefQ3_K, {108}},
      {TensorType::kIQ4_XS, 256, 136, RefIQ4_XS, {0}},
  };
}

std::vector<float> Decode(TensorType type, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  DequantizeRow(type, bytes.data(), out.data(), n);
  return out;
}

TEST(QuantLayoutTest, RandomBlocksDecodeAsTheSpecSays) {
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> mag(-20.0f, 4.0f);
  for (const TypeCase& tc : Cases()) {
    SCOPED_TRACE(TensorTypeName(tc.type));
    constexpr int kBlocks = 5;
    for (int trial = 0; trial < 20; ++trial) {
      // One spare leading byte: the row starts at an odd address.
      std::vector<uint8_t> storage(1 + static_cast<size_t>(kBlocks * tc.block_bytes));
      for (auto& v : storage) v = static_cast<uint8_t>(byte(rng));
      uint8_t* row = storage.data() + 1;
      for (int b = 0; b < kBlocks; ++b) {
        for (int off : tc.half_offsets) {
          const float v = std::ldexp(1.0f + static_cast<float>(byte(rng)) / 256.0f,
                                     static_cast<int>(mag(rng))) * (byte(rng) & 1 ? -1.0f : 1.0f);
          PutHalf(row + b * tc.block_bytes + off, v);
        }
      }
      std::vector<float> out(static_cast<size_t>(kBlocks * tc.block_elems));
      DequantizeRow(tc.type, row, out.data(), kBlocks * tc.block_elems);
      for (int b = 0; b < kBlocks; ++b) {
        for (int e = 0; e < tc.block_elems; ++e) {
          ASSERT_EQ(out[static_cast<size_t>(b * tc.block_elems + e)],
                    tc.ref(row + b * tc.block_bytes, e))
              << "block " << b << " element " << e;
        }
      }
    }
  }
}

TEST(QuantLayoutTest, Q8_0HandBuilt) {
  std::vector<uint8_t> blk(34);
  PutHalf(blk.data(), 0.5f);
  for (int e = 0; e < 32; ++e) blk[2 + e] = static_cast<uint8_t>(static_cast<int8_t>(e - 16));
  blk[2 + 31] = static_cast<uint8_t>(static_cast<int8_t>(-128));
  const std::vector<float> y = Decode(TensorType::kQ8_0, blk, 32);
  for (int e = 0; e < 31; ++e) EXPECT_EQ(y[e], 0.5f * static_cast<float>(e - 16)) << e;
  EXPECT_EQ(y[31], -64.0f);
}

TEST(QuantLayoutTest, Q4_0HandBuiltNibblesAreNotInterleaved) {
  std::vector<uint8_t> blk(18);
  PutHalf(blk.data(), 2.0f);
  for (int j = 0; j < 16; ++j) blk[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> y = Decode(TensorType::kQ4_0, blk, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(y[j + 16], 2.0f * static_cast<float>(7 - j)) << j;
  }
}

// Scales and mins chosen so that sub-blocks 4..7 need their high bits.
constexpr int kSc[8] = {1, 2, 3, 4, 37, 50, 63, 20};   // 37=0b100101, 50=0b110010
constexpr int kMin[8] = {5, 6, 7, 8, 33, 48, 17, 62};  // 33=0b100001, 62=0b111110

void FillKScales(uint8_t* s) {
  // Written out from the SPEC's byte description, not from an encoder.
  for (int k = 0; k < 4; ++k) {
    s[k] = static_cast<uint8_t>(kSc[k] | ((kSc[4 + k] >> 4) << 6));
    s[4 + k] = static_cast<uint8_t>(kMin[k] | ((kMin[4 + k] >> 4) << 6));
    s[8 + k] = static_cast<uint8_t>((kSc[4 + k] & 0xF) | ((kMin[4 + k] & 0xF) << 4));
  }
}

TEST(QuantLayoutTest, Q4_KHandBuiltScalesWithHighBits) {
  std::vector<uint8_t> blk(144);
  PutHalf(blk.data(), 1.0f);
  PutHalf(blk.data() + 2, 0.5f);
  FillKScales(blk.data() + 4);
  // Literal bytes for the sub-block 5 fields: scale 50 has low nibble 0b0010
  // in byte 9 and high bits 0b11 in byte 1; min 48 has low nibble 0 (byte 9
  // high) and high bits 0b11 in byte 5.
  EXPECT_EQ(blk[4 + 9], 0x02);
  EXPECT_EQ(blk[4 + 1] >> 6, 3);
  EXPECT_EQ(blk[4 + 5] >> 6, 3);
  for (int i = 0; i < 128; ++i) blk[16 + i] = static_cast<uint8_t>((i & 0xF) | ((15 - (i & 0xF)) << 4));
  const std::vector<float> y = Decode(TensorType::kQ4_K, blk, 256);
  for (int e = 0; e < 256; ++e) {
    const int l = e % 32;
    const bool high = (e % 64) >= 32;
    const int nib = high ? 15 - (l & 0xF) : (l & 0xF);
    const int j = e / 32;
    EXPECT_EQ(y[e], 1.0f * static_cast<float>(kSc[j] * nib) - 0.5f * static_cast<float>(kMin[j]))
        << "element " << e;
  }
  // Element 167: sub-block 5, high nibble of qs[64 + 7] = 15 - 7 = 8.
  EXPECT_EQ(y[167], 50.0f * 8.0f - 24.0f);
}

TEST(QuantLayoutTest, Q5_KHandBuiltFifthBit) {
  std::vector<uint8_t> blk(176);
  PutHalf(blk.data(), 0.25f);
  PutHalf(blk.data() + 2, 1.0f);
  FillKScales(blk.data() + 4);
  for (int l = 0; l < 32; ++l) blk[16 + l] = static_cast<uint8_t>((l * 37 + 11) & 0xFF);
  for (int i = 0; i < 128; ++i) blk[48 + i] = static_cast<uint8_t>((i * 7) & 0xFF);
  const std::vector<float> y = Decode(TensorType::kQ5_K, blk, 256);
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64;
    const int l = e % 32;
    const bool high = (e % 64) >= 32;
    const int byte = ((32 * c + l) * 7) & 0xFF;
    const int nib = high ? byte >> 4 : byte & 0xF;
    const int bit = (((l * 37 + 11) & 0xFF) >> (e / 32)) & 1;
    const int j = e / 32;
    EXPECT_EQ(y[e], 0.25f * static_cast<float>(kSc[j]) * static_cast<float>(nib + 16 * bit) -
                        static_cast<float>(kMin[j]))
        << "element " << e;
  }
  // Element 255: sub-block 7, l = 31, qh[31] = (31*37+11) & 0xFF = 0x86 (bit 7
  // set); qs[96+31] = 127*7 & 0xFF = 0x79, high nibble 7: q = 23.
  EXPECT_EQ(y[255], 0.25f * 20.0f * 23.0f - 62.0f);
  // Element 32: sub-block 1, high nibble of qs[0] = 0; qh[0] = 0b1011, bit 1 set.
  EXPECT_EQ(y[32], 0.25f * 2.0f * 16.0f - 6.0f);
  // Element 64: sub-block 2, low nibble of qs[32] = 224 & 0xF = 0; bit 2 clear.
  EXPECT_EQ(y[64], -7.0f);
}

TEST(QuantLayoutTest, Q6_KHandBuilt) {
  std::vector<uint8_t> blk(210, 0);
  PutHalf(blk.data() + 208, 0.25f);
  // Element 200: h = 1, m = 2, l = 8: high nibble of ql[72], bits 4..5 of qh[40].
  blk[72] = 0xA0;         // lo = 10
  blk[128 + 40] = 0x30;   // hi = 3  -> q = 58 - 32 = 26
  blk[192 + 12] = static_cast<uint8_t>(static_cast<int8_t>(-3));
  // Element 0: low nibble of ql[0] = 0, qh bits 0 -> q = -32, scale -128.
  blk[192 + 0] = static_cast<uint8_t>(static_cast<int8_t>(-128));
  // Element 63: h = 0, m = 1, l = 31: low nibble of ql[63], bits 2..3 of qh[31].
  blk[63] = 0x0F;
  blk[128 + 31] = 0x08;  // hi = 2 -> q = 15 + 32 - 32 = 15
  blk[192 + 3] = 127;
  const std::vector<float> y = Decode(TensorType::kQ6_K, blk, 256);
  EXPECT_EQ(y[200], 0.25f * -3.0f * 26.0f);
  EXPECT_EQ(y[0], 0.25f * -128.0f * -32.0f);
  EXPECT_EQ(y[63], 0.25f * 127.0f * 15.0f);
  // Element 31 reads ql[31] and qh[31] bits 0..1 (both zero) with scale 1
  // (zero), not the bytes set for element 63.
  EXPECT_EQ(y[31], 0.0f);
  // Element 127 (m = 3, l = 31) reads the high nibble of ql[63] (0) and bits
  // 6..7 of qh[31] (0): q = -32, scale index 7 (zero).
  EXPECT_EQ(y[127], 0.0f);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], RefQ6_K(blk.data(), e)) << e;
}

TEST(QuantLayoutTest, Q5_0HandBuiltFifthBitOfTheUpperHalf) {
  std::vector<uint8_t> blk(22, 0);
  PutHalf(blk.data(), 0.5f);
  blk[2 + 2] = 0x01;  // qh bit 16: the fifth bit of element 16
  blk[6 + 0] = 0x3F;  // element 0: nibble 15; element 16: nibble 3
  const std::vector<float> y = Decode(TensorType::kQ5_0, blk, 32);
  EXPECT_EQ(y[0], 0.5f * (15 - 16));
  EXPECT_EQ(y[16], 0.5f * (3 + 16 - 16));
  EXPECT_EQ(y[1], 0.5f * -16);
}

TEST(QuantLayoutTest, Q3_KHandBuiltScalesAndHighBits) {
  std::vector<uint8_t> blk(110, 0);
  PutHalf(blk.data() + 108, 0.5f);
  // Scale 13 (row 3 of the SPEC table, k = 1) = 45 = 0b10'1101: low nibble in
  // the high half of byte 5, high bits in bits 6..7 of byte 9.
  blk[96 + 5] = 0xD0;
  blk[96 + 9] = 0x80;
  // Element 208 = 128 + 2*32 + 16: h = 1, j = 2, l = 16, sub-block 13.
  blk[32 + 32 + 16] = 0x30;  // low bits 3 at bit 4
  blk[16] = 1 << 6;          // high bit 4h + j = 6 of hmask[16]: q = 3
  // Element 209 (l = 17): low bits 0, high bit clear: q = -4.
  const std::vector<float> y = Decode(TensorType::kQ3_K, blk, 256);
  EXPECT_EQ(y[208], 0.5f * (45 - 32) * 3.0f);
  EXPECT_EQ(y[209], 0.5f * (45 - 32) * -4.0f);
  // Every other sub-block has scale 0 - 32.
  EXPECT_EQ(y[0], 0.5f * -32.0f * -4.0f);
}

TEST(QuantLayoutTest, IQ4_XSHandBuiltScales) {
  std::vector<uint8_t> blk(136, 0);
  PutHalf(blk.data(), 0.25f);
  // Sub-block 7: ls = 0b11'0101 = 53; low nibble in the high half of
  // scales_l[3], high bits 14..15 of scales_h.
  blk[4 + 3] = 0x50;
  blk[2 + 1] = 0xC0;
  blk[8 + 16 * 7 + 0] = 0xF0;  // element 224: level 0 (-127); element 240: 15 (113)
  const std::vector<float> y = Decode(TensorType::kIQ4_XS, blk, 256);
  EXPECT_EQ(y[224], 0.25f * (53 - 32) * -127.0f);
  EXPECT_EQ(y[240], 0.25f * (53 - 32) * 113.0f);
  EXPECT_EQ(y[0], 0.25f * -32.0f * -127.0f);  // ls 0 elsewhere
}

TEST(QuantLayoutTest, MXFP4HandBuiltExponents) {
  std::vector<uint8_t> blk(17, 0);
  blk[0] = 128;   // 2^0: the doubled E2M1 levels as they are
  blk[1] = 0x97;  // element 0: code 7 (12); element 16: code 9 (-1)
  std::vector<float> y = Decode(TensorType::kMXFP4, blk, 32);
  EXPECT_EQ(y[0], 12.0f);
  EXPECT_EQ(y[16], -1.0f);
  blk[0] = 0;  // 2^-128, a subnormal float
  y = Decode(TensorType::kMXFP4, blk, 32);
  EXPECT_EQ(y[0], 12.0f * std::ldexp(1.0f, -128));
  EXPECT_GT(y[0], 0.0f);
}

TEST(QuantLayoutTest, PlainFloatTypes) {
  const std::vector<float> x = {1.0f, -2.5f, 0.1f, 65504.0f, -0.0f, 3.0e-8f, 1e30f, 0.333f};
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> f32(static_cast<size_t>(4 * n));
  QuantizeRow(TensorType::kF32, x.data(), f32.data(), n);
  EXPECT_EQ(std::memcmp(f32.data(), x.data(), f32.size()), 0);
  EXPECT_EQ(Decode(TensorType::kF32, f32, n), x);

  std::vector<uint8_t> f16(static_cast<size_t>(2 * n));
  QuantizeRow(TensorType::kF16, x.data(), f16.data(), n);
  std::vector<float> y = Decode(TensorType::kF16, f16, n);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(Le16(f16.data() + 2 * i), FloatToHalf(x[i])) << i;
    EXPECT_EQ(y[i], HalfToFloat(FloatToHalf(x[i]))) << i;
  }
  EXPECT_EQ(Le16(f16.data()), 0x3C00);  // little-endian 1.0

  std::vector<uint8_t> bf16(static_cast<size_t>(2 * n));
  QuantizeRow(TensorType::kBF16, x.data(), bf16.data(), n);
  y = Decode(TensorType::kBF16, bf16, n);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(Le16(bf16.data() + 2 * i), FloatToBf16(x[i])) << i;
    EXPECT_EQ(y[i], Bf16ToFloat(FloatToBf16(x[i]))) << i;
  }
  EXPECT_EQ(Le16(bf16.data()), 0x3F80);
}

}  // namespace
}  // namespace moetier
