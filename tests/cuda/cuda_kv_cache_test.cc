// The device KV cache (backend/cuda/cuda_kv_cache.cu): StoreKv writes the
// CPU codec's bytes for every cache type, and Attention over keys and values
// of any two types equals cpu::AttentionHeads over the rows the codec
// decodes. The argument checks run everywhere; the rest skips without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_kernels.h"
#include "device_buffer.h"
#include "gguf/tensor/quant_codec.h"
#include "gguf/tensor/tensor_type.h"
#include "gtest/gtest.h"
#include "random_values.h"

namespace moetier::cuda {
namespace {

using cuda_test::DeviceBuffer;
using cuda_test::Gaussian;

constexpr TensorType kKvTypes[] = {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0,
                                   TensorType::kQ4_0};

std::string Name(TensorType type) { return std::string(TensorTypeName(type)); }

int64_t RowBytes(TensorType type, int head_dim) { return TensorRowBytes(type, head_dim); }

class CudaKvCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device or driver on this machine; run tests/cuda/run-on-gpu.sh "
                      "where a GPU exists";
    }
  }
};

// Rows that probe the block rules besides Gaussian ones: all zeros (scale
// 0), equal magnitudes of both signs (q4_0 keeps the first extreme), exact
// halves of a level (rounding direction) and a wide range.
std::vector<float> ProbeRow(int kind, int head_dim, uint32_t seed) {
  std::vector<float> row = Gaussian(static_cast<size_t>(head_dim), seed);
  switch (kind % 4) {
    case 1:
      std::fill(row.begin(), row.end(), 0.0f);
      break;
    case 2:
      for (int i = 0; i < head_dim; ++i) row[static_cast<size_t>(i)] = (i % 3 == 0 ? -2.0f : 2.0f);
      break;
    case 3:
      // With amax 127 the q8_0 scale is 1: i + 0.5 sits exactly between
      // two levels.
      for (int i = 0; i < head_dim; ++i) {
        row[static_cast<size_t>(i)] = i % 32 == 0 ? 127.0f : static_cast<float>(i % 32) + 0.5f;
        if (i % 2 == 1) row[static_cast<size_t>(i)] = -row[static_cast<size_t>(i)];
      }
      break;
    default:
      for (size_t i = 0; i < row.size(); i += 7) row[i] *= 40.0f;
      break;
  }
  return row;
}

// StoreKv of 5 tokens of 3 heads at position 9 of 16, both layouts, against
// QuantizeRow's bytes, with every byte outside the rows left as it was.
void ExpectStoreKvWritesTheCodecsBytes(TensorType type, int head_dim) {
  const int n_tokens = 5, n_head_kv = 3, max_ctx = 16, pos0 = 9;
  std::vector<float> src;
  for (int t = 0; t < n_tokens; ++t) {
    for (int g = 0; g < n_head_kv; ++g) {
      const std::vector<float> row = ProbeRow(t * n_head_kv + g, head_dim, 100u + t * 7u + g);
      src.insert(src.end(), row.begin(), row.end());
    }
  }
  const int64_t row = RowBytes(type, head_dim);
  struct Layout {
    const char* name;
    int64_t head_stride, row_stride;
  };
  // The position-major rows leave an 8-byte gap that must stay untouched.
  const Layout layouts[] = {{"head-major", max_ctx * row, row},
                            {"position-major", row, n_head_kv * row + 8}};
  for (const Layout& layout : layouts) {
    SCOPED_TRACE(Name(type) + " " + layout.name + " head_dim " + std::to_string(head_dim));
    const size_t cache_bytes = static_cast<size_t>(
        std::max(n_head_kv * layout.head_stride, max_ctx * layout.row_stride));
    DeviceBuffer src_dev(src), cache_dev(cache_bytes);
    ASSERT_EQ(cudaMemset(cache_dev.get(), 0xA5, cache_bytes), cudaSuccess);
    const absl::Status status =
        StoreKv(src_dev.as<float>(), n_tokens, n_head_kv, head_dim, cache_dev.get(), type,
                layout.head_stride, layout.row_stride, pos0, nullptr);
    ASSERT_TRUE(status.ok()) << status;
    std::vector<uint8_t> want(cache_bytes, 0xA5);
    for (int t = 0; t < n_tokens; ++t) {
      for (int g = 0; g < n_head_kv; ++g) {
        QuantizeRow(type, src.data() + (t * n_head_kv + g) * head_dim,
                    want.data() + g * layout.head_stride + (pos0 + t) * layout.row_stride,
                    head_dim);
      }
    }
    const std::vector<uint8_t> got = cache_dev.Download<uint8_t>(cache_bytes);
    for (size_t i = 0; i < cache_bytes; ++i) {
      ASSERT_EQ(static_cast<int>(got[i]), static_cast<int>(want[i])) << "byte " << i;
    }
  }
}

