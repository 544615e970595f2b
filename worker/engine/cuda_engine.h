// The forward pass on one NVIDIA GPU for every architecture whose layer
// plan uses the CUDA blocks (blocks/cuda/), the counterpart of
// engine/cpu_engine.h.
//
// Every dense weight (shared experts included), and without an expert
// source every routed expert too, is copied to device memory at creation,
// in the file's own encoding. The sequences' state (the KV caches of
// attention layers, fp32, head-major like the CPU engine's; the recurrent
// state of Gated DeltaNet layers and its checkpoint copy), the activations
// and the scratch of the prefill GEMM are allocated at creation too;
// Forward allocates nothing. All compute runs on one stream (the expert
// cache adds a copy stream). Per MoE layer the host waits once, for the
// router's choice (blocks/cuda/moe_block.h).
//
// Logits stay on the device: Forward copies rows to the host only when
// asked, and Sample draws greedy tokens on the device (one id comes back).
// With a top-k filter (or a greedy repetition penalty) the device selects
// the row's top-k + |penalized| best logits and the host sampler draws
// from those, the token it would draw from the whole row; only samplers
// without top-k copy the last row. ForwardMany keeps the rows its steps ask
// to keep (sample_in_engine) on the device for SampleStep, so the server's
// batched decode samples that way too.
//
// Numerics: activations, norms, attention, recurrent states and logits are
// fp32. Matrix
// inputs of up to `gemv_max_rows` rows go through GemvQuant (exact weights,
// fp32 sums); larger ones through GemmQuant, which rounds weights and
// activations to fp16 and sums in fp32. Nothing uses atomics and the MoE
// weighted sum runs in a fixed order per token, so a run is reproducible;
// with every product on the GEMV (gemv_max_rows >= max_batch) each row's
// arithmetic is also independent of how tokens are batched.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cuda/cuda_kernels.h"
#include "blocks/cuda/attention_block.h"
#include "blocks/cuda/cuda_context.h"
#include "blocks/cuda/cuda_expert_cache.h"
#include "blocks/cuda/deltanet_block.h"
#include "blocks/cuda/moe_block.h"
#include "cache/expert_cache_control.h"
#include "engine/expert_source.h"
#include "engine/forward_engine.h"
#include "engine/routing_hook.h"
#include "engine/sequence.h"
#include "model/model.h"

