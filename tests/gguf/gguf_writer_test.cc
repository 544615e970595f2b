// GgufWriter misuse and I/O failures: each gives a clear error, never a bad file.
#include <cstdint>
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

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// Two F32 tensors: "a" of 16 bytes and "b" of 8 bytes.
void DeclareTwo(GgufWriter& w) {
  ASSERT_TRUE(w.AddTensor("a", TensorType::kF32, {4}).ok());
  ASSERT_TRUE(w.AddTensor("b", TensorType::kF32, {2}).ok());
}

TEST(GgufWriter, DuplicateKeyRejected) {
  GgufWriter w;
  ASSERT_TRUE(w.AddKeyValue("k", GgufValue::Uint32(1)).ok());
  const absl::Status s = w.AddKeyValue("k", GgufValue::String("x"));
  EXPECT_THAT(Msg(s), HasSubstr("duplicate metadata key 'k'"));
}

TEST(GgufWriter, EmptyKeyRejected) {
  GgufWriter w;
  EXPECT_THAT(Msg(w.AddKeyValue("", GgufValue::Uint32(1))), HasSubstr("empty"));
}

TEST(GgufWriter, InconsistentValuesRejected) {
  GgufWriter w;
  // UINT8 holding 300, a signed alternative under an unsigned type, a nested array.
  EXPECT_THAT(Msg(w.AddKeyValue("a", GgufValue{GgufValueType::kUint8, uint64_t{300}})),
              HasSubstr("value 300 does not fit"));
  EXPECT_THAT(Msg(w.AddKeyValue("b", GgufValue{GgufValueType::kUint32, int64_t{3}})),
              HasSubstr("does not hold an unsigned integer"));
  EXPECT_THAT(Msg(w.AddKeyValue("c", GgufValue::Array({GgufValueType::kArray,
                                                       std::vector<uint64_t>{}}))),
              HasSubstr("arrays of arrays"));
  EXPECT_THAT(Msg(w.AddKeyValue("d", GgufValue::Array({GgufValueType::kInt8,
                                                       std::vector<int64_t>{1, -200}}))),
              HasSubstr("element 1 = -200 does not fit INT8"));
  EXPECT_THAT(Msg(w.AddKeyValue("e", GgufValue::Array({GgufValueType::kString,
                                                       std::vector<double>{1.0}}))),
              HasSubstr("not strings"));
}

TEST(GgufWriter, AlignmentKeyValidated) {
  GgufWriter w;
  EXPECT_THAT(Msg(w.AddKeyValue("general.alignment", GgufValue::Uint64(32))),
              HasSubstr("must be UINT32"));
  EXPECT_THAT(Msg(w.AddKeyValue("general.alignment", GgufValue::Uint32(0))),
              HasSubstr("not a nonzero power of two"));
  EXPECT_THAT(Msg(w.AddKeyValue("general.alignment", GgufValue::Uint32(24))),
              HasSubstr("not a nonzero power of two"));
  EXPECT_TRUE(w.AddKeyValue("general.alignment", GgufValue::Uint32(16)).ok());
}

TEST(GgufWriter, BadTensorDeclarationsRejected) {
  GgufWriter w;
  EXPECT_THAT(Msg(w.AddTensor(std::string(64, 'x'), TensorType::kF32, {1})),
              HasSubstr("shorter than 64 bytes"));
  EXPECT_TRUE(w.AddTensor(std::string(63, 'x'), TensorType::kF32, {1}).ok());
  EXPECT_THAT(Msg(w.AddTensor(std::string(63, 'x'), TensorType::kF32, {1})),
              HasSubstr("duplicate tensor name"));
  EXPECT_THAT(Msg(w.AddTensor("", TensorType::kF32, {1})), HasSubstr("empty"));
  EXPECT_THAT(Msg(w.AddTensor("d0", TensorType::kF32, {})), HasSubstr("0 dimensions"));
  EXPECT_THAT(Msg(w.AddTensor("d5", TensorType::kF32, {1, 1, 1, 1, 1})),
              HasSubstr("5 dimensions"));
  EXPECT_THAT(Msg(w.AddTensor("neg", TensorType::kF32, {4, -1})), HasSubstr("negative"));
  EXPECT_THAT(Msg(w.AddTensor("blk", TensorType::kQ4_K, {128})),
              HasSubstr("not a multiple of the Q4_K block size 256"));
  EXPECT_THAT(Msg(w.AddTensor("unk", static_cast<TensorType>(4), {32})),
              HasSubstr("unknown ggml type id 4"));
  EXPECT_THAT(Msg(w.AddTensor("ovf", TensorType::kF32, {int64_t{1} << 62, 4})),
              HasSubstr("overflows"));
}

