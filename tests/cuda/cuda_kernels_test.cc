// CUDA kernels against the host: the tensor codecs (bit-exact dequantization),
// dequantize-then-dot in double for the matrix products, and the CPU ops
// (backend/cpu/cpu_ops.h) for the row operations, host loops
// for the engine's glue kernels. Tolerances
// are per op, as in tests/cpu. Every case that touches the device skips where
// no GPU is usable; argument checks run everywhere.
#include "backend/cuda/cuda_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/expert_rows.h"
#include "device_buffer.h"
#include "gguf/tensor/half.h"
#include "gguf/tensor/quant_codec.h"
#include "gguf/tensor/tensor_type.h"
#include "gtest/gtest.h"
#include "random_values.h"

namespace moetier::cuda {
namespace {

using cuda_test::DeviceBuffer;
using cuda_test::Gaussian;

constexpr TensorType kWeightTypes[] = {TensorType::kF32,  TensorType::kF16,  TensorType::kBF16,
                                       TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_K,
                                       TensorType::kQ5_K, TensorType::kQ6_K};

std::string Name(TensorType type) { return std::string(TensorTypeName(type)); }

std::vector<uint8_t> Quantize(TensorType type, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(
      static_cast<size_t>(TensorRowBytes(type, static_cast<int64_t>(values.size()))));
  QuantizeRow(type, values.data(), bytes.data(), static_cast<int64_t>(values.size()));
  return bytes;
}

std::vector<float> Dequantize(TensorType type, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  DequantizeRow(type, bytes.data(), out.data(), n);
  return out;
}

float RoundToHalf(float x) { return HalfToFloat(FloatToHalf(x)); }

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device or driver on this machine; run tests/cuda/run-on-gpu.sh "
                      "where a GPU exists";
    }
  }
};

// ---------------------------------------------------------------------------

TEST_F(CudaKernelsTest, DequantizeIsBitExactWithTheCodec) {
  uint32_t seed = 1;
  for (TensorType type : kWeightTypes) {
    for (int64_t n : {256, 4096, 256 * 37}) {
      SCOPED_TRACE(Name(type) + " n=" + std::to_string(n));
      // Wide dynamic range so the K-quant mins and sub-block scales vary.
      std::vector<float> values = Gaussian(static_cast<size_t>(n), seed++, 2.0f);
      for (int64_t i = 0; i < n; i += 97) values[static_cast<size_t>(i)] *= 30.0f;
      const std::vector<uint8_t> bytes = Quantize(type, values);
      const std::vector<float> want = Dequantize(type, bytes, n);
      DeviceBuffer src(bytes);
      DeviceBuffer dst32(static_cast<size_t>(n) * sizeof(float));
      DeviceBuffer dst16(static_cast<size_t>(n) * sizeof(uint16_t));
      ASSERT_TRUE(DequantizeToF32(type, src.get(), n, dst32.as<float>(), nullptr).ok());
      ASSERT_TRUE(DequantizeToF16(type, src.get(), n, dst16.as<uint16_t>(), nullptr).ok());
      const std::vector<float> got = dst32.Download<float>(static_cast<size_t>(n));
      const std::vector<uint16_t> got16 = dst16.Download<uint16_t>(static_cast<size_t>(n));
      int mismatches = 0;
      for (int64_t i = 0; i < n && mismatches < 5; ++i) {
        const size_t k = static_cast<size_t>(i);
        if (std::memcmp(&got[k], &want[k], sizeof(float)) != 0 ||
            got16[k] != FloatToHalf(want[k])) {
          ADD_FAILURE() << "element " << i << ": f32 " << got[k] << " f16 "
                        << HalfToFloat(got16[k]) << ", codec " << want[k];
          ++mismatches;
        }
      }
    }
  }
}

// Rows picked by ids on the device (a decode graph's token embedding)
// decode as the codec decodes them.
TEST_F(CudaKernelsTest, DequantizeRowsAtPicksRowsByDeviceIds) {
  const int64_t rows = 9, cols = 512;
  uint32_t seed = 77;
  for (TensorType type : kWeightTypes) {
    SCOPED_TRACE(Name(type));
    const std::vector<uint8_t> bytes =
        Quantize(type, Gaussian(static_cast<size_t>(rows * cols), seed++, 0.5f));
    const std::vector<float> all = Dequantize(type, bytes, rows * cols);
    const std::vector<int32_t> ids = {7, 0, 7, 3};
    DeviceBuffer w_dev(bytes), ids_dev(ids);
    DeviceBuffer out(ids.size() * static_cast<size_t>(cols) * sizeof(float));
    ASSERT_TRUE(DequantizeRowsAt(type, w_dev.get(), ids_dev.as<int32_t>(),
                                 static_cast<int>(ids.size()), cols, out.as<float>(), nullptr)
                    .ok());
    const std::vector<float> got = out.Download<float>(ids.size() * static_cast<size_t>(cols));
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_EQ(std::memcmp(got.data() + i * cols, all.data() + static_cast<size_t>(ids[i]) * cols,
                            static_cast<size_t>(cols) * sizeof(float)),
                0)
          << "output row " << i << " (row " << ids[i] << ")";
    }
  }
}

