// GgufWriter -> GgufFile/GgufModel round trips: every metadata type, tensor
// infos and bytes, alignment variants, v2 and v3, and the exact byte layout.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gguf/writer/gguf_writer.h"
#include "gguf_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using gguf_test::AlignUp;
using gguf_test::ByteBuf;
using gguf_test::PatternBytes;
using gguf_test::ReadFileBytes;
using gguf_test::TempDir;

// Every scalar type at its extremes, strings, and arrays of every element type.
std::vector<GgufKeyValue> AllValueKinds() {
  using L8 = std::numeric_limits<int8_t>;
  using L16 = std::numeric_limits<int16_t>;
  using L32 = std::numeric_limits<int32_t>;
  using L64 = std::numeric_limits<int64_t>;
  std::vector<GgufKeyValue> kvs = {
      {"general.architecture", GgufValue::String("qwen3moe")},
      {"t.u8", GgufValue::Uint8(255)},
      {"t.i8", GgufValue::Int8(L8::min())},
      {"t.u16", GgufValue::Uint16(65535)},
      {"t.i16", GgufValue::Int16(L16::min())},
      {"t.u32", GgufValue::Uint32(std::numeric_limits<uint32_t>::max())},
      {"t.i32", GgufValue::Int32(L32::min())},
      {"t.f32", GgufValue::Float32(-1.5e-7f)},
      {"t.bool.true", GgufValue::Bool(true)},
      {"t.bool.false", GgufValue::Bool(false)},
      {"t.str", GgufValue::String("h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c\n{{ chat }}")},
      {"t.str.empty", GgufValue::String("")},
      {"t.u64", GgufValue::Uint64(std::numeric_limits<uint64_t>::max())},
      {"t.i64", GgufValue::Int64(L64::min())},
      {"t.f64", GgufValue::Float64(3.141592653589793)},
      {"a.u8", GgufValue::Array({GgufValueType::kUint8, std::vector<uint64_t>{0, 1, 255}})},
      {"a.i8", GgufValue::Array({GgufValueType::kInt8, std::vector<int64_t>{L8::min(), -1, 127}})},
      {"a.u16", GgufValue::Array({GgufValueType::kUint16, std::vector<uint64_t>{65535, 7}})},
      {"a.i16",
       GgufValue::Array({GgufValueType::kInt16, std::vector<int64_t>{L16::min(), L16::max()}})},
      {"a.u32", GgufValue::Uint32Array({0, 4000000000u})},
      {"a.i32", GgufValue::Int32Array({L32::min(), 0, L32::max()})},
      {"a.f32", GgufValue::Float32Array({1.0f, -0.0f, 1e30f, std::numeric_limits<float>::infinity()})},
      {"a.bool", GgufValue::Array({GgufValueType::kBool, std::vector<bool>{true, false, true}})},
      {"a.str", GgufValue::StringArray({"<|im_start|>", "", "\xc4\xa0the", std::string(300, 'x')})},
      {"a.u64",
       GgufValue::Array({GgufValueType::kUint64,
                         std::vector<uint64_t>{std::numeric_limits<uint64_t>::max(), 0}})},
      {"a.i64", GgufValue::Array({GgufValueType::kInt64, std::vector<int64_t>{L64::min(), L64::max()}})},
      {"a.f64", GgufValue::Array({GgufValueType::kFloat64, std::vector<double>{1e-300, -2.5}})},
      {"a.empty", GgufValue::Array({GgufValueType::kInt32, std::vector<int64_t>{}})},
      {"a.str.empty", GgufValue::StringArray({})},
  };
  return kvs;
}

struct TensorSpec {
  std::string name;
  TensorType type;
  std::vector<int64_t> ne;
};

// Every block geometry the project stores, 1 to 4 dims, and an empty tensor.
std::vector<TensorSpec> AllTensorKinds() {
  return {
      {"token_embd.weight", TensorType::kQ4_K, {256, 3}},
      {"output_norm.weight", TensorType::kF32, {7}},
      {"blk.0.attn_q.weight", TensorType::kQ8_0, {64, 5}},
      {"blk.0.ffn_gate_exps.weight", TensorType::kQ4_0, {32, 3, 2}},
      {"blk.0.ffn_down_exps.weight", TensorType::kQ6_K, {256, 2, 2, 1}},
      {"blk.0.attn_k.weight", TensorType::kF16, {3, 3}},
      {"blk.0.attn_v.weight", TensorType::kBF16, {5}},
      {"blk.0.empty", TensorType::kF32, {0, 4}},
      {"blk.0.ffn_up_exps.weight", TensorType::kQ5_K, {256, 1, 3}},
      {"blk.0.mxfp4", TensorType::kMXFP4, {64, 2}},
  };
}

