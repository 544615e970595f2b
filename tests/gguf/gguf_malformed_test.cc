// One test per way a GGUF file can be malformed: each must be rejected with a
// Status that names the file, the byte offset and the problem.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gguf_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using gguf_test::BuildRaw;
using gguf_test::ByteBuf;
using gguf_test::KvStr;
using gguf_test::KvU32;
using gguf_test::OffsetText;
using gguf_test::RawImage;
using gguf_test::RawKv;
using gguf_test::RawOptions;
using gguf_test::RawTensor;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kName[] = "bad.gguf";

absl::Status ParseStatus(const std::vector<uint8_t>& bytes) {
  return GgufFile::Parse(bytes, kName).status();
}

// Asserts that parsing fails naming the file, `offset` and `problem`.
void ExpectRejected(const std::vector<uint8_t>& bytes, size_t offset, const std::string& problem) {
  const absl::Status s = ParseStatus(bytes);
  ASSERT_FALSE(s.ok()) << "expected rejection for: " << problem;
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(kName), HasSubstr(OffsetText(offset)), HasSubstr(problem)));
}

// A small well-formed image: two KVs and two F32 tensors of 8 and 4 elements.
std::vector<RawTensor> TwoTensors() {
  return {{"a", {8}, 0, 0}, {"b", {4}, 0, 32}};
}
RawOptions TwoTensorOptions() {
  RawOptions o;
  o.data_bytes = 48;  // 32 (a, padded) + 16 (b)
  return o;
}
std::vector<RawKv> TwoKvs() {
  return {KvStr("general.architecture", "qwen3moe"), KvU32("qwen3moe.block_count", 4)};
}

TEST(GgufMalformed, WellFormedBaseParses) {
  const RawImage img = BuildRaw(TwoKvs(), TwoTensors(), TwoTensorOptions());
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Parse(img.bytes, kName);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->tensors().size(), 2u);
  EXPECT_EQ((*f)->data_offset(), img.data_offset);
  EXPECT_EQ((*f)->tensors()[1].file_offset, img.data_offset + 32);
  EXPECT_EQ((*f)->tensors()[1].size_bytes, 16u);
}

TEST(GgufMalformed, EmptyFile) { ExpectRejected({}, 0, "truncated: magic"); }

TEST(GgufMalformed, BadMagic) {
  RawImage img = BuildRaw(TwoKvs(), TwoTensors(), TwoTensorOptions());
  img.bytes[3] = 'X';
  ExpectRejected(img.bytes, 0, "bad magic 47 47 55 58");
}

TEST(GgufMalformed, VersionZero) {
  RawOptions o = TwoTensorOptions();
  o.version = 0;
  ExpectRejected(BuildRaw(TwoKvs(), TwoTensors(), o).bytes, 4, "unsupported GGUF version 0");
}

TEST(GgufMalformed, VersionOne) {
  RawOptions o = TwoTensorOptions();
  o.version = 1;
  ExpectRejected(BuildRaw(TwoKvs(), TwoTensors(), o).bytes, 4, "unsupported GGUF version 1");
}

TEST(GgufMalformed, VersionAboveThree) {
  RawOptions o = TwoTensorOptions();
  o.version = 4;
  ExpectRejected(BuildRaw(TwoKvs(), TwoTensors(), o).bytes, 4,
                 "unsupported GGUF version 4; versions 2 and 3 are supported");
}

TEST(GgufMalformed, BigEndianVersionReportsByteOrder) {
  RawOptions o = TwoTensorOptions();
  o.version = 0x03000000;  // version 3 written big-endian
  ExpectRejected(BuildRaw(TwoKvs(), TwoTensors(), o).bytes, 4, "byte-order mismatch");
}

