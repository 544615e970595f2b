// CudaEngine::CopyState and LoadState: a sequence's KV rows and recurrent
// state copied from its device slot to host memory and back into any slot,
// for sequences that share a prompt's start (generation/prefix_pool.h).
// The copies run on the compute stream, so they follow the Forward calls
// before them; each call waits for its copies, since the host side is
// pageable memory the caller may free at once.
#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "blocks/cuda/cuda_check.h"
#include "engine/cuda_engine.h"
#include "model/kv_cache_types.h"

namespace moetier {
namespace {

// Per layer: an attention layer's keys and values, [n_head_kv][length]
// rows each; a Gated DeltaNet layer's convolution window and delta
// matrices, as the device holds them.
class CudaSequenceState final : public SequenceState {
 public:
  struct Layer {
    std::vector<uint8_t> k, v;       // attention
    std::vector<float> conv, delta;  // recurrent
  };

  CudaSequenceState(const void* engine, int length, size_t n_layers)
      : engine_(engine), length_(length), layers_(n_layers) {}
  int length() const override { return length_; }
  uint64_t bytes() const override {
    uint64_t bytes = 0;
    for (const Layer& l : layers_) {
      bytes += l.k.size() + l.v.size() + (l.conv.size() + l.delta.size()) * sizeof(float);
    }
    return bytes;
  }
  const void* engine() const { return engine_; }
  std::vector<Layer>& layers() { return layers_; }
  const std::vector<Layer>& layers() const { return layers_; }

