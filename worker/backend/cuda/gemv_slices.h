// How the decode GEMV's warp splits a row of block-quantized weights: in
// each step the 32 lanes decode 256 consecutive weights, 8 per lane, in
// runs of consecutive elements, so a lane reads its bytes with 16-bit
// loads, decodes each sub-block's scale once, and reads the activations as
// float4 / float2. The decoded weights are the codec's bit for bit
// (SPEC.md §2.3, DequantizeRow: the same products, rounded one at a time).
//
// Plain C++ (the functions are __host__ __device__ under nvcc), so that
// tests/cuda/gemv_slices_test.cc checks on any machine that the lanes of
// all steps cover a row exactly once with the codec's values; the kernel in
// cuda_quant.cu only adds the activations and the warp sum.
//
// Each slicer has kRuns runs of kRunLen elements per lane (kRuns * kRunLen
// = 8) and kStepElems = 256 elements per warp step. Decode returns false
// for a lane with nothing in this step (a row of 32-element blocks whose
// length is not a multiple of 256). Row pointers must be 2-byte aligned.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#else
#include "gguf/tensor/half.h"
#endif

#include "base/host_device.h"
#include "gguf/tensor/tensor_type.h"

// Small constant loops over a slice's runs must unroll, or the slice lands
// in local memory (device pass only: the host compiler knows no such pragma).
#if defined(__CUDA_ARCH__)
#define MOETIER_GEMV_UNROLL _Pragma("unroll")
#else
#define MOETIER_GEMV_UNROLL
#endif


namespace moetier::cuda::gemv {

// Products and differences rounded on their own: nvcc never fuses these,
// and the host test is compiled with -ffp-contract=off.
MOETIER_HOST_DEVICE inline float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

MOETIER_HOST_DEVICE inline float SubRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

MOETIER_HOST_DEVICE inline uint32_t Load16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const unsigned short*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

MOETIER_HOST_DEVICE inline float HalfAt(const uint8_t* p) {
#if defined(__CUDACC__)
  return __half2float(__ushort_as_half(static_cast<unsigned short>(Load16(p))));
#else
  return HalfToFloat(static_cast<uint16_t>(Load16(p)));
#endif
}

// Four consecutive bytes from two 16-bit loads, little-endian.
MOETIER_HOST_DEVICE inline uint32_t Load4Bytes(const uint8_t* p) {
  return Load16(p) | (Load16(p + 2) << 16);
}

MOETIER_HOST_DEVICE inline int ByteOf(uint32_t word, int k) {
  return static_cast<int>((word >> (8 * k)) & 0xFFu);
}

template <int kRuns_, int kRunLen_>
struct Slice {
  static constexpr int kRuns = kRuns_;
  static constexpr int kRunLen = kRunLen_;
  int64_t first[kRuns];  // the row's element index of each run's first weight
  float w[kRuns][kRunLen];
};

// Scale and min of sub-block j of a Q4_K/Q5_K block (ggml's get_scale_min_k4).
MOETIER_HOST_DEVICE inline void ScaleMinK4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

template <TensorType T>
struct Slicer;

// Q4_K and Q5_K: one block per step. Lane t takes chunk c = t / 8 of the
// four 64-element chunks and bytes 4(t % 8)..+3 of the chunk's 32 qs bytes:
// their low nibbles are elements 64c + 4(t % 8) + 0..3 (sub-block 2c), the
// high nibbles the same 32 later (sub-block 2c + 1).
template <int kQsOffset, bool kFifthBit>
struct SlicerK4 {
  using SliceT = Slice<2, 4>;
  static constexpr int kStepElems = 256;
  static constexpr int kBlockBytes = kFifthBit ? 176 : 144;
  MOETIER_HOST_DEVICE static bool Decode(const uint8_t* row, int64_t /*n_blocks*/, int64_t step,
                                         int lane, SliceT* s) {
    const uint8_t* blk = row + step * kBlockBytes;
    const int c = lane / 8;
    const int q = lane % 8;
    const uint32_t qs = Load4Bytes(blk + kQsOffset + 32 * c + 4 * q);
    uint32_t qh = 0;
    if constexpr (kFifthBit) qh = Load4Bytes(blk + 16 + 4 * q);
    const float d = HalfAt(blk);
    const float dmin = HalfAt(blk + 2);
    MOETIER_GEMV_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int j = 2 * c + half;
      int sc, m;
      ScaleMinK4(j, blk + 4, &sc, &m);
      const float scale = MulRn(d, static_cast<float>(sc));
      const float min = MulRn(dmin, static_cast<float>(m));
      s->first[half] = step * 256 + 32 * j + 4 * q;
      MOETIER_GEMV_UNROLL
      for (int k = 0; k < 4; ++k) {
        int level = (ByteOf(qs, k) >> (4 * half)) & 0x0F;
        if constexpr (kFifthBit) level |= ((ByteOf(qh, k) >> j) & 1) << 4;
        s->w[half][k] = SubRn(MulRn(scale, static_cast<float>(level)), min);
      }
    }
    return true;
  }
};

