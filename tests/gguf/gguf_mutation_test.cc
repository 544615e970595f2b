// Mutation campaign: thousands of corrupted variants of a valid GGUF image go
// through GgufFile::Parse. Each must come back OK or as an error Status; an OK
// result must describe only bytes inside the image (ASan checks the reads).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gguf/writer/gguf_writer.h"
#include "gguf_test_util.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using gguf_test::PatternBytes;
using gguf_test::TempDir;

constexpr int kMutantsPerKind = 2600;  // four kinds: 10,400 mutants in all
constexpr uint32_t kSeed = 20240611;

// A valid image with every value kind, arrays, and tensors of several types.
std::vector<uint8_t> BaseImage() {
  TempDir dir;
  const std::string path = dir.File("base.gguf");
  GgufWriter w;
  EXPECT_TRUE(w.AddKeyValue("general.architecture", GgufValue::String("qwen3moe")).ok());
  EXPECT_TRUE(w.AddKeyValue("general.alignment", GgufValue::Uint32(32)).ok());
  EXPECT_TRUE(w.AddKeyValue("a.u8", GgufValue::Uint8(3)).ok());
  EXPECT_TRUE(w.AddKeyValue("a.i16", GgufValue::Int16(-3)).ok());
  EXPECT_TRUE(w.AddKeyValue("a.f64", GgufValue::Float64(0.25)).ok());
  EXPECT_TRUE(w.AddKeyValue("a.b", GgufValue::Bool(true)).ok());
  EXPECT_TRUE(w.AddKeyValue("a.u64", GgufValue::Uint64(1ull << 40)).ok());
  EXPECT_TRUE(w.AddKeyValue("tok.tokens", GgufValue::StringArray({"a", "bc", "", "def"})).ok());
  EXPECT_TRUE(w.AddKeyValue("tok.scores", GgufValue::Float32Array({1, 2, 3})).ok());
  EXPECT_TRUE(w.AddKeyValue("tok.types", GgufValue::Int32Array({1, 1, 3})).ok());
  EXPECT_TRUE(w.AddKeyValue("tok.flags", GgufValue::Array({GgufValueType::kBool,
                                                           std::vector<bool>{true, false}}))
                  .ok());
  EXPECT_TRUE(w.AddTensor("token_embd.weight", TensorType::kQ8_0, {64, 4}).ok());
  EXPECT_TRUE(w.AddTensor("norm", TensorType::kF32, {5}).ok());
  EXPECT_TRUE(w.AddTensor("blk.0.ffn_down_exps.weight", TensorType::kQ4_K, {256, 1, 2}).ok());
  EXPECT_TRUE(w.AddTensor("blk.0.attn_k.weight", TensorType::kF16, {4, 2, 1, 1}).ok());
  EXPECT_TRUE(w.Open(path).ok());
  size_t total = 0;
  for (size_t i = 0; i < w.tensor_count(); ++i) total += w.TensorSizeBytes(i);
  EXPECT_TRUE(w.AppendTensorData(PatternBytes(total, 5)).ok());
  EXPECT_TRUE(w.Finish().ok());
  return gguf_test::ReadFileBytes(path);
}

// Offsets of the u64 and u32 fields of a valid image (lengths, counts, types,
// dims, offsets): the targets for overwrites and length inflation.
struct Fields {
  std::vector<size_t> u64s;
  std::vector<size_t> u32s;
};

