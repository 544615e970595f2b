#include "gguf/tensor/tensor_type.h"

#include <cstdint>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "gguf/tensor/quant_blocks.h"

namespace moetier {
namespace {

struct Expected {
  uint32_t id;
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
  bool has_codec;
};

// SPEC.md §2.1–2.2 and ggml's GGML_QUANT_SIZES.
constexpr Expected kExpected[] = {
    {0, "F32", 1, 4, true},         {1, "F16", 1, 2, true},         {2, "Q4_0", 32, 18, true},
    {3, "Q4_1", 32, 20, true},      {6, "Q5_0", 32, 22, true},      {7, "Q5_1", 32, 24, true},
    {8, "Q8_0", 32, 34, true},      {9, "Q8_1", 32, 36, false},     {10, "Q2_K", 256, 84, true},
    {11, "Q3_K", 256, 110, true},   {12, "Q4_K", 256, 144, true},   {13, "Q5_K", 256, 176, true},
    {14, "Q6_K", 256, 210, true},   {15, "Q8_K", 256, 292, false},  {16, "IQ2_XXS", 256, 66, true},
    {17, "IQ2_XS", 256, 74, true},  {18, "IQ3_XXS", 256, 98, true}, {19, "IQ1_S", 256, 50, true},
    {20, "IQ4_NL", 32, 18, true},   {21, "IQ3_S", 256, 110, true},  {22, "IQ2_S", 256, 82, true},
    {23, "IQ4_XS", 256, 136, true}, {24, "I8", 1, 1, false},        {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},       {27, "I64", 1, 8, false},       {28, "F64", 1, 8, false},
    {29, "IQ1_M", 256, 56, true},   {30, "BF16", 1, 2, true},       {34, "TQ1_0", 256, 54, false},
    {35, "TQ2_0", 256, 66, false},  {39, "MXFP4", 32, 17, true},
};

TEST(TensorTypeTest, EveryKnownIdHasItsGeometry) {
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.name);
    const std::optional<TensorTypeInfo> info = LookupTensorType(e.id);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(static_cast<uint32_t>(info->type), e.id);
    EXPECT_EQ(info->name, e.name);
    EXPECT_EQ(info->block_elems, e.block_elems);
    EXPECT_EQ(info->block_bytes, e.block_bytes);
    EXPECT_EQ(info->has_codec, e.has_codec);
    const TensorTypeInfo& by_enum = GetTensorTypeInfo(info->type);
    EXPECT_EQ(by_enum.name, e.name);
    EXPECT_EQ(TensorTypeName(info->type), e.name);
  }
}

TEST(TensorTypeTest, RemovedAndUnknownIdsAreNotFound) {
  std::set<uint32_t> known;
  for (const Expected& e : kExpected) known.insert(e.id);
  for (uint32_t id = 0; id < 64; ++id) {
    EXPECT_EQ(LookupTensorType(id).has_value(), known.count(id) == 1) << id;
  }
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 41u, 42u, 43u, 1000u, 0xFFFFFFFFu}) {
    EXPECT_FALSE(LookupTensorType(id).has_value()) << id;
  }
}

TEST(TensorTypeTest, ParsesNamesCaseInsensitively) {
  EXPECT_EQ(ParseTensorTypeName("q4_k"), TensorType::kQ4_K);
  EXPECT_EQ(ParseTensorTypeName("Q4_K"), TensorType::kQ4_K);
  EXPECT_EQ(ParseTensorTypeName("q4_K"), TensorType::kQ4_K);  // ggml's own spelling
  EXPECT_EQ(ParseTensorTypeName("f32"), TensorType::kF32);
  EXPECT_EQ(ParseTensorTypeName("bf16"), TensorType::kBF16);
  EXPECT_EQ(ParseTensorTypeName("Iq2_Xxs"), TensorType::kIQ2_XXS);
  EXPECT_EQ(ParseTensorTypeName("mxfp4"), TensorType::kMXFP4);
  for (const Expected& e : kExpected) {
    std::string lower = e.name;
    for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    EXPECT_EQ(ParseTensorTypeName(lower), static_cast<TensorType>(e.id)) << lower;
    EXPECT_EQ(ParseTensorTypeName(e.name), static_cast<TensorType>(e.id)) << e.name;
  }
  for (const char* bad : {"", "q4", "q4_2", "F32 ", " f32", "q4_k_m", "Q8_K_", "fp16"}) {
    EXPECT_FALSE(ParseTensorTypeName(bad).has_value()) << '"' << bad << '"';
  }
}

TEST(TensorTypeTest, RowBytes) {
  EXPECT_EQ(TensorRowBytes(TensorType::kF32, 7), 28);
  EXPECT_EQ(TensorRowBytes(TensorType::kBF16, 4096), 8192);
  EXPECT_EQ(TensorRowBytes(TensorType::kQ8_0, 4096), 128 * 34);
  EXPECT_EQ(TensorRowBytes(TensorType::kQ4_K, 4096), 16 * 144);
  EXPECT_EQ(TensorRowBytes(TensorType::kQ6_K, 768), 3 * 210);
  EXPECT_EQ(TensorRowBytes(TensorType::kMXFP4, 2880), 90 * 17);
  EXPECT_EQ(TensorRowBytes(TensorType::kQ4_K, 0), 0);
}

TEST(TensorTypeDeathTest, RowBytesRejectsPartialBlocks) {
  EXPECT_DEATH(TensorRowBytes(TensorType::kQ4_K, 100), "multiple of the block size");
  EXPECT_DEATH(GetTensorTypeInfo(static_cast<TensorType>(4)), "unknown TensorType");
}

TEST(TensorTypeTest, BlockStructsMatchTheTable) {
  EXPECT_EQ(static_cast<int64_t>(sizeof(BlockQ8_0)), GetTensorTypeInfo(TensorType::kQ8_0).block_bytes);
  EXPECT_EQ(static_cast<int64_t>(sizeof(BlockQ4_0)), GetTensorTypeInfo(TensorType::kQ4_0).block_bytes);
  EXPECT_EQ(static_cast<int64_t>(sizeof(BlockQ4_K)), GetTensorTypeInfo(TensorType::kQ4_K).block_bytes);
  EXPECT_EQ(static_cast<int64_t>(sizeof(BlockQ5_K)), GetTensorTypeInfo(TensorType::kQ5_K).block_bytes);
  EXPECT_EQ(static_cast<int64_t>(sizeof(BlockQ6_K)), GetTensorTypeInfo(TensorType::kQ6_K).block_bytes);
  EXPECT_EQ(static_cast<int64_t>(sizeof(BlockQ8K)), GetTensorTypeInfo(TensorType::kQ8_K).block_bytes);
  EXPECT_EQ(kQKK, kQK_K);
}

}  // namespace
}  // namespace moetier
