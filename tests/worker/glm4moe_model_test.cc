// The glm4moe loader (worker/model/glm4moe.cc): leading dense layers, a
// sigmoid router with a selection bias, renormalized and scaled weights, an
// ungated shared expert, half-head rope, optional q/k norms, and the MTP
// layer left out of the main pass; and the errors of files that differ.
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

using Glm4MoeModelTest = testing::EditedModelTest;

// The tiny vector: 3 layers of the main pass (the first dense, width 384)
// and one MTP layer; 4 heads and 2 KV heads of 32, 16 rotated dims; 8
// experts (top 2) of width 128 and one shared expert; scale 1.8.
constexpr const char* kTiny = "glm4moe-tiny-f32";

TEST_F(Glm4MoeModelTest, DenseLeadThenExpertsWithSigmoidRouter) {
  absl::StatusOr<Model> model = Load(Vector(kTiny));
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  EXPECT_EQ(hp.architecture, "glm4moe");
  EXPECT_EQ(hp.n_layer, 3);  // block_count 4 less the MTP layer
  EXPECT_EQ(hp.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(hp.head_dim, 32);
  EXPECT_EQ(hp.n_rot, 16);
  EXPECT_EQ(hp.qk_norm, QkNorm::kNone);
  EXPECT_EQ(hp.router.gating, RouterGating::kSigmoid);
  EXPECT_TRUE(hp.router.renormalize);
  EXPECT_FLOAT_EQ(hp.router.weights_scale, 1.8f);
  EXPECT_EQ(hp.n_ff_exp, 128);
  EXPECT_EQ(hp.n_ff_shared, 128);
  EXPECT_EQ(hp.n_ff_dense, 384);
  ASSERT_EQ(model->weights.layers.size(), 3u);
  const LayerWeights& dense = model->weights.layers[0];
  EXPECT_EQ(dense.ffn, FfnKind::kDense);
  EXPECT_EQ(dense.dense.down.cols(), 384);
  EXPECT_FALSE(dense.moe.router.present());
  EXPECT_EQ(dense.ffn_norm.name, "blk.0.post_attention_norm.weight");
  for (int il = 1; il < 3; ++il) {
    const LayerWeights& l = model->weights.layers[static_cast<size_t>(il)];
    EXPECT_EQ(l.ffn, FfnKind::kMoeWithSharedExpert);
    EXPECT_TRUE(l.attn.q_bias.present());
    ASSERT_TRUE(l.moe.selection_bias.present());
    EXPECT_EQ(l.moe.selection_bias.cols(), 8);
    EXPECT_FALSE(l.moe.shared_gate_inp.present());  // the shared expert has no gate
    EXPECT_EQ(l.moe.shared_down.cols(), 128);
  }
  // Nothing of the MTP layer is read.
  for (const WeightRef* w : WeightRefs(model->weights, /*include_experts=*/true)) {
    EXPECT_EQ(w->name.find("blk.3."), std::string::npos) << w->name;
  }
}

// llama.cpp's defaults for keys a converter may leave out: sigmoid gating,
// no renormalization, no scale, no shared expert, no dense layers.
TEST_F(Glm4MoeModelTest, AbsentRouterKeysTakeLlamaCppDefaults) {
  EditableGguf g = Vector(kTiny);
  g.Remove("glm4moe.expert_gating_func");
  g.Remove("glm4moe.expert_weights_norm");
  g.Remove("glm4moe.expert_weights_scale");
  absl::StatusOr<Model> model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->hparams.router.gating, RouterGating::kSigmoid);
  EXPECT_FALSE(model->hparams.router.renormalize);
  EXPECT_FLOAT_EQ(model->hparams.router.weights_scale, 1.0f);
}

TEST_F(Glm4MoeModelTest, WithoutDenseLayersEveryLayerNeedsExperts) {
  EditableGguf g = Vector(kTiny);
  g.Remove("glm4moe.leading_dense_block_count");
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("blk.0.ffn_gate_inp.weight"));
}

TEST_F(Glm4MoeModelTest, AllDenseIsRefused) {
  EditableGguf g = Vector(kTiny);
  g.Set("glm4moe.leading_dense_block_count", GgufValue::Uint32(3));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(), HasSubstr("leading_dense_block_count"));
  g.Set("glm4moe.leading_dense_block_count", GgufValue::Uint32(9));
  model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("leading_dense_block_count"), HasSubstr("9")));
}

