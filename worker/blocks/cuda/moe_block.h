// The feed-forward block on one GPU, for every FfnKind: the router
// (base/router_params.h: softmax or sigmoid, a selection bias, renormalized
// and scaled as the model says), the routing hooks, grouping the batch's
// tokens by expert on the host (one sync per layer, the only one), each
// used expert's products on exactly its rows, the weighted sum into the
// residual stream, the shared expert (gated by a sigmoid where it has a
// gate) where the layer has one, and the SwiGLU of a layer without experts
// (FfnKind::kDense); shared and dense FFNs are resident in device memory,
// never through the expert cache.
//
// Where the experts are: every expert resident in device memory
// (DeviceExperts), or a VRAM slot cache over host copies
// (blocks/cuda/cuda_expert_cache.h): per layer and batch the block routes
// the batch through the cache, places the used experts in groups, fills the
// missing ones on a copy stream, computes slot experts on the device and
// the misses the cache sends to the host on host cores at the same time,
// and (decode) predicts the next layer's experts to prefetch them.
//
// Routing hooks act at the per-layer sync, on the host, exactly as in the
// CPU block: the override's choice replaces the router's for everything
// that follows, mixed with the router's probabilities of the chosen experts
// weighted as the router weights its own choice; the observer sees the
// choice used. The cache's prefetch takes the override's guess of the next
// layer (a replayed trace's own) where it gives one, else that layer's router.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "blocks/cuda/attention_block.h"
#include "blocks/cuda/cuda_context.h"
#include "blocks/cuda/cuda_expert_cache.h"
#include "cache/expert_slot_cache.h"
#include "engine/expert_source.h"
#include "engine/routing_hook.h"
#include "model/model.h"

namespace moetier {

// Device pointers to one routed expert's matrices, each in the model file's
// encoding and layout (`rows` rows of the tensor's row bytes, back to back).
struct DeviceExpertMatrices {
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down = nullptr;
};

// Where the block finds the routed experts' weights in device memory when
// every used expert is computed on the device: the engine's upload of every
// expert, or a caller's own, which may enqueue the copy of a missing expert
// on `stream` and return its pointers.
//
// Contract: the block calls ExpertPointers once per used expert per layer
// and batch, from one thread, and enqueues all of that expert's work (gate,
// up, SiLU, down) on `stream` before asking for the next expert. The
// pointers must stay valid for work enqueued on `stream` up to that next
// call; since everything is in stream order, an implementation may reuse
// the slot afterwards by enqueuing its next copy on the same stream.
//
// An implementation whose pointers are fixed instead (every expert in
// device memory, the same pointers for the engine's lifetime) says so with
// pointers_stay_valid(). The block then reads every expert's pointers once,
// when it allocates, into a device table for batches it routes on the
// device, and in batches grouped on the host asks for each used expert of
// a layer first and computes them in grouped launches
// (cuda::GemvQuantGroup), with the same bits.
class DeviceExperts {
 public:
  virtual ~DeviceExperts() = default;
  virtual absl::StatusOr<DeviceExpertMatrices> ExpertPointers(int layer, int expert,
                                                              cuda::CudaStream stream) = 0;
  virtual bool pointers_stay_valid() const { return false; }
};

// One layer's FFN weights on the device, but for the routed experts.
struct CudaMoeWeights {
  float* ffn_norm = nullptr;  // fp32
  DeviceMatrix router;
  float* selection_bias = nullptr;  // fp32 [n_expert]; null: none
  TensorType gate_type = TensorType::kF32;
  TensorType up_type = TensorType::kF32;
  TensorType down_type = TensorType::kF32;
  // FfnKind::kMoeWithSharedExpert: x += sigmoid(shared_gate_inp . xn) *
  // SwiGLU_shared(xn), after the routed experts' sum; without a gate
  // (shared_gate_inp.data null) x += SwiGLU_shared(xn).
  bool has_shared_expert = false;
  DeviceMatrix shared_gate_inp;  // fp32, one row of n_embd
  DeviceMatrix shared_gate, shared_up, shared_down;
  // FfnKind::kDense: x += SwiGLU_dense(xn), and nothing else.
  bool dense_ffn = false;
  DeviceMatrix dense_gate, dense_up, dense_down;
};

struct CudaMoeConfig {
  int max_batch = 256;
  // Exactly one of these: the experts in device memory, or host copies
  // behind a VRAM slot cache. Not owned; must outlive the block.
  DeviceExperts* device_experts = nullptr;
  ExpertWeightSource* expert_source = nullptr;
  // Told every choice where there is no expert_source (heat counting).
  ExpertWeightSource* routing_counter = nullptr;
  CudaExpertCacheConfig expert_cache;
  std::vector<HostMemoryRange> dma_ranges;  // registered for the cache's fills
  RoutingObserver* routing_observer = nullptr;
  RoutingOverride* routing_override = nullptr;
  // CudaEngineConfig's switches of the same names.
  bool group_expert_launches = true;
  bool route_on_device = true;
};

class CudaMoeBlock {
 public:
  // `hp`, `ctx`, `batch` and the config's pointers must outlive the block.
  CudaMoeBlock(const ModelHparams& hp, const RoutedExpertShapes& experts, CudaContext& ctx,
               const CudaBatch& batch, CudaMoeConfig config);
  ~CudaMoeBlock();

