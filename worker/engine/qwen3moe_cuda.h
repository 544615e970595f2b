// The qwen3moe forward pass on one NVIDIA GPU (SPEC.md §3.0–3.1), the
// counterpart of engine/qwen3moe_cpu with the kernels of backend/cuda.
//
// Every dense weight, and without an expert source every routed expert too,
// is copied to device memory at creation, in the file's own encoding. The
// KV cache (fp32, head-major like the CPU engine's), the activations and the
// scratch of the prefill GEMM are allocated at creation too; Forward
// allocates nothing. All compute runs on one stream the engine owns (the
// expert cache adds a copy stream). Per layer the host
// waits once: after the router's top-k, whose choice it reads to group the
// batch's tokens by expert (as the CPU engine does) and to launch each used
// expert's products on exactly its rows.
//
// With an expert source (CudaEngineConfig::expert_source) the routed experts
// stay on the host and a VRAM slot cache (engine/cuda_expert_cache.h) holds
// some of them: per layer and batch the engine routes the batch through the
// cache, places the used experts in groups, fills the missing ones on a copy
// stream, computes slot experts on the device and misses the cache sends to
// the host on host cores at the same time, and (decode) predicts the next
// layer's experts to prefetch them. Slots hold the file's bytes, so a slot
// expert computes exactly what a resident one does.
//
// Routing hooks (engine/routing_hook.h; CudaEngineConfig::routing_override
// and routing_observer) act at the per-layer wait, on the host, exactly as
// in the CPU engine: the override's choice replaces the router's for
// everything that follows (grouping, the cache's Route and Place, the
// weighted sum), mixed with the router's probabilities of the chosen
// experts renormalized as the router does, and the observer sees the choice
// used. The cache's prefetch still predicts from the next layer's router,
// so while a trace is replayed it predicts the router, not the trace.
//
// Numerics: activations, norms, attention and logits are fp32. Matrix
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
#include "cache/expert_cache_control.h"
#include "engine/cuda_expert_cache.h"
#include "engine/expert_source.h"
#include "engine/forward_engine.h"
#include "engine/routing_hook.h"
#include "model/qwen3moe_model.h"

namespace moetier {

// Device pointers to one routed expert's matrices, each in the model file's
// encoding and layout (`rows` rows of the WeightRef's row_bytes, back to back).
struct DeviceExpertMatrices {
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down = nullptr;
};

// Where the engine finds the routed experts' weights in device memory when
// every used expert is computed on the device. The built-in implementation
// (internal to qwen3moe_cuda.cc) holds every expert of the model, uploaded
// at creation; a caller may give its own (CudaEngineConfig::device_experts),
// which may enqueue the copy of a missing expert on `stream` and return its
// pointers. The engine's VRAM cache (CudaEngineConfig::expert_source) does
// not go through this seam: it places a layer's experts in groups, and may
// compute some on the host.
//
// Contract: the engine calls ExpertPointers once per used expert per layer
// and batch, from one thread, and enqueues all of that expert's work (gate,
// up, SiLU, down) on `stream` before asking for the next expert. The
// pointers must stay valid for work enqueued on `stream` up to that next
// call; since everything is in stream order, an implementation may reuse
// the slot afterwards by enqueuing its next copy on the same stream.
class DeviceExperts {
 public:
  virtual ~DeviceExperts() = default;
  virtual absl::StatusOr<DeviceExpertMatrices> ExpertPointers(int layer, int expert,
                                                              cuda::CudaStream stream) = 0;
};

struct CudaEngineConfig {
  int device = 0;       // CUDA device ordinal
  int max_ctx = 4096;   // KV cache length in tokens; 1..n_ctx_train
  int max_batch = 256;  // tokens per forward chunk; longer inputs are split
  // Matrix inputs of at most this many rows use the GEMV (in calls of up to
  // kCudaGemvMaxBatch rows), more rows the fp16 GEMM. 0 sends every product
  // through the GEMM; max_batch sends every product through the GEMV.
  int gemv_max_rows = cuda::kCudaGemvMaxBatch;
  // The GEMM through cuBLAS; false: the backend's tiled kernel. True is an
  // error in a build without cuBLAS.
  bool use_cublas = cuda::CudaBlasAvailable();
  // The routed experts' device weights; null: every expert is uploaded at
  // creation (unless expert_source is given). Not owned; must outlive the
  // engine.
  DeviceExperts* device_experts = nullptr;
  // Host copies of the routed experts behind a VRAM slot cache (the
  // daemon's store, or engine/mapped_expert_source.h); null: no cache.
  // Exclusive with device_experts. Not owned; must outlive the engine.
  ExpertWeightSource* expert_source = nullptr;
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

class CudaQwen3Moe final : public ForwardEngine, public ExpertCacheControl {
 public:
  // Fails when there is no usable device, a weight type has no CUDA kernel
  // or a shape is inconsistent (the message names the tensor), the
  // configuration is out of range, or device memory runs out (the message
  // names the tensor or buffer, its size and the device's free and total
  // memory). `model` only needs to live through Create: the engine keeps
  // device copies of everything it reads.
  static absl::StatusOr<std::unique_ptr<CudaQwen3Moe>> Create(const Qwen3MoeModel& model,
                                                              const CudaEngineConfig& config);
  ~CudaQwen3Moe() override;
  CudaQwen3Moe(const CudaQwen3Moe&) = delete;
  CudaQwen3Moe& operator=(const CudaQwen3Moe&) = delete;