namespace moetier {

struct CudaEngineConfig {
  int device = 0;       // CUDA device ordinal
  int max_ctx = 4096;   // positions per sequence; 1..n_ctx_train
  int max_sequences = 1;  // sequences alive at once (each has its own KV cache)
  int max_batch = 256;  // tokens per forward chunk; longer inputs are split
  // How the KV cache stores keys and values: each one of cuda::kCudaKvCacheTypes.
  KvCacheTypes kv_types;
  // Matrix inputs of at most this many rows use the GEMV (in calls of up to
  // kCudaGemvMaxBatch rows), more rows the fp16 GEMM. 0 sends every product
  // through the GEMM; max_batch sends every product through the GEMV.
  int gemv_max_rows = cuda::kCudaGemvMaxBatch;
  // Gated DeltaNet layers run batches of at least this many tokens through
  // the chunked delta rule (chunks of 64), shorter ones token by token;
  // the two agree within fp32 rounding. Decoding (one token) is always
  // token by token. A guess, not yet measured on a GPU.
  int deltanet_chunk_min_tokens = 16;
  // The GEMM through cuBLAS; false: the backend's tiled kernel. True is an
  // error in a build without cuBLAS.
  bool use_cublas = cuda::CudaBlasAvailable();
  // How the MoE layers launch their experts; the logits are the same bits
  // either way, so these exist to measure one against the other:
  // - group_expert_launches: a layer's GEMV products in grouped launches
  //   (cuda::GemvQuantGroup) where the weights are fixed (resident experts,
  //   VRAM cache hits); false: four launches per expert;
  // - route_on_device: with resident experts, no routing hooks and a batch
  //   the GEMV takes (decode), the router's choice is grouped on the device
  //   and no layer waits for the host (it needs group_expert_launches);
  //   false: one host sync per layer.
  bool group_expert_launches = true;
  bool route_on_device = true;
  // A one-token step of one sequence that the MoE routes on the device
  // (route_on_device) is captured in a CUDA graph the first time, per
  // sequence slot, and replayed after: one launch a step instead of one per
  // kernel. The token and position reach the replay through device memory.
  // The same bits as without; a capture that fails turns graphs off for the
  // engine (graphs_failed() says why).
  bool use_cuda_graphs = true;
  // The routed experts' device weights; null: every expert is uploaded at
  // creation (unless expert_source is given). Not owned; must outlive the
  // engine.
  DeviceExperts* device_experts = nullptr;
  // Host copies of the routed experts behind a VRAM slot cache (the
  // daemon's store, or engine/mapped_expert_source.h); null: no cache.
  // Exclusive with device_experts. Not owned; must outlive the engine.
  ExpertWeightSource* expert_source = nullptr;
  // Without expert_source: a source told every choice (Route) and nothing
  // else, so a fully resident worker still counts its routing.
  ExpertWeightSource* routing_counter = nullptr;
  CudaExpertCacheConfig expert_cache;
  // Host memory the expert source serves from, registered for DMA at
  // creation (the store segment's mapping); copies from elsewhere, or from a
  // range that cannot be registered, go through pinned staging buffers.
  // Must stay mapped for the engine's life.
  std::vector<HostMemoryRange> dma_ranges;
  // Routing hooks (engine/routing_hook.h), called per MoE layer and batch
  // once the router's top-k is on the host: the override replaces the
  // choice, then the observer sees the choice used. Null: the router
  // decides, nothing is told (the engine tests the two pointers once per
  // layer). With an override every layer copies the batch's router
  // probabilities to the host with its choice ([n][n_expert] floats) and
  // the new choice and weights back. Not owned; must outlive the engine.
  RoutingObserver* routing_observer = nullptr;
  RoutingOverride* routing_override = nullptr;
};

class CudaEngine final : public ForwardEngine, public ExpertCacheControl, public CudaPhaseTimers {
 public:
  // Fails when there is no usable device, a weight type has no CUDA kernel,
  // a layer uses a block the CUDA backend lacks or a shape is inconsistent
  // (the message names the tensor), the configuration is out of range, or
  // device memory runs out (the message names the tensor or buffer, its
  // size and the device's free and total memory). `model` only needs to
  // live through Create: the engine keeps device copies of everything it
  // reads.
  static absl::StatusOr<std::unique_ptr<CudaEngine>> Create(const Model& model,
                                                            const CudaEngineConfig& config);
  // The part of Create's checks that needs only the model, not a device:
  // weight types, blocks and shapes the CUDA kernels handle.
  static absl::Status CheckModel(const Model& model);
  ~CudaEngine() override;
  CudaEngine(const CudaEngine&) = delete;
  CudaEngine& operator=(const CudaEngine&) = delete;

  // ForwardEngine's contract. Errors from the device (a kernel fault, an
  // expert source failure, a router that chose no valid expert) and from a
  // routing hook come back as a Status; the sequence is then valid up to the
  // last whole batch.
  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence() override { return slots_.Acquire(); }
  absl::Status Forward(Sequence& seq, std::span<const int32_t> tokens, LogitRows host_rows,
                       float* host_logits) override;
  // The sequences' tokens in shared passes of up to max_batch rows: every
  // projection and the MoE block run over all rows at once (each layer's
  // routed experts fetched once for the pass), attention and DeltaNet per
  // sequence. Each row's arithmetic is its solo one when every product of
  // a pass goes through the GEMV (rows <= gemv_max_rows, or gemv_max_rows
  // >= max_batch), so the logits are bit for bit those of Forward; passes
  // with more rows use the fp16 GEMM, within its rounding.
  absl::Status ForwardMany(std::span<const SequenceStep> steps) override;
  absl::Status SaveCheckpoint(Sequence& seq) override;
  absl::Status RestoreCheckpoint(Sequence& seq) override;
  // Benchmarks and long-context tests, as CpuEngine::SkipPositionsForTiming:
  // the next n positions count as computed without computing them. Their
  // KV rows keep what the cache holds (zeros in a fresh engine), recurrent
  // state is cleared when the sequence was empty and otherwise left as it
  // is, so a decode step after it costs what one at that depth costs.
  // OutOfRange past the capacity.
  absl::Status SkipPositionsForTiming(Sequence& seq, int n);
  // Host copies (engine/cuda_engine_state.cc), waited for before returning.
  absl::StatusOr<std::unique_ptr<SequenceState>> CopyState(const Sequence& seq) override;
  absl::Status LoadState(Sequence& seq, const SequenceState& state, int length) override;
  absl::StatusOr<int32_t> Sample(Sampler& sampler) override;
  // Steps' rows stay on the device and are sampled there, as Sample does.
  bool SamplesStepsInPlace() const override { return true; }
  absl::StatusOr<int32_t> SampleStep(size_t step, Sampler& sampler) override;
  absl::StatusOr<std::span<const float>> LastLogitsRow() override;
  int n_vocab() const override { return hp_.n_vocab; }
  int max_ctx() const override { return config_.max_ctx; }
  int max_sequences() const override { return config_.max_sequences; }