TEST_F(CudaKvCacheTest, StoreKvWritesTheCodecsBytesInBothLayouts) {
  for (TensorType type : kKvTypes) ExpectStoreKvWritesTheCodecsBytes(type, 64);
  // Heads that are not whole blocks, for the types without blocks.
  ExpectStoreKvWritesTheCodecsBytes(TensorType::kF32, 40);
  ExpectStoreKvWritesTheCodecsBytes(TensorType::kF16, 40);
}

// Decode (one token) and prefill (several causal tokens after a prefix),
// both cache layouts, keys and values each in every type.
TEST_F(CudaKvCacheTest, AttentionReadsKeysAndValuesOfEveryTypeAsStored) {
  const int n_head = 8, n_head_kv = 2;
  uint32_t seed = 40;
  for (TensorType k_type : kKvTypes) {
    for (TensorType v_type : kKvTypes) {
      for (bool head_major : {false, true}) {
        for (int head_dim : {64, 128, 256}) {
          struct Tokens {
            int n_tokens;
            int64_t n_past;
          };
          for (Tokens tk : {Tokens{1, 0}, Tokens{1, 63}, Tokens{1, 64}, Tokens{1, 299},
                            Tokens{6, 0}, Tokens{5, 70}}) {
            SCOPED_TRACE("keys " + Name(k_type) + " values " + Name(v_type) +
                         (head_major ? " head-major" : " position-major") + " head_dim " +
                         std::to_string(head_dim) + " tokens " + std::to_string(tk.n_tokens) +
                         " past " + std::to_string(tk.n_past));
            const int64_t max_ctx = tk.n_past + tk.n_tokens + 3;
            // The oracle's fp32 caches: element strides shared by keys and
            // values.
            const int64_t kv_stride = head_major ? head_dim : n_head_kv * head_dim + 5;
            const int64_t head_stride = head_major ? max_ctx * head_dim : head_dim;
            const size_t cache_elems =
                static_cast<size_t>(head_major ? n_head_kv * head_stride : max_ctx * kv_stride);
            std::vector<float> k_float(cache_elems, 0.0f), v_float(cache_elems, 0.0f);
            // The device caches: byte strides of each one's type.
            auto view_of = [&](TensorType type) {
              const int64_t row = RowBytes(type, head_dim);
              return head_major ? KvCacheView{nullptr, type, max_ctx * row, row}
                                : KvCacheView{nullptr, type, row, n_head_kv * row + 8};
            };
            KvCacheView k_view = view_of(k_type), v_view = view_of(v_type);
            auto bytes_of = [&](const KvCacheView& v) {
              return static_cast<size_t>(
                  std::max(n_head_kv * v.head_stride, max_ctx * v.row_stride));
            };
            std::vector<uint8_t> k_bytes(bytes_of(k_view), 0), v_bytes(bytes_of(v_view), 0);
            for (int64_t t = 0; t < max_ctx; ++t) {
              for (int g = 0; g < n_head_kv; ++g) {
                const size_t at = static_cast<size_t>(g * head_stride + t * kv_stride);
                const std::vector<float> k_row = Gaussian(static_cast<size_t>(head_dim), seed++);
                const std::vector<float> v_row = Gaussian(static_cast<size_t>(head_dim), seed++);
                uint8_t* k_dst = k_bytes.data() + g * k_view.head_stride + t * k_view.row_stride;
                uint8_t* v_dst = v_bytes.data() + g * v_view.head_stride + t * v_view.row_stride;
                QuantizeRow(k_type, k_row.data(), k_dst, head_dim);
                QuantizeRow(v_type, v_row.data(), v_dst, head_dim);
                DequantizeRow(k_type, k_dst, k_float.data() + at, head_dim);
                DequantizeRow(v_type, v_dst, v_float.data() + at, head_dim);
              }
            }
            const std::vector<float> q =
                Gaussian(static_cast<size_t>(tk.n_tokens * n_head * head_dim), seed++, 0.5f);
            DeviceBuffer k_dev(k_bytes), v_dev(v_bytes), q_dev(q);
            DeviceBuffer out_dev(q.size() * sizeof(float));
            k_view.data = k_dev.get();
            v_view.data = v_dev.get();
            const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
            const absl::Status status =
                Attention(q_dev.as<float>(), k_view, v_view, tk.n_tokens, tk.n_past, n_head,
                          n_head_kv, head_dim, scale, out_dev.as<float>(), nullptr);
            ASSERT_TRUE(status.ok()) << status;
            const std::vector<float> got = out_dev.Download<float>(q.size());
            std::vector<float> want(q.size());
            std::vector<float> scores(static_cast<size_t>(n_head * (tk.n_past + tk.n_tokens)));
            for (int t = 0; t < tk.n_tokens; ++t) {
              const size_t offset = static_cast<size_t>(t * n_head * head_dim);
              cpu::AttentionHeads(q.data() + offset, k_float.data(), v_float.data(), head_stride,
                                  kv_stride, tk.n_past + t + 1, n_head, n_head_kv, head_dim,
                                  scale, 0, n_head, scores.data(), want.data() + offset);
            }
            for (size_t i = 0; i < want.size(); ++i) {
              ASSERT_NEAR(got[i], want[i], 2e-5 * (1.0 + std::fabs(want[i]))) << "element " << i;
            }
          }
        }
      }
    }
  }
}