  // ForwardEngine's contract. Errors from the device (a kernel fault, an
  // expert source failure, a router that chose no valid expert) and from a
  // routing hook (its own Status, or an override's expert id outside the
  // model: Internal, naming layer, position and id) come back as a Status;
  // the cache is then valid up to the last whole batch.
  absl::Status Forward(std::span<const int32_t> tokens, int pos0, LogitRows rows,
                       float* logits) override;
  void Reset() override { cached_tokens_ = 0; }
  int n_vocab() const override { return hp_.n_vocab; }
  int max_ctx() const override { return config_.max_ctx; }
  int cached_tokens() const override { return cached_tokens_; }

  const CudaEngineConfig& config() const { return config_; }
  // Device bytes of the uploaded weights, and of the KV cache, activations
  // and scratch.
  uint64_t weight_bytes() const { return weight_bytes_; }
  uint64_t buffer_bytes() const { return buffer_bytes_; }

  // The expert cache (null without an expert source): its counters for the
  // status page, and the miss cost model it measured at creation (all zero
  // unless the miss policy is auto).
  const ExpertCacheReport* expert_cache_report() const { return cache_.get(); }
  const CudaExpertCache* expert_cache() const { return cache_.get(); }
  const MissCostModel* miss_cost_model() const {
    return cache_ ? &cache_->cost_model() : nullptr;
  }
  // ExpertCacheControl: a new VRAM pool for the cache (between Forward
  // calls). FAILED_PRECONDITION when every expert is resident (no cache).
  absl::StatusOr<uint64_t> ResizeExpertCache(uint64_t pool_bytes) override;

 private:
  struct Matrix {  // a 2-D weight (or one expert's slice) on the device
    TensorType type = TensorType::kF32;
    int64_t rows = 0;
    int64_t cols = 0;
    const void* data = nullptr;
  };
  struct Layer {
    float* attn_norm = nullptr;  // fp32 vectors, decoded on the host
    float* ffn_norm = nullptr;
    float* q_norm = nullptr;
    float* k_norm = nullptr;
    Matrix wq, wk, wv, wo, router;
    TensorType gate_type = TensorType::kF32;
    TensorType up_type = TensorType::kF32;
    TensorType down_type = TensorType::kF32;
    float* k_cache = nullptr;  // [n_head_kv][max_ctx][head_dim]
    float* v_cache = nullptr;
  };

  CudaQwen3Moe(const Qwen3MoeModel& model, const CudaEngineConfig& config);
  absl::Status Init(const Qwen3MoeModel& model);
  absl::Status UploadWeights(const Qwen3MoeModel& model);
  absl::Status AllocateBuffers();
  // cudaMalloc with an error that names `what`; the block is freed with the
  // engine.
  absl::StatusOr<void*> DeviceAlloc(uint64_t bytes, const std::string& what);
  absl::StatusOr<float*> UploadVector(const WeightRef& ref);

  absl::Status ForwardBatch(const int32_t* tokens, int n, int pos0, LogitRows rows,
                            float* logits);
  absl::Status AttentionBlock(int layer, int n, int pos0);
  // The router's choice for the batch's n tokens at positions pos0.., on
  // the host (one sync), after the routing hooks, grouped by expert; with
  // `predict`, also the next layer's predicted choice into host_pred_ids_.
  absl::Status RouteAndGroup(int layer, int n, int pos0, bool predict);
  // The override (host_topk_ids_ and host_topk_weights_ replaced, and
  // copies of both enqueued to topk_ids_ and topk_weights_), then the
  // observer.
  absl::Status ApplyRoutingHooks(int layer, int n, int pos0);
  absl::Status MoeBlock(int layer, int n, int pos0);
  // One expert's products on grouped rows [off, off + count).
  absl::Status LaunchExpert(int layer, const void* gate, const void* up, const void* down,
                            int64_t off, int64_t count);
  // MoeBlock's experts through the slot cache.
  absl::Status CachedExperts(int layer, int n);
  // One group of the layer's used experts (ids and rows in group_ids_ and
  // group_rows_, grouped row offsets in expert_offset_): Place, fills, slot
  // experts on the device and host experts on the host, Release.
  absl::Status CachedGroup(int layer, size_t count);
  // CachedGroup's work between Place and Release; `n_need` host copies are
  // held (need_ids_, need_index_, need_mats_).
  absl::Status CachedGroupWork(int layer, size_t count, size_t n_need);
  // Offers layer + 1's predicted experts (host_pred_ids_) to the cache and
  // enqueues the fills it grants.
  absl::Status PrefetchNext(int layer, int n);
  // y[t * w.rows + r] = sum_c w[r, c] * x[t * w.cols + c] for t < n, through
  // the GEMV or the GEMM as gemv_max_rows decides.
  absl::Status MatMul(const Matrix& w, const float* x, int64_t n, float* y);
  // Waits for the stream; a kernel fault becomes a Status naming `where`.
  absl::Status Sync(const char* where);

