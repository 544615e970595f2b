// The matrix kernels at every SIMD level this CPU supports, against two
// oracles: the f32 reference (DequantizeRow, then a double-precision dot with
// the unquantized activations) within a bound derived from the activation
// quantization step, and the same dot with the quantized activations decoded
// back to floats, which must agree to float rounding.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/block_layouts.h"
#include "backend/cpu/cpu_kernels.h"
#include "gguf/tensor/half.h"
#include "gguf/tensor/iq_grid_blocks.h"
#include "gguf/tensor/iq_grid_chunks.h"
#include "gguf/tensor/quant_codec.h"
#include "gtest/gtest.h"

namespace moetier::cpu {
namespace {

// 64-byte aligned scratch without per-test bookkeeping.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes)
      : data_(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64))) {}
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data() { return data_; }

 private:
  uint8_t* data_;
};

std::vector<SimdLevel> SupportedLevels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (SimdLevelSupported(level)) levels.push_back(level);
  }
  return levels;
}

class LevelGuard {
 public:
  explicit LevelGuard(SimdLevel level) : saved_(ActiveSimdLevel()) {
    EXPECT_TRUE(SetSimdLevel(level).ok());
  }
  ~LevelGuard() { EXPECT_TRUE(SetSimdLevel(saved_).ok()); }

 private:
  SimdLevel saved_;
};

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = FloatToHalf(v);
  std::memcpy(p, &h, 2);
}

enum class WeightSource {
  kQuantized,    // QuantizeRow of gaussian values: realistic blocks
  kRandomBytes,  // arbitrary block bytes with finite scales: every bit pattern
};