 private:
  const void* engine_;
  int length_;
  std::vector<Layer> layers_;
};

// The shape of one KV head's rows in a 2D copy: `width` bytes of the
// copied positions and `state_pitch` bytes between heads in the state (the
// slot's pitch is its head stride).
struct KvRows {
  size_t width, state_pitch;
};

KvRows KvRowsOf(TensorType type, int head_dim, int copied, int state_length) {
  const size_t row = KvRowBytes(type, head_dim);
  return {static_cast<size_t>(copied) * row, static_cast<size_t>(state_length) * row};
}

}  // namespace

absl::StatusOr<std::unique_ptr<SequenceState>> CudaEngine::CopyState(const Sequence& seq) {
  if (absl::Status s = slots_.CheckAppend(seq, 0); !s.ok()) return s;
  const int length = seq.length();
  if (length < 1) return absl::InvalidArgumentError("an empty sequence has no state to copy");
  MOETIER_RETURN_IF_ERROR(ctx_->MakeCurrent());
  auto* stream = static_cast<cudaStream_t>(ctx_->stream());
  const KvRows k = KvRowsOf(config_.kv_types.k, hp_.head_dim, length, length);
  const KvRows v = KvRowsOf(config_.kv_types.v, hp_.head_dim, length, length);
  const size_t heads = static_cast<size_t>(hp_.n_head_kv);
  const std::vector<LayerState>& slot = state_[static_cast<size_t>(seq.slot())];
  auto state = std::make_unique<CudaSequenceState>(this, length, slot.size());
  for (size_t l = 0; l < slot.size(); ++l) {
    CudaSequenceState::Layer& to = state->layers()[l];
    const LayerState& from = slot[l];
    if (IsAttention(mixers_[l])) {
      to.k.resize(heads * k.state_pitch);
      to.v.resize(heads * v.state_pitch);
      MOETIER_RETURN_IF_ERROR(CudaCall(
          cudaMemcpy2DAsync(to.k.data(), k.state_pitch, from.kv.k,
                            static_cast<size_t>(from.kv.k_head_stride), k.width, heads,
                            cudaMemcpyDeviceToHost, stream),
          "copying keys to the host"));
      MOETIER_RETURN_IF_ERROR(CudaCall(
          cudaMemcpy2DAsync(to.v.data(), v.state_pitch, from.kv.v,
                            static_cast<size_t>(from.kv.v_head_stride), v.width, heads,
                            cudaMemcpyDeviceToHost, stream),
          "copying values to the host"));
    } else {
      to.conv.resize(deltanet_->conv_state_floats());
      to.delta.resize(deltanet_->delta_state_floats());
      if (!to.conv.empty()) {
        MOETIER_RETURN_IF_ERROR(CudaCall(
            cudaMemcpyAsync(to.conv.data(), from.recurrent.conv, to.conv.size() * sizeof(float),
                            cudaMemcpyDeviceToHost, stream),
            "copying a convolution state to the host"));
      }
      MOETIER_RETURN_IF_ERROR(CudaCall(
          cudaMemcpyAsync(to.delta.data(), from.recurrent.delta, to.delta.size() * sizeof(float),
                          cudaMemcpyDeviceToHost, stream),
          "copying a delta-rule state to the host"));
    }
  }
  MOETIER_RETURN_IF_ERROR(ctx_->Sync("copying a sequence's state"));
  return state;
}

absl::Status CudaEngine::LoadState(Sequence& seq, const SequenceState& state, int length) {
  if (absl::Status s = slots_.CheckAppend(seq, 0); !s.ok()) return s;
  const auto* mine = dynamic_cast<const CudaSequenceState*>(&state);
  if (mine == nullptr || mine->engine() != this) {
    return absl::InvalidArgumentError("the sequence state was copied from another engine");
  }
  if (length < 1 || length > state.length()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "loading %d positions of a state that holds %d", length, state.length()));
  }
  bool recurrent = false;
  for (const MixerKind mixer : mixers_) recurrent |= !IsAttention(mixer);
  if (recurrent && length != state.length()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the model's recurrent layers hold their state at position %d only, not at %d",
        state.length(), length));
  }
  MOETIER_RETURN_IF_ERROR(ctx_->MakeCurrent());
  auto* stream = static_cast<cudaStream_t>(ctx_->stream());
  const KvRows k = KvRowsOf(config_.kv_types.k, hp_.head_dim, length, state.length());
  const KvRows v = KvRowsOf(config_.kv_types.v, hp_.head_dim, length, state.length());
  const size_t heads = static_cast<size_t>(hp_.n_head_kv);
  const std::vector<LayerState>& slot = state_[static_cast<size_t>(seq.slot())];
  for (size_t l = 0; l < slot.size(); ++l) {
    const CudaSequenceState::Layer& from = mine->layers()[l];
    const LayerState& to = slot[l];
    if (IsAttention(mixers_[l])) {
      MOETIER_RETURN_IF_ERROR(CudaCall(
          cudaMemcpy2DAsync(to.kv.k, static_cast<size_t>(to.kv.k_head_stride), from.k.data(),
                            k.state_pitch, k.width, heads, cudaMemcpyHostToDevice, stream),
          "copying keys to the device"));
      MOETIER_RETURN_IF_ERROR(CudaCall(
          cudaMemcpy2DAsync(to.kv.v, static_cast<size_t>(to.kv.v_head_stride), from.v.data(),
                            v.state_pitch, v.width, heads, cudaMemcpyHostToDevice, stream),
          "copying values to the device"));
    } else {
      if (!from.conv.empty()) {
        MOETIER_RETURN_IF_ERROR(CudaCall(
            cudaMemcpyAsync(to.recurrent.conv, from.conv.data(), from.conv.size() * sizeof(float),
                            cudaMemcpyHostToDevice, stream),
            "copying a convolution state to the device"));
      }
      MOETIER_RETURN_IF_ERROR(CudaCall(
          cudaMemcpyAsync(to.recurrent.delta, from.delta.data(), from.delta.size() * sizeof(float),
                          cudaMemcpyHostToDevice, stream),
          "copying a delta-rule state to the device"));
    }
  }
  MOETIER_RETURN_IF_ERROR(ctx_->Sync("loading a sequence's state"));
  slots_.SetLength(seq, length);
  slots_.SetCheckpoint(seq, -1);
  last_row_ = nullptr;
  return absl::OkStatus();
}

}  // namespace moetier
