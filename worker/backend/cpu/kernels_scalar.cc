// Portable kernels: the fallback on any processor and the definition of the
// activation quantization every level shares.
#include <bit>
#include <cmath>
#include <cstring>

#include "backend/cpu/block_layouts.h"
#include "backend/cpu/gemm_iq_grids.h"
#include "backend/cpu/kernel_table.h"
#include "gguf/tensor/half.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier::cpu {
namespace {

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves the
// rounded integer in the low mantissa bits. Every SIMD level uses the same
// rounding, so all levels produce identical activation bytes.
inline int RoundToInt(float v) {
  const float shifted = v + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(shifted) & 0x007FFFFFu) - 0x00400000;
}

inline int ClampQ(int q) { return q > 127 ? 127 : (q < -127 ? -127 : q); }

// Largest magnitude of n finite values.
inline float AbsMax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float a = std::fabs(x[j]);
    amax = a > amax ? a : amax;
  }
  return amax;
}

void QuantizeQ8_0(const float* x, int64_t k, uint8_t* dst) {
  int8_t* qs = reinterpret_cast<int8_t*>(dst);
  float* d8 = reinterpret_cast<float*>(dst + k);
  int32_t* nsum8 = reinterpret_cast<int32_t*>(dst + 2 * k);
  for (int64_t b = 0; b < k / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    const float amax = AbsMax(xb, kQK8_0);
    const float d = amax / 127.0f;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kQK8_0; ++j) {
      const int q = ClampQ(RoundToInt(xb[j] * id));
      qs[b * kQK8_0 + j] = static_cast<int8_t>(q);
      sum += q;
    }
    for (int j = 0; j < kActRepeat; ++j) {
      d8[b * kActRepeat + j] = d;
      nsum8[b * kActRepeat + j] = -sum;
    }
  }
}

void QuantizeQ8K(const float* x, int64_t k, uint8_t* dst) {
  int8_t* qs = reinterpret_cast<int8_t*>(dst);
  int16_t* bsums = reinterpret_cast<int16_t*>(dst + k);
  float* dd = reinterpret_cast<float*>(dst + k + k / 8);
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    const float amax = AbsMax(xb, kQK_K);
    dd[b] = amax / 127.0f;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) {
        const int q = ClampQ(RoundToInt(xb[g * 16 + j] * id));
        qs[b * kQK_K + g * 16 + j] = static_cast<int8_t>(q);
        sum += q;
      }
      bsums[b * (kQK_K / 16) + g] = static_cast<int16_t>(sum);
    }
  }
}

// One weight row against one activation row.
float DotRowF32(int64_t k, const uint8_t* w, const uint8_t* act) {
  const float* wf = reinterpret_cast<const float*>(w);
  const float* a = reinterpret_cast<const float*>(act);
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) sum += wf[j] * a[j];
  return sum;
}

float DotRowF16(int64_t k, const uint8_t* w, const uint8_t* act) {
  const float* a = reinterpret_cast<const float*>(act);
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    uint16_t h;
    std::memcpy(&h, w + 2 * j, 2);
    sum += HalfToFloat(h) * a[j];
  }
  return sum;
}

float DotRowBf16(int64_t k, const uint8_t* w, const uint8_t* act) {
  const float* a = reinterpret_cast<const float*>(act);
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    uint16_t h;
    std::memcpy(&h, w + 2 * j, 2);
    sum += Bf16ToFloat(h) * a[j];
  }
  return sum;
}

float DotRowQ8_0(int64_t k, const uint8_t* w, const uint8_t* act) {
  const BlockQ8_0* x = reinterpret_cast<const BlockQ8_0*>(w);
  const int8_t* qa = reinterpret_cast<const int8_t*>(act);
  const float* d8 = reinterpret_cast<const float*>(act + k);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK8_0; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < kQK8_0; ++j) isum += x[b].qs[j] * qa[b * kQK8_0 + j];
    sum += HalfToFloat(x[b].d) * d8[b * kActRepeat] * static_cast<float>(isum);
  }
  return sum;
}

