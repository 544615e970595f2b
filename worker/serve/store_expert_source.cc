#include "serve/store_expert_source.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/check.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {
namespace {

// The store's description of one matrix against the model file's.
absl::Status CheckSlice(const store::ExpertSliceDesc& slice, const ExpertMatrixShape& ref, int layer,
                        const char* which) {
  if (slice.tensor_type != static_cast<uint32_t>(ref.type) || slice.cols != ref.cols ||
      slice.rows != ref.rows || slice.row_bytes != ref.row_bytes ||
      slice.size_bytes != ref.bytes()) {
    const std::optional<TensorTypeInfo> store_type = LookupTensorType(slice.tensor_type);
    return absl::FailedPreconditionError(absl::StrFormat(
        "the store's %s matrix of layer %d is %s {%d, %d} with %d-byte rows, but the model file "
        "has %s {%d, %d} with %d-byte rows: moetierd serves a different model file than "
        "--model",
        which, layer, store_type.has_value() ? std::string(store_type->name) : "an unknown type",
        slice.cols, slice.rows, slice.row_bytes, std::string(TensorTypeName(ref.type)), ref.cols,
        ref.rows, ref.row_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<StoreExpertSource>> StoreExpertSource::Create(
    store::StoreClient& client, const RoutedExpertShapes& experts,
    const StoreExpertSourceOptions& options) {
  const int n_layer = static_cast<int>(experts.layers.size());
  const int n_expert = experts.n_expert;
  if (client.n_expert() != static_cast<uint32_t>(n_expert) ||
      client.n_layer() < static_cast<uint32_t>(n_layer)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the store holds %d layers of %d experts, the model file %d layers of %d: moetierd "
        "serves a different model file than --model",
        client.n_layer(), client.n_expert(), n_layer, n_expert));
  }
  for (int l = 0; l < n_layer; ++l) {
    const store::LayerDesc& d = client.layer(static_cast<uint32_t>(l));
    const ExpertLayerShape& w = experts.layers[static_cast<size_t>(l)];
    if (w.expert_bytes() == 0) continue;  // a layer without experts (FfnKind::kDense)
    if (d.expert_bytes == 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("the store has no experts for layer %d, which the model uses", l));
    }
    if (absl::Status s = CheckSlice(d.gate, w.gate, l, "gate"); !s.ok()) return s;
    if (absl::Status s = CheckSlice(d.up, w.up, l, "up"); !s.ok()) return s;
    if (absl::Status s = CheckSlice(d.down, w.down, l, "down"); !s.ok()) return s;
  }
  if (options.miss_timeout_ms < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("miss timeout %d ms must be positive", options.miss_timeout_ms));
  }
  const bool resident =
      client.header().store_mode == static_cast<uint32_t>(store::StoreMode::kFullyResident);
  const int max_held = resident
                           ? n_expert
                           : static_cast<int>(std::clamp<uint32_t>(
                                 client.header().n_slot, 1, static_cast<uint32_t>(n_expert)));
  return std::unique_ptr<StoreExpertSource>(
      new StoreExpertSource(client, options, n_expert, max_held));
}

StoreExpertSource::StoreExpertSource(store::StoreClient& client,
                                     const StoreExpertSourceOptions& options, int n_expert,
                                     int max_held)
    : client_(client),
      options_(options),
      max_held_(max_held),
      pins_(static_cast<size_t>(n_expert)),
      missed_(static_cast<size_t>(n_expert)) {}

StoreExpertSource::~StoreExpertSource() { ReleaseAll(); }

void StoreExpertSource::ReleaseAll() {
  for (int i = 0; i < n_held_; ++i) pins_[i].Release();
  n_held_ = 0;
  held_layer_ = -1;
}

void StoreExpertSource::Route(int layer, std::span<const int32_t> topk_ids) {
  const uint32_t l = static_cast<uint32_t>(layer);
  for (const int32_t e : topk_ids) {
    MOETIER_CHECK(e >= 0 && static_cast<uint32_t>(e) < client_.n_expert());
    client_.CountRouted(l, static_cast<uint32_t>(e));
  }
}

uint32_t StoreExpertSource::WarmRank(int layer, int expert) const {
  MOETIER_CHECK(layer >= 0 && static_cast<uint32_t>(layer) < client_.n_layer() && expert >= 0 &&
                static_cast<uint32_t>(expert) < client_.n_expert());
  return client_.warm_rank(static_cast<uint32_t>(layer), static_cast<uint32_t>(expert));
}

absl::Status StoreExpertSource::Acquire(int layer, std::span<const int32_t> experts,
                                        std::span<ExpertMatrices> out) {
  // The engine releases each layer before the next: a pin left over would
  // be held for good and starve a cache.
  MOETIER_CHECK(n_held_ == 0);
  if (experts.size() > static_cast<size_t>(max_held_) || out.size() != experts.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "asked for %d experts at once (into %d outputs); this store holds at most %d",
        experts.size(), out.size(), max_held_));
  }
  if (layer < 0) return absl::InvalidArgumentError(absl::StrFormat("layer %d", layer));
  const uint32_t l = static_cast<uint32_t>(layer);
  const int n = static_cast<int>(experts.size());
  held_layer_ = layer;
  n_held_ = n;
  // Hits first: they cost two atomic operations each.
  int n_missed = 0;
  for (int i = 0; i < n; ++i) {
    std::optional<store::ExpertPin> pin =
        experts[i] >= 0 ? client_.TryAcquire(l, static_cast<uint32_t>(experts[i])) : std::nullopt;
    if (pin.has_value()) {
      pins_[i] = *std::move(pin);
    } else {
      missed_[n_missed++] = i;
    }
  }
  if (n_missed > 1) {
    // Every miss is asked for before the first wait, so the daemon reads
    // them together. A full request ring only loses the hint.
    for (int m = 0; m < n_missed; ++m) {
      client_.Prefetch(l, static_cast<uint32_t>(experts[missed_[m]])).IgnoreError();
    }
  }
  for (int m = 0; m < n_missed; ++m) {
    const int i = missed_[m];
    if (experts[i] < 0) {
      ReleaseAll();
      return absl::InvalidArgumentError(
          absl::StrFormat("expert %d of layer %d does not exist", experts[i], layer));
    }
    absl::StatusOr<store::ExpertPin> pin =
        client_.Acquire(l, static_cast<uint32_t>(experts[i]), options_.miss_timeout_ms);
    if (!pin.ok()) {
      ReleaseAll();
      return absl::Status(
          pin.status().code(),
          absl::StrFormat("fetching expert %d of layer %d from moetierd's store: %s", experts[i],
                          layer, pin.status().message()));
    }
    pins_[i] = *std::move(pin);
  }
  for (int i = 0; i < n; ++i) {
    const store::ExpertPin& pin = pins_[i];
    out[i] = {pin.gate().data(), pin.up().data(), pin.down().data()};
  }
  return absl::OkStatus();
}

void StoreExpertSource::Release(int layer) {
  MOETIER_CHECK(n_held_ == 0 || layer == held_layer_);
  ReleaseAll();
}

}  // namespace moetier