TEST(GgufMalformed, TruncationAnywhereIsRejected) {
  const RawImage img = BuildRaw(TwoKvs(), TwoTensors(), TwoTensorOptions());
  for (size_t n = 0; n < img.bytes.size(); ++n) {
    const std::vector<uint8_t> cut(img.bytes.begin(), img.bytes.begin() + n);
    const absl::Status s = ParseStatus(cut);
    ASSERT_FALSE(s.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr(kName), HasSubstr("at byte offset ")));
    if (n < img.infos_end) {
      // Inside the header, KVs or tensor infos: a read runs off the end, or
      // a count or length no longer fits in what is left.
      EXPECT_THAT(std::string(s.message()),
                  testing::AnyOf(HasSubstr("truncated"), HasSubstr("left in the file"),
                                 HasSubstr("cannot fit")))
          << s;
    } else {
      EXPECT_THAT(std::string(s.message()), HasSubstr("outside the file")) << s;
    }
  }
}

TEST(GgufMalformed, TruncatedInsideValueNamesOffset) {
  // No tensors, so the counts fit and the cut is found by the value read itself.
  RawImage img = BuildRaw(TwoKvs(), {});
  const size_t value_at = img.kv_type_offsets[1] + 4;  // the u32 payload
  img.bytes.resize(value_at + 2);
  ExpectRejected(img.bytes, value_at, "truncated: metadata value needs 4 bytes");
}

TEST(GgufMalformed, TensorCountLargerThanFile) {
  RawOptions o = TwoTensorOptions();
  o.tensor_count = 1'000'000'000'000ull;
  ExpectRejected(BuildRaw(TwoKvs(), TwoTensors(), o).bytes, 8,
                 "tensor count 1000000000000 cannot fit");
}

TEST(GgufMalformed, TensorCountNegativeAsInt64) {
  RawOptions o = TwoTensorOptions();
  o.tensor_count = std::numeric_limits<uint64_t>::max();
  ExpectRejected(BuildRaw(TwoKvs(), TwoTensors(), o).bytes, 8, "cannot fit");
}

TEST(GgufMalformed, KvCountLargerThanFile) {
  RawOptions o = TwoTensorOptions();
  o.kv_count = 1ull << 40;
  ExpectRejected(BuildRaw(TwoKvs(), TwoTensors(), o).bytes, 16,
                 "metadata key-value count 1099511627776 cannot fit");
}

TEST(GgufMalformed, KvCountSlightlyTooLargeIsTruncation) {
  RawOptions o = TwoTensorOptions();
  o.kv_count = 3;  // the third "KV" starts in the tensor infos, which do not parse as one
  const absl::Status s = ParseStatus(BuildRaw(TwoKvs(), TwoTensors(), o).bytes);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("at byte offset"));
}

TEST(GgufMalformed, StringLengthLargerThanFile) {
  RawImage img = BuildRaw(TwoKvs(), TwoTensors(), TwoTensorOptions());
  const size_t at = img.kv_offsets[1];
  const uint64_t huge = 1'000'000;  // below 1 GiB, above the file size
  std::memcpy(img.bytes.data() + at, &huge, 8);
  ExpectRejected(img.bytes, at, "metadata key length 1000000 is larger than the");
}

TEST(GgufMalformed, StringLengthOver1GiB) {
  RawImage img = BuildRaw(TwoKvs(), TwoTensors(), TwoTensorOptions());
  const size_t at = img.kv_type_offsets[0] + 4;  // the string value's length
  const uint64_t huge = (1ull << 30) + 1;
  std::memcpy(img.bytes.data() + at, &huge, 8);
  ExpectRejected(img.bytes, at, "metadata value length 1073741825 exceeds the 1 GiB limit");
}

TEST(GgufMalformed, TensorNameLengthLargerThanFile) {
  RawImage img = BuildRaw(TwoKvs(), TwoTensors(), TwoTensorOptions());
  const size_t at = img.tensor_offsets[1];
  const uint64_t huge = 1u << 20;
  std::memcpy(img.bytes.data() + at, &huge, 8);
  ExpectRejected(img.bytes, at, "tensor name length 1048576 is larger than the");
}

TEST(GgufMalformed, ArrayCountLargerThanFile) {
  const RawKv kv{"tokenizer.ggml.scores", ByteBuf().U32(9).U32(6).U64(1ull << 40).bytes()};
  const RawImage img = BuildRaw({kv}, {});
  ExpectRejected(img.bytes, img.kv_type_offsets[0] + 8,
                 "array of 1099511627776 FLOAT32 elements needs at least 4 bytes each");
}