// A position held on the device (a replayed decode graph's) is added to
// the host's: storing at 2 + 3 and attending over 2 + 3 past positions is
// storing at 5 and attending over 5, byte for byte and bit for bit.
TEST_F(CudaKvCacheTest, ADevicePositionAddsToTheHostOne) {
  const int n_head = 4, n_head_kv = 2, head_dim = 64, capacity = 8;
  for (TensorType type : kKvTypes) {
    SCOPED_TRACE(Name(type));
    const int64_t row = RowBytes(type, head_dim);
    const int64_t head_stride = capacity * row;
    const size_t bytes = static_cast<size_t>(n_head_kv * head_stride);
    // Five earlier positions, then the token's keys and values at 5.
    const std::vector<float> past = Gaussian(static_cast<size_t>(5 * n_head_kv * head_dim), 1);
    const std::vector<float> now = Gaussian(static_cast<size_t>(n_head_kv * head_dim), 2);
    const std::vector<float> q = Gaussian(static_cast<size_t>(n_head * head_dim), 3);
    const std::vector<int32_t> three = {3};
    DeviceBuffer past_dev(past), now_dev(now), q_dev(q), three_dev(three);
    DeviceBuffer host_cache(bytes), device_cache(bytes);
    DeviceBuffer out_host(q.size() * sizeof(float)), out_device(q.size() * sizeof(float));
    for (DeviceBuffer* cache : {&host_cache, &device_cache}) {
      ASSERT_EQ(cudaMemset(cache->get(), 0, bytes), cudaSuccess);
      ASSERT_TRUE(StoreKv(past_dev.as<float>(), 5, n_head_kv, head_dim, cache->get(), type,
                          head_stride, row, 0, nullptr)
                      .ok());
    }
    ASSERT_TRUE(StoreKv(now_dev.as<float>(), 1, n_head_kv, head_dim, host_cache.get(), type,
                        head_stride, row, 5, nullptr)
                    .ok());
    ASSERT_TRUE(StoreKv(now_dev.as<float>(), 1, n_head_kv, head_dim, device_cache.get(), type,
                        head_stride, row, 2, nullptr, three_dev.as<int32_t>())
                    .ok());
    EXPECT_EQ(host_cache.Download<uint8_t>(bytes), device_cache.Download<uint8_t>(bytes));
    const KvCacheView view{host_cache.get(), type, head_stride, row};
    ASSERT_TRUE(Attention(q_dev.as<float>(), view, view, 1, 5, n_head, n_head_kv, head_dim,
                          0.125f, out_host.as<float>(), nullptr)
                    .ok());
    ASSERT_TRUE(Attention(q_dev.as<float>(), view, view, 1, 2, n_head, n_head_kv, head_dim,
                          0.125f, out_device.as<float>(), nullptr, three_dev.as<int32_t>())
                    .ok());
    EXPECT_EQ(out_host.Download<float>(q.size()), out_device.Download<float>(q.size()));
  }
}

