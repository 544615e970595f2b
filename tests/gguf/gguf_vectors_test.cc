// The real files in tests/data/vectors, written by llama.cpp's gguf-py, must
// parse; their tensors must tile the data blob; and GgufWriter, given what the
// reader found, must reproduce each file byte for byte.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gguf/writer/gguf_writer.h"
#include "gguf_test_util.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using gguf_test::AlignUp;
using gguf_test::ReadFileBytes;
using gguf_test::TempDir;

struct Vector {
  const char* file;
  uint64_t n_embd;
  uint64_t n_vocab;
  std::vector<TensorType> types;  // the set of tensor types it uses
};

std::string VectorPath(const char* file) {
  return std::string(MOETIER_TEST_DATA_DIR) + "/vectors/" + file;
}

class GgufVectors : public ::testing::TestWithParam<Vector> {};

TEST_P(GgufVectors, ParsesAndTensorsTileTheDataBlob) {
  const Vector& v = GetParam();
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::Open(VectorPath(v.file));
  ASSERT_TRUE(m.ok()) << m.status();
  const GgufFile& file = *(*m)->shards()[0];
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 32u);

  const GgufMetadata& md = (*m)->metadata();
  EXPECT_EQ(*md.GetString("general.architecture"), "qwen3moe");
  EXPECT_EQ(*md.GetUint("qwen3moe.block_count"), 4u);
  EXPECT_EQ(*md.GetUint("qwen3moe.embedding_length"), v.n_embd);
  EXPECT_EQ(*md.GetUint("qwen3moe.expert_count"), 8u);
  EXPECT_EQ(*md.GetUint("qwen3moe.expert_used_count"), 2u);
  EXPECT_GT(*md.GetFloat("qwen3moe.attention.layer_norm_rms_epsilon"), 0.0);
  absl::StatusOr<std::vector<std::string>> tokens = md.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->size(), v.n_vocab);

  // ne[0] is the contiguous dimension: n_vocab rows of n_embd; experts are the third dim.
  const GgufTensorInfo* embd = (*m)->FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->ne[0], static_cast<int64_t>(v.n_embd));
  EXPECT_EQ(embd->ne[1], static_cast<int64_t>(v.n_vocab));
  const GgufTensorInfo* gate = (*m)->FindTensor("blk.0.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->n_dims, 3u);
  EXPECT_EQ(gate->ne[2], 8);

  std::vector<const GgufTensorInfo*> by_offset;
  std::vector<TensorType> seen;
  for (const GgufTensorInfo& t : (*m)->tensors()) {
    by_offset.push_back(&t);
    if (std::find(seen.begin(), seen.end(), t.type) == seen.end()) seen.push_back(t.type);
    // The exact size from the type table: rows of ne[0] elements.
    EXPECT_EQ(t.size_bytes, t.row_bytes() * static_cast<uint64_t>(t.ne[1] * t.ne[2] * t.ne[3]))
        << t.name;
  }
  std::sort(seen.begin(), seen.end());
  std::vector<TensorType> want = v.types;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(seen, want);

  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
              return a->offset_in_data < b->offset_in_data;
            });
  uint64_t next = 0;
  for (const GgufTensorInfo* t : by_offset) {
    EXPECT_EQ(t->offset_in_data, next) << t->name;
    next = AlignUp(t->offset_in_data + t->size_bytes, file.alignment());
  }
  EXPECT_EQ(file.data_offset() + next, file.file_size());
}

TEST_P(GgufVectors, WriterReproducesTheFileByteForByte) {
  const Vector& v = GetParam();
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::Open(VectorPath(v.file));
  ASSERT_TRUE(m.ok()) << m.status();
  TempDir dir;
  const std::string out = dir.File("copy.gguf");
  GgufWriter w;
  for (const GgufKeyValue& kv : (*m)->metadata().entries()) {
    ASSERT_TRUE(w.AddKeyValue(kv.key, kv.value).ok()) << kv.key;
  }
  for (const GgufTensorInfo& t : (*m)->tensors()) {
    ASSERT_TRUE(
        w.AddTensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims))
            .ok())
        << t.name;
  }
  ASSERT_TRUE(w.Open(out, (*m)->shards()[0]->version()).ok());
  for (const GgufTensorInfo& t : (*m)->tensors()) {
    ASSERT_TRUE(w.AppendTensorData(t.name, (*m)->TensorData(t)).ok()) << t.name;
  }
  ASSERT_TRUE(w.Finish().ok());
  const std::vector<uint8_t> original = ReadFileBytes(VectorPath(v.file));
  const std::vector<uint8_t> copy = ReadFileBytes(out);
  ASSERT_EQ(copy.size(), original.size());
  const auto diff = std::mismatch(copy.begin(), copy.end(), original.begin());
  EXPECT_TRUE(diff.first == copy.end()) << "first difference at byte " << (diff.first - copy.begin());
}

INSTANTIATE_TEST_SUITE_P(
    GgufPy, GgufVectors,
    ::testing::Values(Vector{"tiny-f32.gguf", 64, 512, {TensorType::kF32}},
                      Vector{"tiny-q8_0.gguf", 64, 512, {TensorType::kF32, TensorType::kQ8_0}},
                      Vector{"small-q4_k_m.gguf",
                             256,
                             1024,
                             {TensorType::kF32, TensorType::kQ4_K, TensorType::kQ6_K}}),
    [](const ::testing::TestParamInfo<Vector>& param_info) {
      std::string name = param_info.param.file;
      name = name.substr(0, name.find('.'));
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

}  // namespace
}  // namespace moetier
