// Split models (SPEC.md §1.6): shards written with GgufWriter read back as one model.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gguf/writer/gguf_writer.h"
#include "gguf_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using gguf_test::PatternBytes;
using gguf_test::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct ShardOptions {
  std::optional<uint16_t> split_no;            // as written; default: the shard index
  std::optional<uint16_t> split_count;         // default: the shard count
  std::optional<int32_t> split_tensors_count;  // default: the real total
  std::vector<std::string> tensor_names;
};

constexpr uint32_t kShards = 3;

// Tensors t0..t5, two per shard, F32 of 8 + i elements.
std::vector<std::string> NamesOfShard(uint32_t shard) {
  return {"blk." + std::to_string(2 * shard) + ".w", "blk." + std::to_string(2 * shard + 1) + ".w"};
}

int64_t ElemsOf(const std::string& name) {
  return 8 + static_cast<int64_t>(name.size()) + (name[4] - '0');
}

void WriteShard(const std::string& prefix, uint32_t shard, uint32_t count,
                const ShardOptions& opt) {
  GgufWriter w;
  if (shard == 0) {
    ASSERT_TRUE(w.AddKeyValue("general.architecture", GgufValue::String("qwen3moe")).ok());
    ASSERT_TRUE(w.AddKeyValue("qwen3moe.block_count", GgufValue::Uint32(6)).ok());
  }
  ASSERT_TRUE(w.AddKeyValue("split.no", GgufValue::Uint16(opt.split_no.value_or(shard))).ok());
  ASSERT_TRUE(
      w.AddKeyValue("split.count", GgufValue::Uint16(opt.split_count.value_or(count))).ok());
  ASSERT_TRUE(w.AddKeyValue("split.tensors.count",
                            GgufValue::Int32(opt.split_tensors_count.value_or(2 * count)))
                  .ok());
  for (const std::string& name : opt.tensor_names) {
    ASSERT_TRUE(w.AddTensor(name, TensorType::kF32, {ElemsOf(name)}).ok());
  }
  ASSERT_TRUE(w.Open(GgufSplitPath(prefix, shard, count)).ok());
  for (const std::string& name : opt.tensor_names) {
    const std::vector<uint8_t> data =
        PatternBytes(static_cast<size_t>(4 * ElemsOf(name)), static_cast<uint32_t>(name.size() + name[4]));
    ASSERT_TRUE(w.AppendTensorData(name, data).ok());
  }
  ASSERT_TRUE(w.Finish().ok());
}

void WriteSet(const std::string& prefix, std::vector<ShardOptions> opts = {}) {
  opts.resize(kShards);
  for (uint32_t i = 0; i < kShards; ++i) {
    if (opts[i].tensor_names.empty()) opts[i].tensor_names = NamesOfShard(i);
    ASSERT_NO_FATAL_FAILURE(WriteShard(prefix, i, kShards, opts[i]));
  }
}

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

TEST(GgufSplit, SplitPathNaming) {
  EXPECT_EQ(GgufSplitPath("/m/qwen", 0, 3), "/m/qwen-00001-of-00003.gguf");
  EXPECT_EQ(GgufSplitPath("x", 11, 12), "x-00012-of-00012.gguf");
}

TEST(GgufSplit, ThreeShardsReadAsOneModel) {
  TempDir dir;
  const std::string prefix = dir.File("model");
  ASSERT_NO_FATAL_FAILURE(WriteSet(prefix));
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::Open(GgufSplitPath(prefix, 0, 3));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ((*m)->shards().size(), 3u);
  EXPECT_EQ(*(*m)->metadata().GetString("general.architecture"), "qwen3moe");
  ASSERT_EQ((*m)->tensors().size(), 6u);
  for (uint32_t shard = 0; shard < kShards; ++shard) {
    for (const std::string& name : NamesOfShard(shard)) {
      SCOPED_TRACE(name);
      const GgufTensorInfo* t = (*m)->FindTensor(name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->shard, shard);
      EXPECT_EQ((*m)->ShardPath(*t), GgufSplitPath(prefix, shard, 3));
      EXPECT_EQ(t->ne[0], ElemsOf(name));
      const std::vector<uint8_t> want =
          PatternBytes(static_cast<size_t>(4 * ElemsOf(name)), static_cast<uint32_t>(name.size() + name[4]));
      const std::span<const uint8_t> got = (*m)->TensorData(*t);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end()));
    }
  }
}

TEST(GgufSplit, MissingShardRejected) {
  TempDir dir;
  const std::string prefix = dir.File("model");
  ASSERT_NO_FATAL_FAILURE(WriteSet(prefix));
  const std::string gone = GgufSplitPath(prefix, 2, 3);
  std::filesystem::remove(gone);
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::Open(GgufSplitPath(prefix, 0, 3));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(m.status()), AllOf(HasSubstr("shard 3 of 3 is missing"), HasSubstr(gone)));
}

