#include "host_expert_store.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace moetier {
namespace {

constexpr uint64_t kAlign = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<HostExpertStore>> HostExpertStore::Create(
    const Model& model) {
  const int n_expert = model.hparams.n_expert;
  const RoutedExpertShapes shapes = RoutedExpertShapesOf(model);
  std::vector<LayerLayout> layout;
  uint64_t size = 0;
  for (const ExpertLayerShape& lw : shapes.layers) {
    LayerLayout l;
    l.first = size;
    l.slot = ExpertSlotLayoutOf(lw, kAlign);
    l.expert_bytes = AlignUp(l.slot.end(), kAlign);
    size += l.expert_bytes * static_cast<uint64_t>(n_expert);
    layout.push_back(l);
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot allocate %.2f GiB for the experts: %s", size / 1073741824.0, std::strerror(errno)));
  }
  (void)madvise(base, size, MADV_HUGEPAGE);
  auto* bytes = static_cast<uint8_t*>(base);
  for (size_t li = 0; li < layout.size(); ++li) {
    if (!HasRoutedExperts(model.weights.layers[li].ffn)) continue;
    const MoeWeights& lw = model.weights.layers[li].moe;
    const LayerLayout& l = layout[li];
    for (int e = 0; e < n_expert; ++e) {
      uint8_t* dst = bytes + l.first + l.expert_bytes * static_cast<uint64_t>(e);
      std::memcpy(dst, lw.gate_exps.expert(e), l.slot.gate_bytes);
      std::memcpy(dst + l.slot.up_offset, lw.up_exps.expert(e), l.slot.up_bytes);
      std::memcpy(dst + l.slot.down_offset, lw.down_exps.expert(e), l.slot.down_bytes);
    }
  }
  return std::unique_ptr<HostExpertStore>(
      new HostExpertStore(bytes, size, n_expert, std::move(layout)));
}

HostExpertStore::~HostExpertStore() { munmap(base_, size_); }

absl::Status HostExpertStore::Acquire(int layer, std::span<const int32_t> experts,
                                      std::span<ExpertMatrices> out) {
  const LayerLayout& l = layout_[static_cast<size_t>(layer)];
  for (size_t i = 0; i < experts.size(); ++i) {
    const uint8_t* e = base_ + l.first + l.expert_bytes * static_cast<uint64_t>(experts[i]);
    out[i] = {e, e + l.slot.up_offset, e + l.slot.down_offset};
  }
  return absl::OkStatus();
}

}  // namespace moetier