  const CudaEngineConfig& config() const { return config_; }
  // Device bytes of the uploaded weights, and of the KV caches, activations
  // and scratch.
  uint64_t weight_bytes() const { return ctx_->weight_bytes(); }
  uint64_t buffer_bytes() const { return ctx_->buffer_bytes(); }

  // The expert cache (null without an expert source): its counters for the
  // status page, and the miss cost model it measured at creation (all zero
  // unless the miss policy is auto).
  const ExpertCacheReport* expert_cache_report() const { return moe_->expert_cache(); }
  // Ok while decode graphs are in use (or off by config); else why a
  // capture failed, after which the engine decodes without them.
  const absl::Status& graphs_failed() const { return graphs_failed_; }
  // Sequence slots whose decode step has a captured graph.
  int captured_decode_graphs() const;
  // Per-phase device time (blocks/cuda/phase_timeline.h), for benchmarks:
  // while on, each pass records an event at every phase's end and adds the
  // intervals once it is done; decode steps then launch their kernels
  // instead of replaying a graph, so the figures are those of eager
  // launches. The logits are the same bits either way. Enabling fails only
  // when the events cannot be created.
  absl::Status EnablePhaseTiming(bool on) override { return ctx_->EnablePhaseTiming(on); }
  CudaPhaseSeconds phase_seconds() const override { return ctx_->phase_seconds(); }
  // Ok unless collecting a pass's times failed, which turned timing off.
  const absl::Status& phase_timing_error() const { return ctx_->phase_timing_error(); }
  void ResetPhaseTimes() override { ctx_->ResetPhaseTimes(); }
  const CudaExpertCache* expert_cache() const { return moe_->expert_cache(); }
  const MissCostModel* miss_cost_model() const {
    return moe_->expert_cache() != nullptr ? &moe_->expert_cache()->cost_model() : nullptr;
  }
  // ExpertCacheControl: a new VRAM pool for the cache (between Forward
  // calls). FAILED_PRECONDITION when every expert is resident (no cache).
  absl::StatusOr<uint64_t> ResizeExpertCache(uint64_t pool_bytes) override;

 private:
  CudaEngine(const Model& model, const CudaEngineConfig& config);
  absl::Status Init(const Model& model);
  // One layer's state of one sequence: the KV cache of an attention layer,
  // the recurrent state of a Gated DeltaNet layer.
  struct LayerState {
    CudaKvLayer kv;
    CudaRecurrentLayer recurrent;
  };
  // Uploads the dense weights (and experts, when the engine owns them) and
  // gives the mixer blocks theirs; the MoE block's come back in
  // `moe_weights`, one per layer.
  absl::Status UploadWeights(const Model& model, std::vector<CudaMoeWeights>& moe_weights);
  absl::Status AllocateBuffers();
  // One sequence slot's rows of a pass.
  struct BatchPart {
    int slot = 0;
    CudaRowSpan span;
  };
  // One pass of n rows, which `parts` cover from row 0 in order; then the
  // logits of `out_rows` (ascending) into logits_'s first rows, each also
  // copied to its host_rows entry where that is not null. Waits for the
  // device before returning. With `step_on_device` (a decode step being
  // captured: one part of one token, no host rows) the token and its
  // position are the two int32 there, read when the kernels run, `tokens`
  // is not read, and nothing waits.
  absl::Status ForwardBatch(std::span<const BatchPart> parts, const int32_t* tokens, int n,
                            std::span<const int> out_rows, std::span<float* const> host_rows,
                            const int32_t* step_on_device = nullptr);
  // Forward of one token through the slot's captured graph (capturing it
  // first when there is none).
  bool DecodesWithGraph(const Sequence& seq, std::span<const int32_t> tokens,
                        LogitRows host_rows) const;
  absl::Status DecodeWithGraph(Sequence& seq, int32_t token, LogitRows host_rows,
                               float* host_logits);
  absl::Status CaptureDecodeGraph(int slot, int pos0, void** exec);
  // Sample's token from the row's m best logits and the penalized tokens'
  // (Sampler::SampleFromBest): what crosses to the host is those, not the
  // row.
  absl::StatusOr<int32_t> SampleFromCandidates(Sampler& sampler, int m);
  // Copies slot's recurrent layers to their checkpoint (save) or back.
  absl::Status CopyRecurrentState(int slot, bool save);