// One weight row of `type` with k elements.
std::vector<uint8_t> MakeWeightRow(TensorType type, int64_t k, WeightSource source,
                                   std::mt19937& rng) {
  std::vector<uint8_t> row(TensorRowBytes(type, k));
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  if (source == WeightSource::kQuantized || type == TensorType::kF32 || type == TensorType::kF16 ||
      type == TensorType::kBF16) {
    std::vector<float> values(k);
    for (float& v : values) v = gauss(rng);
    QuantizeRow(type, values.data(), row.data(), k);
    return row;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (uint8_t& b : row) b = static_cast<uint8_t>(byte(rng));
  const int64_t block_bytes = GetTensorTypeInfo(type).block_bytes;
  const int64_t block_elems = GetTensorTypeInfo(type).block_elems;
  for (int64_t b = 0; b < k / block_elems; ++b) {
    uint8_t* blk = row.data() + b * block_bytes;
    switch (type) {
      case TensorType::kQ8_0:
      case TensorType::kQ4_0:
        PutHalf(blk, scale(rng));
        break;
      case TensorType::kQ4_K:
      case TensorType::kQ5_K:
        PutHalf(blk, scale(rng));
        PutHalf(blk + 2, scale(rng));
        break;
      case TensorType::kQ6_K:
        PutHalf(blk + offsetof(BlockQ6K, d), scale(rng));
        break;
      case TensorType::kQ5_0:
      case TensorType::kIQ4_NL:
      case TensorType::kIQ4_XS:
        PutHalf(blk, scale(rng));
        break;
      case TensorType::kQ4_1:
      case TensorType::kQ5_1:
        PutHalf(blk, scale(rng));
        PutHalf(blk + 2, scale(rng));
        break;
      case TensorType::kQ2_K:
        PutHalf(blk + 80, scale(rng));
        PutHalf(blk + 82, scale(rng));
        break;
      case TensorType::kQ3_K:
        PutHalf(blk + 108, scale(rng));
        break;
      case TensorType::kMXFP4: {
        // Mostly scales 2^-10 .. 2^-3; also the subnormal ones (e = 0, 1) and
        // a large one.
        constexpr uint8_t kExponents[] = {118, 119, 120, 121, 122, 123, 124, 125, 0, 1, 200};
        blk[0] = kExponents[byte(rng) % std::size(kExponents)];
        break;
      }
      default:
        if (IsIqGridType(type)) iq_chunks::PutScaleBits(type, blk, FloatToHalf(scale(rng)));
        break;
    }
  }
  return row;
}

// Decodes one plane of a prepared activation row back to floats (the
// layout of block_layouts.h).
std::vector<float> DecodePlane(ActFormat format, const uint8_t* row, int64_t k) {
  std::vector<float> out(k);
  switch (format) {
    case ActFormat::kF32:
      std::memcpy(out.data(), row, k * sizeof(float));
      break;
    case ActFormat::kQ8_0: {
      const int8_t* qs = reinterpret_cast<const int8_t*>(row);
      const float* d8 = reinterpret_cast<const float*>(row + k);
      const int32_t* nsum8 = reinterpret_cast<const int32_t*>(row + 2 * k);
      for (int64_t b = 0; b < k / kQK8_0; ++b) {
        int32_t sum = 0;
        for (int j = 0; j < kQK8_0; ++j) {
          out[b * kQK8_0 + j] = d8[b * kActRepeat] * qs[b * kQK8_0 + j];
          sum += qs[b * kQK8_0 + j];
        }
        for (int j = 0; j < kActRepeat; ++j) {
          EXPECT_EQ(d8[b * kActRepeat + j], d8[b * kActRepeat]);
          EXPECT_EQ(nsum8[b * kActRepeat + j], -sum);
        }
      }
      break;
    }
    case ActFormat::kQ8_K: {
      const int8_t* qs = reinterpret_cast<const int8_t*>(row);
      const int16_t* bsums = reinterpret_cast<const int16_t*>(row + k);
      const float* d = reinterpret_cast<const float*>(row + k + k / 8);
      for (int64_t g = 0; g < k / 16; ++g) {
        int sum = 0;
        for (int j = 0; j < 16; ++j) {
          out[g * 16 + j] = d[g / 16] * qs[g * 16 + j];
          sum += qs[g * 16 + j];
        }
        EXPECT_EQ(bsums[g], sum);
      }
      break;
    }
  }
  return out;
}

bool HasResidualPlane(TensorType weight_type) {
  return ActFormatFor(weight_type) != ActFormat::kF32 && ActivationsHaveResidualPlane();
}

// Decodes a prepared activation row: its plane, plus the residual plane in
// the second half of the row when there is one.
std::vector<float> DecodeActRow(TensorType weight_type, const uint8_t* row, int64_t k) {
  const ActFormat format = ActFormatFor(weight_type);
  std::vector<float> out = DecodePlane(format, row, k);
  if (HasResidualPlane(weight_type)) {
    const std::vector<float> fine = DecodePlane(format, row + ActRowBytes(weight_type, k) / 2, k);
    for (int64_t j = 0; j < k; ++j) out[j] += fine[j];
  }
  return out;
}

struct Case {
  TensorType type;
  int64_t k;
  int64_t n_rows;
  int64_t n_act;
};

std::string Describe(const Case& c, SimdLevel level, WeightSource source) {
  return std::string(TensorTypeName(c.type)) + " k=" + std::to_string(c.k) +
         " rows=" + std::to_string(c.n_rows) + " acts=" + std::to_string(c.n_act) +
         " level=" + std::string(SimdLevelName(level)) +
         (source == WeightSource::kRandomBytes ? " random-bytes" : " quantized");
}

void RunCase(const Case& c, WeightSource source, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t w_row_bytes = TensorRowBytes(c.type, c.k);
  std::vector<uint8_t> w;
  std::vector<std::vector<float>> w_ref(c.n_rows, std::vector<float>(c.k));
  for (int64_t r = 0; r < c.n_rows; ++r) {
    std::vector<uint8_t> row = MakeWeightRow(c.type, c.k, source, rng);
    w.insert(w.end(), row.begin(), row.end());
    DequantizeRow(c.type, row.data(), w_ref[r].data(), c.k);
  }
  // Activations with a few outliers, as real hidden states have.
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(c.n_act * c.k);
  for (size_t i = 0; i < x.size(); ++i) x[i] = gauss(rng) * (i % 97 == 0 ? 20.0f : 1.0f);

  const size_t act_row_bytes = ActRowBytes(c.type, c.k);
  AlignedBuffer act(act_row_bytes * c.n_act);
  QuantizeActRows(c.type, x.data(), c.k, c.k, c.n_act, act.data());
  std::vector<std::vector<float>> x_deq;
  for (int64_t m = 0; m < c.n_act; ++m) {
    x_deq.push_back(DecodeActRow(c.type, act.data() + m * act_row_bytes, c.k));
  }

  // Activation quantization moves each element by at most half a step; the
  // step is d of the element's block, amax / 127, and with the residual
  // plane that of the residual, at most half of amax / 127, over 127.
  std::vector<float> half_step(c.n_act * c.k, 0.0f);
  const int64_t act_block = ActFormatFor(c.type) == ActFormat::kQ8_K ? 256 : 32;
  for (int64_t i = 0; i < c.n_act * c.k; ++i) {
    half_step[i] = std::fabs(x_deq[i / c.k][i % c.k] - x[i]);
    if (ActFormatFor(c.type) == ActFormat::kF32) {
      ASSERT_EQ(half_step[i], 0.0f);
      continue;
    }
    float amax = 0.0f;
    const int64_t block_start = i / act_block * act_block;
    for (int64_t j = block_start; j < block_start + act_block; ++j)
      amax = std::fmax(amax, std::fabs(x[j]));
    const float bound = HasResidualPlane(c.type)
                            ? amax / (254.0f * 254.0f) * 1.01f + 4e-7f * amax
                            : amax / 254.0f * 1.0001f;
    ASSERT_LE(half_step[i], bound) << "activation " << i << " quantized too coarsely";
  }

  const int64_t ldo = c.n_rows + 3;
  for (SimdLevel level : SupportedLevels()) {
    SCOPED_TRACE(Describe(c, level, source));
    LevelGuard guard(level);
    // Rows [r0, r1) only; the rest must stay untouched.
    const int64_t r0 = c.n_rows > 2 ? 1 : 0;
    const int64_t r1 = c.n_rows;
    std::vector<float> out(c.n_act * ldo, -12345.0f);
    MatMul(c.type, c.k, w.data(), w_row_bytes, r0, r1, act.data(), act_row_bytes, c.n_act,
           out.data(), ldo);
    for (int64_t m = 0; m < c.n_act; ++m) {
      for (int64_t r = 0; r < ldo; ++r) {
        const float got = out[m * ldo + r];
        if (r < r0 || r >= r1) {
          ASSERT_EQ(got, -12345.0f) << "row " << r << " outside the range was written";
          continue;
        }
        double exact_q = 0.0, exact = 0.0, magnitude = 0.0, quant_bound = 0.0;
        for (int64_t j = 0; j < c.k; ++j) {
          const double wj = w_ref[r][j];
          exact_q += wj * x_deq[m][j];
          exact += wj * x[m * c.k + j];
          magnitude += std::fabs(wj * x[m * c.k + j]);
          quant_bound += std::fabs(wj) * half_step[m * c.k + j];
        }
        // Float accumulation: a few ulps per term relative to the magnitude.
        const double rounding =
            1e-6 * (1.0 + std::sqrt(static_cast<double>(c.k))) * magnitude + 1e-30;
        ASSERT_NEAR(got, exact_q, rounding) << "vs decoded activations, row " << r << " act " << m;
        ASSERT_NEAR(got, exact, quant_bound + rounding)
            << "vs f32 reference, row " << r << " act " << m;
      }
    }
  }
}

// The level in force before any test switches it: MOETIER_CPU_SIMD when set
// (ctest runs this test once more with it set to each level), else the best.
// Must run first in its process, so ctest invokes it with a filter.
TEST(CpuKernelsTest, EnvironmentSelectsStartingLevel) {
  const char* env = std::getenv("MOETIER_CPU_SIMD");
  if (env == nullptr) {
    EXPECT_EQ(ActiveSimdLevel(), BestSupportedSimdLevel());
    return;
  }
  absl::StatusOr<SimdLevel> wanted = ParseSimdLevel(env);
  ASSERT_TRUE(wanted.ok()) << wanted.status();
  if (!SimdLevelSupported(*wanted)) GTEST_SKIP() << env << " is not supported on this CPU";
  EXPECT_EQ(ActiveSimdLevel(), *wanted);
}

TEST(CpuKernelsTest, EveryLevelReportedAndSelectable) {
  EXPECT_TRUE(SimdLevelSupported(SimdLevel::kScalar));
  EXPECT_TRUE(SimdLevelSupported(BestSupportedSimdLevel()));
  for (SimdLevel level : SupportedLevels()) {
    LevelGuard guard(level);
    EXPECT_EQ(ActiveSimdLevel(), level);
    absl::StatusOr<SimdLevel> parsed = ParseSimdLevel(SimdLevelName(level));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, level);
  }
  EXPECT_FALSE(ParseSimdLevel("sse9").ok());
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  // Cross-check the CPUID probe against the compiler's.
  EXPECT_EQ(SimdLevelSupported(SimdLevel::kAvx2),
            __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    EXPECT_EQ(BestSupportedSimdLevel(), SimdLevel::kAvx512);
  }
#endif
}

