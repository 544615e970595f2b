// The fp32 reference forward pass for every architecture (SPEC.md §3): the
// model's layer plan walked with the plain blocks of reference_blocks.h,
// every weight dequantized to fp32 once at creation, one token at a time.
// It is the oracle every other backend is checked against, so it favours
// being obviously right over speed; it holds one sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/forward_engine.h"
#include "engine/sequence.h"
#include "model/model.h"
#include "reference/reference_blocks.h"

namespace moetier {

// Bytes of fp32 weights a ReferenceEngine for `model` holds.
uint64_t ReferenceWeightBytes(const Model& model);

class ReferenceEngine final : public ForwardEngine {
 public:
  // Fails when max_ctx is outside 1..n_ctx_train, a layer uses a block the
  // reference lacks, or the fp32 copy of the weights would not fit in this
  // machine's memory.
  static absl::StatusOr<std::unique_ptr<ReferenceEngine>> Create(const Model& model, int max_ctx);

  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence() override { return slots_.Acquire(); }
  absl::Status Forward(Sequence& seq, std::span<const int32_t> tokens, LogitRows host_rows,
                       float* host_logits) override;
  absl::Status SaveCheckpoint(Sequence& seq) override;
  absl::Status RestoreCheckpoint(Sequence& seq) override;
  absl::StatusOr<int32_t> Sample(Sampler& sampler) override;
  absl::StatusOr<std::span<const float>> LastLogitsRow() override;
  int n_vocab() const override { return hp_.n_vocab; }
  int max_ctx() const override { return max_ctx_; }
  int max_sequences() const override { return 1; }
  const ModelHparams& hparams() const { return hp_; }

  // Tests only, as CpuEngine::SkipPositionsForTiming: the next n positions
  // count as computed without computing them. Their KV rows keep what the
  // cache holds (zeros in a fresh engine) and recurrent state stays as it
  // is, so a long context costs nothing to reach and both engines see the
  // same one. OutOfRange past the capacity.
  absl::Status SkipPositions(Sequence& seq, int n);

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;
    std::unique_ptr<reference::Attention> attention;     // attention layers
    std::unique_ptr<reference::GatedDeltaNet> deltanet;  // Gated DeltaNet layers
    std::unique_ptr<reference::Moe> moe;                 // routed-expert layers
    std::unique_ptr<reference::SwigluFfn> dense;         // FfnKind::kDense layers
  };

  ReferenceEngine(const Model& model, int max_ctx);
  // One token through every layer, then (with `logits`) its logits into
  // logits_.
  void ForwardToken(int32_t token, int pos, bool logits);

  ModelHparams hp_;
  int max_ctx_ = 0;
  SequenceSlots slots_;
  reference::DenseMatrix token_embd_;
  std::vector<float> output_norm_;
  reference::DenseMatrix output_;
  std::vector<Layer> layers_;
  bool have_logits_ = false;

  // Activations, sized once.
  std::vector<float> x_;        // residual stream [n_embd]
  std::vector<float> xn_;       // normed input of a sublayer [n_embd]
  std::vector<float> sub_out_;  // [n_embd]
  std::vector<float> logits_;   // [n_vocab] of the last token
};

}  // namespace moetier