float DotRowQ4_0(int64_t k, const uint8_t* w, const uint8_t* act) {
  const BlockQ4_0* x = reinterpret_cast<const BlockQ4_0*>(w);
  const int8_t* qa = reinterpret_cast<const int8_t*>(act);
  const float* d8 = reinterpret_cast<const float*>(act + k);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK8_0; ++b) {
    const int8_t* a = qa + b * kQK8_0;
    int32_t isum = 0;
    for (int j = 0; j < kQK8_0 / 2; ++j) {
      isum += ((x[b].qs[j] & 0x0F) - 8) * a[j];
      isum += ((x[b].qs[j] >> 4) - 8) * a[j + 16];
    }
    sum += HalfToFloat(x[b].d) * d8[b * kActRepeat] * static_cast<float>(isum);
  }
  return sum;
}

// Unpacks the 8 six-bit scales and mins of a Q4_K / Q5_K block (SPEC §2.3).
void UnpackScalesMins(const uint8_t* b, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = b[j] & 63;
    mn[j] = b[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>((b[j + 4] & 0x0F) | ((b[j - 4] >> 6) << 4));
    mn[j] = static_cast<uint8_t>((b[j + 4] >> 4) | ((b[j] >> 6) << 4));
  }
}

float DotRowQ4K(int64_t k, const uint8_t* w, const uint8_t* act) {
  const BlockQ4K* x = reinterpret_cast<const BlockQ4K*>(w);
  const Q8KRow row = Q8KRowAt(act, k);
  const int8_t* qa = row.qs;
  const int16_t* bsums = row.bsums;
  const float* dd = row.d;
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    uint8_t sc[8], mn[8];
    UnpackScalesMins(x[b].scales, sc, mn);
    const int8_t* a = qa + b * kQK_K;
    int32_t isum = 0;
    int32_t msum = 0;
    for (int j = 0; j < 8; ++j) {
      const int c = j / 2;
      const int shift = (j % 2) * 4;
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) s += ((x[b].qs[32 * c + l] >> shift) & 0x0F) * a[32 * j + l];
      isum += sc[j] * s;
      msum += mn[j] * (bsums[b * 16 + 2 * j] + bsums[b * 16 + 2 * j + 1]);
    }
    sum += dd[b] * (HalfToFloat(x[b].d) * static_cast<float>(isum) -
                    HalfToFloat(x[b].dmin) * static_cast<float>(msum));
  }
  return sum;
}

float DotRowQ5K(int64_t k, const uint8_t* w, const uint8_t* act) {
  const BlockQ5K* x = reinterpret_cast<const BlockQ5K*>(w);
  const Q8KRow row = Q8KRowAt(act, k);
  const int8_t* qa = row.qs;
  const int16_t* bsums = row.bsums;
  const float* dd = row.d;
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    uint8_t sc[8], mn[8];
    UnpackScalesMins(x[b].scales, sc, mn);
    const int8_t* a = qa + b * kQK_K;
    int32_t isum = 0;
    int32_t msum = 0;
    for (int j = 0; j < 8; ++j) {
      const int c = j / 2;
      const int shift = (j % 2) * 4;
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) {
        const int q = ((x[b].qs[32 * c + l] >> shift) & 0x0F) | (((x[b].qh[l] >> j) & 1) << 4);
        s += q * a[32 * j + l];
      }
      isum += sc[j] * s;
      msum += mn[j] * (bsums[b * 16 + 2 * j] + bsums[b * 16 + 2 * j + 1]);
    }
    sum += dd[b] * (HalfToFloat(x[b].d) * static_cast<float>(isum) -
                    HalfToFloat(x[b].dmin) * static_cast<float>(msum));
  }
  return sum;
}

float DotRowQ6K(int64_t k, const uint8_t* w, const uint8_t* act) {
  const BlockQ6K* x = reinterpret_cast<const BlockQ6K*>(w);
  const Q8KRow row = Q8KRowAt(act, k);
  const int8_t* qa = row.qs;
  const float* dd = row.d;
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    const int8_t* a = qa + b * kQK_K;
    int32_t isum = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t s = 0;
      for (int t = 0; t < 16; ++t) {
        const int e = 16 * g + t;
        const int h = e / 128;
        const int m = (e % 128) / 32;
        const int l = e % 32;
        const uint8_t ql = x[b].ql[64 * h + 32 * (m & 1) + l];
        const int lo = (m < 2) ? (ql & 0x0F) : (ql >> 4);
        const int hi = (x[b].qh[32 * h + l] >> (2 * m)) & 3;
        s += ((lo | (hi << 4)) - 32) * a[e];
      }
      isum += x[b].scales[g] * s;
    }
    sum += dd[b] * HalfToFloat(x[b].d) * static_cast<float>(isum);
  }
  return sum;
}

