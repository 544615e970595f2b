// The decode GEMV's warp slices (backend/cuda/gemv_slices.h) evaluated on
// the host: over every step and lane of a row, each element is decoded
// exactly once, to the codec's value bit for bit. Runs on every machine: it
// checks the index and bit arithmetic, while cuda_kernels_test checks the
// kernel that adds the activations on a GPU.
#include "backend/cuda/gemv_slices.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf/tensor/quant_codec.h"
#include "gguf/tensor/tensor_type.h"
#include "gtest/gtest.h"

namespace moetier::cuda::gemv {
namespace {

struct Row {
  std::vector<uint8_t> storage;  // the row starts at storage.data() + offset
  size_t offset = 0;
  std::vector<float> want;  // DequantizeRow of the row
  const uint8_t* bytes() const { return storage.data() + offset; }
};

// A quantized row with a wide dynamic range (so K-quant sub-block scales,
// mins and the 6-bit scales' high bits all vary) and some exact zeros. The
// row starts 2 bytes past an 8-byte boundary: the slicers may assume only
// 2-byte alignment.
Row MakeRow(TensorType type, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(cols));
  for (int64_t i = 0; i < cols; ++i) {
    float v = gauss(rng) * std::exp2(static_cast<float>((i / 32) % 7) - 3.0f);
    if (i % 97 == 0) v *= 40.0f;
    if (i % 53 == 5) v = 0.0f;
    values[static_cast<size_t>(i)] = v;
  }
  Row row;
  row.offset = 2;
  row.storage.assign(row.offset + TensorRowBytes(type, cols), 0);
  QuantizeRow(type, values.data(), row.storage.data() + row.offset, cols);
  row.want.resize(static_cast<size_t>(cols));
  DequantizeRow(type, row.bytes(), row.want.data(), cols);
  return row;
}

template <TensorType T>
void ExpectSlicesCoverTheRow(int64_t cols, uint32_t seed) {
  using S = Slicer<T>;
  using SliceT = typename S::SliceT;
  static_assert(SliceT::kRuns * SliceT::kRunLen * 32 == S::kStepElems);
  const int64_t n_blocks = cols / GetTensorTypeInfo(T).block_elems;
  const Row row = MakeRow(T, cols, seed);
  std::vector<int> seen(static_cast<size_t>(cols), 0);
  int failures = 0;
  const int64_t steps = StepsPerRow<T>(n_blocks);
  for (int64_t step = 0; step < steps; ++step) {
    for (int lane = 0; lane < 32; ++lane) {
      SliceT slice;
      if (!S::Decode(row.bytes(), n_blocks, step, lane, &slice)) {
        // Only lanes past the row's last block of a partial step are idle.
        EXPECT_GE(step * S::kStepElems + lane * 8, cols) << "step " << step << " lane " << lane;
        continue;
      }
      for (int run = 0; run < SliceT::kRuns; ++run) {
        // Runs start where the kernel's vector loads of x may: float4 or
        // float2 boundaries.
        EXPECT_EQ(slice.first[run] % SliceT::kRunLen, 0);
        for (int k = 0; k < SliceT::kRunLen; ++k) {
          const int64_t e = slice.first[run] + k;
          ASSERT_GE(e, 0);
          ASSERT_LT(e, cols) << "step " << step << " lane " << lane << " run " << run;
          ++seen[static_cast<size_t>(e)];
          const float got = slice.w[run][k];
          const float want = row.want[static_cast<size_t>(e)];
          if (std::memcmp(&got, &want, sizeof got) != 0 && ++failures <= 5) {
            ADD_FAILURE() << "element " << e << " (step " << step << " lane " << lane << " run "
                          << run << "): " << got << ", the codec gives " << want;
          }
        }
      }
    }
  }
  for (int64_t e = 0; e < cols; ++e) {
    ASSERT_EQ(seen[static_cast<size_t>(e)], 1) << "element " << e << " decoded that many times";
  }
}

TEST(GemvSlicesTest, Q4KLanesDecodeEachElementOnceAsTheCodec) {
  for (int64_t cols : {256, 768, 2048, 2816}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    ExpectSlicesCoverTheRow<TensorType::kQ4_K>(cols, static_cast<uint32_t>(cols));
  }
}

TEST(GemvSlicesTest, Q5KLanesDecodeEachElementOnceAsTheCodec) {
  for (int64_t cols : {256, 768, 2816}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    ExpectSlicesCoverTheRow<TensorType::kQ5_K>(cols, static_cast<uint32_t>(cols) + 1);
  }
}

TEST(GemvSlicesTest, Q6KLanesDecodeEachElementOnceAsTheCodec) {
  for (int64_t cols : {256, 768, 2816}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    ExpectSlicesCoverTheRow<TensorType::kQ6_K>(cols, static_cast<uint32_t>(cols) + 2);
  }
}

// 32-element blocks: rows that end mid-step leave the last step's lanes
// past the row idle.
TEST(GemvSlicesTest, Q8_0LanesDecodeEachElementOnceAsTheCodec) {
  for (int64_t cols : {32, 96, 256, 800, 2048}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    ExpectSlicesCoverTheRow<TensorType::kQ8_0>(cols, static_cast<uint32_t>(cols) + 3);
  }
}

TEST(GemvSlicesTest, Q4_0LanesDecodeEachElementOnceAsTheCodec) {
  for (int64_t cols : {32, 96, 256, 800, 2048}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    ExpectSlicesCoverTheRow<TensorType::kQ4_0>(cols, static_cast<uint32_t>(cols) + 4);
  }
}

}  // namespace
}  // namespace moetier::cuda::gemv
