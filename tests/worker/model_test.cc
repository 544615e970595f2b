#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "edited_model_test.h"
#include "gguf/gguf_reader.h"
#include "gguf_edit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/architectures.h"

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

class Qwen3MoeLoaderTest : public testing::EditedModelTest {
 protected:
  void SetUp() override {
    tiny_ = Vector("tiny-f32");
    ASSERT_FALSE(tiny_.tensors.empty());
  }

  EditableGguf tiny_;
};

TEST_F(Qwen3MoeLoaderTest, ReadsTinyHparamsAndWeights) {
  std::unique_ptr<GgufModel> gguf = OpenOrDie(TestDataPath("vectors/tiny-f32.gguf"));
  ASSERT_NE(gguf, nullptr);
  absl::StatusOr<Model> model = LoadModel(*gguf);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
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

  const LayerWeights& l1 = model->weights.layers[1];
  const GgufTensorInfo* down = gguf->FindTensor("blk.1.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(l1.moe.down_exps.data, gguf->TensorData(*down).data());
  EXPECT_EQ(l1.moe.down_exps.ne, (std::array<int64_t, 4>{32, 64, 8, 1}));
  EXPECT_EQ(l1.moe.down_exps.row_bytes, 32u * 4u);
  EXPECT_EQ(l1.moe.down_exps.expert_stride_bytes, 32u * 4u * 64u);
  EXPECT_EQ(l1.moe.down_exps.expert(3), l1.moe.down_exps.data + 3 * 32 * 4 * 64);
  EXPECT_EQ(l1.attn.k.ne, (std::array<int64_t, 4>{64, 32, 1, 1}));
  EXPECT_EQ(l1.attn.k.name, "blk.1.attn_k.weight");
}

TEST_F(Qwen3MoeLoaderTest, ReadsQuantizedTypes) {
  std::unique_ptr<GgufModel> gguf = OpenOrDie(TestDataPath("vectors/small-q4_k_m.gguf"));
  ASSERT_NE(gguf, nullptr);
  absl::StatusOr<Model> model = LoadModel(*gguf);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->hparams.head_dim, 128);
  EXPECT_EQ(model->hparams.n_vocab, 1024);
  EXPECT_EQ(model->weights.token_embd.type, TensorType::kQ4_K);
  EXPECT_EQ(model->weights.token_embd.row_bytes, 144u);
  EXPECT_EQ(model->weights.output.type, TensorType::kQ6_K);
}

TEST_F(Qwen3MoeLoaderTest, UnknownArchitectureIsRefusedWithTheSupportedOnes) {
  tiny_.Set("general.architecture", GgufValue::String("deepseek2"));
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("'deepseek2'"), HasSubstr("architecture"), HasSubstr("qwen3moe"),
                    HasSubstr("olmoe"), HasSubstr("llama")));
}

TEST_F(Qwen3MoeLoaderTest, LayerPlanIsAttentionAndRoutedExperts) {
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  EXPECT_EQ(hp.architecture, "qwen3moe");
  EXPECT_EQ(hp.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(hp.qk_norm, QkNorm::kPerHead);
  EXPECT_TRUE(hp.router.renormalize);
  EXPECT_EQ(hp.n_rot, hp.head_dim);
  for (const LayerWeights& l : model->weights.layers) {
    EXPECT_EQ(l.mixer, MixerKind::kAttention);
    EXPECT_EQ(l.ffn, FfnKind::kMoe);
    EXPECT_EQ(l.attn.q_norm.ne[0], hp.head_dim);
  }
}

TEST_F(Qwen3MoeLoaderTest, MissingTensorIsNamed) {
  tiny_.RemoveTensor("blk.2.ffn_down_exps.weight");
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.2.ffn_down_exps.weight"), HasSubstr("missing")));
}

TEST_F(Qwen3MoeLoaderTest, WrongShapeIsNamedWithBothShapes) {
  testing::EditableTensor* k = tiny_.Find("blk.1.attn_k.weight");
  ASSERT_NE(k, nullptr);
  k->ne = {64, 16};
  k->data.resize(64 * 16 * 4);
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), AllOf(HasSubstr("blk.1.attn_k.weight"),
                                              HasSubstr("{64, 16}"), HasSubstr("{64, 32}")));
}