  // Its buffers (and pinned host exchange memory); the VRAM cache comes
  // later, with CreateExpertCache, once every other allocation is made.
  absl::Status Allocate();
  // With an expert source: the cache, sized from the VRAM that is left.
  absl::Status CreateExpertCache();
  void SetWeights(int layer, const CudaMoeWeights& weights);

  // x += MoE(RMSNorm(x; ffn_norm)) for the batch's n tokens at positions
  // pos0.. . Errors come from the device, the expert source, a routing hook
  // (or an override's id outside the model: Internal, naming layer, position
  // and id), or a router that chose no valid expert.
  absl::Status Forward(int layer, int n, int pos0);
  // Ends the batch's last hold of the expert source (a prefetch's, or a
  // group's whose copies nothing waited for), also after a failure.
  absl::Status FinishBatch();

  // With resident experts, no hooks, no cache and a batch the GEMV takes:
  // the router's choice stays on the device (BuildExpertJobs groups it and
  // writes the job tables), so no layer needs a host sync, and the batch's
  // work may be captured in a CUDA graph. Its checks and the routing
  // counter's counts wait for the batch's end (FinishBatch).
  bool RoutesOnDevice(int n) const;
  // A captured batch of n tokens was replayed (its host code did not run):
  // FinishBatch reports it as a batch routed on the device.
  void NoteReplayedBatch(int n) { device_routed_n_ = n; }

  // The cache (null with resident experts).
  const CudaExpertCache* expert_cache() const { return cache_.get(); }
  // A new VRAM pool for the cache (between Forward calls).
  absl::StatusOr<uint64_t> ResizeExpertCache(uint64_t pool_bytes);

 private:
  // The router's choice for the batch on the host (one sync), after the
  // routing hooks, grouped by expert; with `predict`, also the next layer's
  // predicted choice into host_pred_ids_.
  absl::Status RouteAndGroup(int layer, int n, int pos0, bool predict);
  absl::Status ApplyRoutingHooks(int layer, int n, int pos0);
  // The next layer's router on this layer's input, copied to host_pred_ids_
  // (enqueued; read after the next Sync).
  absl::Status EnqueueRouterPrediction(int layer, int n);
  // The override's guess of the next layer into host_pred_ids_, else the
  // router's.
  absl::Status PredictWithOverride(int layer, int n, int pos0);
  // One expert's products on grouped rows [off, off + count).
  absl::Status LaunchExpert(int layer, const void* gate, const void* up, const void* down,
                            int64_t off, int64_t count);
  // One expert's matrices and its grouped rows [off, off + count).
  struct ExpertWork {
    DeviceExpertMatrices mats;
    int64_t off = 0;
    int64_t count = 0;
  };
  // Every used expert of the layer from device_experts: in grouped
  // launches (ComputeExperts) when their pointers are fixed, else one at a
  // time (LaunchExpert).
  absl::Status LayerOfDeviceExperts(int layer);
  // The experts of `work`: the GEMV products of all of them in one grouped
  // launch per matrix (gate and up together where their types agree), an
  // expert with more rows than the GEMV takes through the GEMM on its own;
  // SiLU·mul in one call when `rows_are_all_choices` (the experts' rows are
  // every row of the batch), else per expert. LaunchExpert's bits.
  absl::Status ComputeExperts(int layer, std::span<const ExpertWork> work,
                              bool rows_are_all_choices);
  // Room for the grouped jobs, so that Forward allocates nothing.
  void ReserveExpertJobs();
  absl::Status DeviceRoutedExperts(int layer, int n);
  // The most choices of a batch routed on the device: the stride of
  // host_routed_ids_ and the job tables' room.
  size_t DeviceRoutedChoices() const;
  // The router's softmax top-k of the batch into topk_ids_/topk_weights_.
  absl::Status RunRouter(int layer, int n);
  // Every expert's pointers into expert_table_ (from Allocate).
  absl::Status UploadExpertTable();
  // After a batch routed on the device: its invalid choices, if any, as an
  // error, and its choices to the routing counter.
  absl::Status ReportDeviceRouting(int n);
  absl::Status CachedExperts(int layer, int n);
  absl::Status CachedGroup(int layer, size_t count);
  absl::Status CachedGroupWork(int layer, size_t count, size_t n_need);
  absl::Status PrefetchNext(int layer, int n);
  // x += sigmoid(shared_gate_inp . xn) * SwiGLU_shared(xn) (or ungated),
  // xn as the router left it.
  absl::Status SharedExpert(int layer, int n);
  // x += SwiGLU_dense(RMSNorm(x; ffn_norm)) for a layer without experts.
  absl::Status DenseFfn(int layer, int n);
  // shared_down_out_ = down(silu(gate . xn) * up . xn) over n rows of xn.
  absl::Status SwigluOf(const DeviceMatrix& gate, const DeviceMatrix& up, const DeviceMatrix& down,
                        int64_t n_ff, int n);