TEST(CpuKernelsTest, FormatsAndBlockSizes) {
  EXPECT_EQ(ActFormatFor(TensorType::kQ4_K), ActFormat::kQ8_K);
  EXPECT_EQ(ActFormatFor(TensorType::kQ5_K), ActFormat::kQ8_K);
  EXPECT_EQ(ActFormatFor(TensorType::kQ6_K), ActFormat::kQ8_K);
  EXPECT_EQ(ActFormatFor(TensorType::kQ8_0), ActFormat::kQ8_0);
  EXPECT_EQ(ActFormatFor(TensorType::kQ4_0), ActFormat::kQ8_0);
  EXPECT_EQ(ActFormatFor(TensorType::kBF16), ActFormat::kF32);
  EXPECT_TRUE(SupportsWeightType(TensorType::kIQ2_XXS));
  EXPECT_EQ(ActFormatFor(TensorType::kIQ1_M), ActFormat::kQ8_K);
  EXPECT_FALSE(SupportsWeightType(TensorType::kTQ1_0));
  EXPECT_EQ(WeightBlockElems(TensorType::kQ6_K), 256);
  EXPECT_EQ(WeightBlockElems(TensorType::kQ4_0), 32);
  EXPECT_EQ(WeightBlockElems(TensorType::kF16), 1);
  EXPECT_EQ(ActRowBytes(TensorType::kF32, 3) % 64, 0u);
  EXPECT_GE(ActRowBytes(TensorType::kQ4_K, 512), 512u + 64u + 8u);
}