  Qwen3MoeHparams hp_;
  CudaEngineConfig config_;
  int cached_tokens_ = 0;
  uint64_t weight_bytes_ = 0;
  uint64_t buffer_bytes_ = 0;

  void* stream_ = nullptr;  // cudaStream_t
  std::unique_ptr<cuda::CudaBlas> blas_;
  std::vector<void*> device_blocks_;  // every cudaMalloc of the engine
  std::vector<void*> pinned_blocks_;  // every cudaMallocHost

  Matrix token_embd_, output_;
  float* output_norm_ = nullptr;
  std::vector<Layer> layers_;
  std::unique_ptr<DeviceExperts> own_experts_;  // when the config gives none
  DeviceExperts* experts_ = nullptr;            // null with the slot cache
  std::unique_ptr<CudaExpertCache> cache_;

  // Device activations for one batch (B = max_batch, K = n_expert_used).
  int32_t* positions_ = nullptr;  // [max_ctx]: 0, 1, 2, ... (rope positions)
  float* x_ = nullptr;            // [B][n_embd] residual stream
  float* xn_ = nullptr;           // [B][n_embd] normed sublayer input
  float* q_ = nullptr;            // [B][n_head * head_dim]
  float* k_ = nullptr;            // [B][n_head_kv * head_dim]
  float* v_ = nullptr;            // [B][n_head_kv * head_dim]
  float* attn_out_ = nullptr;     // [B][n_head * head_dim]
  float* sub_out_ = nullptr;      // [B][n_embd]
  float* router_logits_ = nullptr;  // [B][n_expert]
  float* router_probs_ = nullptr;   // [B][n_expert]
  int32_t* topk_ids_ = nullptr;     // [B * K]
  float* topk_weights_ = nullptr;   // [B * K]
  int32_t* slot_rows_ = nullptr;    // [2][B * K]: slot -> token, then (token, j) -> slot
  float* expert_in_ = nullptr;      // [B * K][n_embd] xn rows in expert order
  float* gate_out_ = nullptr;       // [B * K][n_ff_exp]
  float* up_out_ = nullptr;         // [B * K][n_ff_exp]
  float* down_out_ = nullptr;       // [B * K][n_embd]
  float* logits_ = nullptr;         // [B][n_vocab]
  uint16_t* w_scratch_ = nullptr;   // fp16 copy of the largest matrix (GEMM only)
  uint16_t* x_scratch_ = nullptr;   // fp16 copy of B rows of the widest input
  int64_t w_scratch_elems_ = 0;
  int64_t x_scratch_elems_ = 0;

  // Pinned host memory for the per-layer exchange with the device.
  int32_t* host_topk_ids_ = nullptr;   // [B * K]
  int32_t* host_slot_rows_ = nullptr;  // [2][B * K], as slot_rows_
  // Routing hooks only: the choice's weights (with either hook) and the
  // router's probabilities (with an override).
  float* host_topk_weights_ = nullptr;  // [B * K]
  float* host_router_probs_ = nullptr;  // [B][n_expert]
  // Host-side grouping by expert.
  std::vector<int32_t> expert_count_;   // [n_expert]
  std::vector<int32_t> expert_offset_;  // [n_expert + 1]

  // The next layer's predicted choice (prefetch; kCudaPrefetchMaxTokens rows).
  float* pred_xn_ = nullptr;        // [P][n_embd]
  float* pred_logits_ = nullptr;    // [P][n_expert]
  float* pred_probs_ = nullptr;     // [P][n_expert]
  int32_t* pred_ids_ = nullptr;     // [P * K]
  float* pred_weights_ = nullptr;   // [P * K]
  int32_t* host_pred_ids_ = nullptr;  // [P * K], pinned
  void* host_rows_ready_ = nullptr;   // cudaEvent_t: host-computed experts' inputs are down
  // Slot cache scratch, sized at creation ([n_expert] each).
  std::vector<int32_t> group_ids_;
  std::vector<uint32_t> group_rows_;
  std::vector<ExpertPlacement> placements_;
  std::vector<int32_t> need_ids_;     // experts whose host copies a group needs
  std::vector<int32_t> need_index_;   // their index in the group
  std::vector<ExpertMatrices> need_mats_;
  std::vector<SlotFillJob> fill_jobs_;
  std::vector<SlotFill> prefetch_fills_;
  std::vector<uint8_t> predicted_;    // [n_expert] flags
};

// The engine as a ForwardEngine, for the worker.
absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCudaQwen3MoeEngine(
    const Qwen3MoeModel& model, const CudaEngineConfig& config);

}  // namespace moetier
