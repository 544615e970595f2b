// The routed experts straight from the model's weight table (the GGUF
// mapping): an ExpertWeightSource with nothing to fetch or hold, for
// putting an expert cache in front of a standalone engine.
#pragma once

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
    return weights_.layers.empty() ? 1
                                   : static_cast<int>(weights_.layers[0].moe.gate_exps.ne[2]);
  }

 private:
  const ModelWeights& weights_;
};

}  // namespace moetier