// The Q8_0 activation row of block b: its int8 values, d and sum of values.
struct Q8_0Block {
  const int8_t* qs;
  float d;
  int32_t sum;
};

Q8_0Block ActQ8_0(const uint8_t* act, int64_t k, int64_t b) {
  return {reinterpret_cast<const int8_t*>(act) + b * kQK8_0,
          reinterpret_cast<const float*>(act + k)[b * kActRepeat],
          -reinterpret_cast<const int32_t*>(act + 2 * k)[b * kActRepeat]};
}

// Element j of a 32-element block: low nibble of qs[j] for j < 16, high nibble
// of qs[j - 16] otherwise; the fifth bit, where there is one, is bit j of qh.
inline int Nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4; }
inline int FifthBit(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

// The 32-element types against Q8_0 rows: y = scale · value (+ min for the
// affine ones), so the dot is da · (scale · Σ value·a (+ min · Σa)).
struct Q4_1Format {
  using Block = BlockQ4_1;
  static constexpr bool kHasMin = true;
  static int Value(const Block& x, int j) { return Nibble(x.qs, j); }
  static float Scale(const Block& x) { return HalfToFloat(x.d); }
  static float Min(const Block& x) { return HalfToFloat(x.m); }
};
struct Q5_0Format {
  using Block = BlockQ5_0;
  static constexpr bool kHasMin = false;
  static int Value(const Block& x, int j) {
    return (Nibble(x.qs, j) | (FifthBit(x.qh, j) << 4)) - 16;
  }
  static float Scale(const Block& x) { return HalfToFloat(x.d); }
  static float Min(const Block&) { return 0.0f; }
};
struct Q5_1Format {
  using Block = BlockQ5_1;
  static constexpr bool kHasMin = true;
  static int Value(const Block& x, int j) { return Nibble(x.qs, j) | (FifthBit(x.qh, j) << 4); }
  static float Scale(const Block& x) { return HalfToFloat(x.d); }
  static float Min(const Block& x) { return HalfToFloat(x.m); }
};
struct IQ4NLFormat {
  using Block = BlockIQ4NL;
  static constexpr bool kHasMin = false;
  static int Value(const Block& x, int j) { return kIq4NlValues[Nibble(x.qs, j)]; }
  static float Scale(const Block& x) { return HalfToFloat(x.d); }
  static float Min(const Block&) { return 0.0f; }
};
struct MXFP4Format {
  using Block = BlockMXFP4;
  static constexpr bool kHasMin = false;
  static int Value(const Block& x, int j) { return kMxfp4Values[Nibble(x.qs, j)]; }
  static float Scale(const Block& x) { return std::ldexp(1.0f, x.e - 128); }
  static float Min(const Block&) { return 0.0f; }
};

template <class F>
float DotRowBlock32(int64_t k, const uint8_t* w, const uint8_t* act) {
  const auto* x = reinterpret_cast<const typename F::Block*>(w);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK8_0; ++b) {
    const Q8_0Block a = ActQ8_0(act, k, b);
    int32_t isum = 0;
    for (int j = 0; j < kQK8_0; ++j) isum += F::Value(x[b], j) * a.qs[j];
    if constexpr (F::kHasMin) {
      sum += a.d * (F::Scale(x[b]) * static_cast<float>(isum) +
                    F::Min(x[b]) * static_cast<float>(a.sum));
    } else {
      sum += a.d * F::Scale(x[b]) * static_cast<float>(isum);
    }
  }
  return sum;
}