TEST_F(Qwen3MoeLoaderTest, TypeWithoutCodecIsRejected) {
  testing::EditableTensor* q = tiny_.Find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  q->type = TensorType::kQ8_1;  // 32 elements in 36 bytes, no codec
  q->data.assign(64 * 2 * 36, 0);
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.0.attn_q.weight"), HasSubstr("Q8_1"), HasSubstr("Q8_0")));
}

TEST_F(Qwen3MoeLoaderTest, MissingOutputMeansTied) {
  tiny_.RemoveTensor("output.weight");
  absl::StatusOr<Model> model = Load(tiny_);
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
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->hparams.head_dim, 64 / 4);
  EXPECT_EQ(model->hparams.n_ff_exp, 32);
  EXPECT_EQ(model->hparams.rope_freq_base, 10000.0f);
  EXPECT_EQ(model->hparams.n_head, 4);
}

TEST_F(Qwen3MoeLoaderTest, HeadCountKvDefaultsToHeadCount) {
  tiny_.Remove("qwen3moe.attention.head_count_kv");
  absl::StatusOr<Model> model = Load(tiny_);
  // With 4 kv heads attn_k must have 64 rows; the file has 32.
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.0.attn_k.weight"), HasSubstr("{64, 64}")));
}

TEST_F(Qwen3MoeLoaderTest, UnequalPerLayerHeadCountsAreUnsupported) {
  tiny_.Set("qwen3moe.attention.head_count", GgufValue::Int32Array({4, 4, 8, 4}));
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("qwen3moe.attention.head_count"), HasSubstr("layer 2")));
}

TEST_F(Qwen3MoeLoaderTest, MissingRequiredKeyIsNamed) {
  tiny_.Remove("qwen3moe.attention.layer_norm_rms_epsilon");
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("qwen3moe.attention.layer_norm_rms_epsilon"));
}

// YaRN's ramp and magnitude from the keys, by SPEC.md §3.0.1's formulas
// written out here in double (llama.cpp's float arithmetic can only differ
// at an exact integer, which these numbers are far from).
TEST_F(Qwen3MoeLoaderTest, YarnRopeScalingIsRead) {
  tiny_.Set("qwen3moe.rope.scaling.type", GgufValue::String("yarn"));
  tiny_.Set("qwen3moe.rope.scaling.factor", GgufValue::Float32(4.0f));
  tiny_.Set("qwen3moe.rope.scaling.original_context_length", GgufValue::Uint32(512));
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  const RopeScaling& s = hp.rope_scaling;
  const auto corr = [&](double rotations) {
    return hp.n_rot * std::log(512.0 / (2.0 * M_PI * rotations)) /
           (2.0 * std::log(static_cast<double>(hp.rope_freq_base)));
  };
  EXPECT_FLOAT_EQ(s.freq_scale, 0.25f);
  EXPECT_EQ(s.ext_factor, 1.0f);
  EXPECT_EQ(s.ramp_low, std::max(0.0, std::floor(corr(32.0))));
  EXPECT_EQ(s.ramp_high, std::min(hp.n_rot - 1.0, std::ceil(corr(1.0))));
  EXPECT_LT(s.ramp_low, s.ramp_high);
  EXPECT_NEAR(s.magnitude, 1.0 + 0.1 * std::log(4.0), 1e-6);
}

