// ggml quantization blocks (SPEC.md §2.2) as plain structs, for kernels that
// read or write blocks in place. Sizes and field offsets equal ggml's (checked
// below), so an array of blocks is exactly the bytes of a GGUF tensor row.
// The layouts need no packing attribute: every field sits at its natural
// alignment and no struct has padding. Halves are raw binary16 bits (see
// tensor/half.h); all multi-byte fields are little-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace moetier {

inline constexpr int kQK8_0 = 32;          // elements per Q8_0 block
inline constexpr int kQK4_0 = 32;          // elements per Q4_0 block
inline constexpr int kQKK = 256;           // elements per K-quant super-block
inline constexpr int kKScaleBytes = 12;    // packed 6-bit scales+mins of Q4_K/Q5_K

// Q8_0: y[e] = d * qs[e].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};

// Q4_0: y[j] = d * ((qs[j] & 0xF) - 8), y[j+16] = d * ((qs[j] >> 4) - 8).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};

// Q4_K: 8 sub-blocks of 32 with 6-bit scale sc_j and min m_j (GetScaleMinK4).
// Element e: c = e/64, l = e%32; the nibble is the low (e%64 < 32) or high
// half of qs[32c + l]; y = d*sc_j*nib - dmin*m_j with j = e/32.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};

// Q5_K: Q4_K plus a fifth bit: q = nib + 16*((qh[e%32] >> (e/32)) & 1).
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};

// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales. h = e/128,
// m = (e%128)/32, l = e%32: low 4 bits from ql[64h + 32(m&1) + l] (low nibble
// for m < 2, high nibble otherwise), high 2 bits from qh[32h + l] >> 2m;
// y = d * scales[e/16] * (q - 32).
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};

// Q4_1: y[j] = d * nib + m with the nibbles of Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_0 / 2];
};

// Q5_0: the Q4_0 nibble plus bit e of qh (a little-endian u32) as its fifth
// bit; y = d * (q5 - 16).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK4_0 / 2];
};

// Q5_1: the Q5_0 five-bit value without the offset; y = d * q5 + m.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK4_0 / 2];
};

// IQ4_NL: y = d * kIq4NlLevels[nib] with the nibbles of Q4_0.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};

// MXFP4: y = kMxfp4Levels[nib] * 2^(e - 128) with the nibbles of Q4_0; e is
// an E8M0 exponent and the levels are E2M1 values doubled.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK4_0 / 2];
};

// Q2_K: 16 sub-blocks of 16, each with a 4-bit scale (low nibble of
// scales[e/16]) and a 4-bit min (high nibble). h = e/128, j = (e%128)/32,
// l = e%32: q = (qs[32h + l] >> 2j) & 3; y = d*sc*q - dmin*m.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};

// Q3_K: Q2_K's two low bits plus a high bit (hmask[l] >> (4h + j)) & 1;
// q = low - (high ? 0 : 4) in -4..3; y = d * (s - 32) * q with 16 six-bit
// scales s packed in 12 bytes (SPEC.md §2.3).
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;
};

// IQ4_XS: 8 sub-blocks of 32 with IQ4_NL levels and 6-bit scales ls (low 4
// bits in scales_l, high 2 in scales_h); y = d * (ls - 32) * level.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};

// The i-quant grid types (codebooks in iq_grids.h). Per group of 8 values a
// block stores a codebook index; signs beside it, 7 bits a group where the
// 8th is parity (IqSignsFromSevenBits) or 8. Scales s are 4-bit (3-bit for
// IQ1) and scale values by (2s + 1).
//
// IQ2_XXS: per 32 values 8 bytes: bytes 0..3 index 4 groups in the
// 256-entry grid; the u32 of bytes 4..7 holds 4 x 7 sign bits and s in its top
// 4 bits; y = d * (2s + 1) / 8 * grid * sign.
struct BlockIQ2_XXS {
  uint16_t d;
  uint16_t qs[kQKK / 8];
};

// IQ2_XS: per group of 8 a u16: 9-bit index into the 512-entry grid and 7
// sign bits; a scale nibble per 16 values (low nibble first);
// y = d * (2s + 1) / 8 * grid * sign.
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[kQKK / 8];
  uint8_t scales[kQKK / 32];
};

// IQ2_S: per group of 8 the low 8 bits of a 10-bit index into the
// 1024-entry grid (qs[0..32)), 8 sign bits (qs[32..64)); qh[g / 4] holds the
// index's top 2 bits at bits 2(g % 4); scales as IQ2_XS.
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[kQKK / 4];
  uint8_t qh[kQKK / 32];
  uint8_t scales[kQKK / 32];
};

