#include "engine/expert_source.h"

namespace moetier {
namespace {

ExpertMatrixShape ShapeOf(const WeightRef& w) {
  return {.type = w.type, .rows = w.rows(), .cols = w.cols(), .row_bytes = w.row_bytes};
}

}  // namespace

RoutedExpertShapes RoutedExpertShapesOf(const Model& model) {
  const ModelHparams& hp = model.hparams;
  RoutedExpertShapes shapes;
  shapes.n_expert = hp.n_expert;
  shapes.top_k = hp.n_expert_used;
  shapes.n_embd = hp.n_embd;
  shapes.n_ff = hp.n_ff_exp;
  for (const LayerWeights& l : model.weights.layers) {
    ExpertLayerShape layer;
    if (HasRoutedExperts(l.ffn)) {
      layer.gate = ShapeOf(l.moe.gate_exps);
      layer.up = ShapeOf(l.moe.up_exps);
      layer.down = ShapeOf(l.moe.down_exps);
    }
    shapes.layers.push_back(layer);
  }
  return shapes;
}

std::vector<uint32_t> WarmRanksOf(const ExpertWeightSource& source, uint32_t n_layer,
                                  uint32_t n_expert) {
  std::vector<uint32_t> ranks(static_cast<size_t>(n_layer) * n_expert);
  bool any = false;
  for (uint32_t l = 0; l < n_layer; ++l) {
    for (uint32_t e = 0; e < n_expert; ++e) {
      const uint32_t rank = source.WarmRank(static_cast<int>(l), static_cast<int>(e));
      ranks[static_cast<size_t>(l) * n_expert + e] = rank;
      any = any || rank > 0;
    }
  }
  if (!any) ranks.clear();
  return ranks;
}

}  // namespace moetier
