#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gguf/gguf_reader.h"
#include "gguf_edit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/qwen3moe_model.h"

namespace moetier {
namespace {

using ::testing::AllOf;
using testing::EditableGguf;
using ::testing::HasSubstr;
using testing::TempPath;
using testing::TestDataPath;

std::unique_ptr<GgufModel> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(path);
  EXPECT_TRUE(gguf.ok()) << gguf.status();
  return gguf.ok() ? *std::move(gguf) : nullptr;
}

class Qwen3MoeLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<EditableGguf> gguf = EditableGguf::Read(TestDataPath("vectors/tiny-f32.gguf"));
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    tiny_ = *std::move(gguf);
  }
  void TearDown() override {
    for (const std::string& path : written_) std::remove(path.c_str());
  }

  // Writes `g` and loads it; the GgufModel stays open for the test.
  absl::StatusOr<Qwen3MoeModel> Load(const EditableGguf& g) {
    const std::string path = TempPath(std::to_string(written_.size()) + ".gguf");
    written_.push_back(path);
    if (absl::Status s = g.Write(path); !s.ok()) return s;
    gguf_ = OpenOrDie(path);
    if (gguf_ == nullptr) return absl::InternalError("reopen failed");
    return LoadQwen3Moe(*gguf_);
  }

  EditableGguf tiny_;
  std::unique_ptr<GgufModel> gguf_;
  std::vector<std::string> written_;
};

TEST_F(Qwen3MoeLoaderTest, ReadsTinyHparamsAndWeights) {
  std::unique_ptr<GgufModel> gguf = OpenOrDie(TestDataPath("vectors/tiny-f32.gguf"));
  ASSERT_NE(gguf, nullptr);
  absl::StatusOr<Qwen3MoeModel> model = LoadQwen3Moe(*gguf);
  ASSERT_TRUE(model.ok()) << model.status();
  const Qwen3MoeHparams& hp = model->hparams;
  EXPECT_EQ(hp.n_layer, 4);
  EXPECT_EQ(hp.n_embd, 64);
  EXPECT_EQ(hp.n_head, 4);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.head_dim, 16);
  EXPECT_EQ(hp.n_expert, 8);
  EXPECT_EQ(hp.n_expert_used, 2);
  EXPECT_EQ(hp.n_ff_exp, 32);
  EXPECT_EQ(hp.n_vocab, 512);
  EXPECT_GT(hp.n_ctx_train, 0);
  EXPECT_GT(hp.rms_eps, 0.0f);
  ASSERT_EQ(model->weights.layers.size(), 4u);
  EXPECT_FALSE(model->weights.output_tied);

  const Qwen3MoeLayerWeights& l1 = model->weights.layers[1];
  const GgufTensorInfo* down = gguf->FindTensor("blk.1.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(l1.ffn_down_exps.data, gguf->TensorData(*down).data());
  EXPECT_EQ(l1.ffn_down_exps.ne, (std::array<int64_t, 4>{32, 64, 8, 1}));
  EXPECT_EQ(l1.ffn_down_exps.row_bytes, 32u * 4u);
  EXPECT_EQ(l1.ffn_down_exps.expert_stride_bytes, 32u * 4u * 64u);
  EXPECT_EQ(l1.ffn_down_exps.expert(3), l1.ffn_down_exps.data + 3 * 32 * 4 * 64);
  EXPECT_EQ(l1.attn_k.ne, (std::array<int64_t, 4>{64, 32, 1, 1}));
  EXPECT_EQ(l1.attn_k.name, "blk.1.attn_k.weight");
}

TEST_F(Qwen3MoeLoaderTest, ReadsQuantizedTypes) {
  std::unique_ptr<GgufModel> gguf = OpenOrDie(TestDataPath("vectors/small-q4_k_m.gguf"));
  ASSERT_NE(gguf, nullptr);
  absl::StatusOr<Qwen3MoeModel> model = LoadQwen3Moe(*gguf);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->hparams.head_dim, 128);
  EXPECT_EQ(model->hparams.n_vocab, 1024);
  EXPECT_EQ(model->weights.token_embd.type, TensorType::kQ4_K);
  EXPECT_EQ(model->weights.token_embd.row_bytes, 144u);
  EXPECT_EQ(model->weights.output.type, TensorType::kQ6_K);
}

TEST_F(Qwen3MoeLoaderTest, RejectsOtherArchitecture) {
  tiny_.Set("general.architecture", GgufValue::String("llama"));
  absl::StatusOr<Qwen3MoeModel> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("'llama'"), HasSubstr("architecture"), HasSubstr("qwen3moe")));
}

TEST_F(Qwen3MoeLoaderTest, MissingTensorIsNamed) {
  tiny_.RemoveTensor("blk.2.ffn_down_exps.weight");
  absl::StatusOr<Qwen3MoeModel> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.2.ffn_down_exps.weight"), HasSubstr("missing")));
}

TEST_F(Qwen3MoeLoaderTest, WrongShapeIsNamedWithBothShapes) {
  testing::EditableTensor* k = tiny_.Find("blk.1.attn_k.weight");
  ASSERT_NE(k, nullptr);
  k->ne = {64, 16};
  k->data.resize(64 * 16 * 4);
  absl::StatusOr<Qwen3MoeModel> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), AllOf(HasSubstr("blk.1.attn_k.weight"),
                                              HasSubstr("{64, 16}"), HasSubstr("{64, 32}")));
}