// One plane is the default; MOETIER_CPU_ACTIVATIONS=q8x2 (ctest runs this
// test and the rest of the suite once more with it) adds the residual plane.
TEST(CpuKernelsTest, ResidualPlaneFollowsEnvironment) {
  const char* env = std::getenv("MOETIER_CPU_ACTIVATIONS");
  const bool single = env == nullptr || std::string(env) != "q8x2";
  EXPECT_EQ(ActivationsHaveResidualPlane(), !single);
  const size_t plane = 640;  // qs, bsums, d: 584 bytes, padded to a multiple of 64
  EXPECT_EQ(ActRowBytes(TensorType::kQ4_K, 512), single ? plane : 2 * plane);
  EXPECT_EQ(ActRowBytes(TensorType::kQ8_0, 64), single ? 192u : 384u);
  EXPECT_EQ(ActRowBytes(TensorType::kF16, 64), 256u);
  // Fixed now: asking for the other format is refused, the same is not.
  EXPECT_TRUE(SetActivationsResidualPlane(!single).ok());
  EXPECT_FALSE(SetActivationsResidualPlane(single).ok());
}

TEST(CpuKernelsTest, FloatWeights) {
  uint32_t seed = 1;
  for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kBF16}) {
    for (int64_t k : {1, 7, 16, 33, 100, 257}) {
      for (int64_t n_act : {1, 2, 3, 4, 5, 9}) {
        RunCase({type, k, 5, n_act}, WeightSource::kQuantized, seed++);
      }
    }
  }
}

TEST(CpuKernelsTest, Q8_0AndQ4_0) {
  uint32_t seed = 100;
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_0}) {
    for (int64_t k : {32, 96, 320}) {
      for (int64_t n_act : {1, 2, 3, 4, 7}) {
        for (WeightSource source : {WeightSource::kQuantized, WeightSource::kRandomBytes}) {
          RunCase({type, k, 6, n_act}, source, seed++);
        }
      }
    }
  }
}

TEST(CpuKernelsTest, KQuants) {
  uint32_t seed = 200;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    for (int64_t k : {256, 768}) {
      for (int64_t n_act : {1, 2, 3, 4, 6}) {
        for (WeightSource source : {WeightSource::kQuantized, WeightSource::kRandomBytes}) {
          RunCase({type, k, 5, n_act}, source, seed++);
        }
      }
    }
  }
}

