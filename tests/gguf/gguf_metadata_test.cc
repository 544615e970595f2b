// GgufMetadata's typed getters: lenient integer widths, strict kinds, clear errors.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

GgufMetadata Sample() {
  GgufMetadata md;
  md.Add({"u8", GgufValue::Uint8(200)});
  md.Add({"u16", GgufValue::Uint16(60000)});
  md.Add({"u32", GgufValue::Uint32(4000000000u)});
  md.Add({"u64.max", GgufValue::Uint64(std::numeric_limits<uint64_t>::max())});
  md.Add({"i8.neg", GgufValue::Int8(-3)});
  md.Add({"i16", GgufValue::Int16(1234)});
  md.Add({"i32.pos", GgufValue::Int32(64)});
  md.Add({"i64.min", GgufValue::Int64(std::numeric_limits<int64_t>::min())});
  md.Add({"f32", GgufValue::Float32(1e-6f)});
  md.Add({"f64", GgufValue::Float64(1e6)});
  md.Add({"b", GgufValue::Bool(true)});
  md.Add({"s", GgufValue::String("qwen3moe")});
  md.Add({"heads", GgufValue::Uint32Array({32, 32, 16})});
  md.Add({"heads.i", GgufValue::Int32Array({4, 4, 2})});
  md.Add({"heads.neg", GgufValue::Int32Array({4, -4, 2})});
  md.Add({"tokens", GgufValue::StringArray({"a", "b"})});
  md.Add({"scores", GgufValue::Float32Array({0.5f, -1.0f})});
  md.Add({"big.u64s", GgufValue::Array({GgufValueType::kUint64,
                                        std::vector<uint64_t>{1, uint64_t{1} << 63}})});
  return md;
}

TEST(GgufMetadata, GetUintAcceptsEveryIntegerWidthThatFits) {
  const GgufMetadata md = Sample();
  EXPECT_EQ(*md.GetUint("u8"), 200u);
  EXPECT_EQ(*md.GetUint("u16"), 60000u);
  EXPECT_EQ(*md.GetUint("u32"), 4000000000u);
  EXPECT_EQ(*md.GetUint("u64.max"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*md.GetUint("i16"), 1234u);
  EXPECT_EQ(*md.GetUint("i32.pos"), 64u);
}

TEST(GgufMetadata, GetUintRejectsNegativeAndNonIntegers) {
  const GgufMetadata md = Sample();
  absl::StatusOr<uint64_t> v = md.GetUint("i8.neg");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("'i8.neg' is -3, expected a value >= 0"));
  v = md.GetUint("f32");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()),
              HasSubstr("'f32' is FLOAT32, expected an unsigned integer"));
  v = md.GetUint("heads");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("ARRAY of UINT32"));
}

TEST(GgufMetadata, GetIntAcceptsAnyIntegerThatFitsInt64) {
  const GgufMetadata md = Sample();
  EXPECT_EQ(*md.GetInt("i8.neg"), -3);
  EXPECT_EQ(*md.GetInt("u32"), 4000000000);
  EXPECT_EQ(*md.GetInt("i64.min"), std::numeric_limits<int64_t>::min());
  absl::StatusOr<int64_t> v = md.GetInt("u64.max");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("does not fit int64"));
  EXPECT_FALSE(md.GetInt("s").ok());
}

TEST(GgufMetadata, GetFloatAcceptsF32AndF64Only) {
  const GgufMetadata md = Sample();
  EXPECT_EQ(*md.GetFloat("f32"), static_cast<double>(1e-6f));
  EXPECT_EQ(*md.GetFloat("f64"), 1e6);
  absl::StatusOr<double> v = md.GetFloat("u8");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("'u8' is UINT8, expected FLOAT32"));
}

TEST(GgufMetadata, OtherScalars) {
  const GgufMetadata md = Sample();
  EXPECT_EQ(*md.GetBool("b"), true);
  EXPECT_FALSE(md.GetBool("u8").ok());
  EXPECT_EQ(*md.GetString("s"), "qwen3moe");
  EXPECT_FALSE(md.GetString("b").ok());
}