TEST_F(Qwen3MoeLoaderTest, YarnWithoutOriginalContextUsesTheTrainedOne) {
  tiny_.Set("qwen3moe.rope.scaling.type", GgufValue::String("yarn"));
  tiny_.Set("qwen3moe.rope.scaling.factor", GgufValue::Float32(2.0f));
  absl::StatusOr<Model> with_default = Load(tiny_);
  ASSERT_TRUE(with_default.ok()) << with_default.status();
  tiny_.Set("qwen3moe.rope.scaling.original_context_length",
            GgufValue::Uint32(static_cast<uint32_t>(with_default->hparams.n_ctx_train)));
  absl::StatusOr<Model> explicit_ctx = Load(tiny_);
  ASSERT_TRUE(explicit_ctx.ok()) << explicit_ctx.status();
  EXPECT_EQ(with_default->hparams.rope_scaling.ramp_low,
            explicit_ctx->hparams.rope_scaling.ramp_low);
  EXPECT_EQ(with_default->hparams.rope_scaling.ramp_high,
            explicit_ctx->hparams.rope_scaling.ramp_high);
}

TEST_F(Qwen3MoeLoaderTest, LinearRopeScalingFromEitherKey) {
  tiny_.Set("qwen3moe.rope.scale_linear", GgufValue::Float32(2.0f));
  absl::StatusOr<Model> old_key = Load(tiny_);
  ASSERT_TRUE(old_key.ok()) << old_key.status();
  EXPECT_FLOAT_EQ(old_key->hparams.rope_scaling.freq_scale, 0.5f);
  EXPECT_EQ(old_key->hparams.rope_scaling.ext_factor, 0.0f);
  EXPECT_EQ(old_key->hparams.rope_scaling.magnitude, 1.0f);
  // rope.scaling.factor wins over the old key, as in llama.cpp.
  tiny_.Set("qwen3moe.rope.scaling.type", GgufValue::String("linear"));
  tiny_.Set("qwen3moe.rope.scaling.factor", GgufValue::Float32(8.0f));
  absl::StatusOr<Model> new_key = Load(tiny_);
  ASSERT_TRUE(new_key.ok()) << new_key.status();
  EXPECT_FLOAT_EQ(new_key->hparams.rope_scaling.freq_scale, 0.125f);
}

TEST_F(Qwen3MoeLoaderTest, RopeScalingTypeNoneIgnoresTheFactor) {
  tiny_.Set("qwen3moe.rope.scaling.type", GgufValue::String("none"));
  tiny_.Set("qwen3moe.rope.scaling.factor", GgufValue::Float32(4.0f));
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE(model->hparams.rope_scaling.scaled());
}

TEST_F(Qwen3MoeLoaderTest, UnknownRopeScalingIsRefusedByName) {
  tiny_.Set("qwen3moe.rope.scaling.type", GgufValue::String("longrope"));
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("qwen3moe.rope.scaling.type"), HasSubstr("longrope")));
}