// Each activation row's sums run in the same order whatever the batch, so
// the engine's batched decode equals its one-token decode bit for bit.
TEST_F(CudaKernelsTest, GemvBatchRowsEqualSingleRowsBitForBit) {
  const int64_t rows = 70, cols = 2048;
  uint32_t seed = 900;
  for (TensorType type : kWeightTypes) {
    SCOPED_TRACE(Name(type));
    const std::vector<uint8_t> w_bytes =
        Quantize(type, Gaussian(static_cast<size_t>(rows * cols), seed++, 0.05f));
    const int batch = kCudaGemvMaxBatch;
    const std::vector<float> x = Gaussian(static_cast<size_t>(batch * cols), seed++);
    DeviceBuffer w_dev(w_bytes), x_dev(x);
    DeviceBuffer y_dev(static_cast<size_t>(batch * rows) * sizeof(float));
    ASSERT_TRUE(GemvQuant(type, w_dev.get(), x_dev.as<float>(), rows, cols, batch,
                          y_dev.as<float>(), nullptr)
                    .ok());
    const std::vector<float> y_batch = y_dev.Download<float>(static_cast<size_t>(batch * rows));
    for (int b = 0; b < batch; ++b) {
      ASSERT_TRUE(GemvQuant(type, w_dev.get(), x_dev.as<float>() + b * cols, rows, cols, 1,
                            y_dev.as<float>(), nullptr)
                      .ok());
      const std::vector<float> y_one = y_dev.Download<float>(static_cast<size_t>(rows));
      ASSERT_EQ(std::memcmp(y_one.data(), y_batch.data() + static_cast<size_t>(b * rows),
                            static_cast<size_t>(rows) * sizeof(float)),
                0)
          << "activation row " << b;
    }
  }
}

// Block types run the sliced kernel (x 16-byte aligned) or, with x only
// 4-byte aligned, the element-strided one; both are checked. Rows of
// 32-element blocks that end mid-step (800 = 25 blocks) leave lanes idle.
TEST_F(CudaKernelsTest, GemvMatchesDequantizeThenDot) {
  struct Shape {
    int64_t rows, cols;
  };
  uint32_t seed = 100;
  for (TensorType type : kWeightTypes) {
    std::vector<Shape> shapes = {{1, 256}, {7, 512}, {33, 1024}, {130, 2816}};
    if (GetTensorTypeInfo(type).block_elems == 32) shapes.push_back({5, 800});
    for (Shape shape : shapes) {
      for (int batch : {1, 3, 8}) {
        for (int x_offset : {0, 1}) {  // floats before x in its buffer
          SCOPED_TRACE(Name(type) + " " + std::to_string(shape.rows) + "x" +
                       std::to_string(shape.cols) + " batch " + std::to_string(batch) +
                       " x offset " + std::to_string(x_offset));
          const int64_t rows = shape.rows, cols = shape.cols;
          const std::vector<float> w_values =
              Gaussian(static_cast<size_t>(rows * cols), seed++, 0.05f);
          const std::vector<uint8_t> w_bytes = Quantize(type, w_values);
          const std::vector<float> w = Dequantize(type, w_bytes, rows * cols);
          const std::vector<float> x = Gaussian(static_cast<size_t>(batch * cols), seed++);
          std::vector<float> x_padded(static_cast<size_t>(x_offset), 0.0f);
          x_padded.insert(x_padded.end(), x.begin(), x.end());
          DeviceBuffer w_dev(w_bytes), x_dev(x_padded);
          DeviceBuffer y_dev(static_cast<size_t>(batch * rows) * sizeof(float));
          const absl::Status status = GemvQuant(type, w_dev.get(), x_dev.as<float>() + x_offset,
                                                rows, cols, batch, y_dev.as<float>(), nullptr);
          ASSERT_TRUE(status.ok()) << status;
          const std::vector<float> y = y_dev.Download<float>(static_cast<size_t>(batch * rows));
          for (int b = 0; b < batch; ++b) {
            for (int64_t r = 0; r < rows; ++r) {
              double dot = 0.0, mag = 0.0;
              for (int64_t c = 0; c < cols; ++c) {
                const double term = static_cast<double>(w[static_cast<size_t>(r * cols + c)]) *
                                    x[static_cast<size_t>(b * cols + c)];
                dot += term;
                mag += std::fabs(term);
              }
              // fp32 sums of `cols` products, in a different order than double.
              ASSERT_NEAR(y[static_cast<size_t>(b * rows + r)], dot, 1e-5 * mag + 1e-6)
                  << "row " << r << " activation row " << b;
            }
          }
        }
      }
    }
  }
}

