// The routed experts straight from the model's weight table (the GGUF
// mapping): an ExpertWeightSource with nothing to fetch or hold, for
// putting an expert cache in front of a standalone engine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "engine/expert_source.h"
#include "model/model.h"

namespace moetier {

class MappedExpertSource final : public ExpertWeightSource {
 public:
  // `weights` must outlive the source.
  explicit MappedExpertSource(const ModelWeights& weights) : weights_(weights) {}

  absl::Status Acquire(int layer, std::span<const int32_t> experts,
                       std::span<ExpertMatrices> out) override {
    const MoeWeights& w = weights_.layers[static_cast<size_t>(layer)].moe;
    for (size_t i = 0; i < experts.size(); ++i) {
      out[i] = {w.gate_exps.expert(experts[i]), w.up_exps.expert(experts[i]),
                w.down_exps.expert(experts[i])};
    }
    return absl::OkStatus();
  }
  void Release(int) override {}
  int max_experts_held() const override {
    int64_t n_expert = 1;  // layers without experts have ne[2] == 1
    for (const LayerWeights& l : weights_.layers) {
      n_expert = std::max(n_expert, l.moe.gate_exps.ne[2]);
    }
    return static_cast<int>(n_expert);
  }

 private:
  const ModelWeights& weights_;
};

}  // namespace moetier