TEST(GgufMalformed, StringArrayCountLargerThanFile) {
  // Each string element needs at least its 8-byte length, so 100 cannot fit in 16 bytes.
  const RawKv kv{"tokenizer.ggml.tokens",
                 ByteBuf().U32(9).U32(8).U64(100).Zeros(16).bytes()};
  const RawImage img = BuildRaw({kv}, {});
  ExpectRejected(img.bytes, img.kv_type_offsets[0] + 8, "needs at least 8 bytes each");
}

TEST(GgufMalformed, ArrayOfArraysRejected) {
  const RawKv kv{"nested", ByteBuf().U32(9).U32(9).U64(1).U32(4).U64(1).U32(7).bytes()};
  const RawImage img = BuildRaw({kv}, {});
  ExpectRejected(img.bytes, img.kv_type_offsets[0] + 4, "is an array of arrays");
}

TEST(GgufMalformed, UnknownValueType) {
  const RawKv kv{"weird", ByteBuf().U32(13).U32(0).bytes()};
  const RawImage img = BuildRaw({kv}, {});
  ExpectRejected(img.bytes, img.kv_type_offsets[0], "unknown value type id 13");
}

TEST(GgufMalformed, UnknownArrayElementType) {
  const RawKv kv{"weird", ByteBuf().U32(9).U32(0xFFFFFFFF).U64(0).bytes()};
  const RawImage img = BuildRaw({kv}, {});
  ExpectRejected(img.bytes, img.kv_type_offsets[0] + 4, "unknown array element type id 4294967295");
}

TEST(GgufMalformed, DuplicateKey) {
  const RawImage img =
      BuildRaw({KvU32("a.b", 1), KvStr("c", "x"), KvU32("a.b", 2)}, {});
  ExpectRejected(img.bytes, img.kv_offsets[2], "duplicate metadata key 'a.b'");
}

TEST(GgufMalformed, EmptyKey) {
  const RawImage img = BuildRaw({KvU32("a", 1), KvU32("", 2)}, {});
  ExpectRejected(img.bytes, img.kv_offsets[1], "metadata key 2 of 2 is empty");
}

TEST(GgufMalformed, TensorDataOutsideFile) {
  RawOptions o = TwoTensorOptions();
  o.data_bytes = 47;  // b needs 16 bytes at 32
  const RawImage img = BuildRaw(TwoKvs(), TwoTensors(), o);
  ExpectRejected(img.bytes, img.tensor_offset_fields[1], "tensor 'b': data (offset 32 in the data "
                                                         "blob");
  ExpectRejected(img.bytes, img.tensor_offset_fields[1], "lies outside the file");
}

TEST(GgufMalformed, TensorOffsetFarOutsideFileDoesNotOverflow) {
  std::vector<RawTensor> t = TwoTensors();
  t[1].offset = std::numeric_limits<uint64_t>::max() - 31;  // aligned, and start + size wraps
  const RawImage img = BuildRaw(TwoKvs(), t, TwoTensorOptions());
  ExpectRejected(img.bytes, img.tensor_offset_fields[1], "lies outside the file");
}

TEST(GgufMalformed, OverlappingTensors) {
  std::vector<RawTensor> t = TwoTensors();
  t[0].dims = {16};  // 64 bytes at 0 now covers b at 32
  RawOptions o = TwoTensorOptions();
  o.data_bytes = 64;
  const RawImage img = BuildRaw(TwoKvs(), t, o);
  ExpectRejected(img.bytes, img.tensor_offset_fields[1], "tensor 'b' (bytes");
  ExpectRejected(img.bytes, img.tensor_offset_fields[1], "overlaps tensor 'a'");
}

TEST(GgufMalformed, IdenticalOffsetsOverlapInAnyOrder) {
  std::vector<RawTensor> t = {{"x", {8}, 0, 64}, {"y", {8}, 0, 0}, {"z", {8}, 0, 64}};
  RawOptions o;
  o.data_bytes = 96;
  const RawImage img = BuildRaw({}, t, o);
  const absl::Status s = ParseStatus(img.bytes);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("overlaps tensor"));
}