// IQ3_XXS: per 4 values a byte indexing the 256-entry grid (qs[0..64)),
// then per 32 values a u32 of 4 x 7 sign bits and s in its top 4 bits;
// y = d * (2s + 1) / 4 * grid * sign.
struct BlockIQ3_XXS {
  uint16_t d;
  uint8_t qs[3 * kQKK / 8];
};

// IQ3_S: per 4 values the low 8 bits of a 9-bit index into the 512-entry
// grid, the 9th in qh (bit i of qh[g] for index i of 32-group g), 8 sign bits
// per 8 values, a scale nibble per 32 values (low nibble first);
// y = d * (2s + 1) * grid * sign.
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[kQKK / 4];
  uint8_t qh[kQKK / 32];
  uint8_t signs[kQKK / 8];
  uint8_t scales[kQKK / 64];
};

// IQ1_S: per group of 8 the low 8 bits of an 11-bit index into the signed
// 2048-entry grid; per 32 values a u16 qh: the indices' top 3 bits at 3l,
// s at bits 12..14, and bit 15 choosing a delta of -1/8 (else +1/8);
// y = d * (2s + 1) * (grid + delta).
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[kQKK / 8];
  uint16_t qh[kQKK / 32];
};

// IQ1_M: IQ1_S's indices, with each group's top 3 bits and delta sign in a
// nibble of qh (bits 0..2 and 3); 3-bit scales per 16 values, four to a u16 of
// `scales`, whose top nibbles make up the fp16 block scale d.
struct BlockIQ1_M {
  uint8_t qs[kQKK / 8];
  uint8_t qh[kQKK / 16];
  uint8_t scales[kQKK / 32];
};