Fields MapFields(const std::vector<uint8_t>& b) {
  Fields f;
  size_t pos = 0;
  const auto u32 = [&]() {
    uint32_t v;
    std::memcpy(&v, b.data() + pos, 4);
    f.u32s.push_back(pos);
    pos += 4;
    return v;
  };
  const auto u64 = [&]() {
    uint64_t v;
    std::memcpy(&v, b.data() + pos, 8);
    f.u64s.push_back(pos);
    pos += 8;
    return v;
  };
  const auto str = [&]() { pos += u64(); };
  pos = 4;
  u32();
  const uint64_t n_tensors = u64();
  const uint64_t n_kv = u64();
  for (uint64_t i = 0; i < n_kv; ++i) {
    str();
    const uint32_t type = u32();
    const auto scalar = [&](uint32_t t) {
      switch (t) {
        case 0: case 1: case 7: pos += 1; break;
        case 2: case 3: pos += 2; break;
        case 4: case 5: case 6: pos += 4; break;
        case 10: case 11: case 12: pos += 8; break;
        case 8: str(); break;
        default: ADD_FAILURE() << "unexpected type " << t;
      }
    };
    if (type == 9) {
      const uint32_t et = u32();
      const uint64_t n = u64();
      for (uint64_t j = 0; j < n; ++j) scalar(et);
    } else {
      scalar(type);
    }
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    str();
    const uint32_t n_dims = u32();
    for (uint32_t d = 0; d < n_dims; ++d) u64();
    u32();
    u64();
  }
  return f;
}

// Parses one mutant; on success checks that everything it reports is in bounds.
void CheckMutant(const std::vector<uint8_t>& bytes, const char* kind, int i,
                 bool* parsed = nullptr) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Parse(bytes, "mutant.gguf");
  if (parsed != nullptr) *parsed = f.ok();
  if (!f.ok()) {
    ASSERT_NE(f.status().code(), absl::StatusCode::kOk);
    ASSERT_NE(std::string(f.status().message()).find("mutant.gguf"), std::string::npos)
        << kind << " #" << i << ": " << f.status();
    return;
  }
  const GgufFile& file = **f;
  for (const GgufTensorInfo& t : file.tensors()) {
    ASSERT_GE(t.file_offset, file.data_offset()) << kind << " #" << i;
    ASSERT_LE(t.file_offset + t.size_bytes, bytes.size()) << kind << " #" << i;
    ASSERT_EQ(t.offset_in_data % file.alignment(), 0u);
    if (t.size_bytes > 0) {
      // Touch the first and last byte through the reader's span (ASan checks them).
      const std::span<const uint8_t> d = file.bytes().subspan(t.file_offset, t.size_bytes);
      volatile uint8_t sink = d.front();
      sink = d.back();
      (void)sink;
    }
  }
  // The lenient getters must cope with whatever types the mutant has.
  for (const GgufKeyValue& kv : file.metadata().entries()) {
    (void)file.metadata().GetUint(kv.key);
    (void)file.metadata().GetInt(kv.key);
    (void)file.metadata().GetFloat(kv.key);
    (void)file.metadata().GetStringArray(kv.key);
    (void)file.metadata().GetIntArray(kv.key);
    (void)file.metadata().GetUintOrArray(kv.key, 4);
  }
}

class GgufMutation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = new std::vector<uint8_t>(BaseImage());
    fields_ = new Fields(MapFields(*base_));
  }
  static void TearDownTestSuite() {
    delete base_;
    delete fields_;
  }
  static std::vector<uint8_t>* base_;
  static Fields* fields_;
};

std::vector<uint8_t>* GgufMutation::base_ = nullptr;
Fields* GgufMutation::fields_ = nullptr;

TEST_F(GgufMutation, BaseImageIsValid) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Parse(*base_, "base.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 4u);
  EXPECT_GT(fields_->u64s.size(), 30u);
  EXPECT_GT(fields_->u32s.size(), 15u);
}

TEST_F(GgufMutation, Truncations) {
  absl::StatusOr<std::unique_ptr<GgufFile>> full = GgufFile::Parse(*base_, "base.gguf");
  ASSERT_TRUE(full.ok());
  uint64_t data_end = 0;
  for (const GgufTensorInfo& t : (*full)->tensors()) {
    data_end = std::max(data_end, t.file_offset + t.size_bytes);
  }
  ASSERT_LT(data_end, base_->size()) << "the base image should end in padding";
  std::mt19937_64 rng(kSeed);
  for (int i = 0; i < kMutantsPerKind; ++i) {
    const size_t n = std::uniform_int_distribution<size_t>(0, base_->size() - 1)(rng);
    const std::vector<uint8_t> m(base_->begin(), base_->begin() + n);
    bool parsed = false;
    ASSERT_NO_FATAL_FAILURE(CheckMutant(m, "truncation", i, &parsed));
    // A prefix parses exactly when it still holds every tensor's bytes; only
    // the last tensor's trailing padding may go.
    ASSERT_EQ(parsed, n >= data_end) << "prefix of " << n << " bytes";
  }
}

