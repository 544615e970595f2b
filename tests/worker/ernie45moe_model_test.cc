// The ernie4_5-moe loader (worker/model/ernie45moe.cc): leading dense
// layers and experts every interleave_moe_layer_step-th layer after them, a
// softmax router with an optional selection bias, an ungated shared expert,
// NORM rope over the whole head, optional q/k/v biases; and the errors of
// files that differ.
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "edited_model_test.h"
#include "gguf/gguf_value.h"
#include "gguf_edit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/architectures.h"

namespace moetier {
namespace {

using ::testing::AllOf;
using testing::EditableGguf;
using ::testing::HasSubstr;

using Ernie45MoeModelTest = testing::EditedModelTest;

// The tiny vector: 4 layers, the first dense (width 256), then experts in
// every layer; 8 experts (top 2) of width 128 and a shared expert of 256.
constexpr const char* kTiny = "ernie45moe-tiny-f32";

TEST_F(Ernie45MoeModelTest, DenseLeadThenExpertsWithSoftmaxRouter) {
  absl::StatusOr<Model> model = Load(Vector(kTiny));
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  EXPECT_EQ(hp.architecture, "ernie4_5-moe");
  EXPECT_EQ(hp.rope_style, RopeStyle::kNorm);
  EXPECT_EQ(hp.n_rot, hp.head_dim);
  EXPECT_EQ(hp.qk_norm, QkNorm::kNone);
  EXPECT_EQ(hp.router.gating, RouterGating::kSoftmax);
  EXPECT_TRUE(hp.router.renormalize);
  EXPECT_EQ(hp.n_ff_exp, 128);
  EXPECT_EQ(hp.n_ff_shared, 256);
  EXPECT_EQ(hp.n_ff_dense, 256);
  ASSERT_EQ(model->weights.layers.size(), 4u);
  EXPECT_EQ(model->weights.layers[0].ffn, FfnKind::kDense);
  for (size_t il = 1; il < 4; ++il) {
    const LayerWeights& l = model->weights.layers[il];
    EXPECT_EQ(l.ffn, FfnKind::kMoeWithSharedExpert) << il;
    EXPECT_TRUE(l.moe.selection_bias.present()) << il;
    EXPECT_FALSE(l.moe.shared_gate_inp.present()) << il;
    EXPECT_TRUE(l.attn.q_bias.present()) << il;
  }
}

// A step of 2 puts experts in layers 1 and 3 only; layer 2 then needs a
// dense FFN, where this file (laid out as llama.cpp's loader wants it) has
// experts.
TEST_F(Ernie45MoeModelTest, TheStepInterleavesDenseLayers) {
  EditableGguf g = Vector(kTiny);
  g.Set("ernie4_5-moe.interleave_moe_layer_step", GgufValue::Uint32(2));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(), AllOf(HasSubstr("layer 2 has expert tensors"),
                                              HasSubstr("interleave_moe_layer_step = 2")));
}

// Optional keys of another type, or negative, are errors naming them, not
// their defaults (which would drop the shared expert, or the dense lead).
TEST_F(Ernie45MoeModelTest, AnOptionalKeyOfTheWrongTypeIsNamed) {
  for (const char* key : {"ernie4_5-moe.expert_shared_feed_forward_length",
                          "ernie4_5-moe.leading_dense_block_count"}) {
    for (const GgufValue& value : {GgufValue::Int32(-1), GgufValue::Float32(256.0f)}) {
      EditableGguf g = Vector(kTiny);
      g.Set(key, value);
      absl::StatusOr<Model> model = Load(g);
      ASSERT_FALSE(model.ok()) << key;
      EXPECT_THAT(model.status().message(), HasSubstr(key));
    }
  }
  EditableGguf g = Vector(kTiny);
  g.Set("ernie4_5-moe.nextn_predict_layers", GgufValue::Uint32(1));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("nextn_predict_layers"));
}

TEST_F(Ernie45MoeModelTest, TheSelectionBiasAndTheSharedExpertAreOptional) {
  EditableGguf g = Vector(kTiny);
  for (int il = 1; il < 4; ++il) {
    g.RemoveTensor("blk." + std::to_string(il) + ".exp_probs_b.bias");
  }
  g.Set("ernie4_5-moe.expert_shared_feed_forward_length", GgufValue::Uint32(0));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE(model->weights.layers[1].moe.selection_bias.present());
  EXPECT_EQ(model->weights.layers[1].ffn, FfnKind::kMoe);
}

TEST_F(Ernie45MoeModelTest, RequiredKeysAreNamed) {
  for (const char* key :
       {"ernie4_5-moe.interleave_moe_layer_step", "ernie4_5-moe.expert_feed_forward_length"}) {
    EditableGguf g = Vector(kTiny);
    g.Remove(key);
    absl::StatusOr<Model> model = Load(g);
    ASSERT_FALSE(model.ok()) << key;
    EXPECT_THAT(model.status().message(), HasSubstr(key));
  }
}

// Absent, leading_dense_block_count is 0 (llama.cpp's default): layer 0
// then needs experts, which the file lacks.
TEST_F(Ernie45MoeModelTest, AbsentDenseLeadIsZero) {
  EditableGguf g = Vector(kTiny);
  g.Remove("ernie4_5-moe.leading_dense_block_count");
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("blk.0.ffn_gate_inp.weight"));
}

// The routing weights are never scaled, whatever the file says (llama.cpp
// reads no expert_weights_scale for this architecture).
TEST_F(Ernie45MoeModelTest, AnExpertWeightsScaleIsIgnored) {
  EditableGguf g = Vector(kTiny);
  g.Set("ernie4_5-moe.expert_weights_scale", GgufValue::Float32(2.5f));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FLOAT_EQ(model->hparams.router.weights_scale, 1.0f);
}

TEST_F(Ernie45MoeModelTest, NoLayerWithExpertsIsRefused) {
  EditableGguf g = Vector(kTiny);
  g.Set("ernie4_5-moe.leading_dense_block_count", GgufValue::Uint32(4));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("leading_dense_block_count"), HasSubstr("no layer with experts")));
}

// llama.cpp asserts that rope turns the whole head.
TEST_F(Ernie45MoeModelTest, PartialRopeIsRefused) {
  EditableGguf g = Vector(kTiny);
  g.Set("ernie4_5-moe.rope.dimension_count", GgufValue::Uint32(16));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("rope.dimension_count"));
}

}  // namespace
}  // namespace moetier
