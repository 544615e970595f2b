// The qwen3next loader (worker/model/qwen3next.cc): Qwen3-Next's value
// heads grouped by key head, and the projections it regroups at load, read
// back row by row against the file's own bytes.
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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
using testing::EditableTensor;
using ::testing::HasSubstr;

// The vectors' DeltaNet heads: 2 key heads and 4 value heads (of 16 values
// in the tiny files, 64 in the small one).
constexpr int kKeyHeads = 2;
constexpr int kValueHeads = 4;
constexpr int kRatio = kValueHeads / kKeyHeads;
constexpr int kHeadDim = 16;

using Qwen3NextModelTest = testing::EditedModelTest;

// Row `row` of an edited tensor, in its own encoding.
std::vector<uint8_t> FileRow(const EditableTensor& t, int64_t row) {
  const size_t row_bytes = t.data.size() / static_cast<size_t>(t.ne[1]);
  const uint8_t* begin = t.data.data() + static_cast<size_t>(row) * row_bytes;
  return {begin, begin + row_bytes};
}

std::vector<uint8_t> ModelRow(const WeightRef& w, int64_t row) {
  return {w.row(row), w.row(row) + w.row_bytes};
}

TEST_F(Qwen3NextModelTest, HybridWithGroupedValueHeadsAndPlainRope) {
  absl::StatusOr<Model> model = Load(Vector("qwen3next-tiny-f32"));
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  EXPECT_EQ(hp.architecture, "qwen3next");
  ASSERT_EQ(hp.n_layer, 4);
  for (int il = 0; il < 3; ++il) {
    EXPECT_EQ(model->weights.layers[il].mixer, MixerKind::kGatedDeltaNet) << il;
  }
  EXPECT_EQ(model->weights.layers[3].mixer, MixerKind::kGatedAttention);
  for (const LayerWeights& l : model->weights.layers) {
    EXPECT_EQ(l.ffn, FfnKind::kMoeWithSharedExpert);
  }
  EXPECT_EQ(hp.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(hp.n_rot, 8);
  EXPECT_TRUE(hp.rope_pair_uses_position.empty()) << "no rope sections: every pair rotates";
  EXPECT_TRUE(hp.router.renormalize);
  EXPECT_FALSE(hp.deltanet.v_heads_tiled);
  // Grouped: value heads 0, 1 read key head 0 and 2, 3 key head 1 (tiled
  // would give 0, 1, 0, 1).
  EXPECT_EQ(hp.deltanet.k_head_of(1), 0);
  EXPECT_EQ(hp.deltanet.k_head_of(2), 1);
  EXPECT_EQ(hp.deltanet.d_v, kHeadDim);
}

// ssm_ba holds, per key head g, the beta rows of its r value heads, then
// their alpha rows; the loader hands the engines beta and alpha in value-head
// order, F32 and quantized alike, and a copied Model keeps them.
TEST_F(Qwen3NextModelTest, SsmBaSplitsIntoBetaAndAlphaByKeyHeadGroup) {
  for (const char* name : {"qwen3next-tiny-f32", "qwen3next-small-q4_k_m"}) {
    SCOPED_TRACE(name);
    EditableGguf g = Vector(name);
    const EditableTensor* ba = g.Find("blk.0.ssm_ba.weight");
    ASSERT_NE(ba, nullptr);
    absl::StatusOr<Model> loaded = Load(g);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    std::optional<Model> model(*loaded);
    *loaded = Model{};  // the copy alone keeps the regrouped rows
    const DeltaNetWeights& d = model->weights.layers[0].deltanet;
    EXPECT_EQ(d.beta.type, ba->type);
    ASSERT_EQ(d.beta.rows(), kValueHeads);
    ASSERT_EQ(d.alpha.rows(), kValueHeads);
    EXPECT_EQ(d.beta.cols(), ba->ne[0]);
    for (int g_head = 0; g_head < kKeyHeads; ++g_head) {
      for (int i = 0; i < kRatio; ++i) {
        const int j = g_head * kRatio + i;
        EXPECT_EQ(ModelRow(d.beta, j), FileRow(*ba, g_head * 2 * kRatio + i)) << "beta " << j;
        EXPECT_EQ(ModelRow(d.alpha, j), FileRow(*ba, g_head * 2 * kRatio + kRatio + i))
            << "alpha " << j;
      }
    }
    EXPECT_THAT(d.beta.name, HasSubstr("blk.0.ssm_ba.weight"));
  }
}

// A legacy ssm_in holds, per key head g, [q_g, k_g, v_g (r heads), z_g (r
// heads)]; the engines get flat q, k, v rows (attn_qkv's order) and z.
TEST_F(Qwen3NextModelTest, LegacySsmInRegroupsIntoQkvAndZ) {
  EditableGguf g = Vector("qwen3next-ssm-in-tiny-f32");
  ASSERT_EQ(g.Find("blk.0.attn_qkv.weight"), nullptr);
  const EditableTensor* in = g.Find("blk.0.ssm_in.weight");
  ASSERT_NE(in, nullptr);
  absl::StatusOr<Model> model = Load(g);
  ASSERT_TRUE(model.ok()) << model.status();
  const DeltaNetWeights& d = model->weights.layers[0].deltanet;
  const int key_dim = kKeyHeads * kHeadDim;
  const int v_rows = kRatio * kHeadDim;  // one key head's value rows
  const int group = 2 * kHeadDim + 2 * v_rows;
  ASSERT_EQ(d.qkv.rows(), 2 * key_dim + kValueHeads * kHeadDim);
  ASSERT_EQ(d.z.rows(), kValueHeads * kHeadDim);
  for (int g_head = 0; g_head < kKeyHeads; ++g_head) {
    for (int r = 0; r < kHeadDim; ++r) {
      EXPECT_EQ(ModelRow(d.qkv, g_head * kHeadDim + r), FileRow(*in, g_head * group + r));
      EXPECT_EQ(ModelRow(d.qkv, key_dim + g_head * kHeadDim + r),
                FileRow(*in, g_head * group + kHeadDim + r));
    }
    for (int r = 0; r < v_rows; ++r) {
      EXPECT_EQ(ModelRow(d.qkv, 2 * key_dim + g_head * v_rows + r),
                FileRow(*in, g_head * group + 2 * kHeadDim + r));
      EXPECT_EQ(ModelRow(d.z, g_head * v_rows + r),
                FileRow(*in, g_head * group + 2 * kHeadDim + v_rows + r));
    }
  }
}

TEST_F(Qwen3NextModelTest, NeitherQkvNorSsmInIsNamed) {
  EditableGguf g = Vector("qwen3next-tiny-f32");
  g.RemoveTensor("blk.1.attn_qkv.weight");
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("layer 1"), HasSubstr("blk.1.attn_qkv.weight"),
                    HasSubstr("blk.1.ssm_in.weight")));
}

TEST_F(Qwen3NextModelTest, SsmBaOfTheWrongShapeIsNamed) {
  EditableGguf g = Vector("qwen3next-tiny-f32");
  EditableTensor* ba = g.Find("blk.2.ssm_ba.weight");
  ASSERT_NE(ba, nullptr);
  ASSERT_EQ(ba->ne, (std::vector<int64_t>{64, 2 * kValueHeads}));
  ba->ne = {64, kValueHeads};
  ba->data.resize(ba->data.size() / 2);
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("blk.2.ssm_ba.weight"), HasSubstr("{64, 4}"), HasSubstr("{64, 8}")));
}

// qwen35moe's separate projections are not what a qwen3next file has.
TEST_F(Qwen3NextModelTest, MissingSsmBaIsNamed) {
  EditableGguf g = Vector("qwen3next-tiny-f32");
  g.RemoveTensor("blk.0.ssm_ba.weight");
  absl::StatusOr<Model> model = Load(g);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("blk.0.ssm_ba.weight"));
}

}  // namespace
}  // namespace moetier