TEST(GgufMalformed, UnknownTensorType) {
  for (uint32_t id : {4u, 5u, 31u, 36u, 43u, 1000u, 0xFFFFFFFFu}) {
    std::vector<RawTensor> t = TwoTensors();
    t[1].type = id;
    const RawImage img = BuildRaw(TwoKvs(), t, TwoTensorOptions());
    ExpectRejected(img.bytes, img.tensor_type_offsets[1],
                   "tensor 'b': unknown ggml type id " + std::to_string(id));
  }
}

TEST(GgufMalformed, Ne0NotMultipleOfBlockSize) {
  std::vector<RawTensor> t = {{"q", {48, 2}, 8, 0}};  // Q8_0 blocks hold 32
  RawOptions o;
  o.data_bytes = 256;
  const RawImage img = BuildRaw({}, t, o);
  ExpectRejected(img.bytes, img.tensor_type_offsets[0],
                 "ne[0] = 48 is not a multiple of the Q8_0 block size 32");
  t = {{"k", {128}, 12, 0}};  // Q4_K super-blocks hold 256
  const RawImage img2 = BuildRaw({}, t, o);
  ExpectRejected(img2.bytes, img2.tensor_type_offsets[0], "not a multiple of the Q4_K block size 256");
}

TEST(GgufMalformed, MoreThanFourDims) {
  std::vector<RawTensor> t = {{"five", {1, 1, 1, 1, 1}, 0, 0}};
  RawOptions o;
  o.data_bytes = 32;
  const RawImage img = BuildRaw({}, t, o);
  ExpectRejected(img.bytes, img.tensor_ndims_offsets[0], "tensor 'five' has 5 dimensions");
}

TEST(GgufMalformed, NegativeDim) {
  std::vector<RawTensor> t = {{"neg", {4, static_cast<uint64_t>(-2)}, 0, 0}};
  RawOptions o;
  o.data_bytes = 32;
  const RawImage img = BuildRaw({}, t, o);
  ExpectRejected(img.bytes, img.tensor_ndims_offsets[0] + 4 + 8,
                 "dimension ne[1] is negative as int64 (-2)");
}

TEST(GgufMalformed, DimProductOverflows) {
  std::vector<RawTensor> t = {{"big", {1ull << 32, 1ull << 32}, 0, 0}};
  RawOptions o;
  o.data_bytes = 32;
  const RawImage img = BuildRaw({}, t, o);
  ExpectRejected(img.bytes, img.tensor_type_offsets[0],
                 "the product of the dimensions overflows int64 at ne[1]");
}

TEST(GgufMalformed, ByteSizeOverflows) {
  // 2^61 F32 elements fit int64, their 2^63 bytes do not.
  std::vector<RawTensor> t = {{"wide", {1ull << 61}, 0, 0}};
  RawOptions o;
  o.data_bytes = 32;
  const RawImage img = BuildRaw({}, t, o);
  ExpectRejected(img.bytes, img.tensor_type_offsets[0], "overflows int64");
}

TEST(GgufMalformed, HugeButRepresentableTensorIsOutsideFile) {
  std::vector<RawTensor> t = {{"huge", {1ull << 40}, 0, 0}};
  RawOptions o;
  o.data_bytes = 32;
  const RawImage img = BuildRaw({}, t, o);
  ExpectRejected(img.bytes, img.tensor_offset_fields[0], "lies outside the file");
}

TEST(GgufMalformed, DuplicateTensorName) {
  std::vector<RawTensor> t = TwoTensors();
  t[1].name = "a";
  const RawImage img = BuildRaw(TwoKvs(), t, TwoTensorOptions());
  ExpectRejected(img.bytes, img.tensor_offsets[1], "duplicate tensor name 'a'");
}