TEST(GgufWriter, DeclarationsAfterOpenRejected) {
  TempDir dir;
  GgufWriter w;
  DeclareTwo(w);
  ASSERT_TRUE(w.Open(dir.File("x.gguf")).ok());
  EXPECT_EQ(w.AddKeyValue("late", GgufValue::Uint8(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.AddTensor("late", TensorType::kF32, {1}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.Open(dir.File("y.gguf")).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GgufWriter, DataBeforeOpenOrAfterFinishRejected) {
  TempDir dir;
  GgufWriter w;
  DeclareTwo(w);
  const std::vector<uint8_t> bytes(24, 1);
  EXPECT_THAT(Msg(w.AppendTensorData(bytes)), HasSubstr("before Open()"));
  EXPECT_THAT(Msg(w.Finish()), HasSubstr("before Open()"));
  ASSERT_TRUE(w.Open(dir.File("x.gguf")).ok());
  ASSERT_TRUE(w.AppendTensorData(bytes).ok());
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_THAT(Msg(w.AppendTensorData(bytes)), HasSubstr("after Finish()"));
  EXPECT_THAT(Msg(w.Finish()), HasSubstr("called twice"));
}

TEST(GgufWriter, UnsupportedVersionRejected) {
  TempDir dir;
  GgufWriter w;
  EXPECT_THAT(Msg(w.Open(dir.File("x.gguf"), 1)), HasSubstr("cannot write GGUF version 1"));
  EXPECT_THAT(Msg(w.Open(dir.File("x.gguf"), 4)), HasSubstr("cannot write GGUF version 4"));
}

TEST(GgufWriter, OversizedDataRejected) {
  TempDir dir;
  const std::string path = dir.File("x.gguf");
  GgufWriter w;
  DeclareTwo(w);
  ASSERT_TRUE(w.Open(path).ok());
  const std::vector<uint8_t> too_many(25, 1);
  const absl::Status s = w.AppendTensorData(too_many);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr(path), HasSubstr("25 bytes of tensor data appended but "
                                                       "only 24 bytes")));
  // The writer is now failed; Finish repeats the error rather than closing a bad file as good.
  EXPECT_EQ(w.Finish(), s);
}

TEST(GgufWriter, OversizedNamedDataRejected) {
  TempDir dir;
  GgufWriter w;
  DeclareTwo(w);
  ASSERT_TRUE(w.Open(dir.File("x.gguf")).ok());
  ASSERT_TRUE(w.AppendTensorData("a", std::vector<uint8_t>(10, 1)).ok());
  EXPECT_THAT(Msg(w.AppendTensorData("a", std::vector<uint8_t>(7, 1))),
              HasSubstr("7 bytes appended to tensor 'a', which has only 6 of its 16 bytes left"));
}

TEST(GgufWriter, OutOfOrderDataRejected) {
  TempDir dir;
  GgufWriter w;
  DeclareTwo(w);
  ASSERT_TRUE(w.Open(dir.File("x.gguf")).ok());
  EXPECT_THAT(Msg(w.AppendTensorData("b", std::vector<uint8_t>(8, 1))),
              HasSubstr("data for tensor 'b' is out of order; the tensor being written is 'a' "
                        "(tensor 1 of 2)"));
}

TEST(GgufWriter, DataAfterLastTensorRejected) {
  TempDir dir;
  GgufWriter w;
  DeclareTwo(w);
  ASSERT_TRUE(w.Open(dir.File("x.gguf")).ok());
  ASSERT_TRUE(w.AppendTensorData("a", std::vector<uint8_t>(16, 1)).ok());
  ASSERT_TRUE(w.AppendTensorData("b", std::vector<uint8_t>(8, 1)).ok());
  EXPECT_THAT(Msg(w.AppendTensorData("a", std::vector<uint8_t>(1, 1))),
              HasSubstr("every tensor is complete"));
}

TEST(GgufWriter, ShortDataRejectedAtFinish) {
  TempDir dir;
  const std::string path = dir.File("x.gguf");
  GgufWriter w;
  DeclareTwo(w);
  ASSERT_TRUE(w.Open(path).ok());
  ASSERT_TRUE(w.AppendTensorData(std::vector<uint8_t>(19, 1)).ok());
  EXPECT_THAT(Msg(w.Finish()),
              AllOf(HasSubstr(path), HasSubstr("short tensor data: tensor 'b' (2 of 2) got 3 of "
                                               "its 8 bytes; 5 bytes")));
}

TEST(GgufWriter, EmptyTensorsNeedNoData) {
  TempDir dir;
  const std::string path = dir.File("x.gguf");
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("e0", TensorType::kF32, {0}).ok());
  ASSERT_TRUE(w.AddTensor("a", TensorType::kF32, {2}).ok());
  ASSERT_TRUE(w.AddTensor("e1", TensorType::kQ8_0, {32, 0}).ok());
  ASSERT_TRUE(w.Open(path).ok());
  EXPECT_TRUE(w.AppendTensorData("e0", {}).ok());
  ASSERT_TRUE(w.AppendTensorData("a", std::vector<uint8_t>(8, 7)).ok());
  EXPECT_TRUE(w.AppendTensorData("e1", {}).ok());
  ASSERT_TRUE(w.Finish().ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->tensors().size(), 3u);
  EXPECT_EQ((*f)->tensors()[0].size_bytes, 0u);
  EXPECT_EQ((*f)->tensors()[1].offset_in_data, 0u);
  EXPECT_EQ((*f)->tensors()[2].offset_in_data, 32u);
}

TEST(GgufWriter, CannotCreateFileNamesPath) {
  GgufWriter w;
  const absl::Status s = w.Open("/nonexistent-dir/x.gguf");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("/nonexistent-dir/x.gguf"), HasSubstr("cannot create")));
}