  const ModelHparams& hp_;
  const RoutedExpertShapes experts_;
  CudaContext& ctx_;
  const CudaBatch& batch_;
  const CudaMoeConfig config_;
  std::vector<CudaMoeWeights> layers_;
  std::unique_ptr<CudaExpertCache> cache_;

  // Device buffers (B = max_batch, K = n_expert_used).
  float* router_logits_ = nullptr;  // [B][n_expert]
  float* router_probs_ = nullptr;   // [B][n_expert]
  int32_t* topk_ids_ = nullptr;     // [B * K]
  float* topk_weights_ = nullptr;   // [B * K]
  int32_t* slot_rows_ = nullptr;    // [2][B * K]: slot -> token, then (token, j) -> slot
  float* expert_in_ = nullptr;      // [B * K][n_embd] xn rows in expert order
  float* gate_out_ = nullptr;       // [B * K][n_ff_exp]
  float* up_out_ = nullptr;         // [B * K][n_ff_exp]
  float* down_out_ = nullptr;       // [B * K][n_embd]
  // The shared expert and the dense FFN (layers that have one), F = the
  // wider of n_ff_shared and n_ff_dense.
  float* shared_logit_ = nullptr;     // [B]
  float* shared_gate_out_ = nullptr;  // [B][F]
  float* shared_up_out_ = nullptr;    // [B][F]
  float* shared_down_out_ = nullptr;  // [B][n_embd]

  // Pinned host memory for the per-layer exchange with the device.
  int32_t* host_topk_ids_ = nullptr;   // [B * K]
  int32_t* host_slot_rows_ = nullptr;  // [2][B * K], as slot_rows_
  // Routing hooks only: the choice's weights (with either hook) and the
  // router's probabilities (with an override).
  float* host_topk_weights_ = nullptr;  // [B * K]
  float* host_router_probs_ = nullptr;  // [B][n_expert]
  std::vector<int32_t> expert_count_;   // [n_expert]
  std::vector<int32_t> expert_offset_;  // [n_expert + 1]
  // The device experts' pointers are fixed (DeviceExperts::pointers_stay_valid)
  // and the config groups their launches.
  const bool group_fixed_experts_;
  // Device routing (RoutesOnDevice): every expert's gate, up and down
  // pointers ([n_layer][n_expert][3], uploaded by Allocate), the job
  // tables, the per-layer invalid-choice records and their host copy, and
  // with a routing counter every layer's choice on the host.
  const void** expert_table_ = nullptr;
  cuda::GemvJob* device_jobs_ = nullptr;      // [3][max choices]
  int32_t* device_n_jobs_ = nullptr;          // [1]
  int32_t* bad_choice_ = nullptr;             // [n_layer]
  int32_t* host_bad_choice_ = nullptr;        // [n_layer], pinned
  int32_t* host_routed_ids_ = nullptr;        // [n_layer][max choices], pinned
  int device_routed_n_ = 0;  // tokens of a batch routed on the device to its last layer
  // ComputeExperts' scratch: the experts, and their jobs.
  std::vector<ExpertWork> expert_work_;  // at most n_expert
  std::vector<cuda::GemvJob> gate_up_jobs_;
  std::vector<cuda::GemvJob> down_jobs_;

  // The next layer's predicted choice (prefetch; kCudaPrefetchMaxTokens rows).
  float* pred_xn_ = nullptr;          // [P][n_embd]
  float* pred_logits_ = nullptr;      // [P][n_expert]
  float* pred_probs_ = nullptr;       // [P][n_expert]
  int32_t* pred_ids_ = nullptr;       // [P * K]
  float* pred_weights_ = nullptr;     // [P * K]
  int32_t* host_pred_ids_ = nullptr;  // [P * K], pinned
  void* host_rows_ready_ = nullptr;   // cudaEvent_t: host-computed experts' inputs are down
  // Slot cache scratch ([n_expert] each).
  std::vector<int32_t> group_ids_;
  std::vector<uint32_t> group_rows_;
  std::vector<ExpertPlacement> placements_;
  std::vector<int32_t> need_ids_;  // experts whose host copies a group needs
  std::vector<int32_t> need_index_;  // their index in the group
  std::vector<ExpertMatrices> need_mats_;
  std::vector<SlotFillJob> fill_jobs_;
  std::vector<SlotFill> prefetch_fills_;
  std::vector<uint8_t> predicted_;  // [n_expert] flags
};

}  // namespace moetier