  ModelHparams hp_;
  CudaEngineConfig config_;
  SequenceSlots slots_;
  std::unique_ptr<CudaContext> ctx_;
  CudaBatch batch_;
  DeviceMatrix token_embd_, output_;
  float* output_norm_ = nullptr;
  std::unique_ptr<DeviceExperts> own_experts_;  // when the config gives none
  std::vector<MixerKind> mixers_;               // per layer
  std::unique_ptr<CudaAttentionBlock> attention_;
  std::unique_ptr<CudaDeltaNetBlock> deltanet_;
  std::unique_ptr<CudaMoeBlock> moe_;
  // Per sequence slot, per layer; and each slot's checkpoint of its
  // recurrent layers (empty for attention layers).
  std::vector<std::vector<LayerState>> state_;
  std::vector<std::vector<CudaRecurrentLayer>> checkpoints_;
  float* logits_ = nullptr;        // [B][n_vocab], device
  const float* last_row_ = nullptr;  // the row Sample draws from (device); null: none
  int32_t* sampled_ = nullptr;     // [1], device
  int32_t* host_sampled_ = nullptr;  // [1], pinned
  std::vector<float> host_row_;    // [n_vocab]: for samplers that need the whole row
  // Sampling from candidates: TopCandidates' scratch; ids [2][kMaxTopCandidates]
  // (the best, then the penalized) and logits (the best, then the
  // penalized, back to back), on the device and pinned.
  uint64_t* candidate_scratch_ = nullptr;
  int64_t candidate_scratch_keys_ = 0;
  int32_t* candidate_ids_ = nullptr;
  int32_t* host_candidate_ids_ = nullptr;
  float* candidate_logits_ = nullptr;
  float* host_candidate_logits_ = nullptr;
  int32_t* tokens_ = nullptr;       // [B]: a pass's token ids, device
  int32_t* host_tokens_ = nullptr;  // [B], pinned
  // Decode graphs: per sequence slot the instantiated graph
  // (cudaGraphExec_t, null until captured), the step's token and position
  // on the device and pinned, and why graphs were turned off, if they were.
  std::vector<void*> decode_graphs_;
  int32_t* step_ = nullptr;       // [2]: token, position; device
  int32_t* host_step_ = nullptr;  // [2], pinned
  absl::Status graphs_failed_;
  // A pass's plan, kept between calls so that passes allocate nothing once
  // they have grown: its parts, their spans, state and steps, its tokens,
  // the rows whose logits it keeps and where they go; and ForwardMany's
  // tokens run per step.
  std::vector<BatchPart> parts_;
  std::vector<CudaRowSpan> spans_;
  std::vector<const CudaKvLayer*> kv_of_part_;
  std::vector<const CudaRecurrentLayer*> recurrent_of_part_;
  std::vector<size_t> part_steps_;
  std::vector<int32_t> batch_tokens_;
  std::vector<int> out_rows_;
  std::vector<float*> out_dst_;
  std::vector<int> step_done_;
  // Per out row of a pass, its step; per step of the last ForwardMany, its
  // row kept for SampleStep (step_rows_ or logits_; null: none), and the
  // device rows [max_sequences][n_vocab] they are kept in.
  std::vector<size_t> out_steps_;
  std::vector<const float*> step_row_of_;
  float* step_rows_ = nullptr;
};

// The engine as a ForwardEngine, for the worker.
absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCudaEngine(const Model& model,
                                                                const CudaEngineConfig& config);

}  // namespace moetier
