#include "cache/expert_slot_layout.h"

#include <algorithm>

namespace moetier {
namespace {

uint64_t MatrixBytes(const WeightRef& w) { return static_cast<uint64_t>(w.rows()) * w.row_bytes; }

}  // namespace

ExpertSlotLayout ExpertSlotLayoutOf(const Qwen3MoeLayerWeights& layer, uint64_t align) {
  ExpertSlotLayout l;
  l.gate_bytes = MatrixBytes(layer.ffn_gate_exps);
  l.up_bytes = MatrixBytes(layer.ffn_up_exps);
  l.down_bytes = MatrixBytes(layer.ffn_down_exps);
  l.up_offset = AlignUp(l.gate_bytes, align);
  l.down_offset = l.up_offset + AlignUp(l.up_bytes, align);
  return l;
}

ExpertSlotCacheOptions ExpertSlotGeometry(const Qwen3MoeModel& model, uint64_t align) {
  const Qwen3MoeHparams& hp = model.hparams;
  ExpertSlotCacheOptions o;
  o.n_layer = static_cast<uint32_t>(hp.n_layer);
  o.n_expert = static_cast<uint32_t>(hp.n_expert);
  o.top_k = static_cast<uint32_t>(hp.n_expert_used);
  for (const Qwen3MoeLayerWeights& lw : model.weights.layers) {
    const ExpertSlotLayout l = ExpertSlotLayoutOf(lw, align);
    o.expert_bytes.push_back(l.copy_bytes());
    o.slot_bytes = std::max(o.slot_bytes, AlignUp(l.end(), align));
  }
  return o;
}

}  // namespace moetier