TEST_F(GgufMutation, BitFlips) {
  std::mt19937_64 rng(kSeed + 1);
  // Flip bits mostly in the header, metadata and tensor infos, where they matter.
  const size_t meta_end = std::min<size_t>(base_->size(), fields_->u64s.back() + 8);
  int ok = 0;
  for (int i = 0; i < kMutantsPerKind; ++i) {
    std::vector<uint8_t> m = *base_;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % 8 == 0 ? rng() % m.size() : rng() % meta_end;
      m[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
    }
    bool parsed = false;
    ASSERT_NO_FATAL_FAILURE(CheckMutant(m, "bit flip", i, &parsed));
    ok += parsed ? 1 : 0;
  }
  // Both outcomes must occur, or the campaign is not exercising the reader.
  EXPECT_GT(ok, 0);
  EXPECT_LT(ok, kMutantsPerKind);
}

TEST_F(GgufMutation, ExtremeFieldOverwrites) {
  static constexpr uint64_t kExtremes[] = {0,
                                           1,
                                           2,
                                           3,
                                           4,
                                           5,
                                           9,
                                           13,
                                           31,
                                           32,
                                           63,
                                           64,
                                           255,
                                           0x7FFF,
                                           0xFFFF,
                                           0x7FFFFFFF,
                                           0x80000000,
                                           0xFFFFFFFF,
                                           (1ull << 30) + 1,
                                           1ull << 32,
                                           0x7FFFFFFFFFFFFFFFull,
                                           0x8000000000000000ull,
                                           0xFFFFFFFFFFFFFFFFull,
                                           0xFFFFFFFFFFFFFFE0ull};
  std::mt19937_64 rng(kSeed + 2);
  for (int i = 0; i < kMutantsPerKind; ++i) {
    std::vector<uint8_t> m = *base_;
    const uint64_t v = kExtremes[rng() % std::size(kExtremes)];
    if (rng() % 2 == 0) {
      const size_t at = fields_->u64s[rng() % fields_->u64s.size()];
      std::memcpy(m.data() + at, &v, 8);
    } else {
      const size_t at = fields_->u32s[rng() % fields_->u32s.size()];
      const auto v32 = static_cast<uint32_t>(v);
      std::memcpy(m.data() + at, &v32, 4);
    }
    ASSERT_NO_FATAL_FAILURE(CheckMutant(m, "overwrite", i));
  }
}

TEST_F(GgufMutation, LengthInflation) {
  std::mt19937_64 rng(kSeed + 3);
  for (int i = 0; i < kMutantsPerKind; ++i) {
    std::vector<uint8_t> m = *base_;
    const size_t at = fields_->u64s[rng() % fields_->u64s.size()];
    uint64_t v;
    std::memcpy(&v, m.data() + at, 8);
    switch (rng() % 3) {
      case 0:
        v += 1 + rng() % 64;  // a little too long
        break;
      case 1:
        v += rng() % (4 * m.size());  // around the file size
        break;
      default:
        v <<= 1 + rng() % 40;  // far too long
        break;
    }
    std::memcpy(m.data() + at, &v, 8);
    // Sometimes also drop the tail, so inflated lengths meet a short file.
    if (rng() % 4 == 0) m.resize(m.size() - rng() % m.size());
    ASSERT_NO_FATAL_FAILURE(CheckMutant(m, "inflation", i));
  }
}

}  // namespace
}  // namespace moetier
