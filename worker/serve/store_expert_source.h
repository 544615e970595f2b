// The routed experts from the daemon's expert store (proto/store/): an
// ExpertWeightSource over a StoreClient, for the CPU engine in daemon mode.
//
// Acquire pins each expert with the store's hit path (two atomic operations,
// no lock, no system call). Experts that are not resident are all hinted to
// the daemon first, so their reads overlap, and then waited for one by one
// (StoreClient::Acquire, bounded by miss_timeout_ms; a daemon that stops
// heartbeating is noticed within its silence limit). The pins of the current
// layer are held until Release, or until the source is destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/expert_source.h"
#include "store/store_client.h"

namespace moetier {

struct StoreExpertSourceOptions {
  // How long one miss may wait for the daemon to read the expert.
  int64_t miss_timeout_ms = 60000;
};

class StoreExpertSource final : public ExpertWeightSource {
 public:
  // Checks that the store describes `experts` exactly as the
  // model file does (layer and expert counts; type, shape and row size of
  // every layer's gate, up and down matrices), so the engine computes from
  // the store's bytes what it would compute from the file. `client` must
  // outlive the source.
  static absl::StatusOr<std::unique_ptr<StoreExpertSource>> Create(
      store::StoreClient& client, const RoutedExpertShapes& experts,
      const StoreExpertSourceOptions& options);
  ~StoreExpertSource() override;  // releases any pins still held
  StoreExpertSource(const StoreExpertSource&) = delete;
  StoreExpertSource& operator=(const StoreExpertSource&) = delete;

  absl::Status Acquire(int layer, std::span<const int32_t> experts,
                       std::span<ExpertMatrices> out) override;
  void Release(int layer) override;
  // Counts every token row in the store (StoreClient::CountRouted).
  void Route(int layer, std::span<const int32_t> topk_ids) override;
  uint32_t WarmRank(int layer, int expert) const override;
  // Every expert of a layer in a fully resident store; in a cache, as many
  // as it has slots.
  int max_experts_held() const override { return max_held_; }

  // Pins held now (0 between layers).
  int held() const { return n_held_; }

 private:
  StoreExpertSource(store::StoreClient& client, const StoreExpertSourceOptions& options,
                    int n_expert, int max_held);
  void ReleaseAll();

  store::StoreClient& client_;
  StoreExpertSourceOptions options_;
  int max_held_ = 1;
  int held_layer_ = -1;
  int n_held_ = 0;
  std::vector<store::ExpertPin> pins_;  // [n_expert]; the first n_held_ are held
  std::vector<int32_t> missed_;         // [n_expert] indices into the request
};

}  // namespace moetier