TEST_F(CudaKernelsTest, GemmMatchesDequantizeThenDotBothPaths) {
  absl::StatusOr<std::unique_ptr<CudaBlas>> blas = CudaBlas::Create();
  if (CudaBlasAvailable()) {
    ASSERT_TRUE(blas.ok()) << blas.status();
  } else {
    ASSERT_EQ(blas.status().code(), absl::StatusCode::kUnimplemented);
  }
  struct Shape {
    int64_t rows, cols, n_tokens;
  };
  uint32_t seed = 300;
  for (TensorType type : kWeightTypes) {
    for (Shape shape : {Shape{16, 256, 1}, Shape{100, 512, 17}, Shape{257, 768, 64}}) {
      const int64_t rows = shape.rows, cols = shape.cols, n_tokens = shape.n_tokens;
      const std::vector<float> w_values =
          Gaussian(static_cast<size_t>(rows * cols), seed++, 0.05f);
      const std::vector<uint8_t> w_bytes = Quantize(type, w_values);
      const std::vector<float> w = Dequantize(type, w_bytes, rows * cols);
      const std::vector<float> x = Gaussian(static_cast<size_t>(n_tokens * cols), seed++);
      DeviceBuffer w_dev(w_bytes), x_dev(x);
      DeviceBuffer w_scratch(static_cast<size_t>(rows * cols) * 2);
      DeviceBuffer x_scratch(static_cast<size_t>(n_tokens * cols) * 2);
      DeviceBuffer y_dev(static_cast<size_t>(n_tokens * rows) * sizeof(float));
      std::vector<CudaBlas*> paths = {nullptr};
      if (blas.ok()) paths.push_back(blas->get());
      for (CudaBlas* path : paths) {
        SCOPED_TRACE(Name(type) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                     " tokens " + std::to_string(n_tokens) + (path ? " cuBLAS" : " tiled"));
        ASSERT_EQ(cudaMemset(y_dev.get(), 0xFF, static_cast<size_t>(n_tokens * rows) * 4),
                  cudaSuccess);
        const absl::Status status =
            GemmQuant(path, type, w_dev.get(), x_dev.as<float>(), rows, cols, n_tokens,
                      w_scratch.as<uint16_t>(), x_scratch.as<uint16_t>(), y_dev.as<float>(),
                      nullptr);
        ASSERT_TRUE(status.ok()) << status;
        const std::vector<float> y = y_dev.Download<float>(static_cast<size_t>(n_tokens * rows));
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            double dot16 = 0.0, dot32 = 0.0, mag = 0.0;
            for (int64_t c = 0; c < cols; ++c) {
              const float wv = w[static_cast<size_t>(r * cols + c)];
              const float xv = x[static_cast<size_t>(t * cols + c)];
              dot16 += static_cast<double>(RoundToHalf(wv)) * RoundToHalf(xv);
              dot32 += static_cast<double>(wv) * xv;
              mag += std::fabs(static_cast<double>(wv) * xv);
            }
            const float got = y[static_cast<size_t>(t * rows + r)];
            // Exact fp16 operands, fp32 accumulation (tensor cores may
            // round the partial sums less carefully than a scalar loop).
            ASSERT_NEAR(got, dot16, 5e-5 * mag + 1e-6) << "token " << t << " row " << r;
            // And fp16 rounding of both operands costs at most ~2^-10 of the magnitude.
            ASSERT_NEAR(got, dot32, 1.5e-3 * mag + 1e-6) << "token " << t << " row " << r;
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------

TEST_F(CudaKernelsTest, RmsNormMatchesCpu) {
  for (int n : {64, 300, 2048}) {
    const int rows = 5;
    const std::vector<float> x = Gaussian(static_cast<size_t>(rows * n), 7, 3.0f);
    const std::vector<float> w = Gaussian(static_cast<size_t>(n), 8);
    DeviceBuffer x_dev(x), w_dev(w), y_dev(x.size() * sizeof(float));
    ASSERT_TRUE(RmsNorm(x_dev.as<float>(), w_dev.as<float>(), rows, n, 1e-6f, y_dev.as<float>(),
                        nullptr)
                    .ok());
    // In place too.
    ASSERT_TRUE(RmsNorm(x_dev.as<float>(), w_dev.as<float>(), rows, n, 1e-6f, x_dev.as<float>(),
                        nullptr)
                    .ok());
    const std::vector<float> y = y_dev.Download<float>(x.size());
    const std::vector<float> y_in_place = x_dev.Download<float>(x.size());
    for (int r = 0; r < rows; ++r) {
      std::vector<float> want(static_cast<size_t>(n));
      cpu::RmsNorm(x.data() + r * n, w.data(), n, 1e-6f, want.data());
      for (int i = 0; i < n; ++i) {
        const float expect = want[static_cast<size_t>(i)];
        ASSERT_NEAR(y[static_cast<size_t>(r * n + i)], expect, 2e-6 * std::fabs(expect) + 1e-7)
            << "n " << n << " row " << r << " i " << i;
        ASSERT_EQ(y_in_place[static_cast<size_t>(r * n + i)], y[static_cast<size_t>(r * n + i)]);
      }
    }
  }
}

// The gated attention layer's q/gate split and output gate, and the shared
// expert's gated sum, against host loops of the CPU blocks' arithmetic.
TEST_F(CudaKernelsTest, GatedAttentionAndSharedExpertGlue) {
  const int n_rows = 6, n = 40;  // rows = tokens * heads, n = head_dim
  const std::vector<float> src = Gaussian(static_cast<size_t>(2 * n_rows * n), 13);
  DeviceBuffer src_dev(src), first_dev(src.size() / 2 * sizeof(float)),
      second_dev(src.size() / 2 * sizeof(float));
  ASSERT_TRUE(SplitRowHalves(src_dev.as<float>(), n_rows, n, first_dev.as<float>(),
                             second_dev.as<float>(), nullptr)
                  .ok());
  const std::vector<float> first = first_dev.Download<float>(src.size() / 2);
  const std::vector<float> second = second_dev.Download<float>(src.size() / 2);
  for (int r = 0; r < n_rows; ++r) {
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(first[static_cast<size_t>(r * n + i)], src[static_cast<size_t>(2 * r * n + i)]);
      ASSERT_EQ(second[static_cast<size_t>(r * n + i)],
                src[static_cast<size_t>(2 * r * n + n + i)]);
    }
  }
  const std::vector<float> x = Gaussian(first.size(), 14);
  const std::vector<float> gate = Gaussian(first.size(), 15, 4.0f);
  DeviceBuffer x_dev(x), gate_dev(gate);
  ASSERT_TRUE(MulSigmoid(x_dev.as<float>(), gate_dev.as<float>(), static_cast<int64_t>(x.size()),
                         nullptr)
                  .ok());
  const std::vector<float> gated = x_dev.Download<float>(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = x[i] * (1.0f / (1.0f + std::exp(-gate[i])));
    ASSERT_NEAR(gated[i], want, 1e-6 * (1.0 + std::fabs(want))) << i;
  }
  const std::vector<float> y = Gaussian(x.size(), 16);
  const std::vector<float> logits = Gaussian(static_cast<size_t>(n_rows), 17, 3.0f);
  DeviceBuffer acc_dev(x), y_dev(y), logits_dev(logits);
  ASSERT_TRUE(AddSigmoidScaledRows(acc_dev.as<float>(), y_dev.as<float>(), logits_dev.as<float>(),
                                   n_rows, n, nullptr)
                  .ok());
  const std::vector<float> acc = acc_dev.Download<float>(x.size());
  for (int r = 0; r < n_rows; ++r) {
    const float g = 1.0f / (1.0f + std::exp(-logits[static_cast<size_t>(r)]));
    for (int i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(r * n + i);
      const float want = x[k] + g * y[k];
      ASSERT_NEAR(acc[k], want, 1e-6 * (1.0 + std::fabs(want))) << k;
    }
  }
}

TEST_F(CudaKernelsTest, SiluMulMatchesCpu) {
  const int64_t n = 10000;
  const std::vector<float> g = Gaussian(n, 10, 4.0f), u = Gaussian(n, 11);
  DeviceBuffer g_dev(g), u_dev(u), out_dev(static_cast<size_t>(n) * sizeof(float));
  ASSERT_TRUE(SiluMul(g_dev.as<float>(), u_dev.as<float>(), n, out_dev.as<float>(), nullptr).ok());
  // Aliasing the output with an input.
  ASSERT_TRUE(SiluMul(g_dev.as<float>(), u_dev.as<float>(), n, g_dev.as<float>(), nullptr).ok());
  const std::vector<float> got = out_dev.Download<float>(static_cast<size_t>(n));
  const std::vector<float> got_alias = g_dev.Download<float>(static_cast<size_t>(n));
  std::vector<float> want(static_cast<size_t>(n));
  cpu::SiluMul(g.data(), u.data(), n, want.data());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 2e-6 * (1.0 + std::fabs(want[i]))) << i;
    ASSERT_EQ(got_alias[i], got[i]) << i;
  }
}

TEST_F(CudaKernelsTest, RouterTopKMatchesCpu) {
  uint32_t seed = 20;
  const RouterParams routers[] = {
      {},
      {.renormalize = false},
      {.gating = RouterGating::kSigmoid, .renormalize = true, .weights_scale = 2.5f},
      {.gating = RouterGating::kSigmoid, .renormalize = false},
  };
  for (int n_expert : {8, 60, 128, 512}) {
    for (int k : {1, 2, 8}) {
      for (size_t r = 0; r < std::size(routers); ++r) {
        const RouterParams& router = routers[r];
        // The sigmoid routers choose with a selection bias (glm4moe's).
        const bool biased = router.gating == RouterGating::kSigmoid;
        SCOPED_TRACE(std::to_string(n_expert) + " experts, top " + std::to_string(k) + ", router " +
                     std::to_string(r));
        const int n_tokens = 4;
        std::vector<float> logits = Gaussian(static_cast<size_t>(n_tokens * n_expert), seed++, 2.0f);
        // Token 3: all equal, so ties decide (lower id first).
        std::fill(logits.begin() + 3 * n_expert, logits.end(), 0.5f);
        const std::vector<float> bias = Gaussian(static_cast<size_t>(n_expert), seed++, 0.3f);
        DeviceBuffer logits_dev(logits);
        DeviceBuffer bias_dev(bias);
        DeviceBuffer probs_dev(logits.size() * sizeof(float));
        DeviceBuffer ids_dev(static_cast<size_t>(n_tokens * k) * sizeof(int32_t));
        DeviceBuffer weights_dev(static_cast<size_t>(n_tokens * k) * sizeof(float));
        ASSERT_TRUE(RouterTopK(logits_dev.as<float>(), n_tokens, n_expert, k, router,
                               biased ? bias_dev.as<float>() : nullptr, probs_dev.as<float>(),
                               ids_dev.as<int32_t>(), weights_dev.as<float>(), nullptr)
                        .ok());
        const std::vector<float> probs = probs_dev.Download<float>(logits.size());
        const std::vector<int32_t> ids = ids_dev.Download<int32_t>(static_cast<size_t>(n_tokens * k));
        const std::vector<float> weights =
            weights_dev.Download<float>(static_cast<size_t>(n_tokens * k));
        for (int t = 0; t < n_tokens; ++t) {
          std::vector<float> want_probs(static_cast<size_t>(n_expert));
          std::vector<int32_t> want_ids(static_cast<size_t>(k));
          std::vector<float> want_weights(static_cast<size_t>(k));
          cpu::RouterTopK(logits.data() + t * n_expert, n_expert, k, router,
                          biased ? bias.data() : nullptr, want_probs.data(), want_ids.data(),
                          want_weights.data());
          for (int e = 0; e < n_expert; ++e) {
            ASSERT_NEAR(probs[static_cast<size_t>(t * n_expert + e)],
                        want_probs[static_cast<size_t>(e)],
                        2e-6 * want_probs[static_cast<size_t>(e)] + 1e-9);
          }
          for (int j = 0; j < k; ++j) {
            ASSERT_EQ(ids[static_cast<size_t>(t * k + j)], want_ids[static_cast<size_t>(j)])
                << "token " << t << " rank " << j;
            ASSERT_NEAR(weights[static_cast<size_t>(t * k + j)],
                        want_weights[static_cast<size_t>(j)],
                        4e-6 * want_weights[static_cast<size_t>(j)] + 1e-9);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------

TEST_F(CudaKernelsTest, ArgmaxRowsPrefersTheLowerIdOnTies) {
  for (int n_vocab : {1, 1000, 151936}) {
    const int rows = 3;
    std::vector<float> logits = Gaussian(static_cast<size_t>(rows * n_vocab), 50);
    std::vector<int32_t> want(rows);
    for (int r = 0; r < rows; ++r) {
      auto begin = logits.begin() + r * n_vocab;
      want[static_cast<size_t>(r)] =
          static_cast<int32_t>(std::max_element(begin, begin + n_vocab) - begin);
    }
    if (n_vocab > 10) {
      // Row 2: the maximum twice; the first one wins.
      float* row = logits.data() + 2 * n_vocab;
      row[n_vocab - 1] = 100.0f;
      row[7] = 100.0f;
      want[2] = 7;
    }
    DeviceBuffer logits_dev(logits), ids_dev(rows * sizeof(int32_t));
    ASSERT_TRUE(ArgmaxRows(logits_dev.as<float>(), rows, n_vocab, ids_dev.as<int32_t>(), nullptr)
                    .ok());
    EXPECT_EQ(ids_dev.Download<int32_t>(rows), want) << "n_vocab " << n_vocab;
  }
}

TEST_F(CudaKernelsTest, SampleTemperatureInvertsTheCdf) {
  const int n_vocab = 5000;
  const float temperature = 0.7f;
  const std::vector<float> logits = Gaussian(n_vocab, 60, 3.0f);
  std::vector<double> cdf(n_vocab);
  double max = -1e300, z = 0.0;
  for (float l : logits) max = std::max(max, static_cast<double>(l) / temperature);
  for (int i = 0; i < n_vocab; ++i) {
    z += std::exp(logits[static_cast<size_t>(i)] / temperature - max);
    cdf[static_cast<size_t>(i)] = z;
  }
  DeviceBuffer logits_dev(logits), id_dev(sizeof(int32_t));
  for (float u : {0.0f, 0.1f, 0.5f, 0.9f, 0.999f}) {
    ASSERT_TRUE(SampleTemperature(logits_dev.as<float>(), n_vocab, temperature, u,
                                  id_dev.as<int32_t>(), nullptr)
                    .ok());
    const int32_t id = id_dev.Download<int32_t>(1)[0];
    ASSERT_GE(id, 0);
    ASSERT_LT(id, n_vocab);
    const double below = id == 0 ? 0.0 : cdf[static_cast<size_t>(id - 1)] / z;
    const double through = cdf[static_cast<size_t>(id)] / z;
    // The device sums 5000 terms in fp32; the host in double.
    EXPECT_LE(below, u + 1e-4) << "u " << u << " id " << id;
    EXPECT_GE(through, u - 1e-4) << "u " << u << " id " << id;
  }
  // Temperature 0 is argmax.
  ASSERT_TRUE(
      SampleTemperature(logits_dev.as<float>(), n_vocab, 0.0f, 0.5f, id_dev.as<int32_t>(), nullptr)
          .ok());
  EXPECT_EQ(id_dev.Download<int32_t>(1)[0],
            std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// ---------------------------------------------------------------------------
// Engine glue: residual add, row gather, KV store, MoE combine. Their host
// versions are a few lines each, written out here.

TEST_F(CudaKernelsTest, AddInPlaceAddsEveryElement) {
  // Sizes around the grid-stride limit (65535 blocks of 256 threads).
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{65535} * 256 + 77}) {
    const std::vector<float> x = Gaussian(static_cast<size_t>(n), 80);
    const std::vector<float> y = Gaussian(static_cast<size_t>(n), 81);
    DeviceBuffer x_dev(x), y_dev(y);
    ASSERT_TRUE(AddInPlace(x_dev.as<float>(), y_dev.as<float>(), n, nullptr).ok());
    const std::vector<float> got = x_dev.Download<float>(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], x[i] + y[i]) << "n " << n << " i " << i;
  }
}

TEST_F(CudaKernelsTest, AddRowBiasAddsTheBiasToEveryRow) {
  // A decode row, a prompt, and more elements than one grid-stride pass.
  for (const auto& [n_rows, n] : {std::pair<int64_t, int>{1, 128}, std::pair<int64_t, int>{37, 96},
                                  std::pair<int64_t, int>{70000, 300}}) {
    const std::vector<float> rows = Gaussian(static_cast<size_t>(n_rows * n), 83);
    const std::vector<float> bias = Gaussian(static_cast<size_t>(n), 84);
    DeviceBuffer rows_dev(rows), bias_dev(bias);
    ASSERT_TRUE(AddRowBias(rows_dev.as<float>(), bias_dev.as<float>(), n_rows, n, nullptr).ok());
    const std::vector<float> got = rows_dev.Download<float>(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_EQ(got[i], rows[i] + bias[i % static_cast<size_t>(n)])
          << "rows " << n_rows << " i " << i;
    }
  }
}

TEST_F(CudaKernelsTest, GatherRowsCopiesTheIndexedRows) {
  const int n_src = 7, n = 300;
  const std::vector<float> src = Gaussian(static_cast<size_t>(n_src * n), 82);
  // Repeats and any order, as expert grouping produces.
  const std::vector<int32_t> rows = {6, 0, 0, 3, 5, 1, 6, 2, 4};
  DeviceBuffer src_dev(src), rows_dev(rows), dst_dev(rows.size() * n * sizeof(float));
  ASSERT_TRUE(GatherRows(src_dev.as<float>(), rows_dev.as<int32_t>(),
                         static_cast<int64_t>(rows.size()), n, dst_dev.as<float>(), nullptr)
                  .ok());
  const std::vector<float> got = dst_dev.Download<float>(rows.size() * n);
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(got[r * n + i], src[static_cast<size_t>(rows[r]) * n + i]) << r << " " << i;
    }
  }
}

TEST_F(CudaKernelsTest, MoeCombineSumsInRouterOrder) {
  const int n_tokens = 6, k = 4, n = 700;
  const int n_rows = n_tokens * k;
  const std::vector<float> expert_out = Gaussian(static_cast<size_t>(n_rows * n), 84);
  const std::vector<float> weights = Gaussian(static_cast<size_t>(n_rows), 85);
  const std::vector<float> x = Gaussian(static_cast<size_t>(n_tokens * n), 86);
  // A permutation: row of (t, j) somewhere in expert order.
  std::vector<int32_t> rows(static_cast<size_t>(n_rows));
  for (int i = 0; i < n_rows; ++i) rows[static_cast<size_t>(i)] = (i * 7 + 3) % n_rows;
  DeviceBuffer out_dev(expert_out), rows_dev(rows), weights_dev(weights), x_dev(x);
  ASSERT_TRUE(MoeCombine(out_dev.as<float>(), rows_dev.as<int32_t>(), weights_dev.as<float>(),
                         n_tokens, k, n, x_dev.as<float>(), nullptr)
                  .ok());
  const std::vector<float> got = x_dev.Download<float>(x.size());
  for (int t = 0; t < n_tokens; ++t) {
    for (int i = 0; i < n; ++i) {
      double want = 0.0;
      for (int j = 0; j < k; ++j) {
        const size_t tj = static_cast<size_t>(t * k + j);
        want += static_cast<double>(weights[tj]) *
                expert_out[static_cast<size_t>(rows[tj]) * n + static_cast<size_t>(i)];
      }
      want += x[static_cast<size_t>(t * n + i)];
      ASSERT_NEAR(got[static_cast<size_t>(t * n + i)], want, 1e-5 * (1.0 + std::fabs(want)))
          << t << " " << i;
    }
  }
  // Deterministic: the same inputs give the same bits.
  DeviceBuffer x2_dev(x);
  ASSERT_TRUE(MoeCombine(out_dev.as<float>(), rows_dev.as<int32_t>(), weights_dev.as<float>(),
                         n_tokens, k, n, x2_dev.as<float>(), nullptr)
                  .ok());
  EXPECT_EQ(x2_dev.Download<float>(x.size()), got);
}

// A grouped launch gives each job GemvQuant's bits: 70 jobs (two launches),
// 1..8 activation rows each, some with x only 4-byte aligned (the
// element-strided kernel), every job its own weights and outputs.
TEST_F(CudaKernelsTest, GemvQuantGroupGivesEachJobGemvQuantsBits) {
  const int64_t rows = 40, cols = 512;
  const int n_jobs = 70;
  uint32_t seed = 1300;
  for (TensorType type : kWeightTypes) {
    SCOPED_TRACE(Name(type));
    const size_t row_bytes = static_cast<size_t>(TensorRowBytes(type, cols));
    std::vector<uint8_t> w_bytes;
    for (int j = 0; j < n_jobs; ++j) {
      const std::vector<uint8_t> w =
          Quantize(type, Gaussian(static_cast<size_t>(rows * cols), seed++, 0.05f));
      w_bytes.insert(w_bytes.end(), w.begin(), w.end());
    }
    // Job j's x starts at float offset j * (8 * cols + 4) + (j % 3 == 2), so
    // every third job's x is misaligned for float4.
    const size_t x_stride = static_cast<size_t>(kCudaGemvMaxBatch * cols + 4);
    const std::vector<float> x = Gaussian(x_stride * n_jobs + 1, seed++);
    DeviceBuffer w_dev(w_bytes), x_dev(x);
    const size_t y_stride = static_cast<size_t>(kCudaGemvMaxBatch * rows);
    DeviceBuffer y_group(y_stride * n_jobs * sizeof(float));
    DeviceBuffer y_single(y_stride * sizeof(float));
    std::vector<GemvJob> jobs;
    for (int j = 0; j < n_jobs; ++j) {
      GemvJob job;
      job.w = static_cast<const uint8_t*>(w_dev.get()) + static_cast<size_t>(j) * rows * row_bytes;
      job.x = x_dev.as<float>() + static_cast<size_t>(j) * x_stride + (j % 3 == 2 ? 1 : 0);
      job.y = y_group.as<float>() + static_cast<size_t>(j) * y_stride;
      job.n_rows = 1 + j % kCudaGemvMaxBatch;
      jobs.push_back(job);
    }
    ASSERT_TRUE(GemvQuantGroup(type, jobs.data(), n_jobs, rows, cols, nullptr).ok());
    const std::vector<float> grouped = y_group.Download<float>(y_stride * n_jobs);
    for (int j = 0; j < n_jobs; ++j) {
      const GemvJob& job = jobs[static_cast<size_t>(j)];
      ASSERT_TRUE(
          GemvQuant(type, job.w, job.x, rows, cols, job.n_rows, y_single.as<float>(), nullptr)
              .ok());
      const std::vector<float> single =
          y_single.Download<float>(static_cast<size_t>(job.n_rows * rows));
      ASSERT_EQ(std::memcmp(single.data(), grouped.data() + static_cast<size_t>(j) * y_stride,
                            single.size() * sizeof(float)),
                0)
          << "job " << j << " (" << job.n_rows << " rows)";
    }
  }
}

// The device grouping against the host's rule (expert_rows.h, itself
// checked against the MoE block's host grouping): row maps, the three job
// tables and their count, and the first invalid choice, with -1 and
// out-of-range ids among the choices and experts of more than 8 rows. Jobs
// of one row read their token's row of token_rows, the others the gathered
// rows.
TEST_F(CudaKernelsTest, BuildExpertJobsGroupsAsTheHost) {
  const int n_tokens = 12, top_k = 4, n_expert = 5;
  const int n = n_tokens * top_k;
  const int64_t n_embd = 64, n_ff = 32;
  std::mt19937 rng(5);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % n_expert);
  ids[7] = -1;
  ids[30] = n_expert;
  // Fake weight pointers: the kernel only copies them into the jobs.
  std::vector<uintptr_t> weights(static_cast<size_t>(3 * n_expert));
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0x10000 + 0x100 * i;
  DeviceBuffer ids_dev(ids), weights_dev(weights);
  DeviceBuffer in(static_cast<size_t>(n * n_embd) * sizeof(float));
  DeviceBuffer token_rows(static_cast<size_t>(n_tokens * n_embd) * sizeof(float));
  DeviceBuffer gate(static_cast<size_t>(n * n_ff) * sizeof(float));
  DeviceBuffer up(static_cast<size_t>(n * n_ff) * sizeof(float));
  DeviceBuffer down(static_cast<size_t>(n * n_embd) * sizeof(float));
  DeviceBuffer slot_rows(2 * static_cast<size_t>(n) * sizeof(int32_t));
  DeviceBuffer jobs(3 * static_cast<size_t>(n) * sizeof(GemvJob));
  DeviceBuffer counts(2 * sizeof(int32_t));
  ExpertJobsArgs a;
  a.topk_ids = ids_dev.as<int32_t>();
  a.n_tokens = n_tokens;
  a.top_k = top_k;
  a.n_expert = n_expert;
  a.expert_weights = static_cast<const void* const*>(weights_dev.get());
  a.expert_in = in.as<float>();
  a.token_rows = token_rows.as<float>();
  a.gate_out = gate.as<float>();
  a.up_out = up.as<float>();
  a.down_out = down.as<float>();
  a.n_embd = n_embd;
  a.n_ff = n_ff;
  a.slot_rows = slot_rows.as<int32_t>();
  a.jobs = static_cast<GemvJob*>(jobs.get());
  a.n_jobs = counts.as<int32_t>();
  a.bad_choice = counts.as<int32_t>() + 1;
  ASSERT_TRUE(BuildExpertJobs(a, nullptr).ok());
  int single_row_jobs = 0;
  const std::vector<int32_t> rows = slot_rows.Download<int32_t>(2 * static_cast<size_t>(n));
  const std::vector<GemvJob> got = jobs.Download<GemvJob>(3 * static_cast<size_t>(n));
  const std::vector<int32_t> count = counts.Download<int32_t>(2);
  EXPECT_EQ(count[1], 1 + 7);  // the first invalid choice
  int n_jobs = 0;
  // The choice at each row, then the jobs in row order.
  std::vector<int> choice_at(static_cast<size_t>(n), -1);
  for (int i = 0; i < n; ++i) {
    const ExpertRow r = ExpertRowOf(ids.data(), n, n_expert, i);
    EXPECT_EQ(rows[static_cast<size_t>(n + i)], r.row) << "choice " << i;
    EXPECT_EQ(rows[static_cast<size_t>(r.row)], i / top_k) << "row " << r.row;
    choice_at[static_cast<size_t>(r.row)] = i;
  }
  for (int row = 0; row < n; ++row) {
    const int i = choice_at[static_cast<size_t>(row)];
    ASSERT_GE(i, 0);
    const ExpertRow r = ExpertRowOf(ids.data(), n, n_expert, i);
    if (!r.valid || r.rank % kCudaGemvMaxBatch != 0) continue;
    const int32_t rows_in_job = std::min(kCudaGemvMaxBatch, r.expert_rows - r.rank);
    const uintptr_t* wp = weights.data() + 3 * ids[static_cast<size_t>(i)];
    const float* x = rows_in_job == 1 ? a.token_rows + (i / top_k) * n_embd
                                      : a.expert_in + row * n_embd;
    single_row_jobs += rows_in_job == 1;
    float* g = a.gate_out + row * n_ff;
    const GemvJob expect[3] = {
        {reinterpret_cast<const void*>(wp[0]), x, g, rows_in_job},
        {reinterpret_cast<const void*>(wp[1]), x, a.up_out + row * n_ff, rows_in_job},
        {reinterpret_cast<const void*>(wp[2]), g, a.down_out + row * n_embd, rows_in_job}};
    for (int t = 0; t < 3; ++t) {
      const GemvJob& j = got[static_cast<size_t>(t * n + n_jobs)];
      EXPECT_EQ(j.w, expect[t].w) << "table " << t << " job " << n_jobs;
      EXPECT_EQ(j.x, expect[t].x) << "table " << t << " job " << n_jobs;
      EXPECT_EQ(j.y, expect[t].y) << "table " << t << " job " << n_jobs;
      EXPECT_EQ(j.n_rows, expect[t].n_rows) << "table " << t << " job " << n_jobs;
    }
    ++n_jobs;
  }
  EXPECT_EQ(count[0], n_jobs);
  EXPECT_GT(n_jobs, n_expert);  // some expert had more than 8 rows
  EXPECT_GT(single_row_jobs, 0);
}

// ---------------------------------------------------------------------------
// Argument checks happen on the host before any launch, so they run here
// whether or not a GPU exists.

TEST(CudaKernelsArgsTest, RejectsBadArgumentsBeforeLaunching) {
  alignas(16) static float dummy[1024];
  float* f = dummy;
  const absl::Status unsupported =
      GemvQuant(TensorType::kQ2_K, f, f, 4, 256, 1, f, nullptr);
  EXPECT_EQ(unsupported.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unsupported.message().find("Q2_K"), absl::string_view::npos) << unsupported;
  EXPECT_EQ(GemvQuant(TensorType::kQ4_K, f, f, 4, 100, 1, f, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // not whole blocks
  EXPECT_EQ(GemvQuant(TensorType::kQ8_0, f, f, 4, 64, 9, f, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // batch > 8
  EXPECT_EQ(GemvQuant(TensorType::kF32, reinterpret_cast<char*>(f) + 2, f, 4, 64, 1, f, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);  // misaligned f32 weights
  GemvJob job;
  job.w = f;
  job.x = f;
  job.y = f;
  job.n_rows = 9;
  EXPECT_EQ(GemvQuantGroup(TensorType::kQ8_0, &job, 1, 4, 64, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // n_rows > 8
  job.n_rows = 1;
  job.x = nullptr;
  const absl::Status no_x = GemvQuantGroup(TensorType::kQ8_0, &job, 1, 4, 64, nullptr);
  EXPECT_EQ(no_x.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_x.message().find("job 0"), absl::string_view::npos) << no_x;
  EXPECT_EQ(GemvQuantGroup(TensorType::kQ8_0, nullptr, 2, 4, 64, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // no jobs
  EXPECT_TRUE(GemvQuantGroup(TensorType::kQ8_0, nullptr, 0, 4, 64, nullptr).ok());
  ExpertJobsArgs jobs_args;
  jobs_args.n_tokens = 1;
  jobs_args.top_k = 8;
  jobs_args.n_expert = 128;
  jobs_args.n_embd = 64;
  jobs_args.n_ff = 64;
  const absl::Status no_ids = BuildExpertJobs(jobs_args, nullptr);
  EXPECT_EQ(no_ids.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_ids.message().find("null"), absl::string_view::npos) << no_ids;
  jobs_args.n_tokens = kCudaExpertJobsMaxChoices;  // 8x too many choices
  EXPECT_EQ(BuildExpertJobs(jobs_args, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GemvQuantJobTables(TensorType::kQ4_K, reinterpret_cast<GemvJob*>(dummy),
                               reinterpret_cast<int32_t*>(dummy), 40000, 2, 64, 256, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);  // grid.y past 65535
  EXPECT_EQ(DequantizeToF32(TensorType::kQ6_K, f, 255, f, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RopeNeox(f, reinterpret_cast<int32_t*>(f), 1, 1, 64, 65, 1e4f, {}, nullptr, nullptr, nullptr)
          .code(),
      absl::StatusCode::kInvalidArgument);  // odd n_rot
  EXPECT_EQ(
      RouterTopK(f, 1, 8, 9, {}, nullptr, f, reinterpret_cast<int32_t*>(f), f, nullptr).code(),
      absl::StatusCode::kInvalidArgument);  // k > n_expert
  EXPECT_EQ(
      RouterTopK(f, 1, 2000, 8, {}, nullptr, f, reinterpret_cast<int32_t*>(f), f, nullptr).code(),
      absl::StatusCode::kInvalidArgument);  // too many experts
  EXPECT_EQ(SampleTemperature(f, 10, 1.0f, 1.0f, reinterpret_cast<int32_t*>(f), nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // uniform outside [0, 1)
  EXPECT_EQ(GatherRows(f, nullptr, 1, 64, f, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // no row indices
  EXPECT_EQ(MoeCombine(f, reinterpret_cast<int32_t*>(f), f, 1, 0, 64, f, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // k = 0
  EXPECT_EQ(AddInPlace(f, f, -1, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AddRowBias(f, nullptr, 1, 4, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AddRowBias(f, f, 1, 0, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitRowHalves(f, 1, 0, f, f, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MulSigmoid(f, nullptr, 4, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AddSigmoidScaledRows(f, f, nullptr, 1, 4, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QkNormRope(f, f, f, nullptr, reinterpret_cast<int32_t*>(f), 1, 1, 1, 64, 64, 1e4f, {},
                       nullptr, false, nullptr, 1e-6f, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);  // only one of the two norms
  EXPECT_EQ(QkNormRope(f, f, nullptr, nullptr, reinterpret_cast<int32_t*>(f), 1, 1, 1, 64, 63, 1e4f,
                       {}, nullptr, false, nullptr, 1e-6f, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);  // odd n_rot
  EXPECT_TRUE(CudaWeightTypeSupported(TensorType::kQ5_K));
  EXPECT_FALSE(CudaWeightTypeSupported(TensorType::kQ3_K));
}

}  // namespace
}  // namespace moetier::cuda