uint64_t SizeOf(const TensorSpec& t) {
  const TensorTypeInfo& info = GetTensorTypeInfo(t.type);
  uint64_t rows = 1;
  for (size_t i = 1; i < t.ne.size(); ++i) rows *= static_cast<uint64_t>(t.ne[i]);
  return static_cast<uint64_t>(t.ne[0] / info.block_elems * info.block_bytes) * rows;
}

void ExpectSameValue(const GgufValue& want, const GgufValue& got, const std::string& key) {
  EXPECT_EQ(want.type, got.type) << key;
  EXPECT_TRUE(want == got) << key;
  if (const auto* a = std::get_if<GgufArray>(&want.data)) {
    ASSERT_TRUE(std::holds_alternative<GgufArray>(got.data)) << key;
    EXPECT_EQ(a->element_type, std::get<GgufArray>(got.data).element_type) << key;
  }
}

struct WrittenFile {
  std::string path;
  std::vector<std::vector<uint8_t>> contents;  // per tensor
};

// Writes kvs and tensors, streaming each tensor's bytes in uneven chunks that
// straddle tensor boundaries.
void WriteModel(const std::string& path, const std::vector<GgufKeyValue>& kvs,
                const std::vector<TensorSpec>& tensors, uint32_t version, WrittenFile* out) {
  GgufWriter w;
  for (const GgufKeyValue& kv : kvs) ASSERT_TRUE(w.AddKeyValue(kv.key, kv.value).ok()) << kv.key;
  for (const TensorSpec& t : tensors) {
    ASSERT_TRUE(w.AddTensor(t.name, t.type, t.ne).ok()) << t.name;
  }
  ASSERT_TRUE(w.Open(path, version).ok());
  out->path = path;
  std::vector<uint8_t> all;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ASSERT_EQ(w.TensorSizeBytes(i), SizeOf(tensors[i])) << tensors[i].name;
    out->contents.push_back(PatternBytes(SizeOf(tensors[i]), static_cast<uint32_t>(i + 1)));
    all.insert(all.end(), out->contents.back().begin(), out->contents.back().end());
  }
  size_t pos = 0;
  size_t chunk = 1;
  while (pos < all.size()) {
    const size_t n = std::min(chunk, all.size() - pos);
    ASSERT_TRUE(w.AppendTensorData(std::span<const uint8_t>(all.data() + pos, n)).ok());
    pos += n;
    chunk = chunk * 3 + 1;  // 1, 4, 13, 40, ... bytes
  }
  const absl::Status s = w.Finish();
  ASSERT_TRUE(s.ok()) << s;
}

struct Variant {
  uint32_t version;
  std::optional<uint32_t> alignment;  // general.alignment, or the default 32
};

class GgufRoundTrip : public ::testing::TestWithParam<Variant> {};

TEST_P(GgufRoundTrip, EveryTypeAndTensorSurvives) {
  const Variant v = GetParam();
  TempDir dir;
  std::vector<GgufKeyValue> kvs = AllValueKinds();
  if (v.alignment) kvs.push_back({"general.alignment", GgufValue::Uint32(*v.alignment)});
  const std::vector<TensorSpec> tensors = AllTensorKinds();
  WrittenFile written;
  ASSERT_NO_FATAL_FAILURE(WriteModel(dir.File("m.gguf"), kvs, tensors, v.version, &written));

  absl::StatusOr<std::unique_ptr<GgufModel>> model = GgufModel::Open(written.path);
  ASSERT_TRUE(model.ok()) << model.status();
  const GgufFile& file = *(*model)->shards()[0];
  const uint32_t alignment = v.alignment.value_or(32);
  EXPECT_EQ(file.version(), v.version);
  EXPECT_EQ(file.alignment(), alignment);
  EXPECT_EQ(file.data_offset() % alignment, 0u);

  const auto& entries = file.metadata().entries();
  ASSERT_EQ(entries.size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ(entries[i].key, kvs[i].key);  // file order is kept
    ExpectSameValue(kvs[i].value, entries[i].value, kvs[i].key);
  }

  const std::vector<uint8_t> bytes = ReadFileBytes(written.path);
  ASSERT_EQ(bytes.size(), file.file_size());
  ASSERT_EQ((*model)->tensors().size(), tensors.size());
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorInfo& t = (*model)->tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, tensors[i].name);
    EXPECT_EQ(t.type, tensors[i].type);
    ASSERT_EQ(t.n_dims, tensors[i].ne.size());
    for (int d = 0; d < kGgufMaxDims; ++d) {
      EXPECT_EQ(t.ne[d], d < static_cast<int>(t.n_dims) ? tensors[i].ne[d] : 1);
    }
    EXPECT_EQ(t.size_bytes, SizeOf(tensors[i]));
    // llama.cpp's strict rule: each tensor starts where the padded previous one ends.
    EXPECT_EQ(t.offset_in_data, expected_offset);
    EXPECT_EQ(t.file_offset, file.data_offset() + t.offset_in_data);
    EXPECT_EQ(t.shard, 0u);
    const std::span<const uint8_t> data = (*model)->TensorData(t);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), written.contents[i].begin(),
                           written.contents[i].end()));
    // Zero padding up to the next aligned offset.
    const uint64_t padded_end = file.data_offset() + AlignUp(t.offset_in_data + t.size_bytes,
                                                             alignment);
    for (uint64_t b = t.file_offset + t.size_bytes; b < padded_end; ++b) {
      ASSERT_EQ(bytes[b], 0) << "padding byte " << b;
    }
    expected_offset = AlignUp(t.offset_in_data + t.size_bytes, alignment);
    EXPECT_EQ((*model)->FindTensor(t.name), &t);
  }
  // The file ends with the last tensor's padding, as llama.cpp writes it.
  EXPECT_EQ(bytes.size(), file.data_offset() + expected_offset);
  EXPECT_EQ((*model)->FindTensor("missing"), nullptr);
  EXPECT_FALSE((*model)->GetTensor("missing").ok());
}