// The types beyond Q4_0 and the common K-quants (the i-quant grid types
// included), each with the activation format llama.cpp pairs it with, at
// every level; tiles of every width the kernels treat apart (1 and 2 rows,
// more, and more than a kernel tile).
TEST(CpuKernelsTest, LowBitTypes) {
  uint32_t seed = 400;
  struct TypeFormat {
    TensorType type;
    ActFormat format;
  };
  for (const TypeFormat& tf : {TypeFormat{TensorType::kQ4_1, ActFormat::kQ8_0},
                               TypeFormat{TensorType::kQ5_0, ActFormat::kQ8_0},
                               TypeFormat{TensorType::kQ5_1, ActFormat::kQ8_0},
                               TypeFormat{TensorType::kIQ4_NL, ActFormat::kQ8_0},
                               TypeFormat{TensorType::kMXFP4, ActFormat::kQ8_0},
                               TypeFormat{TensorType::kQ2_K, ActFormat::kQ8_K},
                               TypeFormat{TensorType::kQ3_K, ActFormat::kQ8_K},
                               TypeFormat{TensorType::kIQ4_XS, ActFormat::kQ8_K},
                               TypeFormat{TensorType::kIQ2_XXS, ActFormat::kQ8_K},
                               TypeFormat{TensorType::kIQ2_XS, ActFormat::kQ8_K},
                               TypeFormat{TensorType::kIQ2_S, ActFormat::kQ8_K},
                               TypeFormat{TensorType::kIQ3_XXS, ActFormat::kQ8_K},
                               TypeFormat{TensorType::kIQ3_S, ActFormat::kQ8_K},
                               TypeFormat{TensorType::kIQ1_S, ActFormat::kQ8_K},
                               TypeFormat{TensorType::kIQ1_M, ActFormat::kQ8_K}}) {
    EXPECT_TRUE(SupportsWeightType(tf.type));
    EXPECT_EQ(ActFormatFor(tf.type), tf.format);
    EXPECT_EQ(WeightBlockElems(tf.type), GetTensorTypeInfo(tf.type).block_elems);
    // Odd block counts too: the AVX-512 kernels take two blocks at a time.
    const std::vector<int64_t> ks = GetTensorTypeInfo(tf.type).block_elems == 32
                                        ? std::vector<int64_t>{32, 96, 256, 768}
                                        : std::vector<int64_t>{256, 768};
    for (int64_t k : ks) {
      for (int64_t n_act : {1, 2, 3, 4, 5, 7, 9}) {
        for (WeightSource source : {WeightSource::kQuantized, WeightSource::kRandomBytes}) {
          RunCase({tf.type, k, 5, n_act}, source, seed++);
        }
      }
    }
    RunCase({tf.type, 512, 130, 11}, WeightSource::kQuantized, seed++);  // tiled
  }
}

// Batches large enough that MatMul tiles rows and activation groups.
TEST(CpuKernelsTest, TiledBatches) {
  RunCase({TensorType::kQ4_K, 512, 130, 11}, WeightSource::kQuantized, 300);
  RunCase({TensorType::kQ6_K, 256, 70, 9}, WeightSource::kQuantized, 301);
  RunCase({TensorType::kQ8_0, 1024, 33, 13}, WeightSource::kQuantized, 302);
  RunCase({TensorType::kF16, 1000, 40, 6}, WeightSource::kQuantized, 303);
}