TEST_F(Qwen3MoeLoaderTest, BadRopeScalingValuesAreNamed) {
  struct Case {
    const char* key;
    GgufValue value;
  };
  const Case cases[] = {
      {"qwen3moe.rope.scaling.factor", GgufValue::Float32(-2.0f)},
      {"qwen3moe.rope.scaling.factor", GgufValue::String("4")},
      {"qwen3moe.rope.scaling.type", GgufValue::Uint32(2)},
      {"qwen3moe.rope.scaling.attn_factor", GgufValue::Float32(0.0f)},
      {"qwen3moe.rope.scaling.original_context_length", GgufValue::Uint32(0)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    EditableGguf g = tiny_;
    g.Set("qwen3moe.rope.scaling.type", GgufValue::String("yarn"));
    g.Set(c.key, c.value);
    absl::StatusOr<Model> model = Load(g);
    ASSERT_FALSE(model.ok());
    EXPECT_THAT(model.status().message(), HasSubstr(c.key));
  }
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
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  const LayerWeights& l = model->weights.layers[2];
  EXPECT_EQ(l.moe.gate_exps.ne, (std::array<int64_t, 4>{64, 32, 8, 1}));
  EXPECT_EQ(l.moe.up_exps.ne, (std::array<int64_t, 4>{64, 32, 8, 1}));
  EXPECT_EQ(l.moe.up_exps.data, l.moe.gate_exps.data + 32 * 64 * 4);
  EXPECT_EQ(l.moe.gate_exps.expert_stride_bytes, 64u * 64u * 4u);
  EXPECT_EQ(l.moe.up_exps.expert(5), l.moe.up_exps.data + 5 * 64 * 64 * 4);
}

TEST_F(Qwen3MoeLoaderTest, FusedGateUpWithWrongShapeIsNamed) {
  testing::EditableTensor* gate = tiny_.Find("blk.0.ffn_gate_exps.weight");
  gate->name = "blk.0.ffn_gate_up_exps.weight";
  tiny_.RemoveTensor("blk.0.ffn_up_exps.weight");
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.0.ffn_gate_up_exps.weight"), HasSubstr("{64, 64, 8}")));
}

// --- the other architectures, each one file on the shared loader -------------

class ArchitectureTest : public Qwen3MoeLoaderTest {
 protected:
  void LoadVector(const char* name) {
    tiny_ = Vector(name);
    ASSERT_FALSE(tiny_.tensors.empty());
  }
};

TEST_F(ArchitectureTest, MixtralIsLlamaWithNormRopeNoQkNormAndRenormalizedTopK) {
  LoadVector("mixtral-tiny-f32");
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  EXPECT_EQ(hp.architecture, "llama");
  EXPECT_EQ(hp.rope_style, RopeStyle::kNorm);
  EXPECT_EQ(hp.qk_norm, QkNorm::kNone);
  EXPECT_TRUE(hp.router.renormalize);
  EXPECT_EQ(hp.n_layer, 3);
  EXPECT_EQ(hp.n_expert, 8);
  EXPECT_EQ(hp.n_expert_used, 2);
  EXPECT_EQ(hp.n_ff_exp, 32);  // llama.feed_forward_length is the expert width
  EXPECT_EQ(hp.n_head, 4);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.head_dim, 16);
  for (const LayerWeights& l : model->weights.layers) {
    EXPECT_FALSE(l.attn.q_norm.present());
    EXPECT_FALSE(l.attn.k_norm.present());
  }
}

// A converted Llama 3 carries rope_freqs.weight: head_dim / 2 divisors of
// the rope angles. Read when present; a bad factor or shape is named.
TEST_F(ArchitectureTest, LlamaReadsTheRopeFrequencyFactors) {
  LoadVector("mixtral-tiny-f32");
  absl::StatusOr<Model> plain = Load(tiny_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->hparams.rope_freq_factors.empty());

  const std::vector<float> factors = {1, 1, 1.5f, 2, 3, 4, 6, 8};  // head_dim 16
  testing::EditableTensor t;
  t.name = "rope_freqs.weight";
  t.type = TensorType::kF32;
  t.ne = {8};
  t.data.resize(factors.size() * sizeof(float));
  std::memcpy(t.data.data(), factors.data(), t.data.size());
  tiny_.tensors.push_back(t);
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->hparams.rope_freq_factors, factors);

  const float zero = 0.0f;
  std::memcpy(tiny_.tensors.back().data.data() + 4 * sizeof(float), &zero, sizeof(float));
  absl::StatusOr<Model> bad = Load(tiny_);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), AllOf(HasSubstr("rope_freqs.weight"), HasSubstr("factor 4")));

  tiny_.tensors.back().ne = {4, 2};
  EXPECT_FALSE(Load(tiny_).ok());
}

TEST_F(ArchitectureTest, OlmoeNormsTheWholeProjectionAndDoesNotRenormalize) {
  LoadVector("olmoe-tiny-f32");
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  EXPECT_EQ(hp.architecture, "olmoe");
  EXPECT_EQ(hp.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(hp.qk_norm, QkNorm::kWhole);
  EXPECT_FALSE(hp.router.renormalize);
  EXPECT_EQ(hp.n_ff_exp, 32);
  EXPECT_EQ(model->weights.layers[1].attn.q_norm.ne[0], hp.n_head * hp.head_dim);
  EXPECT_FALSE(model->weights.output_tied);
}

TEST_F(ArchitectureTest, OlmoeNeedsItsOutputMatrix) {
  LoadVector("olmoe-tiny-f32");
  tiny_.RemoveTensor("output.weight");
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), AllOf(HasSubstr("output.weight"), HasSubstr("missing")));
}