TEST(CudaKvCacheArgsTest, RejectsBadArgumentsBeforeLaunching) {
  // Never dereferenced: every call fails its checks first.
  float* f = reinterpret_cast<float*>(uintptr_t{256});
  auto* bytes = reinterpret_cast<uint8_t*>(f);
  // Position-major rows of 4 KV heads of 64 values.
  auto view = [&](TensorType type, const void* data = nullptr) {
    const int64_t row = RowBytes(type, 64);
    return KvCacheView{data != nullptr ? data : f, type, row, 4 * row};
  };
  const KvCacheView f32 = view(TensorType::kF32);
  auto attention = [&](const KvCacheView& k, const KvCacheView& v, int n_head, int n_head_kv,
                       int head_dim) {
    return Attention(f, k, v, 1, 0, n_head, n_head_kv, head_dim, 1.0f, f, nullptr);
  };
  auto expect_invalid = [](const absl::Status& status, const std::string& says) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(std::string(status.message()).find(says), std::string::npos) << status;
  };
  expect_invalid(attention(f32, f32, 6, 4, 64), "n_head 6 is not a multiple of n_head_kv 4");
  expect_invalid(attention(f32, f32, 4, 4, 512), "head_dim 512");
  expect_invalid(attention({f, TensorType::kQ4_K, 0, 144}, f32, 4, 4, 64), "key cache type");
  expect_invalid(attention(f32, {f, TensorType::kBF16, 128, 512}, 4, 4, 64), "value cache type");
  expect_invalid(attention({f, TensorType::kQ8_0, 34, 136}, f32, 4, 4, 40),
                 "needs head_dim a multiple of 32, not 40");
  expect_invalid(attention(f32, {f, TensorType::kF16, 129, 516}, 4, 4, 64),
                 "multiples of 2 bytes");
  expect_invalid(attention({f, TensorType::kF32, 258, 1032}, f32, 4, 4, 64),
                 "multiples of 4 bytes");
  // The scale of a block row must be 2-byte aligned, an f32 row 4-byte.
  expect_invalid(attention(view(TensorType::kQ8_0, bytes + 1), f32, 4, 4, 64),
                 "multiples of 2 bytes");
  expect_invalid(attention(f32, view(TensorType::kF32, bytes + 2), 4, 4, 64),
                 "multiples of 4 bytes");
  // Rows that overlap: heads 0 bytes apart, or positions closer than the
  // heads they hold.
  expect_invalid(attention({f, TensorType::kF32, 0, 1024}, f32, 4, 4, 64), "overlap");
  expect_invalid(attention(f32, {f, TensorType::kQ4_0, 36, 72}, 4, 4, 64), "overlap");
  expect_invalid(attention({nullptr, TensorType::kF32, 256, 1024}, f32, 4, 4, 64),
                 "null pointer");
  expect_invalid(StoreKv(f, 1, 1, 64, f, TensorType::kBF16, 128, 128, 0, nullptr),
                 "KV cache type");
  expect_invalid(StoreKv(f, 1, 1, 40, f, TensorType::kQ4_0, 0, 18, 0, nullptr),
                 "needs head_dim a multiple of 32");
  expect_invalid(StoreKv(f, 1, 2, 64, f, TensorType::kQ8_0, 34, 68, 0, nullptr), "overlap");
  expect_invalid(StoreKv(f, 1, 1, 64, f, TensorType::kF32, 256, 256, -1, nullptr),
                 "negative position");
  // Both layouts of the four types pass the checks (n_tokens 0 launches
  // nothing).
  for (TensorType type : kKvTypes) {
    const int64_t row = RowBytes(type, 64);
    for (const KvCacheView& v : {view(type), KvCacheView{f, type, 16 * row, row}}) {
      EXPECT_TRUE(Attention(f, v, v, 0, 0, 4, 4, 64, 1.0f, f, nullptr).ok()) << Name(type);
      EXPECT_TRUE(StoreKv(f, 0, 4, 64, f, type, v.head_stride, v.row_stride, 0, nullptr).ok())
          << Name(type);
    }
    EXPECT_TRUE(CudaKvCacheTypeSupported(type)) << Name(type);
  }
  EXPECT_FALSE(CudaKvCacheTypeSupported(TensorType::kQ4_K));
}

}  // namespace
}  // namespace moetier::cuda