TEST_F(Glm4MoeModelTest, WithoutSharedExpertsTheLayersAreRoutedOnly) {
  EditableGguf g = Vector(kTiny);
  g.Set("glm4moe.expert_shared_count", GgufValue::Uint32(0));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->weights.layers[1].ffn, FfnKind::kMoe);
  EXPECT_EQ(model->hparams.n_ff_shared, 0);
  // Two shared experts are one matrix twice as wide, which the file lacks.
  g.Set("glm4moe.expert_shared_count", GgufValue::Uint32(2));
  model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("blk.1.ffn_gate_shexp.weight"));
}

// Optional keys of another type, or negative, are errors naming them, not
// llama.cpp's defaults (which would drop the shared expert, change the
// gating or the scale).
TEST_F(Glm4MoeModelTest, AnOptionalKeyOfTheWrongTypeIsNamed) {
  for (const char* key : {"glm4moe.expert_shared_count", "glm4moe.expert_gating_func",
                          "glm4moe.leading_dense_block_count", "glm4moe.nextn_predict_layers"}) {
    for (const GgufValue& value : {GgufValue::Int32(-1), GgufValue::Float32(1.0f)}) {
      EditableGguf g = Vector(kTiny);
      g.Set(key, value);
      absl::StatusOr<Model> model = Load(g);
      ASSERT_FALSE(model.ok()) << key;
      EXPECT_THAT(model.status().message(), HasSubstr(key));
    }
  }
  EditableGguf g = Vector(kTiny);
  g.Set("glm4moe.expert_weights_scale", GgufValue::Uint32(2));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("glm4moe.expert_weights_scale"));
}

// llama.cpp routes within the best expert groups of any architecture whose
// file sets expert_group_count above 1; moetier has no such router and says
// so rather than route differently.
TEST_F(Glm4MoeModelTest, GroupLimitedRoutingIsRefused) {
  EditableGguf g = Vector(kTiny);
  g.Set("glm4moe.expert_group_count", GgufValue::Uint32(4));
  g.Set("glm4moe.expert_group_used_count", GgufValue::Uint32(2));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("glm4moe.expert_group_count = 4"), HasSubstr("group-limited")));
  // One group is no grouping.
  g.Set("glm4moe.expert_group_count", GgufValue::Uint32(1));
  EXPECT_TRUE(Load(g).ok());
}

TEST_F(Glm4MoeModelTest, MissingSelectionBiasIsNamed) {
  EditableGguf g = Vector(kTiny);
  g.RemoveTensor("blk.2.exp_probs_b.bias");
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("blk.2.exp_probs_b.bias"));
}

TEST_F(Glm4MoeModelTest, SoftmaxWeightGatingIsRefused) {
  EditableGguf g = Vector(kTiny);
  g.Set("glm4moe.expert_gating_func", GgufValue::Uint32(3));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(), HasSubstr("expert_gating_func = 3"));
  g.Set("glm4moe.expert_gating_func", GgufValue::Uint32(1));
  model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->hparams.router.gating, RouterGating::kSoftmax);
}

TEST_F(Glm4MoeModelTest, VisionRopeSectionsAreRefused) {
  EditableGguf g = Vector(kTiny);
  g.Set("glm4moe.rope.dimension_sections", GgufValue::Int32Array({4, 2, 2, 0}));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("rope.dimension_sections"));
}

// Without its MTP layer's tensors the main pass still loads: they are never
// read, and a file trimmed of them (nextn_predict_layers 0) is a plain
// three-layer model.
TEST_F(Glm4MoeModelTest, TheMtpLayerIsNeverRead) {
  EditableGguf g = Vector(kTiny);
  std::vector<std::string> mtp;
  for (const auto& t : g.tensors) {
    if (t.name.rfind("blk.3.", 0) == 0) mtp.push_back(t.name);
  }
  ASSERT_FALSE(mtp.empty());
  for (const std::string& name : mtp) g.RemoveTensor(name);
  absl::StatusOr<Model> model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->hparams.n_layer, 3);
  // Counting it as a main layer needs its tensors.
  g.Set("glm4moe.nextn_predict_layers", GgufValue::Uint32(0));
  model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("blk.3."));
}

}  // namespace
}  // namespace moetier