INSTANTIATE_TEST_SUITE_P(
    VersionsAndAlignments, GgufRoundTrip,
    ::testing::Values(Variant{3, std::nullopt}, Variant{2, std::nullopt}, Variant{3, 1u},
                      Variant{2, 8u}, Variant{3, 64u}, Variant{3, 4096u}),
    [](const ::testing::TestParamInfo<Variant>& param_info) {
      return "v" + std::to_string(param_info.param.version) + "_align" +
             std::to_string(param_info.param.alignment.value_or(32));
    });

// The layout byte for byte against an image assembled by hand from SPEC.md §1.
TEST(GgufWriterLayout, MatchesSpecByteForByte) {
  TempDir dir;
  const std::string path = dir.File("exact.gguf");
  GgufWriter w;
  ASSERT_TRUE(w.AddKeyValue("general.architecture", GgufValue::String("qwen3moe")).ok());
  ASSERT_TRUE(w.AddKeyValue("x.n", GgufValue::Uint32(7)).ok());
  ASSERT_TRUE(w.AddKeyValue("x.ids", GgufValue::Int32Array({-1, 2})).ok());
  ASSERT_TRUE(w.AddTensor("a", TensorType::kF32, {3}).ok());
  ASSERT_TRUE(w.AddTensor("bb", TensorType::kF16, {2, 2}).ok());
  ASSERT_TRUE(w.Open(path, 3).ok());
  const std::vector<uint8_t> a = PatternBytes(12, 1);
  const std::vector<uint8_t> bb = PatternBytes(8, 2);
  ASSERT_TRUE(w.AppendTensorData("a", a).ok());
  ASSERT_TRUE(w.AppendTensorData("bb", bb).ok());
  ASSERT_TRUE(w.Finish().ok());

  ByteBuf want;
  want.Raw("GGUF").U32(3).U64(2).U64(3);
  want.Str("general.architecture").U32(8).Str("qwen3moe");
  want.Str("x.n").U32(4).U32(7);
  want.Str("x.ids").U32(9).U32(5).U64(2).I32(-1).I32(2);
  want.Str("a").U32(1).U64(3).U32(0).U64(0);
  want.Str("bb").U32(2).U64(2).U64(2).U32(1).U64(32);
  want.Zeros(AlignUp(want.size(), 32) - want.size());
  want.Raw(a).Zeros(20).Raw(bb).Zeros(24);
  const std::vector<uint8_t> got = ReadFileBytes(path);
  EXPECT_EQ(got, want.bytes());
  EXPECT_EQ(w.bytes_written(), want.size());
}

TEST(GgufWriterLayout, NoTensorsStillPadsAfterInfos) {
  TempDir dir;
  const std::string path = dir.File("meta_only.gguf");
  GgufWriter w;
  ASSERT_TRUE(w.AddKeyValue("k", GgufValue::Uint8(1)).ok());
  ASSERT_TRUE(w.Open(path).ok());
  ASSERT_TRUE(w.Finish().ok());
  const std::vector<uint8_t> got = ReadFileBytes(path);
  // 24 header bytes + 9 key + 4 type + 1 value = 38, padded to 64.
  ASSERT_EQ(got.size(), 64u);
  for (size_t i = 38; i < got.size(); ++i) EXPECT_EQ(got[i], 0) << i;
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->data_offset(), 64u);
  EXPECT_TRUE((*f)->tensors().empty());
}

}  // namespace
}  // namespace moetier
