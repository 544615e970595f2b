// CpuEngine::CopyState and LoadState: a sequence's state copied out of its
// slot and back into any slot, for sequences that share a prompt's start.
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/cpu_engine.h"
#include "model/kv_cache_types.h"

namespace moetier {
namespace {

// Bytes that need no zeroing: every one is written before it is read.
std::unique_ptr<uint8_t[]> Uninitialized(size_t bytes) {
  return std::make_unique_for_overwrite<uint8_t[]>(bytes);
}

// Per layer: an attention layer's keys and values, [n_head_kv][length]
// rows each (the slot's layout without the rows past the length); a Gated
// DeltaNet layer's convolution window and delta matrices.
class CpuSequenceState final : public SequenceState {
 public:
  struct Layer {
    std::unique_ptr<uint8_t[]> k, v;         // attention
    std::unique_ptr<uint8_t[]> conv, delta;  // recurrent
  };

  CpuSequenceState(const void* engine, int length) : engine_(engine), length_(length) {}
  int length() const override { return length_; }
  uint64_t bytes() const override { return bytes_; }

  const void* engine() const { return engine_; }
  std::vector<Layer>& layers() { return layers_; }
  const std::vector<Layer>& layers() const { return layers_; }
  std::unique_ptr<uint8_t[]> Hold(size_t bytes) {
    bytes_ += bytes;
    return Uninitialized(bytes);
  }

 private:
  const void* engine_;
  int length_;
  uint64_t bytes_ = 0;
  std::vector<Layer> layers_;
};

// The first `rows` rows of every KV head, from a slot's layout (`capacity`
// rows per head) into a state's (`rows` per head).
void CopyKvRowsOut(const uint8_t* slot, uint8_t* state, int n_head_kv, size_t row_bytes,
                   int capacity, int rows) {
  const size_t slot_head = static_cast<size_t>(capacity) * row_bytes;
  const size_t state_head = static_cast<size_t>(rows) * row_bytes;
  for (size_t h = 0; h < static_cast<size_t>(n_head_kv); ++h) {
    std::memcpy(state + h * state_head, slot + h * slot_head, state_head);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<SequenceState>> CpuEngine::CopyState(const Sequence& seq) {
  if (absl::Status s = slots_.CheckAppend(seq, 0); !s.ok()) return s;
  const int length = seq.length();
  if (length < 1) return absl::InvalidArgumentError("an empty sequence has no state to copy");
  const size_t row_k = KvRowBytes(config_.kv_types.k, hp_.head_dim);
  const size_t row_v = KvRowBytes(config_.kv_types.v, hp_.head_dim);
  const size_t head_rows = static_cast<size_t>(length) * static_cast<size_t>(hp_.n_head_kv);
  auto state = std::make_unique<CpuSequenceState>(this, length);
  const std::vector<LayerState>& slot = state_[static_cast<size_t>(seq.slot())];
  for (const LayerState& from : slot) {
    CpuSequenceState::Layer& to = state->layers().emplace_back();
    if (from.kv.k.size() > 0) {
      to.k = state->Hold(head_rows * row_k);
      to.v = state->Hold(head_rows * row_v);
      CopyKvRowsOut(from.kv.k.data(), to.k.get(), hp_.n_head_kv, row_k, config_.max_ctx, length);
      CopyKvRowsOut(from.kv.v.data(), to.v.get(), hp_.n_head_kv, row_v, config_.max_ctx, length);
    }
    if (from.recurrent.delta.size() > 0) {
      to.conv = state->Hold(from.recurrent.conv.size());
      to.delta = state->Hold(from.recurrent.delta.size());
      if (from.recurrent.conv.size() > 0) {
        std::memcpy(to.conv.get(), from.recurrent.conv.data(), from.recurrent.conv.size());
      }
      std::memcpy(to.delta.get(), from.recurrent.delta.data(), from.recurrent.delta.size());
    }
  }
  return state;
}

absl::Status CpuEngine::LoadState(Sequence& seq, const SequenceState& state, int length) {
  if (absl::Status s = slots_.CheckAppend(seq, 0); !s.ok()) return s;
  const auto* mine = dynamic_cast<const CpuSequenceState*>(&state);
  if (mine == nullptr || mine->engine() != this) {
    return absl::InvalidArgumentError("the sequence state was copied from another engine");
  }
  if (length < 1 || length > state.length()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "loading %d positions of a state that holds %d", length, state.length()));
  }
  std::vector<LayerState>& slot = state_[static_cast<size_t>(seq.slot())];
  bool recurrent = false;
  for (const CpuSequenceState::Layer& layer : mine->layers()) recurrent |= layer.delta != nullptr;
  if (recurrent && length != state.length()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the model's recurrent layers hold their state at position %d only, not at %d",
        state.length(), length));
  }
  const size_t row_k = KvRowBytes(config_.kv_types.k, hp_.head_dim);
  const size_t row_v = KvRowBytes(config_.kv_types.v, hp_.head_dim);
  for (size_t l = 0; l < slot.size(); ++l) {
    const CpuSequenceState::Layer& from = mine->layers()[l];
    LayerState& to = slot[l];
    if (from.k != nullptr) {
      // The state's heads are state.length() rows apart; the first `length`
      // of each go in.
      const size_t stride_k = static_cast<size_t>(state.length()) * row_k;
      const size_t stride_v = static_cast<size_t>(state.length()) * row_v;
      const size_t slot_k = static_cast<size_t>(config_.max_ctx) * row_k;
      const size_t slot_v = static_cast<size_t>(config_.max_ctx) * row_v;
      for (size_t h = 0; h < static_cast<size_t>(hp_.n_head_kv); ++h) {
        std::memcpy(to.kv.k.data() + h * slot_k, from.k.get() + h * stride_k,
                    static_cast<size_t>(length) * row_k);
        std::memcpy(to.kv.v.data() + h * slot_v, from.v.get() + h * stride_v,
                    static_cast<size_t>(length) * row_v);
      }
    }
    if (from.delta != nullptr) {
      if (to.recurrent.conv.size() > 0) {
        std::memcpy(to.recurrent.conv.data(), from.conv.get(), to.recurrent.conv.size());
      }
      std::memcpy(to.recurrent.delta.data(), from.delta.get(), to.recurrent.delta.size());
    }
  }
  slots_.SetLength(seq, length);
  slots_.SetCheckpoint(seq, -1);
  have_logits_ = false;
  return absl::OkStatus();
}

}  // namespace moetier