TEST(GgufSplit, WrongSplitNoRejected) {
  TempDir dir;
  const std::string prefix = dir.File("model");
  std::vector<ShardOptions> opts(kShards);
  opts[1].split_no = 2;
  ASSERT_NO_FATAL_FAILURE(WriteSet(prefix, opts));
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::Open(GgufSplitPath(prefix, 0, 3));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Msg(m.status()), AllOf(HasSubstr(GgufSplitPath(prefix, 1, 3)),
                                     HasSubstr("split.no is 2 but this file is shard 2 of 3")));
}

TEST(GgufSplit, WrongSplitCountRejected) {
  TempDir dir;
  const std::string prefix = dir.File("model");
  std::vector<ShardOptions> opts(kShards);
  opts[2].split_count = 4;
  ASSERT_NO_FATAL_FAILURE(WriteSet(prefix, opts));
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::Open(GgufSplitPath(prefix, 0, 3));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Msg(m.status()), AllOf(HasSubstr(GgufSplitPath(prefix, 2, 3)),
                                     HasSubstr("split.count is 4 but the set has 3 files")));
}

TEST(GgufSplit, WrongTensorTotalRejected) {
  TempDir dir;
  const std::string prefix = dir.File("model");
  std::vector<ShardOptions> opts(kShards);
  opts[0].split_tensors_count = 7;
  ASSERT_NO_FATAL_FAILURE(WriteSet(prefix, opts));
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::Open(GgufSplitPath(prefix, 0, 3));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Msg(m.status()), HasSubstr("split.tensors.count is 7 but the 3 shards hold 6"));
}

TEST(GgufSplit, DuplicateTensorAcrossShardsRejected) {
  TempDir dir;
  const std::string prefix = dir.File("model");
  std::vector<ShardOptions> opts(kShards);
  opts[2].tensor_names = {"blk.4.w", "blk.1.w"};  // blk.1.w is also in the first shard
  ASSERT_NO_FATAL_FAILURE(WriteSet(prefix, opts));
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::Open(GgufSplitPath(prefix, 0, 3));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Msg(m.status()),
              AllOf(HasSubstr(GgufSplitPath(prefix, 2, 3)), HasSubstr("tensor 'blk.1.w' is also in"),
                    HasSubstr(GgufSplitPath(prefix, 0, 3))));
}

TEST(GgufSplit, OpeningALaterShardPointsToTheFirst) {
  TempDir dir;
  const std::string prefix = dir.File("model");
  ASSERT_NO_FATAL_FAILURE(WriteSet(prefix));
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::Open(GgufSplitPath(prefix, 1, 3));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Msg(m.status()), AllOf(HasSubstr("this is shard 2 of a 3-file split model"),
                                     HasSubstr("open the first shard, -00001-of-00003.gguf")));
}

TEST(GgufSplit, RenamedFirstShardCannotFindOthers) {
  TempDir dir;
  const std::string prefix = dir.File("model");
  ASSERT_NO_FATAL_FAILURE(WriteSet(prefix));
  const std::string renamed = dir.File("renamed.gguf");
  std::filesystem::rename(GgufSplitPath(prefix, 0, 3), renamed);
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::Open(renamed);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Msg(m.status()), AllOf(HasSubstr(renamed), HasSubstr("does not end in "
                                                                   "-00001-of-00003.gguf")));
}

TEST(GgufSplit, FromFilesChecksOrder) {
  TempDir dir;
  const std::string prefix = dir.File("model");
  ASSERT_NO_FATAL_FAILURE(WriteSet(prefix));
  std::vector<std::unique_ptr<GgufFile>> files;
  for (uint32_t i : {0u, 2u, 1u}) {
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(GgufSplitPath(prefix, i, 3));
    ASSERT_TRUE(f.ok()) << f.status();
    files.push_back(*std::move(f));
  }
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::FromFiles(std::move(files));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Msg(m.status()), HasSubstr("split.no is 2 but this file is shard 2 of 3"));
  EXPECT_FALSE(GgufModel::FromFiles({}).ok());
}

TEST(GgufSplit, SingleFileWithAndWithoutSplitKeys) {
  TempDir dir;
  // A plain file.
  const std::string plain = dir.File("plain.gguf");
  {
    GgufWriter w;
    ASSERT_TRUE(w.AddTensor("x", TensorType::kF32, {4}).ok());
    ASSERT_TRUE(w.Open(plain).ok());
    ASSERT_TRUE(w.AppendTensorData(std::vector<uint8_t>(16, 3)).ok());
    ASSERT_TRUE(w.Finish().ok());
  }
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::Open(plain);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->shards().size(), 1u);
  EXPECT_EQ((*m)->tensors().size(), 1u);

  // A one-shard split set.
  const std::string prefix = dir.File("one");
  ShardOptions opt;
  opt.tensor_names = {"blk.0.w"};
  opt.split_tensors_count = 1;
  ASSERT_NO_FATAL_FAILURE(WriteShard(prefix, 0, 1, opt));
  m = GgufModel::Open(GgufSplitPath(prefix, 0, 1));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->tensors().size(), 1u);
}

}  // namespace
}  // namespace moetier