// The two low bits of element e = 128h + 32j + l of a Q2_K / Q3_K block.
inline int LowBits(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

float DotRowQ2K(int64_t k, const uint8_t* w, const uint8_t* act) {
  const BlockQ2K* x = reinterpret_cast<const BlockQ2K*>(w);
  const Q8KRow row = Q8KRowAt(act, k);
  const int8_t* qa = row.qs;
  const int16_t* bsums = row.bsums;
  const float* dd = row.d;
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    const int8_t* a = qa + b * kQK_K;
    int32_t isum = 0;
    int32_t msum = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t s = 0;
      for (int t = 0; t < 16; ++t) s += LowBits(x[b].qs, 16 * g + t) * a[16 * g + t];
      isum += (x[b].scales[g] & 0x0F) * s;
      msum += (x[b].scales[g] >> 4) * bsums[b * 16 + g];
    }
    sum += dd[b] * (HalfToFloat(x[b].d) * static_cast<float>(isum) -
                    HalfToFloat(x[b].dmin) * static_cast<float>(msum));
  }
  return sum;
}

// The 16 six-bit Q3_K scales, offset by 32 (SPEC §2.3 table).
void UnpackQ3Scales(const uint8_t* s, int* out) {
  for (int k = 0; k < 4; ++k) {
    out[k] = ((s[k] & 0x0F) | ((s[8 + k] & 3) << 4)) - 32;
    out[4 + k] = ((s[4 + k] & 0x0F) | (((s[8 + k] >> 2) & 3) << 4)) - 32;
    out[8 + k] = ((s[k] >> 4) | (((s[8 + k] >> 4) & 3) << 4)) - 32;
    out[12 + k] = ((s[4 + k] >> 4) | (((s[8 + k] >> 6) & 3) << 4)) - 32;
  }
}

float DotRowQ3K(int64_t k, const uint8_t* w, const uint8_t* act) {
  const BlockQ3K* x = reinterpret_cast<const BlockQ3K*>(w);
  const Q8KRow row = Q8KRowAt(act, k);
  const int8_t* qa = row.qs;
  const float* dd = row.d;
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    const int8_t* a = qa + b * kQK_K;
    int sc[16];
    UnpackQ3Scales(x[b].scales, sc);
    int32_t isum = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t s = 0;
      for (int t = 0; t < 16; ++t) {
        const int e = 16 * g + t;
        const int high = (x[b].hmask[e % 32] >> (e / 32)) & 1;
        s += (LowBits(x[b].qs, e) - 4 + 4 * high) * a[e];
      }
      isum += sc[g] * s;
    }
    sum += dd[b] * HalfToFloat(x[b].d) * static_cast<float>(isum);
  }
  return sum;
}

float DotRowIQ4XS(int64_t k, const uint8_t* w, const uint8_t* act) {
  const BlockIQ4XS* x = reinterpret_cast<const BlockIQ4XS*>(w);
  const Q8KRow row = Q8KRowAt(act, k);
  const int8_t* qa = row.qs;
  const float* dd = row.d;
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    int32_t isum = 0;
    for (int g = 0; g < 8; ++g) {
      const int ls = ((x[b].scales_l[g / 2] >> (4 * (g % 2))) & 0x0F) |
                     (((x[b].scales_h >> (2 * g)) & 3) << 4);
      const int8_t* a = qa + b * kQK_K + 32 * g;
      int32_t s = 0;
      for (int j = 0; j < 32; ++j) s += kIq4NlValues[Nibble(x[b].qs + 16 * g, j)] * a[j];
      isum += (ls - 32) * s;
    }
    sum += dd[b] * HalfToFloat(x[b].d) * static_cast<float>(isum);
  }
  return sum;
}

template <float (*kDot)(int64_t, const uint8_t*, const uint8_t*)>
void GemmTile(int64_t k, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
              size_t act_stride, int n_act, float* out, int64_t ldo) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int m = 0; m < n_act; ++m) {
      out[m * ldo + r] = kDot(k, w + r * w_stride, act + m * act_stride);
    }
  }
}

float DotF32(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

void AxpyF32(float a, const float* x, float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] += a * x[j];
}

void ScaleF32(float a, float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] *= a;
}

float SumF32(const float* x, int64_t n) {
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    for (int i = 0; i < 4; ++i) s[i] += x[j + i];
  }
  for (; j < n; ++j) s[0] += x[j];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// s[t] = exp(s[t] - max) / sum, the sum in double.
