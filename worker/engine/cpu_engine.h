// The forward pass on the CPU for every architecture whose layer plan uses
// the CPU blocks (blocks/cpu/), computed straight from the file's quantized
// blocks with the kernels of backend/cpu.
//
// Every buffer, the sequences' KV caches included, is allocated at
// creation; the token loop allocates nothing. Tokens are processed in
// batches of up to max_batch: every matrix reads its weight rows once per
// batch, and the MoE block groups the batch's tokens by expert so that each
// selected expert's weights are streamed once per layer per batch.
// Activations are quantized once per matrix input and shared by all rows
// (and, for q/k/v and gate/up, by all matrices reading that input).
//
// Results do not depend on the thread count or the batch size: each output
// element is computed by one kernel call whose arithmetic is fixed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cpu/huge_page_copy.h"
#include "backend/cpu/thread_pool.h"
#include "blocks/cpu/attention_block.h"
#include "blocks/cpu/cpu_batch.h"
#include "blocks/cpu/deltanet_block.h"
#include "blocks/cpu/mat_runner.h"
#include "blocks/cpu/moe_block.h"
#include "engine/expert_source.h"
#include "engine/forward_engine.h"
#include "engine/routing_hook.h"
#include "engine/sequence.h"
#include "model/model.h"

namespace moetier {

struct CpuEngineConfig {
  int max_ctx = 4096;     // positions per sequence; 1..n_ctx_train
  int max_sequences = 1;  // sequences alive at once (each has its own KV cache)
  int n_threads = 1;      // threads including the caller's
  int max_batch = 256;    // tokens processed together; longer inputs are split
  // How the KV cache stores keys and values (model/kv_cache_types.h); every
  // type of kKvCacheTypeChoices, F32 (exact) by default.
  KvCacheTypes kv_types;
  // Copy every weight into anonymous memory backed by 2 MiB transparent huge
  // pages at creation (backend/cpu/huge_page_copy.h) instead of reading the
  // model's mapping. Much faster decoding of large models (fewer TLB misses),
  // at the cost of the copy time and of memory no longer shared with the
  // page cache or other processes. The model's mapping is marked cold so
  // that the kernel reclaims its pages first.
  bool copy_weights_to_huge_pages = false;
  // Where the routed experts' matrices come from (engine/expert_source.h);
  // null: the model's mapping (WeightRef::expert). When set, the engine asks
  // it for exactly the experts each layer's batch routed to and never reads
  // the expert tensors of the mapping, and the huge-page copy above covers
  // the dense tensors only. Not owned; must outlive the engine.
  ExpertWeightSource* expert_source = nullptr;
  // Routing hooks (engine/routing_hook.h), called per layer and batch after
  // the router's top-k: the override replaces the choice, then the observer
  // sees the choice used. Null: the router decides, nothing is told. Not
  // owned; must outlive the engine.
  RoutingObserver* routing_observer = nullptr;
  RoutingOverride* routing_override = nullptr;
};

class CpuEngine final : public ForwardEngine {
 public:
  // Fails when a weight type has no CPU kernel, a layer uses a block the
  // CPU backend lacks, a shape is inconsistent, or the configuration is out
  // of range; the message names what to change. Forward fails (with the
  // source's or hook's Status, the sequence valid up to the last whole
  // batch) when the expert source or a routing hook fails.
  static absl::StatusOr<std::unique_ptr<CpuEngine>> Create(const Model& model,
                                                           const CpuEngineConfig& config);
  // The part of Create's checks that needs only the model: weight types,
  // blocks and shapes the cpu kernels handle.
  static absl::Status CheckModel(const Model& model);
  ~CpuEngine() override;

  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence() override;
  absl::Status Forward(Sequence& seq, std::span<const int32_t> tokens, LogitRows host_rows,
                       float* host_logits) override;
  // One engine pass per max_batch rows: the steps' tokens are packed in
  // order, a step's tokens split across passes when they do not fit. Every
  // row is computed as the solo Forward computes it, so each step's logits
  // are bit-identical to its sequence run alone with the same splits (one
  // difference: a Gated DeltaNet layer runs runs of 8 or more tokens by
  // chunks, so a prompt split otherwise agrees within float rounding).
  // Routing hooks see one sequence at a time: with them, more than one step
  // is FailedPrecondition, unless the only hook is an override that routes
  // rows alone (RoutingOverride::routes_rows_alone).
  absl::Status ForwardMany(std::span<const SequenceStep> steps) override;
  absl::Status SaveCheckpoint(Sequence& seq) override;
  absl::Status RestoreCheckpoint(Sequence& seq) override;
  absl::StatusOr<std::unique_ptr<SequenceState>> CopyState(const Sequence& seq) override;
  absl::Status LoadState(Sequence& seq, const SequenceState& state, int length) override;
  absl::StatusOr<int32_t> Sample(Sampler& sampler) override;
  absl::StatusOr<std::span<const float>> LastLogitsRow() override;
  int n_vocab() const override { return hp_.n_vocab; }
  int max_ctx() const override { return config_.max_ctx; }
  int max_sequences() const override { return config_.max_sequences; }