// /dev/full fails every write with ENOSPC, like a full disk.
TEST(GgufWriter, DiskFullDuringDataIsClear) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("big", TensorType::kF32, {1 << 20}).ok());  // 4 MiB
  ASSERT_TRUE(w.Open("/dev/full").ok());  // the header is still in the buffer
  const std::vector<uint8_t> chunk(1 << 20, 1);
  absl::Status s;
  for (int i = 0; i < 4 && s.ok(); ++i) s = w.AppendTensorData(chunk);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("/dev/full"), HasSubstr("write failed at byte offset"),
                            HasSubstr("disk full"), HasSubstr("No space left on device")));
  // Sticky: later calls report the same failure.
  EXPECT_EQ(w.AppendTensorData(chunk), s);
  EXPECT_EQ(w.Finish(), s);
}

TEST(GgufWriter, DiskFullAtFinishIsClear) {
  GgufWriter w;
  ASSERT_TRUE(w.AddKeyValue("k", GgufValue::String("v")).ok());
  ASSERT_TRUE(w.AddTensor("a", TensorType::kF32, {2}).ok());
  ASSERT_TRUE(w.Open("/dev/full").ok());
  ASSERT_TRUE(w.AppendTensorData(std::vector<uint8_t>(8, 1)).ok());
  const absl::Status s = w.Finish();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("/dev/full"), HasSubstr("disk full"),
                            HasSubstr("No space left on device")));
}

// A tensor larger than the writer's buffer streams through in chunks and the
// reader sees exactly the bytes, padding included.
TEST(GgufWriter, StreamsLargeTensorInChunks) {
  TempDir dir;
  const std::string path = dir.File("big.gguf");
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("big", TensorType::kQ8_0, {32 * 1000, 100}).ok());  // 3.4 MB
  ASSERT_TRUE(w.AddTensor("tail", TensorType::kF32, {3}).ok());
  ASSERT_TRUE(w.Open(path).ok());
  const uint64_t size = w.TensorSizeBytes(0);
  ASSERT_EQ(size, 1000u * 34 * 100);
  const std::vector<uint8_t> block = PatternBytes(65537, 9);  // odd chunk size
  uint64_t done = 0;
  while (done < size) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(block.size(), size - done));
    ASSERT_TRUE(w.AppendTensorData("big", std::span<const uint8_t>(block.data(), n)).ok());
    done += n;
  }
  ASSERT_TRUE(w.AppendTensorData("tail", std::vector<uint8_t>(12, 5)).ok());
  ASSERT_TRUE(w.Finish().ok());
  absl::StatusOr<std::unique_ptr<GgufModel>> m = GgufModel::Open(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::span<const uint8_t> big = (*m)->TensorData(*(*m)->FindTensor("big"));
  ASSERT_EQ(big.size(), size);
  for (uint64_t i = 0; i < size; i += 4099) ASSERT_EQ(big[i], block[i % block.size()]) << i;
  const GgufTensorInfo& tail = *(*m)->FindTensor("tail");
  EXPECT_EQ(tail.offset_in_data, gguf_test::AlignUp(size, 32));
  EXPECT_EQ((*m)->TensorData(tail)[11], 5);
  EXPECT_EQ(w.bytes_written(), (*m)->shards()[0]->file_size());
}

}  // namespace
}  // namespace moetier