template <>
struct Slicer<TensorType::kQ4_K> : SlicerK4<16, false> {};
template <>
struct Slicer<TensorType::kQ5_K> : SlicerK4<48, true> {};

// Q6_K: one block per step. Lane t takes half h = t / 16 of the block and
// the pair of positions l = 2(t % 16), +1; run m (0..3) is elements
// 128h + 32m + l, +1.
template <>
struct Slicer<TensorType::kQ6_K> {
  using SliceT = Slice<4, 2>;
  static constexpr int kStepElems = 256;
  MOETIER_HOST_DEVICE static bool Decode(const uint8_t* row, int64_t /*n_blocks*/, int64_t step,
                                         int lane, SliceT* s) {
    const uint8_t* blk = row + step * 210;
    const int h = lane / 16;
    const int l = 2 * (lane % 16);
    const uint32_t ql_lo = Load16(blk + 64 * h + l);       // runs 0 and 2
    const uint32_t ql_hi = Load16(blk + 64 * h + 32 + l);  // runs 1 and 3
    const uint32_t qh = Load16(blk + 128 + 32 * h + l);
    const float d = HalfAt(blk + 208);
    MOETIER_GEMV_UNROLL
    for (int m = 0; m < 4; ++m) {
      const int8_t sc = static_cast<int8_t>(blk[192 + 8 * h + 2 * m + l / 16]);
      const float scale = MulRn(d, static_cast<float>(sc));
      const uint32_t ql = (m & 1) ? ql_hi : ql_lo;
      s->first[m] = step * 256 + 128 * h + 32 * m + l;
      MOETIER_GEMV_UNROLL
      for (int k = 0; k < 2; ++k) {
        const int lo = (ByteOf(ql, k) >> (m < 2 ? 0 : 4)) & 0x0F;
        const int hi = (ByteOf(qh, k) >> (2 * m)) & 3;
        s->w[m][k] = MulRn(scale, static_cast<float>((lo | (hi << 4)) - 32));
      }
    }
    return true;
  }
};

// Q8_0 and Q4_0: eight 32-element blocks per step. Lane t takes block
// 8 * step + t / 4 and quarter q = t % 4 of it: Q8_0 elements 8q..8q+7
// (int8 levels), Q4_0 the low nibbles of bytes 4q..4q+3 (elements 4q..)
// and their high nibbles (elements 16 + 4q..), levels offset by 8.
template <int kBlockBytes, bool kNibbles>
struct Slicer32 {
  using SliceT = Slice<2, 4>;
  static constexpr int kStepElems = 256;
  MOETIER_HOST_DEVICE static bool Decode(const uint8_t* row, int64_t n_blocks, int64_t step,
                                         int lane, SliceT* s) {
    const int64_t b = 8 * step + lane / 4;
    if (b >= n_blocks) return false;
    const uint8_t* blk = row + b * kBlockBytes;
    const int q = lane % 4;
    const float d = HalfAt(blk);
    MOETIER_GEMV_UNROLL
    for (int run = 0; run < 2; ++run) {
      const int byte0 = kNibbles ? 4 * q : 8 * q + 4 * run;
      const uint32_t qs = Load4Bytes(blk + 2 + byte0);
      s->first[run] = 32 * b + (kNibbles ? 16 * run + 4 * q : byte0);
      MOETIER_GEMV_UNROLL
      for (int k = 0; k < 4; ++k) {
        const int level = kNibbles ? ((ByteOf(qs, k) >> (4 * run)) & 0x0F) - 8
                                   : static_cast<int8_t>(ByteOf(qs, k));
        s->w[run][k] = MulRn(d, static_cast<float>(level));
      }
    }
    return true;
  }
};

template <>
struct Slicer<TensorType::kQ8_0> : Slicer32<34, false> {};
template <>
struct Slicer<TensorType::kQ4_0> : Slicer32<18, true> {};

// Warp steps that cover a row of `n_blocks` blocks of type T.
template <TensorType T>
MOETIER_HOST_DEVICE inline int64_t StepsPerRow(int64_t n_blocks) {
  if constexpr (T == TensorType::kQ8_0 || T == TensorType::kQ4_0) return (n_blocks + 7) / 8;
  return n_blocks;
}

}  // namespace moetier::cuda::gemv