TEST_F(Qwen3MoeLoaderTest, TypeWithoutCodecIsRejected) {
  testing::EditableTensor* q = tiny_.Find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  q->type = TensorType::kQ4_1;  // 32 elements in 20 bytes, no codec
  q->data.assign(64 * 2 * 20, 0);
  absl::StatusOr<Qwen3MoeModel> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.0.attn_q.weight"), HasSubstr("Q4_1"), HasSubstr("Q8_0")));
}

TEST_F(Qwen3MoeLoaderTest, MissingOutputMeansTied) {
  tiny_.RemoveTensor("output.weight");
  absl::StatusOr<Qwen3MoeModel> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(model->weights.output_tied);
  EXPECT_EQ(model->weights.output.data, model->weights.token_embd.data);
  EXPECT_EQ(model->weights.output.ne, model->weights.token_embd.ne);
}

TEST_F(Qwen3MoeLoaderTest, DefaultsForOptionalKeys) {
  tiny_.Remove("qwen3moe.attention.key_length");
  tiny_.Remove("qwen3moe.attention.value_length");
  tiny_.Remove("qwen3moe.expert_feed_forward_length");
  // n_ff_exp falls back to feed_forward_length / expert_used_count.
  tiny_.Set("qwen3moe.feed_forward_length", GgufValue::Uint32(64));
  tiny_.Remove("qwen3moe.rope.freq_base");
  // Per-layer arrays are accepted when every layer agrees.
  tiny_.Set("qwen3moe.attention.head_count", GgufValue::Int32Array({4, 4, 4, 4}));
  tiny_.Set("qwen3moe.block_count", GgufValue::Uint64(4));
  absl::StatusOr<Qwen3MoeModel> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->hparams.head_dim, 64 / 4);
  EXPECT_EQ(model->hparams.n_ff_exp, 32);
  EXPECT_EQ(model->hparams.rope_freq_base, 10000.0f);
  EXPECT_EQ(model->hparams.n_head, 4);
}

TEST_F(Qwen3MoeLoaderTest, HeadCountKvDefaultsToHeadCount) {
  tiny_.Remove("qwen3moe.attention.head_count_kv");
  absl::StatusOr<Qwen3MoeModel> model = Load(tiny_);
  // With 4 kv heads attn_k must have 64 rows; the file has 32.
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.0.attn_k.weight"), HasSubstr("{64, 64}")));
}

TEST_F(Qwen3MoeLoaderTest, UnequalPerLayerHeadCountsAreUnsupported) {
  tiny_.Set("qwen3moe.attention.head_count", GgufValue::Int32Array({4, 4, 8, 4}));
  absl::StatusOr<Qwen3MoeModel> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("qwen3moe.attention.head_count"), HasSubstr("layer 2")));
}

TEST_F(Qwen3MoeLoaderTest, MissingRequiredKeyIsNamed) {
  tiny_.Remove("qwen3moe.attention.layer_norm_rms_epsilon");
  absl::StatusOr<Qwen3MoeModel> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("qwen3moe.attention.layer_norm_rms_epsilon"));
}

TEST_F(Qwen3MoeLoaderTest, RopeScalingIsRefused) {
  tiny_.Set("qwen3moe.rope.scaling.type", GgufValue::String("yarn"));
  tiny_.Set("qwen3moe.rope.scaling.factor", GgufValue::Float32(4.0f));
  absl::StatusOr<Qwen3MoeModel> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("yarn"));
}

TEST_F(Qwen3MoeLoaderTest, FusedGateUpSplitsIntoHalves) {
  for (int il = 0; il < 4; ++il) {
    const std::string blk = "blk." + std::to_string(il) + ".";
    testing::EditableTensor gate = *tiny_.Find(blk + "ffn_gate_exps.weight");
    testing::EditableTensor up = *tiny_.Find(blk + "ffn_up_exps.weight");
    testing::EditableTensor fused;
    fused.name = blk + "ffn_gate_up_exps.weight";
    fused.type = gate.type;
    fused.ne = {64, 64, 8};
    const size_t expert_bytes = 64 * 32 * 4;
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
  absl::StatusOr<Qwen3MoeModel> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  const Qwen3MoeLayerWeights& l = model->weights.layers[2];
  EXPECT_EQ(l.ffn_gate_exps.ne, (std::array<int64_t, 4>{64, 32, 8, 1}));
  EXPECT_EQ(l.ffn_up_exps.ne, (std::array<int64_t, 4>{64, 32, 8, 1}));
  EXPECT_EQ(l.ffn_up_exps.data, l.ffn_gate_exps.data + 32 * 64 * 4);
  EXPECT_EQ(l.ffn_gate_exps.expert_stride_bytes, 64u * 64u * 4u);
  EXPECT_EQ(l.ffn_up_exps.expert(5), l.ffn_up_exps.data + 5 * 64 * 64 * 4);
}

TEST_F(Qwen3MoeLoaderTest, FusedGateUpWithWrongShapeIsNamed) {
  testing::EditableTensor* gate = tiny_.Find("blk.0.ffn_gate_exps.weight");
  gate->name = "blk.0.ffn_gate_up_exps.weight";
  tiny_.RemoveTensor("blk.0.ffn_up_exps.weight");
  absl::StatusOr<Qwen3MoeModel> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.0.ffn_gate_up_exps.weight"), HasSubstr("{64, 64, 8}")));
}

}  // namespace
}  // namespace moetier