TEST_F(ArchitectureTest, DenseLlamaIsRefused) {
  LoadVector("mixtral-tiny-f32");
  tiny_.Remove("llama.expert_count");
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("llama.expert_count"), HasSubstr("dense")));
}

TEST_F(ArchitectureTest, LlamaRopeMustCoverTheWholeHead) {
  LoadVector("mixtral-tiny-f32");
  tiny_.Set("llama.rope.dimension_count", GgufValue::Uint32(8));
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("llama.rope.dimension_count"), HasSubstr("16")));
}

TEST_F(ArchitectureTest, PerExpertTensorsOfOldMixtralFilesAreRefused) {
  LoadVector("mixtral-tiny-f32");
  testing::EditableTensor* gate = tiny_.Find("blk.0.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  gate->name = "blk.0.ffn_gate.0.weight";
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.0.ffn_gate.0.weight"), HasSubstr("not supported")));
}

TEST_F(ArchitectureTest, AttentionBiasesAreRefusedByName) {
  LoadVector("mixtral-tiny-f32");
  tiny_.tensors.push_back(testing::ZeroF32Vector("blk.1.attn_output.bias", 64));
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.1.attn_output.bias"), HasSubstr("biases")));
}

TEST_F(ArchitectureTest, UnexpectedQkNormIsRefused) {
  LoadVector("mixtral-tiny-f32");
  tiny_.tensors.push_back(testing::ZeroF32Vector("blk.0.attn_q_norm.weight", 16));
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("blk.0.attn_q_norm.weight"));
}

TEST_F(ArchitectureTest, Qwen35MoeIsAHybridOfGatedDeltaNetAndGatedAttention) {
  LoadVector("qwen35moe-tiny-f32");
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  EXPECT_EQ(hp.architecture, "qwen35moe");
  ASSERT_EQ(hp.n_layer, 4);
  for (int il = 0; il < 3; ++il) {
    EXPECT_EQ(model->weights.layers[il].mixer, MixerKind::kGatedDeltaNet) << il;
  }
  EXPECT_EQ(model->weights.layers[3].mixer, MixerKind::kGatedAttention);
  for (const LayerWeights& l : model->weights.layers) {
    EXPECT_EQ(l.ffn, FfnKind::kMoeWithSharedExpert);
    EXPECT_TRUE(l.moe.shared_gate_inp.present());
  }
  EXPECT_EQ(hp.n_rot, 8);
  EXPECT_EQ(hp.head_dim, 32);
  EXPECT_EQ(hp.rope_pair_uses_position, (std::vector<uint8_t>{1, 1, 1, 1}));
  EXPECT_EQ(hp.deltanet.n_k_heads, 2);
  EXPECT_EQ(hp.deltanet.n_v_heads, 4);
  EXPECT_EQ(hp.deltanet.d_k, 16);
  EXPECT_EQ(hp.deltanet.d_v, 16);
  EXPECT_EQ(hp.deltanet.conv_kernel, 4);
  EXPECT_EQ(hp.deltanet.k_head_of(3), 1);  // tiled: 3 mod 2
  EXPECT_EQ(hp.n_ff_shared, 32);
  // The attention layer's q projection carries each head's gate.
  EXPECT_EQ(model->weights.layers[3].attn.q.rows(), 2 * hp.n_head * hp.head_dim);
}

TEST_F(ArchitectureTest, Qwen35MoeNeedsTheRopeSections) {
  LoadVector("qwen35moe-tiny-f32");
  tiny_.Remove("qwen35moe.rope.dimension_sections");
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("qwen35moe.rope.dimension_sections"), HasSubstr("missing")));
}

