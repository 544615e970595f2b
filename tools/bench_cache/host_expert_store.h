// Every routed expert of a model copied into one anonymous buffer, laid out
// as the daemon's store holds them (one contiguous slice per expert): the
// host side of an expert cache for benchmarks that run without a daemon.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/expert_slot_layout.h"
#include "engine/expert_source.h"
#include "model/model.h"

namespace moetier {

class HostExpertStore final : public ExpertWeightSource {
 public:
  // Copies the experts out of the model's mapping (reads the whole file's
  // expert tensors once).
  static absl::StatusOr<std::unique_ptr<HostExpertStore>> Create(const Model& model);
  ~HostExpertStore() override;
  HostExpertStore(const HostExpertStore&) = delete;
  HostExpertStore& operator=(const HostExpertStore&) = delete;

  absl::Status Acquire(int layer, std::span<const int32_t> experts,
                       std::span<ExpertMatrices> out) override;
  void Release(int) override {}
  int max_experts_held() const override { return n_expert_; }

  // The whole buffer: what a GPU worker registers for DMA.
  std::span<const uint8_t> bytes() const { return {base_, size_}; }

 private:
  struct LayerLayout {
    uint64_t first = 0;         // offset of expert 0
    uint64_t expert_bytes = 0;  // stride between experts
    ExpertSlotLayout slot;      // the matrices inside an expert
  };
  HostExpertStore(uint8_t* base, uint64_t size, int n_expert, std::vector<LayerLayout> layout)
      : base_(base), size_(size), n_expert_(n_expert), layout_(std::move(layout)) {}

  uint8_t* base_;
  uint64_t size_;
  int n_expert_;
  std::vector<LayerLayout> layout_;
};

}  // namespace moetier
