// The qwen2moe loader (worker/model/qwen2moe.cc): attention biases on q, k
// and v, no q/k norm, a shared expert in every layer and a router without
// renormalization; and the errors of files that differ from that.
#include <cstring>
#include <memory>
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
using testing::EditableTensor;
using ::testing::HasSubstr;

using Qwen2MoeModelTest = testing::EditedModelTest;

// The tiny vector: embd 128, 4 heads and 2 KV heads of 32, 8 experts (top
// 2) of width 256, a shared expert of 256.
constexpr int kEmbd = 128;
constexpr int kQDim = 4 * 32;
constexpr int kKvDim = 2 * 32;

TEST_F(Qwen2MoeModelTest, BiasedAttentionAndSharedExpertInEveryLayer) {
  absl::StatusOr<Model> model = Load(Vector("qwen2moe-tiny-f32"));
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  EXPECT_EQ(hp.architecture, "qwen2moe");
  EXPECT_EQ(hp.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(hp.n_rot, hp.head_dim);
  EXPECT_EQ(hp.qk_norm, QkNorm::kNone);
  EXPECT_FALSE(hp.router.renormalize);
  EXPECT_EQ(hp.n_ff_exp, 256);
  EXPECT_EQ(hp.n_ff_shared, 256);
  EXPECT_FALSE(model->weights.output_tied);
  ASSERT_EQ(model->weights.layers.size(), 2u);
  for (const LayerWeights& l : model->weights.layers) {
    EXPECT_EQ(l.mixer, MixerKind::kAttention);
    EXPECT_EQ(l.ffn, FfnKind::kMoeWithSharedExpert);
    EXPECT_FALSE(l.attn.q_norm.present());
    ASSERT_TRUE(l.attn.q_bias.present());
    ASSERT_TRUE(l.attn.k_bias.present());
    ASSERT_TRUE(l.attn.v_bias.present());
    EXPECT_EQ(l.attn.q_bias.cols(), kQDim);
    EXPECT_EQ(l.attn.k_bias.cols(), kKvDim);
    EXPECT_EQ(l.attn.v_bias.cols(), kKvDim);
    EXPECT_TRUE(l.moe.shared_gate_inp.present());
    EXPECT_EQ(l.moe.shared_down.cols(), 256);
  }
}

// The biases travel with the dense weights: a model's table lists them.
TEST_F(Qwen2MoeModelTest, BiasesAreDenseWeights) {
  absl::StatusOr<Model> model = Load(Vector("qwen2moe-tiny-f32"));
  ASSERT_TRUE(model.ok()) << model.status();
  int biases = 0;
  for (const WeightRef* w : WeightRefs(model->weights, /*include_experts=*/false)) {
    if (w->name.find(".bias") != std::string::npos) ++biases;
  }
  EXPECT_EQ(biases, 3 * 2);
}

// llama.cpp's newer loaders read q/k/v biases as optional; so does this one.
TEST_F(Qwen2MoeModelTest, AbsentBiasesAreNone) {
  EditableGguf g = Vector("qwen2moe-tiny-f32");
  g.RemoveTensor("blk.0.attn_k.bias");
  absl::StatusOr<Model> model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE(model->weights.layers[0].attn.k_bias.present());
  EXPECT_TRUE(model->weights.layers[0].attn.q_bias.present());
  EXPECT_TRUE(model->weights.layers[1].attn.k_bias.present());
}

TEST_F(Qwen2MoeModelTest, BiasOfTheWrongShapeIsNamed) {
  EditableGguf g = Vector("qwen2moe-tiny-f32");
  EditableTensor* bias = g.Find("blk.1.attn_v.bias");
  ASSERT_NE(bias, nullptr);
  ASSERT_EQ(bias->ne, (std::vector<int64_t>{kKvDim}));
  bias->ne = {kQDim};
  bias->data.resize(kQDim * sizeof(float));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), AllOf(HasSubstr("blk.1.attn_v.bias"), HasSubstr("64")));
}

TEST_F(Qwen2MoeModelTest, OutputBiasIsRefusedByName) {
  EditableGguf g = Vector("qwen2moe-tiny-f32");
  g.tensors.push_back(testing::ZeroF32Vector("blk.0.attn_output.bias", kEmbd));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.0.attn_output.bias"), HasSubstr("qwen2moe")));
}

TEST_F(Qwen2MoeModelTest, MissingSharedExpertIsNamed) {
  EditableGguf g = Vector("qwen2moe-tiny-f32");
  g.RemoveTensor("blk.1.ffn_up_shexp.weight");
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("blk.1.ffn_up_shexp.weight"));
}

// Early files lack the expert widths; llama.cpp then takes the expert width
// as feed_forward_length / top-k and the shared one as feed_forward_length.
TEST_F(Qwen2MoeModelTest, WidthsFallBackToFeedForwardLength) {
  EditableGguf g = Vector("qwen2moe-tiny-f32");
  g.Remove("qwen2moe.expert_feed_forward_length");
  g.Set("qwen2moe.feed_forward_length", GgufValue::Uint32(512));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->hparams.n_ff_exp, 256);
  EXPECT_EQ(model->hparams.n_ff_shared, 256);

  // Shared width 512 from the fallback, but the tensors are 256 wide.
  g.Remove("qwen2moe.expert_shared_feed_forward_length");
  model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("blk.0.ffn_gate_shexp.weight"));

  g.Set("qwen2moe.expert_feed_forward_length", GgufValue::Uint32(256));
  g.Set("qwen2moe.feed_forward_length", GgufValue::Uint32(256));
  model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->hparams.n_ff_shared, 256);

  // llama.cpp reads a width of 0 as absent too.
  g.Set("qwen2moe.expert_feed_forward_length", GgufValue::Uint32(0));
  g.Set("qwen2moe.expert_shared_feed_forward_length", GgufValue::Uint32(0));
  g.Set("qwen2moe.feed_forward_length", GgufValue::Uint32(512));
  model = Load(g);
  ASSERT_FALSE(model.ok());  // shared width 512 from the fallback, tensors 256
  EXPECT_THAT(model.status().message(), HasSubstr("blk.0.ffn_gate_shexp.weight"));
  g.Set("qwen2moe.expert_shared_feed_forward_length", GgufValue::Uint32(256));
  model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->hparams.n_ff_exp, 256);  // 512 / top-2
}

// A qwen2moe file without output.weight is refused, as llama.cpp does.
TEST_F(Qwen2MoeModelTest, OutputIsRequired) {
  EditableGguf g = Vector("qwen2moe-tiny-f32");
  g.RemoveTensor("output.weight");
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("output.weight"));
}

// Other architectures still refuse q/k/v biases.
TEST_F(Qwen2MoeModelTest, QwenThreeRefusesQueryBias) {
  EditableGguf g = Vector("tiny-f32");
  g.tensors.push_back(testing::ZeroF32Vector("blk.0.attn_q.bias", 128));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), AllOf(HasSubstr("blk.0.attn_q.bias"), HasSubstr("biases")));
}

}  // namespace
}  // namespace moetier