// Rows spaced wider than ActRowBytes give the same products as packed rows.
TEST(CpuKernelsTest, PaddedActivationRows) {
  std::mt19937 rng(17);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ8_0, TensorType::kF32}) {
    const int64_t k = 512, n_rows = 20, n_act = 5;
    std::vector<uint8_t> w;
    for (int64_t r = 0; r < n_rows; ++r) {
      const std::vector<uint8_t> row = MakeWeightRow(type, k, WeightSource::kQuantized, rng);
      w.insert(w.end(), row.begin(), row.end());
    }
    std::vector<float> x(n_act * k);
    for (float& v : x) v = gauss(rng);
    const size_t packed = ActRowBytes(type, k);
    const size_t padded = packed + 128;
    AlignedBuffer a(packed * n_act), b(padded * n_act);
    QuantizeActRows(type, x.data(), k, k, n_act, a.data());
    for (int64_t m = 0; m < n_act; ++m) {
      QuantizeActRows(type, x.data() + m * k, k, k, 1, b.data() + m * padded);
    }
    for (SimdLevel level : SupportedLevels()) {
      LevelGuard guard(level);
      std::vector<float> want(n_act * n_rows), got(n_act * n_rows);
      const size_t w_row_bytes = w.size() / n_rows;
      MatMul(type, k, w.data(), w_row_bytes, 0, n_rows, a.data(), packed, n_act, want.data(),
             n_rows);
      MatMul(type, k, w.data(), w_row_bytes, 0, n_rows, b.data(), padded, n_act, got.data(),
             n_rows);
      EXPECT_EQ(got, want) << TensorTypeName(type) << " " << SimdLevelName(level);
    }
  }
}

// Activations of zeros and of extreme ranges quantize without NaN and give
// the exact zero product.
TEST(CpuKernelsTest, ZeroActivations) {
  std::mt19937 rng(7);
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K, TensorType::kQ8_0,
                          TensorType::kQ4_0, TensorType::kQ5_K}) {
    const int64_t k = 512;
    std::vector<uint8_t> w = MakeWeightRow(type, k, WeightSource::kQuantized, rng);
    std::vector<float> x(k, 0.0f);
    const size_t act_row_bytes = ActRowBytes(type, k);
    AlignedBuffer act(act_row_bytes);
    QuantizeActRows(type, x.data(), k, k, 1, act.data());
    for (SimdLevel level : SupportedLevels()) {
      LevelGuard guard(level);
      float out = 1.0f;
      MatMul(type, k, w.data(), w.size(), 0, 1, act.data(), act_row_bytes, 1, &out, 1);
      EXPECT_EQ(out, 0.0f) << TensorTypeName(type) << " " << SimdLevelName(level);
    }
  }
}

// Every level writes the same activation bytes, ties (x / d exactly half
// way between integers) included, so results never depend on the level
// through the activations.
TEST(CpuKernelsTest, ActivationBytesIdenticalAcrossLevels) {
  std::mt19937 rng(13);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  const int64_t k = 1024;
  std::vector<float> x(3 * k);
  for (float& v : x) v = gauss(rng);
  // Row 1: amax 127 makes 1/d exactly 1, and every other value a tie.
  for (int64_t j = 0; j < k; ++j)
    x[k + j] = (j % 32 == 0) ? 127.0f : static_cast<float>(j % 61) - 30.5f;
  // Row 2: zeros and tiny values.
  for (int64_t j = 0; j < k; ++j)
    x[2 * k + j] = (j % 3 == 0) ? 0.0f : 1e-30f * static_cast<float>(j % 7);
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_K}) {
    const size_t row_bytes = ActRowBytes(type, k);
    // Only the defined part of a plane: qs, per-block values (no padding).
    const size_t used = ActFormatFor(type) == ActFormat::kQ8_0 ? 3 * k : k + k / 8 + k / 64;
    const size_t second = HasResidualPlane(type) ? row_bytes / 2 : 0;
    std::vector<std::vector<uint8_t>> bytes;
    for (SimdLevel level : SupportedLevels()) {
      LevelGuard guard(level);
      AlignedBuffer act(row_bytes * 3);
      QuantizeActRows(type, x.data(), k, k, 3, act.data());
      std::vector<uint8_t> rows;
      for (int m = 0; m < 3; ++m) {
        const uint8_t* row = act.data() + m * row_bytes;
        rows.insert(rows.end(), row, row + used);
        if (second != 0) rows.insert(rows.end(), row + second, row + second + used);
      }
      bytes.push_back(rows);
    }
    for (size_t i = 1; i < bytes.size(); ++i) {
      EXPECT_EQ(bytes[i], bytes[0]) << TensorTypeName(type) << " level " << i;
    }
    // Ties round to even: 0.5 -> 0, 1.5 -> 2, -2.5 -> -2.
    LevelGuard guard(SimdLevel::kScalar);
    AlignedBuffer act(row_bytes);
    QuantizeActRows(type, x.data() + k, k, k, 1, act.data());
    const int8_t* qs = reinterpret_cast<const int8_t*>(act.data());
    for (int64_t j = 1; j < 64; ++j) {
      if (j % 32 == 0) continue;
      const float v = x[k + j];
      const float rounded = std::nearbyint(v);  // default mode: ties to even
      EXPECT_EQ(qs[j], static_cast<int8_t>(rounded)) << "value " << v;
    }
  }
}