void NormalizeExp(float* s, int64_t n, float max) {
  double sum = 0.0;
  for (int64_t t = 0; t < n; ++t) {
    s[t] = std::exp(s[t] - max);
    sum += s[t];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t t = 0; t < n; ++t) s[t] *= inv;
}

void SoftmaxF32(float* s, int64_t n) {
  float max = -INFINITY;
  for (int64_t t = 0; t < n; ++t) max = s[t] > max ? s[t] : max;
  NormalizeExp(s, n, max);
}

void AttendF32(const float* q, int n_q, const float* k, const float* v, int64_t kv_stride,
               int64_t n_kv, int head_dim, float scale, float* scores, float* out,
               const float* sinks) {
  // A head's scores are followed by its sink, where it has one.
  const int64_t stride = sinks != nullptr ? n_kv + 1 : n_kv;
  for (int i = 0; i < n_q; ++i) {
    const float* qi = q + static_cast<int64_t>(i) * head_dim;
    float* s = scores + i * stride;
    float max = -INFINITY;
    for (int64_t t = 0; t < n_kv; ++t) {
      s[t] = scale * DotF32(qi, k + t * kv_stride, head_dim);
      max = s[t] > max ? s[t] : max;
    }
    if (sinks != nullptr) {
      s[n_kv] = sinks[i];
      max = s[n_kv] > max ? s[n_kv] : max;
    }
    NormalizeExp(s, stride, max);
    float* oi = out + static_cast<int64_t>(i) * head_dim;
    for (int d = 0; d < head_dim; ++d) oi[d] = 0.0f;
    for (int64_t t = 0; t < n_kv; ++t) AxpyF32(s[t], v + t * kv_stride, oi, head_dim);
  }
}

void AccumulateKvValues(TensorType type, const uint8_t* rows, int64_t row_stride, int64_t n_rows,
                        const float* weights, int64_t w_stride, int n_q, int head_dim,
                        float* out) {
  float decoded[kMaxKvHeadDim];
  for (int64_t t = 0; t < n_rows; ++t) {
    DequantizeRow(type, rows + t * row_stride, decoded, head_dim);
    for (int i = 0; i < n_q; ++i) {
      AxpyF32(weights[i * w_stride + t], decoded, out + static_cast<int64_t>(i) * head_dim,
              head_dim);
    }
  }
}

}  // namespace

const KernelTable kScalarKernels = {
    .gemm_f32 = GemmTile<DotRowF32>,
    .gemm_f16 = GemmTile<DotRowF16>,
    .gemm_bf16 = GemmTile<DotRowBf16>,
    .gemm_q8_0 = GemmTile<DotRowQ8_0>,
    .gemm_q4_0 = GemmTile<DotRowQ4_0>,
    .gemm_q4_k = GemmTile<DotRowQ4K>,
    .gemm_q5_k = GemmTile<DotRowQ5K>,
    .gemm_q6_k = GemmTile<DotRowQ6K>,
    .gemm_q4_1 = GemmTile<DotRowBlock32<Q4_1Format>>,
    .gemm_q5_0 = GemmTile<DotRowBlock32<Q5_0Format>>,
    .gemm_q5_1 = GemmTile<DotRowBlock32<Q5_1Format>>,
    .gemm_iq4_nl = GemmTile<DotRowBlock32<IQ4NLFormat>>,
    .gemm_mxfp4 = GemmTile<DotRowBlock32<MXFP4Format>>,
    .gemm_q2_k = GemmTile<DotRowQ2K>,
    .gemm_q3_k = GemmTile<DotRowQ3K>,
    .gemm_iq4_xs = GemmTile<DotRowIQ4XS>,
    .gemm_iq_grid = MOETIER_IQ_GRID_GEMMS,
    .quantize_q8_0 = QuantizeQ8_0,
    .quantize_q8_k = QuantizeQ8K,
    .dot_f32 = DotF32,
    .axpy_f32 = AxpyF32,
    .scale_f32 = ScaleF32,
    .sum_f32 = SumF32,
    .attend_f32 = AttendF32,
    .softmax_f32 = SoftmaxF32,
    .accumulate_kv_values = AccumulateKvValues,
};

}  // namespace moetier::cpu