// The non-linear levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4NlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// The E2M1 values of MXFP4, doubled (ggml's kvalues_mxfp4).
inline constexpr int8_t kMxfp4Levels[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// Q8_K: activation blocks for dot products against K-quants. d is a float
// (not a half); bsums[i] is the sum of qs[16i .. 16i+15], which lets a kernel
// apply a weight block's mins without touching the activations again.
struct BlockQ8K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

// Scale and min of sub-block j (0..7) of a Q4_K or Q5_K block (ggml's
// get_scale_min_k4). Bytes 0..3 hold scales 0..3 in their low 6 bits, bytes
// 4..7 mins 0..3; the top 2 bits of bytes 0..7 and the nibbles of bytes 8..11
// make up scales and mins 4..7.
inline void GetScaleMinK4(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

#define MOETIER_BLOCK_LAYOUT(T) \
  static_assert(std::is_standard_layout_v<T> && std::is_trivially_copyable_v<T>, #T)

MOETIER_BLOCK_LAYOUT(BlockQ8_0);
static_assert(sizeof(BlockQ8_0) == 34 && alignof(BlockQ8_0) == 2);
static_assert(offsetof(BlockQ8_0, d) == 0 && offsetof(BlockQ8_0, qs) == 2);

MOETIER_BLOCK_LAYOUT(BlockQ4_0);
static_assert(sizeof(BlockQ4_0) == 18 && alignof(BlockQ4_0) == 2);
static_assert(offsetof(BlockQ4_0, d) == 0 && offsetof(BlockQ4_0, qs) == 2);

MOETIER_BLOCK_LAYOUT(BlockQ4_K);
static_assert(sizeof(BlockQ4_K) == 144 && alignof(BlockQ4_K) == 2);
static_assert(offsetof(BlockQ4_K, d) == 0 && offsetof(BlockQ4_K, dmin) == 2);
static_assert(offsetof(BlockQ4_K, scales) == 4 && offsetof(BlockQ4_K, qs) == 16);

MOETIER_BLOCK_LAYOUT(BlockQ5_K);
static_assert(sizeof(BlockQ5_K) == 176 && alignof(BlockQ5_K) == 2);
static_assert(offsetof(BlockQ5_K, d) == 0 && offsetof(BlockQ5_K, dmin) == 2);
static_assert(offsetof(BlockQ5_K, scales) == 4 && offsetof(BlockQ5_K, qh) == 16);
static_assert(offsetof(BlockQ5_K, qs) == 48);

MOETIER_BLOCK_LAYOUT(BlockQ6_K);
static_assert(sizeof(BlockQ6_K) == 210 && alignof(BlockQ6_K) == 2);
static_assert(offsetof(BlockQ6_K, ql) == 0 && offsetof(BlockQ6_K, qh) == 128);
static_assert(offsetof(BlockQ6_K, scales) == 192 && offsetof(BlockQ6_K, d) == 208);

MOETIER_BLOCK_LAYOUT(BlockQ4_1);
static_assert(sizeof(BlockQ4_1) == 20 && offsetof(BlockQ4_1, m) == 2 &&
              offsetof(BlockQ4_1, qs) == 4);

MOETIER_BLOCK_LAYOUT(BlockQ5_0);
static_assert(sizeof(BlockQ5_0) == 22 && offsetof(BlockQ5_0, qh) == 2 &&
              offsetof(BlockQ5_0, qs) == 6);

MOETIER_BLOCK_LAYOUT(BlockQ5_1);
static_assert(sizeof(BlockQ5_1) == 24 && offsetof(BlockQ5_1, qh) == 4 &&
              offsetof(BlockQ5_1, qs) == 8);

MOETIER_BLOCK_LAYOUT(BlockIQ4_NL);
static_assert(sizeof(BlockIQ4_NL) == 18 && offsetof(BlockIQ4_NL, qs) == 2);

MOETIER_BLOCK_LAYOUT(BlockMXFP4);
static_assert(sizeof(BlockMXFP4) == 17 && offsetof(BlockMXFP4, qs) == 1);

MOETIER_BLOCK_LAYOUT(BlockQ2_K);
static_assert(sizeof(BlockQ2_K) == 84 && offsetof(BlockQ2_K, qs) == 16);
static_assert(offsetof(BlockQ2_K, d) == 80 && offsetof(BlockQ2_K, dmin) == 82);

MOETIER_BLOCK_LAYOUT(BlockQ3_K);
static_assert(sizeof(BlockQ3_K) == 110 && offsetof(BlockQ3_K, qs) == 32);
static_assert(offsetof(BlockQ3_K, scales) == 96 && offsetof(BlockQ3_K, d) == 108);

MOETIER_BLOCK_LAYOUT(BlockIQ4_XS);
static_assert(sizeof(BlockIQ4_XS) == 136 && offsetof(BlockIQ4_XS, scales_h) == 2);
static_assert(offsetof(BlockIQ4_XS, scales_l) == 4 && offsetof(BlockIQ4_XS, qs) == 8);

MOETIER_BLOCK_LAYOUT(BlockIQ2_XXS);
static_assert(sizeof(BlockIQ2_XXS) == 66 && offsetof(BlockIQ2_XXS, qs) == 2);
MOETIER_BLOCK_LAYOUT(BlockIQ2_XS);
static_assert(sizeof(BlockIQ2_XS) == 74 && offsetof(BlockIQ2_XS, scales) == 66);
MOETIER_BLOCK_LAYOUT(BlockIQ2_S);
static_assert(sizeof(BlockIQ2_S) == 82 && offsetof(BlockIQ2_S, qh) == 66 &&
              offsetof(BlockIQ2_S, scales) == 74);
MOETIER_BLOCK_LAYOUT(BlockIQ3_XXS);
static_assert(sizeof(BlockIQ3_XXS) == 98 && offsetof(BlockIQ3_XXS, qs) == 2);
MOETIER_BLOCK_LAYOUT(BlockIQ3_S);
static_assert(sizeof(BlockIQ3_S) == 110 && offsetof(BlockIQ3_S, qh) == 66 &&
              offsetof(BlockIQ3_S, signs) == 74 && offsetof(BlockIQ3_S, scales) == 106);
MOETIER_BLOCK_LAYOUT(BlockIQ1_S);
static_assert(sizeof(BlockIQ1_S) == 50 && offsetof(BlockIQ1_S, qh) == 34);
MOETIER_BLOCK_LAYOUT(BlockIQ1_M);
static_assert(sizeof(BlockIQ1_M) == 56 && offsetof(BlockIQ1_M, qh) == 32 &&
              offsetof(BlockIQ1_M, scales) == 48);

MOETIER_BLOCK_LAYOUT(BlockQ8K);
static_assert(sizeof(BlockQ8K) == 292 && alignof(BlockQ8K) == 4);
static_assert(offsetof(BlockQ8K, d) == 0 && offsetof(BlockQ8K, qs) == 4);
static_assert(offsetof(BlockQ8K, bsums) == 260);

#undef MOETIER_BLOCK_LAYOUT

}  // namespace moetier
