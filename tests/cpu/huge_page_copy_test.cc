#include "backend/cpu/huge_page_copy.h"

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace moetier::cpu {
namespace {

TEST(CpuHugePageCopyTest, CopiesTheUnionAndTranslatesEveryByte) {
  std::vector<uint8_t> source(1 << 20);
  std::iota(source.begin(), source.end(), uint8_t{0});
  for (size_t i = 0; i < source.size(); i += 7) source[i] ^= static_cast<uint8_t>(i >> 8);
  const uint8_t* s = source.data();
  // Overlapping, nested, adjacent, out of order, and one empty range.
  const std::vector<ByteRange> ranges = {{s + 5000, s + 9000},     {s + 100, s + 6000},
                                         {s + 200, s + 300},       {s + 9000, s + 12000},
                                         {s + 500000, s + 900001}, {s + 700, s + 700}};
  absl::StatusOr<HugePageCopy> copy = HugePageCopy::Create(ranges, /*release_source=*/false);
  if (!copy.ok() && copy.status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << copy.status();
  }
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(copy->size() >= (12000 - 100) + (900001 - 500000), true);
  for (const ByteRange& r : ranges) {
    for (const uint8_t* p = r.begin; p < r.end; ++p) {
      const uint8_t* q = copy->Translate(p);
      ASSERT_EQ(*q, *p) << "offset " << (p - s);
      // The copy keeps each byte's position within a 64-byte line.
      ASSERT_EQ(reinterpret_cast<uintptr_t>(q) % 64, reinterpret_cast<uintptr_t>(p) % 64);
    }
  }
  // Contiguous source bytes stay contiguous.
  EXPECT_EQ(copy->Translate(s + 9000) - copy->Translate(s + 100), 8900);
}

TEST(CpuHugePageCopyTest, ReleasingTheSourceKeepsBothIntact) {
  std::vector<uint8_t> source(3 << 20, 0x5A);
  absl::StatusOr<HugePageCopy> copy =
      HugePageCopy::Create({{ByteRange{source.data(), source.data() + source.size()}}}, true);
  if (!copy.ok() && copy.status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << copy.status();
  }
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(*copy->Translate(source.data() + 123456), 0x5A);
  EXPECT_EQ(*copy->Translate(source.data() + source.size() - 1), 0x5A);
  // Marking pages cold must not lose the caller's data (anonymous memory
  // included, where MADV_DONTNEED would zero it).
  for (size_t i = 0; i < source.size(); i += 4096) ASSERT_EQ(source[i], 0x5A) << i;
}

TEST(CpuHugePageCopyTest, UnionBytesCountsOverlapsOnce) {
  std::vector<uint8_t> source(1000);
  const uint8_t* s = source.data();
  const std::vector<ByteRange> ranges = {{s, s + 100}, {s + 50, s + 150}, {s + 500, s + 600}};
  EXPECT_EQ(UnionBytes(ranges), 250u);
}

TEST(CpuHugePageCopyTest, SmallWeightsAreNotWorthCopying) {
  EXPECT_FALSE(HugePageCopyPays(64u << 20));
  // More than any machine's available memory.
  EXPECT_FALSE(HugePageCopyPays(size_t{1} << 62));
}

}  // namespace
}  // namespace moetier::cpu