TEST(CpuKernelsTest, VectorHelpers) {
  std::mt19937 rng(11);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (int64_t n : {1, 5, 16, 31, 130}) {
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = gauss(rng);
      b[i] = gauss(rng);
    }
    double dot = 0.0;
    for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(a[i]) * b[i];
    for (SimdLevel level : SupportedLevels()) {
      LevelGuard guard(level);
      EXPECT_NEAR(DotF32(a.data(), b.data(), n), dot, 1e-5 * n);
      std::vector<float> y = b;
      AxpyF32(0.5f, a.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(y[i], b[i] + 0.5f * a[i]);
      ScaleF32(-2.0f, y.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(y[i], -2.0f * (b[i] + 0.5f * a[i]));
    }
  }
}

// The value half of stored-KV attention: every level against a
// double-precision sum over the decoded rows, and the x86 levels against
// each other bit for bit (each output value is the same chain of fused
// multiply-adds in row order, however the heads are grouped). Head counts
// past 8 and row counts past a 16-row tile take the kernels' outer loops;
// a head size that is not a multiple of 32 takes AVX-512's fallback.
TEST(CpuKernelsTest, AccumulateKvValues) {
  std::mt19937 rng(12);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0,
                          TensorType::kQ4_0}) {
    for (int head_dim : {32, 48, 128, 256}) {
      const bool blocks = type == TensorType::kQ8_0 || type == TensorType::kQ4_0;
      if (blocks && head_dim % 32 != 0) continue;
      for (int n_q : {1, 3, 8, 11}) {
        const int64_t n_rows = 37;
        const size_t row_bytes = static_cast<size_t>(TensorRowBytes(type, head_dim));
        std::vector<uint8_t> rows(n_rows * row_bytes);
        std::vector<float> values(head_dim);
        std::vector<float> decoded(n_rows * head_dim);
        for (int64_t t = 0; t < n_rows; ++t) {
          for (float& x : values) x = gauss(rng);
          QuantizeRow(type, values.data(), rows.data() + t * row_bytes, head_dim);
          DequantizeRow(type, rows.data() + t * row_bytes, decoded.data() + t * head_dim,
                        head_dim);
        }
        const int64_t w_stride = n_rows + 3;
        std::vector<float> weights(n_q * w_stride);
        for (float& w : weights) w = std::abs(gauss(rng)) / n_rows;
        std::vector<float> start(n_q * head_dim);
        for (float& x : start) x = gauss(rng);

        std::vector<std::vector<float>> by_level;
        for (SimdLevel level : SupportedLevels()) {
          LevelGuard guard(level);
          std::vector<float> out = start;
          AccumulateKvValues(type, rows.data(), static_cast<int64_t>(row_bytes), n_rows,
                             weights.data(), w_stride, n_q, head_dim, out.data());
          for (int i = 0; i < n_q; ++i) {
            for (int d = 0; d < head_dim; ++d) {
              double want = start[i * head_dim + d];
              for (int64_t t = 0; t < n_rows; ++t) {
                want += static_cast<double>(weights[i * w_stride + t]) * decoded[t * head_dim + d];
              }
              ASSERT_NEAR(out[i * head_dim + d], want, 1e-5)
                  << TensorTypeName(type) << " head_dim " << head_dim << " heads " << n_q
                  << " level " << SimdLevelName(level) << " head " << i << " value " << d;
            }
          }
          if (level != SimdLevel::kScalar) by_level.push_back(std::move(out));
        }
        for (size_t l = 1; l < by_level.size(); ++l) {
          EXPECT_EQ(0, std::memcmp(by_level[0].data(), by_level[l].data(),
                                   by_level[0].size() * sizeof(float)))
              << TensorTypeName(type) << " head_dim " << head_dim << " heads " << n_q;
        }
      }
    }
  }
}

}  // namespace
}  // namespace moetier::cpu
