#include "cache/expert_slot_layout.h"

#include <algorithm>

namespace moetier {
ExpertSlotLayout ExpertSlotLayoutOf(const ExpertLayerShape& layer, uint64_t align) {
  ExpertSlotLayout l;
  l.gate_bytes = layer.gate.bytes();
  l.up_bytes = layer.up.bytes();
  l.down_bytes = layer.down.bytes();
  l.up_offset = AlignUp(l.gate_bytes, align);
  l.down_offset = l.up_offset + AlignUp(l.up_bytes, align);
  return l;
}

ExpertSlotCacheOptions ExpertSlotGeometry(const RoutedExpertShapes& shapes, uint64_t align) {
  ExpertSlotCacheOptions o;
  o.n_layer = static_cast<uint32_t>(shapes.layers.size());
  o.n_expert = static_cast<uint32_t>(shapes.n_expert);
  o.top_k = static_cast<uint32_t>(shapes.top_k);
  for (const ExpertLayerShape& lw : shapes.layers) {
    const ExpertSlotLayout l = ExpertSlotLayoutOf(lw, align);
    o.expert_bytes.push_back(l.copy_bytes());
    o.slot_bytes = std::max(o.slot_bytes, AlignUp(l.end(), align));
  }
  return o;
}

}  // namespace moetier