// Qwen3-VL's language model: qwen3moe's layers with multi-section rope.
// The vector's sections [1,6,6,0] (sum 13) hold pairs 3, 6, 9 and 12 of 16
// at position 0: sector i mod 13 is a multiple of 3 at or past 3 * 1.
TEST_F(ArchitectureTest, Qwen3VlMoeIsQwen3MoeWithRopeSections) {
  LoadVector("qwen3vlmoe-tiny-f32");
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  EXPECT_EQ(hp.architecture, "qwen3vlmoe");
  EXPECT_EQ(hp.qk_norm, QkNorm::kPerHead);
  EXPECT_EQ(hp.rope_style, RopeStyle::kNeox);
  EXPECT_TRUE(hp.router.renormalize);
  ASSERT_EQ(hp.n_rot, 32);
  std::vector<uint8_t> held_at_zero(16, 1);
  for (int pair : {3, 6, 9, 12}) held_at_zero[static_cast<size_t>(pair)] = 0;
  EXPECT_EQ(hp.rope_pair_uses_position, held_at_zero);
  for (const LayerWeights& l : model->weights.layers) {
    EXPECT_EQ(l.mixer, MixerKind::kAttention);
    EXPECT_EQ(l.ffn, FfnKind::kMoe);
  }
}

TEST_F(ArchitectureTest, Qwen3VlMoeNeedsTheRopeSections) {
  LoadVector("qwen3vlmoe-tiny-f32");
  tiny_.Remove("qwen3vlmoe.rope.dimension_sections");
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("qwen3vlmoe.rope.dimension_sections"), HasSubstr("missing"),
                    HasSubstr("multi-section rope of qwen3vlmoe")));
  tiny_.Set("qwen3vlmoe.rope.dimension_sections", GgufValue::Int32Array({8, 8, 0}));
  model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("must be 4 values"));
  // ggml asserts one of the first three positive; a section alone past the
  // head size is refused before any sum.
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{0, 0, 0, 8}, std::vector<int32_t>{40, 0, 0, 0},
        std::vector<int32_t>{1, -1, 0, 0}}) {
    tiny_.Set("qwen3vlmoe.rope.dimension_sections", GgufValue::Int32Array(bad));
    model = Load(tiny_);
    ASSERT_FALSE(model.ok());
    EXPECT_THAT(model.status().message(), HasSubstr("one of the first three positive"));
  }
  // ggml asserts sections summing to at most the head size (32 here).
  tiny_.Set("qwen3vlmoe.rope.dimension_sections", GgufValue::Int32Array({11, 11, 11, 0}));
  model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), AllOf(HasSubstr("sum to 33"), HasSubstr("head size 32")));
}

TEST_F(ArchitectureTest, Qwen35MoeConvOfTheWrongShapeIsNamed) {
  LoadVector("qwen35moe-tiny-f32");
  testing::EditableTensor* conv = tiny_.Find("blk.1.ssm_conv1d.weight");
  ASSERT_NE(conv, nullptr);
  ASSERT_EQ(conv->ne, (std::vector<int64_t>{4, 128}));
  conv->ne = {3, 128};
  conv->data.resize(3 * 128 * 4);
  absl::StatusOr<Model> model = Load(tiny_);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.1.ssm_conv1d.weight"), HasSubstr("{3, 128}"),
                    HasSubstr("{4, 128}")));
}

TEST_F(ArchitectureTest, Qwen35MoeRecurrentLayersCanBeListed) {
  LoadVector("qwen35moe-tiny-f32");
  tiny_.Set("qwen35moe.full_attention_interval", GgufValue::Uint32(2));
  absl::StatusOr<Model> model = Load(tiny_);
  // Layer 1 is attention now, and the file has DeltaNet tensors there.
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("blk.1.attn_q.weight"));
}

}  // namespace
}  // namespace moetier
