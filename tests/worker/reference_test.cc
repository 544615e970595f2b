#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gguf_edit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/architectures.h"
#include "reference/reference_engine.h"
#include "vectors.h"

namespace moetier {
namespace {

using testing::CompareRow;
using testing::EditableGguf;
using testing::ReadFloats;
using testing::ReadIds;
using testing::RowError;
using testing::TempPath;
using testing::TestDataPath;

// A model file, its weight table and a reference engine on it.
struct Loaded {
  std::unique_ptr<GgufModel> gguf;
  Model model;
  std::unique_ptr<ReferenceEngine> ref;
};

std::unique_ptr<Loaded> LoadOrFail(const std::string& path, int max_ctx = 64) {
  auto out = std::make_unique<Loaded>();
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(path);
  EXPECT_TRUE(gguf.ok()) << gguf.status();
  if (!gguf.ok()) return nullptr;
  out->gguf = *std::move(gguf);
  absl::StatusOr<Model> model = LoadModel(*out->gguf);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  out->model = *std::move(model);
  absl::StatusOr<std::unique_ptr<ReferenceEngine>> ref =
      ReferenceEngine::Create(out->model, max_ctx);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!ref.ok()) return nullptr;
  out->ref = *std::move(ref);
  return out;
}

// A new sequence, then every row of `ids`.
std::vector<float> RunAll(ReferenceEngine& ref, const std::vector<int32_t>& ids) {
  std::vector<float> logits(ids.size() * ref.n_vocab());
  absl::StatusOr<std::unique_ptr<Sequence>> seq = ref.NewSequence();
  EXPECT_TRUE(seq.ok()) << seq.status();
  if (!seq.ok()) return logits;
  const absl::Status s = ref.Forward(**seq, ids, LogitRows::kAll, logits.data());
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

// --- agreement with independent implementations -------------------------------

struct VectorCase {
  const char* model;     // tests/data/vectors/<model>.gguf
  const char* expected;  // <model>.<expected>.f32
};

class ReferenceVectorTest : public ::testing::TestWithParam<VectorCase> {};

TEST_P(ReferenceVectorTest, LogitsWithinOneThousandthOfRowRange) {
  const VectorCase& c = GetParam();
  const std::string base = TestDataPath(std::string("vectors/") + c.model);
  const std::vector<int32_t> ids = ReadIds(base + ".ids");
  std::unique_ptr<Loaded> m = LoadOrFail(base + ".gguf", std::max<int>(64, ids.size()));
  ASSERT_NE(m, nullptr);
  const std::vector<float> expected = ReadFloats(base + "." + c.expected + ".f32");
  const size_t n_vocab = m->ref->n_vocab();
  ASSERT_FALSE(ids.empty());
  ASSERT_EQ(expected.size(), ids.size() * n_vocab);

  const std::vector<float> logits = RunAll(*m->ref, ids);
  double worst = 0.0;
  for (size_t pos = 0; pos < ids.size(); ++pos) {
    const RowError e = CompareRow(&logits[pos * n_vocab], &expected[pos * n_vocab], n_vocab);
    ASSERT_GT(e.range, 0.0);
    EXPECT_LE(e.max_abs, 1e-3 * e.range) << "position " << pos;
    worst = std::max(worst, e.relative());
  }
  std::printf("%s vs %s: max |diff| / row range = %.3g\n", c.model, c.expected, worst);
  RecordProperty("max_relative_error", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(
    Vectors, ReferenceVectorTest,
    ::testing::Values(
        VectorCase{"tiny-f32", "exact"}, VectorCase{"tiny-f32", "llamacpp"},
        VectorCase{"tiny-q8_0", "exact"}, VectorCase{"small-q4_k_m", "exact"},
        VectorCase{"mixtral-tiny-f32", "exact"}, VectorCase{"mixtral-tiny-f32", "llamacpp"},
        VectorCase{"mixtral-small-q4_k_m", "exact"}, VectorCase{"olmoe-tiny-f32", "exact"},
        VectorCase{"olmoe-tiny-f32", "llamacpp"}, VectorCase{"qwen35moe-tiny-f32", "exact"},
        VectorCase{"qwen35moe-tiny-f32", "llamacpp"}, VectorCase{"qwen35moe-small-q4_k_m", "exact"},
        VectorCase{"mixed-low-bit", "exact"}, VectorCase{"iq-grids-low-bit", "exact"},
        VectorCase{"yarn-tiny-f32", "exact"}, VectorCase{"yarn-tiny-f32", "llamacpp"},
        VectorCase{"mixtral-linear-tiny-f32", "exact"},
        VectorCase{"mixtral-linear-tiny-f32", "llamacpp"},
        VectorCase{"mixtral-rope-freqs-tiny-f32", "exact"},
        VectorCase{"mixtral-rope-freqs-tiny-f32", "llamacpp"},
        VectorCase{"qwen35moe-yarn-tiny-f32", "exact"},
        VectorCase{"qwen35moe-yarn-tiny-f32", "llamacpp"},
        VectorCase{"qwen3next-tiny-f32", "exact"}, VectorCase{"qwen3next-tiny-f32", "llamacpp"},
        VectorCase{"qwen3next-ssm-in-tiny-f32", "exact"},
        VectorCase{"qwen3next-ssm-in-tiny-f32", "llamacpp"},
        VectorCase{"qwen3next-small-q4_k_m", "exact"}, VectorCase{"qwen2moe-tiny-f32", "exact"},
        VectorCase{"qwen2moe-tiny-f32", "llamacpp"}, VectorCase{"qwen2moe-small-q4_k_m", "exact"},
        VectorCase{"qwen3vlmoe-tiny-f32", "exact"}, VectorCase{"qwen3vlmoe-tiny-f32", "llamacpp"},
        VectorCase{"qwen3vlmoe-small-q4_k_m", "exact"}, VectorCase{"glm4moe-tiny-f32", "exact"},
        VectorCase{"glm4moe-tiny-f32", "llamacpp"}, VectorCase{"glm4moe-small-q4_k_m", "exact"},
        VectorCase{"ernie45moe-tiny-f32", "exact"}, VectorCase{"ernie45moe-tiny-f32", "llamacpp"},
        VectorCase{"ernie45moe-small-q4_k_m", "exact"}, VectorCase{"gpt-oss-tiny-f32", "exact"},
        VectorCase{"gpt-oss-tiny-f32", "llamacpp"}, VectorCase{"gpt-oss-small-mxfp4", "exact"}),
    [](const ::testing::TestParamInfo<VectorCase>& param_info) {
      std::string name = std::string(param_info.param.model) + "_" + param_info.param.expected;
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return name;
    });

// --- the KV cache --------------------------------------------------------------

class ReferenceKvCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = LoadOrFail(TestDataPath("vectors/tiny-f32.gguf"));
    ASSERT_NE(tiny_, nullptr);
    ids_ = ReadIds(TestDataPath("vectors/tiny-f32.ids"));
    n_vocab_ = tiny_->ref->n_vocab();
  }

  void ExpectRowsNear(const float* a, const float* b, size_t rows) {
    for (size_t r = 0; r < rows; ++r) {
      const RowError e = CompareRow(a + r * n_vocab_, b + r * n_vocab_, n_vocab_);
      EXPECT_LE(e.max_abs, 1e-6 * e.range) << "row " << r;
    }
  }

  std::unique_ptr<Loaded> tiny_;
  std::vector<int32_t> ids_;
  size_t n_vocab_ = 0;
};

TEST_F(ReferenceKvCacheTest, OneTokenAtATimeEqualsWholeSequence) {
  const std::vector<float> whole = RunAll(*tiny_->ref, ids_);
  absl::StatusOr<std::unique_ptr<Sequence>> seq = tiny_->ref->NewSequence();
  ASSERT_TRUE(seq.ok()) << seq.status();
  std::vector<float> step(ids_.size() * n_vocab_);
  for (size_t i = 0; i < ids_.size(); ++i) {
    ASSERT_TRUE(tiny_->ref
                    ->Forward(**seq, std::span<const int32_t>(&ids_[i], 1), LogitRows::kAll,
                              &step[i * n_vocab_])
                    .ok());
    EXPECT_EQ((*seq)->length(), static_cast<int>(i + 1));
  }
  ExpectRowsNear(step.data(), whole.data(), ids_.size());
}

TEST_F(ReferenceKvCacheTest, ChunksAndLastRowMatchWholeSequence) {
  const std::vector<float> whole = RunAll(*tiny_->ref, ids_);
  absl::StatusOr<std::unique_ptr<Sequence>> seq = tiny_->ref->NewSequence();
  ASSERT_TRUE(seq.ok()) << seq.status();
  const std::span<const int32_t> ids(ids_);
  std::vector<float> part(ids_.size() * n_vocab_);
  ASSERT_TRUE(tiny_->ref->Forward(**seq, ids.subspan(0, 5), LogitRows::kAll, part.data()).ok());
  ASSERT_TRUE(
      tiny_->ref->Forward(**seq, ids.subspan(5, 7), LogitRows::kAll, &part[5 * n_vocab_]).ok());
  std::vector<float> last(n_vocab_);
  ASSERT_TRUE(tiny_->ref->Forward(**seq, ids.subspan(12), LogitRows::kLast, last.data()).ok());
  ExpectRowsNear(part.data(), whole.data(), 12);
  ExpectRowsNear(last.data(), &whole[(ids_.size() - 1) * n_vocab_], 1);
}

TEST_F(ReferenceKvCacheTest, ANewSequenceForgetsTheLastOne) {
  const std::vector<float> whole = RunAll(*tiny_->ref, ids_);
  // A different continuation first, then the original tokens in a new
  // sequence: they must not see the old one's keys and values.
  std::vector<int32_t> other = ids_;
  for (size_t i = 10; i < other.size(); ++i) other[i] = (other[i] + 7) % 512;
  const std::vector<float> scratch = RunAll(*tiny_->ref, other);
  const std::vector<float> again = RunAll(*tiny_->ref, ids_);
  ExpectRowsNear(again.data(), whole.data(), ids_.size());
  // The different continuation really changed something.
  const RowError diff = CompareRow(&scratch[20 * n_vocab_], &whole[20 * n_vocab_], n_vocab_);
  EXPECT_GT(diff.max_abs, 1e-3 * diff.range);
}

TEST_F(ReferenceKvCacheTest, SampleDrawsFromTheLastRow) {
  absl::StatusOr<Sampler> greedy = Sampler::Create(static_cast<int>(n_vocab_), {.temperature = 0});
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(tiny_->ref->Sample(*greedy).status().code(), absl::StatusCode::kFailedPrecondition);
  const std::vector<float> whole = RunAll(*tiny_->ref, ids_);
  const float* last = &whole[(ids_.size() - 1) * n_vocab_];
  absl::StatusOr<int32_t> token = tiny_->ref->Sample(*greedy);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, std::max_element(last, last + n_vocab_) - last);
}

TEST_F(ReferenceKvCacheTest, RejectsBadArguments) {
  std::vector<float> logits(n_vocab_ * 64);
  absl::StatusOr<std::unique_ptr<Sequence>> seq = tiny_->ref->NewSequence();
  ASSERT_TRUE(seq.ok()) << seq.status();
  // One sequence at a time.
  EXPECT_EQ(tiny_->ref->NewSequence().status().code(), absl::StatusCode::kResourceExhausted);
  const int32_t bad_id[1] = {512};
  EXPECT_EQ(tiny_->ref->Forward(**seq, bad_id, LogitRows::kAll, logits.data()).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> too_many(65, 1);
  EXPECT_EQ(tiny_->ref->Forward(**seq, too_many, LogitRows::kAll, logits.data()).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(tiny_->ref->Forward(**seq, {}, LogitRows::kAll, logits.data()).code(),
            absl::StatusCode::kInvalidArgument);
  const int32_t ok_id[1] = {5};
  EXPECT_EQ(tiny_->ref->Forward(**seq, ok_id, LogitRows::kAll, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // rows asked for, nowhere to put them
  EXPECT_EQ((*seq)->length(), 0);
  // Another engine's sequence.
  std::unique_ptr<Loaded> other = LoadOrFail(TestDataPath("vectors/tiny-f32.gguf"));
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->ref->Forward(**seq, ok_id, LogitRows::kNone, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ReferenceEngine::Create(tiny_->model, 0).ok());
  EXPECT_FALSE(ReferenceEngine::Create(tiny_->model, tiny_->model.hparams.n_ctx_train + 1).ok());
}

// --- file layout variants give the same numbers ---------------------------------

class ReferenceLayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<EditableGguf> g = EditableGguf::Read(TestDataPath("vectors/tiny-f32.gguf"));
    ASSERT_TRUE(g.ok()) << g.status();
    tiny_ = *std::move(g);
    original_ = LoadOrFail(TestDataPath("vectors/tiny-f32.gguf"));
    ASSERT_NE(original_, nullptr);
    ids_ = ReadIds(TestDataPath("vectors/tiny-f32.ids"));
  }
  void TearDown() override {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  std::unique_ptr<Loaded> WriteAndLoad() {
    path_ = TempPath("variant.gguf");
    const absl::Status s = tiny_.Write(path_);
    EXPECT_TRUE(s.ok()) << s;
    return LoadOrFail(path_);
  }

  EditableGguf tiny_;
  std::unique_ptr<Loaded> original_;
  std::vector<int32_t> ids_;
  std::string path_;
};

TEST_F(ReferenceLayoutTest, FusedGateUpGivesIdenticalLogits) {
  for (int il = 0; il < 4; ++il) {
    const std::string blk = "blk." + std::to_string(il) + ".";
    const testing::EditableTensor gate = *tiny_.Find(blk + "ffn_gate_exps.weight");
    const testing::EditableTensor up = *tiny_.Find(blk + "ffn_up_exps.weight");
    testing::EditableTensor fused{blk + "ffn_gate_up_exps.weight", gate.type, {64, 64, 8}, {}};
    const size_t expert_bytes = gate.data.size() / 8;
    for (size_t e = 0; e < 8; ++e) {
      fused.data.insert(fused.data.end(), gate.data.begin() + e * expert_bytes,
                        gate.data.begin() + (e + 1) * expert_bytes);
      fused.data.insert(fused.data.end(), up.data.begin() + e * expert_bytes,
                        up.data.begin() + (e + 1) * expert_bytes);
    }
    tiny_.RemoveTensor(gate.name);
    tiny_.RemoveTensor(up.name);
    tiny_.tensors.push_back(std::move(fused));
  }
  std::unique_ptr<Loaded> fused = WriteAndLoad();
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(RunAll(*fused->ref, ids_), RunAll(*original_->ref, ids_));
}

TEST_F(ReferenceLayoutTest, FusedQkvGivesIdenticalLogits) {
  for (int il = 0; il < 4; ++il) {
    const std::string blk = "blk." + std::to_string(il) + ".";
    testing::EditableTensor qkv{blk + "attn_qkv.weight", TensorType::kF32, {64, 64 + 32 + 32}, {}};
    for (const char* part : {"attn_q.weight", "attn_k.weight", "attn_v.weight"}) {
      const testing::EditableTensor t = *tiny_.Find(blk + part);
      qkv.data.insert(qkv.data.end(), t.data.begin(), t.data.end());
      tiny_.RemoveTensor(t.name);
    }
    tiny_.tensors.push_back(std::move(qkv));
  }
  std::unique_ptr<Loaded> fused = WriteAndLoad();
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->model.weights.layers[3].attn.v.name, "blk.3.attn_qkv.weight");
  EXPECT_EQ(RunAll(*fused->ref, ids_), RunAll(*original_->ref, ids_));
}

TEST_F(ReferenceLayoutTest, TiedOutputUsesTheEmbedding) {
  tiny_.RemoveTensor("output.weight");
  std::unique_ptr<Loaded> tied = WriteAndLoad();
  ASSERT_NE(tied, nullptr);
  // The same computation with the output matrix swapped by hand.
  Model by_hand = original_->model;
  by_hand.weights.output = by_hand.weights.token_embd;
  absl::StatusOr<std::unique_ptr<ReferenceEngine>> ref = ReferenceEngine::Create(by_hand, 64);
  ASSERT_TRUE(ref.ok());
  const std::vector<float> tied_logits = RunAll(*tied->ref, ids_);
  EXPECT_EQ(tied_logits, RunAll(**ref, ids_));
  EXPECT_NE(tied_logits, RunAll(*original_->ref, ids_));
}

}  // namespace
}  // namespace moetier