TEST(GgufMetadata, MissingKeyIsNotFound) {
  const GgufMetadata md = Sample();
  absl::StatusOr<uint64_t> v = md.GetUint("qwen3moe.block_count");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("'qwen3moe.block_count' is missing"));
  EXPECT_FALSE(md.Has("nope"));
  EXPECT_EQ(md.Find("nope"), nullptr);
  EXPECT_TRUE(md.Has("s"));
}

TEST(GgufMetadata, Arrays) {
  const GgufMetadata md = Sample();
  EXPECT_THAT(*md.GetStringArray("tokens"), ElementsAre("a", "b"));
  EXPECT_THAT(*md.GetFloatArray("scores"), ElementsAre(0.5, -1.0));
  EXPECT_THAT(*md.GetIntArray("heads"), ElementsAre(32, 32, 16));
  EXPECT_THAT(*md.GetIntArray("heads.i"), ElementsAre(4, 4, 2));
  EXPECT_FALSE(md.GetIntArray("big.u64s").ok());
  EXPECT_FALSE(md.GetStringArray("heads").ok());
  EXPECT_FALSE(md.GetFloatArray("tokens").ok());
  EXPECT_FALSE(md.GetArray("s").ok());
  absl::StatusOr<const GgufArray*> a = md.GetArray("tokens");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->size(), 2u);
  EXPECT_EQ((*a)->element_type, GgufValueType::kString);
}

TEST(GgufMetadata, UintOrArrayForPerLayerValues) {
  const GgufMetadata md = Sample();
  EXPECT_THAT(*md.GetUintOrArray("i32.pos", 3), ElementsAre(64, 64, 64));
  EXPECT_THAT(*md.GetUintOrArray("heads", 3), ElementsAre(32, 32, 16));
  EXPECT_THAT(*md.GetUintOrArray("heads.i", 3), ElementsAre(4, 4, 2));
  absl::StatusOr<std::vector<uint64_t>> v = md.GetUintOrArray("heads", 4);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("has 3 per-layer values, expected 4"));
  EXPECT_FALSE(md.GetUintOrArray("heads.neg", 3).ok());
  EXPECT_FALSE(md.GetUintOrArray("scores", 2).ok());
  EXPECT_FALSE(md.GetUintOrArray("i8.neg", 2).ok());
}

TEST(GgufMetadata, FallbackGetters) {
  const GgufMetadata md = Sample();
  EXPECT_EQ(md.GetUintOr("u8", 7), 200u);
  EXPECT_EQ(md.GetUintOr("missing", 7), 7u);
  EXPECT_EQ(md.GetFloatOr("f64", 2.0), 1e6);
  EXPECT_EQ(md.GetFloatOr("missing", 2.0), 2.0);
  EXPECT_EQ(md.GetStringOr("s", "x"), "qwen3moe");
  EXPECT_EQ(md.GetStringOr("missing", "x"), "x");
}

TEST(GgufMetadata, EntriesKeepInsertionOrder) {
  const GgufMetadata md = Sample();
  ASSERT_GE(md.entries().size(), 3u);
  EXPECT_EQ(md.entries()[0].key, "u8");
  EXPECT_EQ(md.entries()[2].key, "u32");
}

TEST(GgufMetadataDeathTest, DuplicateAddAborts) {
  GgufMetadata md;
  md.Add({"k", GgufValue::Uint8(1)});
  EXPECT_DEATH(md.Add({"k", GgufValue::Uint8(2)}), "duplicate metadata key");
}

TEST(GgufValue, TypeNames) {
  EXPECT_EQ(GgufValueTypeName(GgufValueType::kUint8), "UINT8");
  EXPECT_EQ(GgufValueTypeName(GgufValueType::kFloat64), "FLOAT64");
  EXPECT_EQ(GgufValueTypeName(GgufValueType::kArray), "ARRAY");
  EXPECT_EQ(GgufValueTypeName(static_cast<GgufValueType>(99)), "UNKNOWN");
}

}  // namespace
}  // namespace moetier