  // Benchmarks only: the next n positions of `seq` count as computed
  // without computing them; their KV rows keep whatever the slot holds
  // (zeros in a fresh engine), and recurrent state is cleared when the
  // sequence was empty and otherwise left as it is. A decode
  // step after it costs what one at that depth costs, without the prefill
  // (the logits are those of a context whose skipped positions hold zero
  // keys and values, as after ReferenceEngine::SkipPositions: a long-context
  // test reaches depth this way). OutOfRange past the capacity.
  absl::Status SkipPositionsForTiming(Sequence& seq, int n);

  const CpuEngineConfig& config() const { return config_; }
  // Where Forward spends its time, accumulated since creation or the last
  // ResetPhaseTimes().
  double phase_seconds(CpuPhase phase) const {
    return runner_.phase_seconds()[static_cast<size_t>(phase)];
  }
  void ResetPhaseTimes() { runner_.phase_seconds().fill(0.0); }
  // Bytes of buffers, KV caches and weight copies the engine allocated.
  uint64_t allocated_bytes() const;

 private:
  CpuEngine(const Model& model, const CpuEngineConfig& config);
  absl::Status CopyWeightsToHugePages();
  void Allocate();
  // One layer's state of one sequence: the KV cache of an attention layer,
  // the recurrent state of a Gated DeltaNet layer.
  struct LayerState {
    CpuKvLayer kv;
    CpuRecurrentLayer recurrent;
  };
  // One sequence's rows in a batch.
  struct BatchPart {
    std::vector<LayerState>* state;
    CpuRowSpan span;
  };
  // One batch of n <= max_batch rows: `tokens` ([n]) and the parts that
  // cover them in order; the logits of rows out_rows go, in that order, to
  // `logits` when it is set.
  absl::Status ForwardBatch(std::span<const BatchPart> parts, const int32_t* tokens, int n,
                            std::span<const int> out_rows, float* logits);
  // Seconds of phase time accounted so far, to charge the rest of a call
  // to CpuPhase::kOther.
  double AccountedSeconds() const;

  ModelHparams hp_;
  // The weights the engine reads: the model's, or their huge-page copy.
  ModelWeights weights_;
  std::optional<cpu::HugePageCopy> weight_copy_;
  CpuEngineConfig config_;
  cpu::ThreadPool pool_;
  CpuMatRunner runner_;
  std::vector<float> output_norm_;  // decoded to f32 once
  std::unique_ptr<CpuBatch> batch_;
  std::unique_ptr<CpuAttentionBlock> attention_;
  std::unique_ptr<CpuDeltaNetBlock> deltanet_;
  std::unique_ptr<CpuMoeBlock> moe_;
  SequenceSlots slots_;
  // Per sequence slot, per layer; and each slot's checkpoint of its
  // recurrent layers (empty for attention layers).
  std::vector<std::vector<LayerState>> state_;
  std::vector<std::vector<CpuRecurrentLayer>> checkpoints_;
  std::vector<float> last_logits_;  // [n_vocab]: the row Sample draws from
  // A batch's layout, reused by every call (capacity reserved at creation).
  std::vector<BatchPart> parts_;
  std::vector<CpuRowSpan> spans_;
  std::vector<const CpuKvLayer*> kv_of_part_;
  std::vector<CpuRecurrentLayer*> recurrent_of_part_;
  std::vector<int32_t> batch_tokens_;
  std::vector<int> out_rows_;
  std::vector<size_t> out_steps_;   // ForwardMany: the step of each out row
  std::vector<int> step_done_;      // ForwardMany: tokens of each step run so far
  std::vector<float> many_logits_;  // [kManyLogitsRows][n_vocab]
  static constexpr int kManyLogitsRows = 16;
  bool have_logits_ = false;
};

// The factory forward_engine.h declares, for the standalone worker.
absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCpuEngineWithConfig(
    const Model& model, const CpuEngineConfig& config);

}  // namespace moetier
