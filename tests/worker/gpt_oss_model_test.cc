// The gpt-oss loader (worker/model/gpt_oss.cc): attention sinks, q/k/v and
// output biases, a sliding window on the layers its pattern picks, a biased
// router weighing by the softmax of the chosen, per-expert biases and the
// clamped SwiGLU; and the errors of files that differ.
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

using testing::EditableGguf;
using ::testing::HasSubstr;

using GptOssModelTest = testing::EditedModelTest;

constexpr const char* kTiny = "gpt-oss-tiny-f32";

std::vector<int> Windows(const Model& model) {
  std::vector<int> windows;
  for (const LayerWeights& l : model.weights.layers) windows.push_back(l.attention_window);
  return windows;
}

TEST_F(GptOssModelTest, EveryLayerHasSinksBiasesAndRoutedExperts) {
  EditableGguf g = Vector(kTiny);
  g.Set("gpt-oss.attention.sliding_window", GgufValue::Uint32(5));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  EXPECT_EQ(hp.architecture, "gpt-oss");
  EXPECT_EQ(hp.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(hp.n_rot, hp.head_dim);
  EXPECT_EQ(hp.qk_norm, QkNorm::kNone);
  EXPECT_EQ(hp.rope_scaling_keys.type, "yarn");
  EXPECT_EQ(hp.rope_scaling.ext_factor, 1.0f);
  EXPECT_EQ(hp.router.gating, RouterGating::kSoftmaxOfChosen);
  EXPECT_FALSE(hp.router.renormalize);
  EXPECT_FLOAT_EQ(hp.router.weights_scale, 1.0f);
  EXPECT_EQ(hp.expert_activation, ExpertActivation::kSwigluOai);
  // The default period 2: the even layers slide.
  EXPECT_EQ(Windows(*model), (std::vector<int>{5, 0, 5, 0}));
  for (const LayerWeights& l : model->weights.layers) {
    EXPECT_EQ(l.mixer, MixerKind::kAttention);
    EXPECT_EQ(l.ffn, FfnKind::kMoe);
    EXPECT_NE(hp.n_head * hp.head_dim, hp.n_embd);  // q is wider than the stream
    EXPECT_EQ(l.attn.sinks.cols(), hp.n_head);
    EXPECT_TRUE(l.attn.q_bias.present() && l.attn.k_bias.present() && l.attn.v_bias.present());
    EXPECT_EQ(l.attn.output_bias.cols(), hp.n_embd);
    EXPECT_EQ(l.ffn_norm.name.substr(l.ffn_norm.name.find('.', 4) + 1),
              "post_attention_norm.weight");
    EXPECT_EQ(l.moe.router_bias.cols(), hp.n_expert);
    EXPECT_EQ(l.moe.gate_exps_bias.cols(), hp.n_ff_exp);
    EXPECT_EQ(l.moe.gate_exps_bias.rows(), hp.n_expert);
    EXPECT_EQ(l.moe.up_exps_bias.rows(), hp.n_expert);
    EXPECT_EQ(l.moe.down_exps_bias.cols(), hp.n_embd);
  }
  // The biases stay with the dense weights the worker keeps.
  int biases = 0;
  for (const WeightRef* w : WeightRefs(model->weights, /*include_experts=*/false)) {
    biases += w->name.find("_exps.bias") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(biases, 3 * hp.n_layer);
}

// A sliding-window layer reads at most its window's rows, whatever the
// position; the others read every earlier row.
TEST_F(GptOssModelTest, KvReadsStopGrowingAtTheWindow) {
  EditableGguf g = Vector(kTiny);
  g.Set("gpt-oss.attention.sliding_window", GgufValue::Uint32(5));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  const uint64_t row = 2ull * hp.n_head_kv * hp.head_dim * sizeof(float);  // K and V, f32
  EXPECT_EQ(KvBytesReadAt(*model, {}, 0), 4 * row);
  EXPECT_EQ(KvBytesReadAt(*model, {}, 3), 4 * 4 * row);
  // Position 99: layers 1 and 3 read 100 rows, layers 0 and 2 their 5.
  EXPECT_EQ(KvBytesReadAt(*model, {}, 99), (2 * 100 + 2 * 5) * row);
}

// llama.cpp's set_swa_pattern: period n slides layers il % n < n - 1, so 3
// slides two of three, 1 none and 0 all.
TEST_F(GptOssModelTest, TheWindowPatternPicksTheSlidingLayers) {
  EditableGguf g = Vector(kTiny);
  g.Set("gpt-oss.attention.sliding_window", GgufValue::Uint32(7));
  const std::vector<std::pair<uint32_t, std::vector<int>>> cases = {
      {3, {7, 7, 0, 7}}, {1, {0, 0, 0, 0}}, {0, {7, 7, 7, 7}}, {2, {7, 0, 7, 0}}};
  for (const auto& [period, windows] : cases) {
    g.Set("gpt-oss.attention.sliding_window_pattern", GgufValue::Uint32(period));
    absl::StatusOr<Model> model = Load(g);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ(Windows(*model), windows) << "period " << period;
  }
}

TEST_F(GptOssModelTest, MissingPiecesAreNamed) {
  for (const char* tensor : {"blk.1.attn_sinks.weight", "blk.2.ffn_gate_inp.bias",
                             "blk.0.ffn_down_exps.bias", "blk.3.ffn_up_exps.bias"}) {
    EditableGguf g = Vector(kTiny);
    g.RemoveTensor(tensor);
    absl::StatusOr<Model> model = Load(g);
    ASSERT_FALSE(model.ok()) << tensor;
    EXPECT_THAT(model.status().message(), HasSubstr(tensor));
  }
  EditableGguf g = Vector(kTiny);
  g.Remove("gpt-oss.attention.sliding_window");
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("gpt-oss.attention.sliding_window"));
}

TEST_F(GptOssModelTest, ASeparateRopeBaseForTheWindowedLayersIsRefused) {
  EditableGguf g = Vector(kTiny);
  g.Set("gpt-oss.rope.freq_base_swa", GgufValue::Float32(10000.0f));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(), HasSubstr("gpt-oss.rope.freq_base_swa"));
  // The same base as every other layer's is no difference.
  g.Set("gpt-oss.rope.freq_base_swa", GgufValue::Float32(150000.0f));
  model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
}

TEST_F(GptOssModelTest, AnUnscaledTypeWithAFactorIsRefused) {
  EditableGguf g = Vector(kTiny);
  g.Set("gpt-oss.rope.scaling.type", GgufValue::String("none"));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("gpt-oss.rope.scaling.factor"));
  g.Remove("gpt-oss.rope.scaling.factor");
  model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
}

TEST_F(GptOssModelTest, APatternOfTheWrongTypeIsNamed) {
  EditableGguf g = Vector(kTiny);
  g.Set("gpt-oss.attention.sliding_window_pattern", GgufValue::String("2"));
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("gpt-oss.attention.sliding_window_pattern"));
}

}  // namespace
}  // namespace moetier