TEST(GgufMalformed, TensorNameOf64BytesRejected63Accepted) {
  std::vector<RawTensor> t = TwoTensors();
  t[1].name = std::string(63, 'n');
  ASSERT_TRUE(ParseStatus(BuildRaw(TwoKvs(), t, TwoTensorOptions()).bytes).ok());
  t[1].name = std::string(64, 'n');
  const RawImage img = BuildRaw(TwoKvs(), t, TwoTensorOptions());
  ExpectRejected(img.bytes, img.tensor_offsets[1], "is 64 bytes; names must be shorter than 64");
}

TEST(GgufMalformed, MisalignedTensorOffset) {
  std::vector<RawTensor> t = TwoTensors();
  t[1].offset = 36;
  RawOptions o = TwoTensorOptions();
  o.data_bytes = 64;
  const RawImage img = BuildRaw(TwoKvs(), t, o);
  ExpectRejected(img.bytes, img.tensor_offset_fields[1],
                 "tensor 'b': data offset 36 is not a multiple of the alignment 32");
}

TEST(GgufMalformed, AlignmentMustBeUint32) {
  const RawKv kv{"general.alignment", ByteBuf().U32(10).U64(32).bytes()};
  const RawImage img = BuildRaw({kv}, {});
  ExpectRejected(img.bytes, img.kv_type_offsets[0], "general.alignment is UINT64; it must be UINT32");
}

TEST(GgufMalformed, AlignmentZero) {
  const RawImage img = BuildRaw({KvU32("general.alignment", 0)}, {});
  ExpectRejected(img.bytes, img.kv_type_offsets[0], "general.alignment is 0; it must be a nonzero "
                                                    "power of two");
}

TEST(GgufMalformed, AlignmentNotPowerOfTwo) {
  const RawImage img = BuildRaw({KvU32("general.alignment", 48)}, {});
  ExpectRejected(img.bytes, img.kv_type_offsets[0], "general.alignment is 48");
}

TEST(GgufMalformed, CustomAlignmentMovesDataAndChecksOffsets) {
  RawOptions o;
  o.alignment = 64;
  o.data_bytes = 96;
  std::vector<RawTensor> t = {{"a", {8}, 0, 0}, {"b", {8}, 0, 64}};
  RawImage img = BuildRaw({KvU32("general.alignment", 64)}, t, o);
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Parse(img.bytes, kName);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->data_offset() % 64, 0u);
  EXPECT_EQ((*f)->data_offset(), img.data_offset);

  t[1].offset = 32;  // fine for 32, not for 64
  img = BuildRaw({KvU32("general.alignment", 64)}, t, o);
  ExpectRejected(img.bytes, img.tensor_offset_fields[1], "not a multiple of the alignment 64");
}

TEST(GgufMalformed, BoolAndStringEdgeValuesParse) {
  // llama.cpp takes any nonzero bool byte as true; empty strings are valid values.
  const RawKv b{"flag", ByteBuf().U32(7).U8(2).bytes()};
  const RawKv s{"empty", ByteBuf().U32(8).Str("").bytes()};
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Parse(BuildRaw({b, s}, {}).bytes, kName);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->metadata().GetBool("flag"), true);
  EXPECT_EQ(*(*f)->metadata().GetString("empty"), "");
}

TEST(GgufMalformed, OpenNamesMissingFile) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open("/nonexistent/dir/x.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("/nonexistent/dir/x.gguf"));
}

TEST(GgufMalformed, OpenRejectsDirectory) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(::testing::TempDir());
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("not a regular file"));
}

TEST(GgufMalformed, OpenReportsParseErrorsWithPath) {
  gguf_test::TempDir dir;
  const std::string path = dir.File("trunc.gguf");
  RawImage img = BuildRaw(TwoKvs(), TwoTensors(), TwoTensorOptions());
  img.bytes.resize(img.bytes.size() - 1);
  gguf_test::WriteFileBytes(path, img.bytes);
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()),
              AllOf(HasSubstr(path), HasSubstr(OffsetText(img.tensor_offset_fields[1])),
                    HasSubstr("outside the file")));
  gguf_test::WriteFileBytes(path, {});
  f = GgufFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), AllOf(HasSubstr(path), HasSubstr("truncated")));
}

}  // namespace
}  // namespace moetier
