// HostExpertFfn: one expert's SwiGLU on host cores, from the file's blocks.
#include "blocks/cpu/host_expert_ffn.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gtest/gtest.h"
#include "model/architectures.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier {
namespace {

const std::string kModel = std::string(MOETIER_TEST_DATA_DIR) + "/vectors/small-q4_k_m.gguf";

class HostExpertFfnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(kModel);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    gguf_ = *std::move(gguf);
    absl::StatusOr<Model> model = LoadModel(*gguf_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
  }

  ExpertMatrices Expert(int layer, int e) const {
    const LayerWeights& lw = model_.weights.layers[layer];
    return {lw.moe.gate_exps.expert(e), lw.moe.up_exps.expert(e), lw.moe.down_exps.expert(e)};
  }

  std::vector<float> Input(int rows) const {
    std::vector<float> x(static_cast<size_t>(rows * model_.hparams.n_embd));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
    return x;
  }

  // The same expert in double precision from the dequantized weights.
  std::vector<double> Reference(int layer, int e, const std::vector<float>& x, int rows) const {
    const LayerWeights& lw = model_.weights.layers[layer];
    const int64_t n_embd = model_.hparams.n_embd, n_ff = model_.hparams.n_ff_exp;
    auto matrix = [](const WeightRef& w, int e2) {
      std::vector<float> m(static_cast<size_t>(w.rows() * w.cols()));
      for (int64_t r = 0; r < w.rows(); ++r) {
        DequantizeRow(w.type, w.expert(e2) + r * w.row_bytes, m.data() + r * w.cols(), w.cols());
      }
      return m;
    };
    const std::vector<float> g = matrix(lw.moe.gate_exps, e), u = matrix(lw.moe.up_exps, e),
                             d = matrix(lw.moe.down_exps, e);
    std::vector<double> out(static_cast<size_t>(rows * n_embd));
    std::vector<double> h(static_cast<size_t>(n_ff));
    for (int t = 0; t < rows; ++t) {
      const float* xt = x.data() + t * n_embd;
      for (int64_t f = 0; f < n_ff; ++f) {
        double gs = 0, us = 0;
        for (int64_t c = 0; c < n_embd; ++c) {
          gs += double{g[f * n_embd + c]} * xt[c];
          us += double{u[f * n_embd + c]} * xt[c];
        }
        h[f] = gs / (1 + std::exp(-gs)) * us;
      }
      for (int64_t r = 0; r < n_embd; ++r) {
        double s = 0;
        for (int64_t f = 0; f < n_ff; ++f) s += double{d[r * n_ff + f]} * h[f];
        out[t * n_embd + r] = s;
      }
    }
    return out;
  }

  std::unique_ptr<GgufModel> gguf_;
  Model model_;
};

TEST_F(HostExpertFfnTest, MatchesTheDequantizedExpertWithinActivationRounding) {
  cpu::ThreadPool pool(2);
  HostExpertFfn ffn(RoutedExpertShapesOf(model_), 4, pool);
  for (int layer = 0; layer < model_.hparams.n_layer; ++layer) {
    const ExpertLayerShape shape = RoutedExpertShapesOf(model_).layers[layer];
    const int e = layer % model_.hparams.n_expert;
    const std::vector<float> x = Input(3);
    std::vector<float> out(x.size());
    ffn.Compute(shape, Expert(layer, e), x.data(), 3, out.data());
    const std::vector<double> want = Reference(layer, e, x, 3);
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      max_err = std::max(max_err, std::fabs(out[i] - want[i]));
      max_ref = std::max(max_ref, std::fabs(want[i]));
    }
    // Activations are quantized to 8 bits per value (as in llama.cpp):
    // about 1% of the output's scale.
    EXPECT_LT(max_err, 0.02 * max_ref) << "layer " << layer;
    EXPECT_GT(max_ref, 0);
  }
}

TEST_F(HostExpertFfnTest, RowsAndThreadsDoNotChangeTheBits) {
  const ExpertLayerShape shape = RoutedExpertShapesOf(model_).layers[1];
  const std::vector<float> x = Input(4);
  cpu::ThreadPool one(1), two(2);
  HostExpertFfn ffn1(RoutedExpertShapesOf(model_), 4, one),
      ffn2(RoutedExpertShapesOf(model_), 4, two);
  std::vector<float> together(x.size()), threaded(x.size()), apart(x.size());
  ffn1.Compute(shape, Expert(1, 5), x.data(), 4, together.data());
  ffn2.Compute(shape, Expert(1, 5), x.data(), 4, threaded.data());
  const int64_t n_embd = model_.hparams.n_embd;
  for (int t = 0; t < 4; ++t) {
    ffn1.Compute(shape, Expert(1, 5), x.data() + t * n_embd, 1, apart.data() + t * n_embd);
  }
  EXPECT_EQ(std::memcmp(together.data(), threaded.data(), x.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(together.data(), apart.data(), x.size() * sizeof(float)), 0);
}

TEST_F(HostExpertFfnTest, MeasuredCostIsPositiveAndGrowsWithRows) {
  cpu::ThreadPool pool(1);
  HostExpertFfn ffn(RoutedExpertShapesOf(model_), 16, pool);
  const ExpertLayerShape shape = RoutedExpertShapesOf(model_).layers[0];
  const ComputeCost cost = MeasureHostExpertCost(ffn, shape, Expert(0, 0), 16, 3);
  EXPECT_GT(cost.fixed_s + cost.per_row_s, 0);
  EXPECT_GE(cost.per_row_s, 0);
  EXPECT_GT(cost.Seconds(16), cost.Seconds(1) - 1e-12);
}

}  // namespace
}  // namespace moetier
