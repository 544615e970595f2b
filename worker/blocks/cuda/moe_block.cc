#include "blocks/cuda/moe_block.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_kernels.h"
#include "base/check.h"
#include "blocks/cuda/cuda_check.h"

namespace moetier {

CudaMoeBlock::CudaMoeBlock(const ModelHparams& hp, const RoutedExpertShapes& experts,
                           CudaContext& ctx, const CudaBatch& batch, CudaMoeConfig config)
    : hp_(hp),
      experts_(experts),
      ctx_(ctx),
      batch_(batch),
      config_(std::move(config)),
      layers_(static_cast<size_t>(hp.n_layer)),
      group_fixed_experts_(config_.device_experts != nullptr &&
                     config_.device_experts->pointers_stay_valid() &&
                     config_.group_expert_launches) {
  MOETIER_CHECK((config_.device_experts == nullptr) != (config_.expert_source == nullptr));
  expert_count_.assign(static_cast<size_t>(hp_.n_expert), 0);
  expert_offset_.assign(static_cast<size_t>(hp_.n_expert) + 1, 0);
  if (group_fixed_experts_) ReserveExpertJobs();
}

void CudaMoeBlock::ReserveExpertJobs() {
  // Jobs of at most kCudaGemvMaxBatch rows: at most one per expert plus one
  // per such chunk of the batch's choices. Forward then allocates nothing.
  const size_t max_jobs =
      static_cast<size_t>(hp_.n_expert) +
      static_cast<size_t>(config_.max_batch) * static_cast<size_t>(hp_.n_expert_used) /
          cuda::kCudaGemvMaxBatch;
  expert_work_.reserve(static_cast<size_t>(hp_.n_expert));
  gate_up_jobs_.reserve(2 * max_jobs);
  down_jobs_.reserve(max_jobs);
}

CudaMoeBlock::~CudaMoeBlock() {
  cudaSetDevice(ctx_.device());
  if (ctx_.stream() != nullptr) cudaStreamSynchronize(static_cast<cudaStream_t>(ctx_.stream()));
  cache_.reset();  // waits for its copies, releases the source, frees the pool
  if (host_rows_ready_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(host_rows_ready_));
  cudaGetLastError();
}

void CudaMoeBlock::SetWeights(int layer, const CudaMoeWeights& weights) {
  layers_[static_cast<size_t>(layer)] = weights;
}

absl::Status CudaMoeBlock::Allocate() {
  const uint64_t b = static_cast<uint64_t>(config_.max_batch);
  const uint64_t bk = b * static_cast<uint64_t>(hp_.n_expert_used);
  const uint64_t n_embd = static_cast<uint64_t>(hp_.n_embd);
  const uint64_t n_ff = static_cast<uint64_t>(hp_.n_ff_exp);
  const uint64_t n_expert = static_cast<uint64_t>(hp_.n_expert);
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(router_logits_, b * n_expert, "router logits"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(router_probs_, b * n_expert, "router probabilities"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(topk_ids_, bk, "router choices"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(topk_weights_, bk, "router weights"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(slot_rows_, 2 * bk, "expert row maps"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(expert_in_, bk * n_embd, "expert inputs"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(gate_out_, bk * n_ff, "expert gate outputs"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(up_out_, bk * n_ff, "expert up outputs"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(down_out_, bk * n_embd, "expert outputs"));
  // The shared expert's and the dense FFN's buffers, for the wider of them.
  uint64_t dense_ff = 0;
  for (const CudaMoeWeights& l : layers_) {
    if (l.has_shared_expert) dense_ff = std::max<uint64_t>(dense_ff, hp_.n_ff_shared);
    if (l.dense_ffn) dense_ff = std::max<uint64_t>(dense_ff, hp_.n_ff_dense);
  }
  if (dense_ff > 0) {
    MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(shared_logit_, b, "shared expert gate logits"));
    MOETIER_RETURN_IF_ERROR(
        ctx_.AllocBuffer(shared_gate_out_, b * dense_ff, "shared expert / dense FFN gate outputs"));
    MOETIER_RETURN_IF_ERROR(
        ctx_.AllocBuffer(shared_up_out_, b * dense_ff, "shared expert / dense FFN up outputs"));
    MOETIER_RETURN_IF_ERROR(
        ctx_.AllocBuffer(shared_down_out_, b * n_embd, "shared expert / dense FFN outputs"));
  }
  const CudaExpertCacheConfig& cache_config = config_.expert_cache;
  const bool may_predict = config_.expert_source != nullptr && cache_config.prefetch &&
                           cache_config.static_host_layers < 0 && hp_.n_layer > 1;
  // The next layer's router for decode batches (prefetch).
  const uint64_t pred_rows =
      static_cast<uint64_t>(std::min(config_.max_batch, kCudaPrefetchMaxTokens));
  const uint64_t pk = may_predict ? pred_rows * static_cast<uint64_t>(hp_.n_expert_used) : 0;
  if (may_predict) {
    MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(pred_xn_, pred_rows * n_embd, "predicted router input"));
    MOETIER_RETURN_IF_ERROR(
        ctx_.AllocBuffer(pred_logits_, pred_rows * n_expert, "predicted router logits"));
    MOETIER_RETURN_IF_ERROR(
        ctx_.AllocBuffer(pred_probs_, pred_rows * n_expert, "predicted router probabilities"));
    MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(pred_ids_, pk, "predicted router choices"));
    MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(pred_weights_, pk, "predicted router weights"));
  }
  MOETIER_RETURN_IF_ERROR(ctx_.AllocPinned(host_topk_ids_, bk, "router choices"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocPinned(host_slot_rows_, 2 * bk, "expert row maps"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocPinned(host_pred_ids_, pk, "predicted router choices"));
  const bool any_hook = config_.routing_observer != nullptr || config_.routing_override != nullptr;
  MOETIER_RETURN_IF_ERROR(
      ctx_.AllocPinned(host_topk_weights_, any_hook ? bk : 0, "routing weights"));
  MOETIER_RETURN_IF_ERROR(ctx_.AllocPinned(
      host_router_probs_, config_.routing_override != nullptr ? b * n_expert : 0,
      "router probabilities"));
  if (group_fixed_experts_ && config_.route_on_device) {
    const uint64_t choices = DeviceRoutedChoices();
    const uint64_t n_layer = static_cast<uint64_t>(hp_.n_layer);
    MOETIER_RETURN_IF_ERROR(
        ctx_.AllocBuffer(expert_table_, n_layer * n_expert * 3, "expert pointer table"));
    MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(device_jobs_, 3 * choices, "expert job tables"));
    MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(device_n_jobs_, 1, "expert job count"));
    MOETIER_RETURN_IF_ERROR(ctx_.AllocBuffer(bad_choice_, n_layer, "router choice checks"));
    // Layers without experts never write theirs.
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaMemset(bad_choice_, 0, n_layer * sizeof(*bad_choice_)),
                                     "clearing the router choice checks"));
    MOETIER_RETURN_IF_ERROR(ctx_.AllocPinned(host_bad_choice_, n_layer, "router choice checks"));
    MOETIER_RETURN_IF_ERROR(ctx_.AllocPinned(
        host_routed_ids_, config_.routing_counter != nullptr ? n_layer * choices : 0,
        "routed choices"));
    MOETIER_RETURN_IF_ERROR(UploadExpertTable());
  }
  return absl::OkStatus();
}

absl::Status CudaMoeBlock::CreateExpertCache() {
  if (config_.expert_source == nullptr) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<CudaExpertCache>> cache =
      CudaExpertCache::Create(experts_, *config_.expert_source, config_.expert_cache,
                              config_.dma_ranges, config_.max_batch, ctx_.stream());
  if (!cache.ok()) return cache.status();
  cache_ = *std::move(cache);
  cudaEvent_t ready = nullptr;
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
                                   "cudaEventCreate"));
  host_rows_ready_ = ready;
  const size_t n_expert = static_cast<size_t>(hp_.n_expert);
  group_ids_.assign(n_expert, 0);
  group_rows_.assign(n_expert, 0);
  placements_.assign(n_expert, {});
  need_ids_.assign(n_expert, 0);
  need_index_.assign(n_expert, 0);
  need_mats_.assign(n_expert, {});
  fill_jobs_.assign(n_expert, {});
  prefetch_fills_.assign(n_expert, {});
  predicted_.assign(n_expert, 0);
  ReserveExpertJobs();
  return absl::OkStatus();
}

absl::Status CudaMoeBlock::FinishBatch() {
  absl::Status status = cache_ != nullptr ? cache_->FinishHold() : absl::OkStatus();
  if (device_routed_n_ > 0) {
    const int n = device_routed_n_;
    device_routed_n_ = 0;
    absl::Status reported = ReportDeviceRouting(n);
    if (status.ok()) status = std::move(reported);
  }
  return status;
}

absl::StatusOr<uint64_t> CudaMoeBlock::ResizeExpertCache(uint64_t pool_bytes) {
  if (cache_ == nullptr) {
    return absl::FailedPreconditionError(
        "this CUDA worker holds every expert in device memory and has no expert cache to resize");
  }
  MOETIER_RETURN_IF_ERROR(ctx_.MakeCurrent());
  return cache_->Resize(pool_bytes, ctx_.stream());
}

absl::Status CudaMoeBlock::EnqueueRouterPrediction(int layer, int n) {
  // The next layer's router on the same hidden state: its choice is
  // usually close to the one that layer will make, early enough to start
  // the copies during this layer's experts.
  const CudaMoeWeights& next = layers_[static_cast<size_t>(layer) + 1];
  const int n_embd = hp_.n_embd;
  const int n_slots = n * hp_.n_expert_used;
  auto* stream = static_cast<cudaStream_t>(ctx_.stream());
  MOETIER_RETURN_IF_ERROR(
      cuda::RmsNorm(batch_.x, next.ffn_norm, n, n_embd, hp_.rms_eps, pred_xn_, ctx_.stream()));
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(next.router, pred_xn_, n, pred_logits_));
  MOETIER_RETURN_IF_ERROR(cuda::RouterTopK(pred_logits_, n, hp_.n_expert, hp_.n_expert_used,
                                           hp_.router, next.selection_bias, pred_probs_, pred_ids_,
                                           pred_weights_, ctx_.stream()));
  return CudaCall(
      cudaMemcpyAsync(host_pred_ids_, pred_ids_, static_cast<size_t>(n_slots) * sizeof(int32_t),
                      cudaMemcpyDeviceToHost, stream),
      "copying the predicted choice to the host");
}

absl::Status CudaMoeBlock::PredictWithOverride(int layer, int n, int pos0) {
  const RoutingBatch next = RoutingBatchAt(hp_, layer + 1, n, pos0);
  const std::span<int32_t> guess(host_pred_ids_, static_cast<size_t>(n) * hp_.n_expert_used);
  if (config_.routing_override->PredictNext(next, guess)) {
    return CheckOverriddenExperts(next, guess);
  }
  // The override leaves the guess to the router. The router's choice is
  // copied already, so this costs one more wait.
  MOETIER_RETURN_IF_ERROR(EnqueueRouterPrediction(layer, n));
  return ctx_.Sync("the predicted router");
}

absl::Status CudaMoeBlock::RunRouter(int layer, int n) {
  const CudaMoeWeights& l = layers_[static_cast<size_t>(layer)];
  // The model's router (base/router_params.h), as the reference.
  MOETIER_RETURN_IF_ERROR(
      cuda::RmsNorm(batch_.x, l.ffn_norm, n, hp_.n_embd, hp_.rms_eps, batch_.xn, ctx_.stream()));
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(l.router, batch_.xn, n, router_logits_));
  return cuda::RouterTopK(router_logits_, n, hp_.n_expert, hp_.n_expert_used, hp_.router,
                          l.selection_bias, router_probs_, topk_ids_, topk_weights_, ctx_.stream());
}

size_t CudaMoeBlock::DeviceRoutedChoices() const {
  return std::min<size_t>(
      static_cast<size_t>(config_.max_batch) * static_cast<size_t>(hp_.n_expert_used),
      static_cast<size_t>(cuda::kCudaExpertJobsMaxChoices));
}

bool CudaMoeBlock::RoutesOnDevice(int n) const {
  return config_.route_on_device && cache_ == nullptr && expert_table_ != nullptr &&
         config_.routing_override == nullptr &&
         config_.routing_observer == nullptr && !ctx_.gemm_possible(n) &&
         n * hp_.n_expert_used <= cuda::kCudaExpertJobsMaxChoices;
}

absl::Status CudaMoeBlock::UploadExpertTable() {
  const size_t n_expert = static_cast<size_t>(hp_.n_expert);
  std::vector<const void*> table(static_cast<size_t>(hp_.n_layer) * n_expert * 3);
  for (int layer = 0; layer < hp_.n_layer; ++layer) {
    const CudaMoeWeights& l = layers_[static_cast<size_t>(layer)];
    if (l.dense_ffn) continue;  // no experts: its entries stay null, never read
    for (int e = 0; e < hp_.n_expert; ++e) {
      absl::StatusOr<DeviceExpertMatrices> mats =
          config_.device_experts->ExpertPointers(layer, e, ctx_.stream());
      if (!mats.ok()) return mats.status();
      // The job tables' GEMV reads weights as GemvQuant does, which checks
      // their alignment on the host; here that is the only check.
      for (auto [p, type] : {std::pair{mats->gate, l.gate_type}, std::pair{mats->up, l.up_type},
                             std::pair{mats->down, l.down_type}}) {
        const uintptr_t align = type == TensorType::kF32 ? 4 : 2;
        if (p == nullptr || reinterpret_cast<uintptr_t>(p) % align != 0) {
          return absl::InternalError(absl::StrFormat(
              "expert %d of layer %d: a weight pointer is null or misaligned", e, layer));
        }
      }
      const size_t at = (static_cast<size_t>(layer) * n_expert + static_cast<size_t>(e)) * 3;
      table[at] = mats->gate;
      table[at + 1] = mats->up;
      table[at + 2] = mats->down;
    }
  }
  // With the weight uploads, which the engine waits for before its first
  // batch (a copy from pageable memory has taken `table` when it returns).
  return CudaCall(cudaMemcpy(expert_table_, table.data(), table.size() * sizeof(const void*),
                             cudaMemcpyHostToDevice),
                  "uploading the expert pointer table");
}

absl::Status CudaMoeBlock::DeviceRoutedExperts(int layer, int n) {
  const CudaMoeWeights& l = layers_[static_cast<size_t>(layer)];
  const int n_choices = n * hp_.n_expert_used;
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_ff = hp_.n_ff_exp;
  const cuda::CudaStream stream = ctx_.stream();
  MOETIER_RETURN_IF_ERROR(RunRouter(layer, n));
  if (config_.routing_counter != nullptr) {
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(host_routed_ids_ + static_cast<size_t>(layer) * DeviceRoutedChoices(),
                        topk_ids_,
                        static_cast<size_t>(n_choices) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                        static_cast<cudaStream_t>(stream)),
        "copying the router's choice to the host"));
  }
  cuda::ExpertJobsArgs args;
  args.topk_ids = topk_ids_;
  args.n_tokens = n;
  args.top_k = hp_.n_expert_used;
  args.n_expert = hp_.n_expert;
  args.expert_weights =
      expert_table_ + static_cast<size_t>(layer) * static_cast<size_t>(hp_.n_expert) * 3;
  args.expert_in = expert_in_;
  args.token_rows = batch_.xn;
  args.gate_out = gate_out_;
  args.up_out = up_out_;
  args.down_out = down_out_;
  args.n_embd = n_embd;
  args.n_ff = n_ff;
  args.slot_rows = slot_rows_;
  args.jobs = device_jobs_;
  args.n_jobs = device_n_jobs_;
  args.bad_choice = bad_choice_ + layer;
  MOETIER_RETURN_IF_ERROR(cuda::BuildExpertJobs(args, stream));
  // One token's jobs read its row of xn directly (token_rows); only jobs of
  // several rows need them gathered.
  if (n > 1) {
    MOETIER_RETURN_IF_ERROR(
        cuda::GatherRows(batch_.xn, slot_rows_, n_choices, hp_.n_embd, expert_in_, stream));
  }
  MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kRouter));
  // The tables hold n_choices jobs each: gate, up, down.
  const cuda::GemvJob* gate_jobs = device_jobs_;
  const cuda::GemvJob* up_jobs = device_jobs_ + n_choices;
  const cuda::GemvJob* down_jobs = device_jobs_ + 2 * n_choices;
  if (l.gate_type == l.up_type) {
    MOETIER_RETURN_IF_ERROR(cuda::GemvQuantJobTables(l.gate_type, gate_jobs, device_n_jobs_,
                                                     n_choices, 2, n_ff, n_embd, stream));
  } else {
    MOETIER_RETURN_IF_ERROR(cuda::GemvQuantJobTables(l.gate_type, gate_jobs, device_n_jobs_,
                                                     n_choices, 1, n_ff, n_embd, stream));
    MOETIER_RETURN_IF_ERROR(cuda::GemvQuantJobTables(l.up_type, up_jobs, device_n_jobs_,
                                                     n_choices, 1, n_ff, n_embd, stream));
  }
  MOETIER_RETURN_IF_ERROR(
      cuda::SiluMul(gate_out_, up_out_, static_cast<int64_t>(n_choices) * n_ff, gate_out_, stream));
  MOETIER_RETURN_IF_ERROR(cuda::GemvQuantJobTables(l.down_type, down_jobs, device_n_jobs_,
                                                   n_choices, 1, n_embd, n_ff, stream));
  if (layer == hp_.n_layer - 1) {
    // Read by FinishBatch once the batch's work is done.
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(host_bad_choice_, bad_choice_,
                        static_cast<size_t>(hp_.n_layer) * sizeof(int32_t),
                        cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)),
        "copying the router's choice checks to the host"));
    device_routed_n_ = n;
  }
  return absl::OkStatus();
}

absl::Status CudaMoeBlock::ReportDeviceRouting(int n) {
  MOETIER_RETURN_IF_ERROR(ctx_.Sync("the router's choices"));
  const int top_k = hp_.n_expert_used;
  for (int layer = 0; layer < hp_.n_layer; ++layer) {
    if (layers_[static_cast<size_t>(layer)].dense_ffn) continue;
    if (const int32_t bad = host_bad_choice_[layer]; bad != 0) {
      // RouterTopK gives -1 only when the probabilities are NaN.
      return absl::InternalError(absl::StrFormat(
          "layer %d: the router chose no valid expert for token %d of the batch (non-finite "
          "activations?)",
          layer, (bad - 1) / top_k));
    }
  }
  if (ExpertWeightSource* told = config_.routing_counter; told != nullptr) {
    for (int layer = 0; layer < hp_.n_layer; ++layer) {
      if (layers_[static_cast<size_t>(layer)].dense_ffn) continue;
      told->Route(layer, std::span<const int32_t>(
                             host_routed_ids_ + static_cast<size_t>(layer) * DeviceRoutedChoices(),
                             static_cast<size_t>(n * top_k)));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaMoeBlock::RouteAndGroup(int layer, int n, int pos0, bool predict) {
  const int n_embd = hp_.n_embd;
  const int n_expert = hp_.n_expert;
  const int top_k = hp_.n_expert_used;
  const int n_slots = n * top_k;
  auto* stream = static_cast<cudaStream_t>(ctx_.stream());

  MOETIER_RETURN_IF_ERROR(RunRouter(layer, n));
  MOETIER_RETURN_IF_ERROR(CudaCall(
      cudaMemcpyAsync(host_topk_ids_, topk_ids_, static_cast<size_t>(n_slots) * sizeof(int32_t),
                      cudaMemcpyDeviceToHost, stream),
      "copying the router's choice to the host"));
  const bool hooks = config_.routing_override != nullptr || config_.routing_observer != nullptr;
  if (config_.routing_override != nullptr) {
    // The override's weights come from the router's probabilities.
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(host_router_probs_, router_probs_,
                        static_cast<size_t>(n) * n_expert * sizeof(float), cudaMemcpyDeviceToHost,
                        stream),
        "copying the router's probabilities to the host"));
  } else if (hooks) {
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(host_topk_weights_, topk_weights_,
                        static_cast<size_t>(n_slots) * sizeof(float), cudaMemcpyDeviceToHost,
                        stream),
        "copying the router's weights to the host"));
  }
  // While a trace is replayed the override predicts the next layer from the
  // trace (asked once this layer's own choice is in, below); the router
  // knows nothing of the trace.
  if (predict && config_.routing_override == nullptr) {
    MOETIER_RETURN_IF_ERROR(EnqueueRouterPrediction(layer, n));
  }
  MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kRouter));
  MOETIER_RETURN_IF_ERROR(ctx_.Sync("the router"));
  for (int i = 0; i < n_slots; ++i) {
    const int32_t e = host_topk_ids_[i];
    if (e < 0 || e >= n_expert) {
      // RouterTopK gives -1 only when the probabilities are NaN.
      return absl::InternalError(absl::StrFormat(
          "layer %d: the router chose expert %d for token %d of the batch (non-finite "
          "activations?)",
          layer, e, i / top_k));
    }
  }
  // An override's ids are checked there: from here every id is a valid
  // expert.
  if (hooks) MOETIER_RETURN_IF_ERROR(ApplyRoutingHooks(layer, n, pos0));
  if (predict && config_.routing_override != nullptr) {
    MOETIER_RETURN_IF_ERROR(PredictWithOverride(layer, n, pos0));
  }
  // The choice used, for the store's heat profile (a no-op elsewhere).
  if (ExpertWeightSource* told = config_.expert_source != nullptr ? config_.expert_source
                                                                  : config_.routing_counter;
      told != nullptr) {
    told->Route(layer, std::span<const int32_t>(host_topk_ids_, n_slots));
  }

  // Group the (token, choice) pairs by expert, experts ascending. From here
  // until the next layer's Sync the device may still read host_slot_rows_
  // (the copy below), and nothing on the host writes it before that Sync.
  std::fill(expert_count_.begin(), expert_count_.end(), 0);
  for (int i = 0; i < n_slots; ++i) ++expert_count_[static_cast<size_t>(host_topk_ids_[i])];
  expert_offset_[0] = 0;
  for (int e = 0; e < n_expert; ++e) {
    expert_offset_[static_cast<size_t>(e) + 1] =
        expert_offset_[static_cast<size_t>(e)] + expert_count_[static_cast<size_t>(e)];
  }
  std::fill(expert_count_.begin(), expert_count_.end(), 0);
  // host_slot_rows_[slot] is the token of grouped row `slot`;
  // host_slot_rows_[n_slots + t * top_k + j] the grouped row of (t, j).
  int32_t* slot_token = host_slot_rows_;
  int32_t* token_slot = host_slot_rows_ + n_slots;
  for (int t = 0; t < n; ++t) {
    for (int j = 0; j < top_k; ++j) {
      const int e = host_topk_ids_[t * top_k + j];
      const size_t ue = static_cast<size_t>(e);
      const int slot = expert_offset_[ue] + expert_count_[ue]++;
      slot_token[slot] = t;
      token_slot[t * top_k + j] = slot;
    }
  }
  MOETIER_RETURN_IF_ERROR(CudaCall(
      cudaMemcpyAsync(slot_rows_, host_slot_rows_,
                      2 * static_cast<size_t>(n_slots) * sizeof(int32_t), cudaMemcpyHostToDevice,
                      stream),
      "copying the expert row maps to the device"));
  MOETIER_RETURN_IF_ERROR(
      cuda::GatherRows(batch_.xn, slot_rows_, n_slots, n_embd, expert_in_, ctx_.stream()));
  return ctx_.MarkPhase(CudaPhase::kHostRouting);
}

absl::Status CudaMoeBlock::ApplyRoutingHooks(int layer, int n, int pos0) {
  const int n_expert = hp_.n_expert;
  const int top_k = hp_.n_expert_used;
  const size_t n_choices = static_cast<size_t>(n) * top_k;
  auto* stream = static_cast<cudaStream_t>(ctx_.stream());
  RoutingBatch batch = RoutingBatchAt(hp_, layer, n, pos0);
  if (RoutingOverride* override = config_.routing_override; override != nullptr) {
    const std::span<int32_t> ids(host_topk_ids_, n_choices);
    MOETIER_RETURN_IF_ERROR(override->Override(batch, ids));
    MOETIER_RETURN_IF_ERROR(CheckOverriddenExperts(batch, ids));
    // The router's probabilities of the chosen experts, weighted in
    // RouterTopK's order and precision (IEEE fp32 on both sides), so that
    // the router's own choice gets its own weights bit for bit.
    for (int t = 0; t < n; ++t) {
      cpu::RouterWeightsOf(host_router_probs_ + static_cast<size_t>(t) * n_expert,
                           ids.data() + static_cast<size_t>(t) * top_k, top_k, hp_.router,
                           host_topk_weights_ + static_cast<size_t>(t) * top_k);
    }
    // On the stream before anything that reads them (the combine reads the
    // weights). The host writes these pinned buffers again only after the
    // next layer's Sync, by when both copies are done.
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(topk_ids_, host_topk_ids_, n_choices * sizeof(int32_t),
                        cudaMemcpyHostToDevice, stream),
        "copying the overridden choice to the device"));
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(topk_weights_, host_topk_weights_, n_choices * sizeof(float),
                        cudaMemcpyHostToDevice, stream),
        "copying the overridden weights to the device"));
  }
  if (RoutingObserver* observer = config_.routing_observer; observer != nullptr) {
    batch.experts = std::span<const int32_t>(host_topk_ids_, n_choices);
    batch.weights = std::span<const float>(host_topk_weights_, n_choices);
    MOETIER_RETURN_IF_ERROR(observer->OnRouting(batch));
  }
  return absl::OkStatus();
}

absl::Status CudaMoeBlock::LaunchExpert(int layer, const void* gate_w, const void* up_w,
                                        const void* down_w, int64_t off, int64_t count) {
  const CudaMoeWeights& l = layers_[static_cast<size_t>(layer)];
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_ff = hp_.n_ff_exp;
  const DeviceMatrix gate{l.gate_type, n_ff, n_embd, gate_w};
  const DeviceMatrix up{l.up_type, n_ff, n_embd, up_w};
  const DeviceMatrix down{l.down_type, n_embd, n_ff, down_w};
  float* g = gate_out_ + off * n_ff;
  float* u = up_out_ + off * n_ff;
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(gate, expert_in_ + off * n_embd, count, g));
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(up, expert_in_ + off * n_embd, count, u));
  MOETIER_RETURN_IF_ERROR(cuda::SiluMul(g, u, count * n_ff, g, ctx_.stream()));
  return ctx_.MatMul(down, g, count, down_out_ + off * n_embd);
}

absl::Status CudaMoeBlock::LayerOfDeviceExperts(int layer) {
  // Each used expert's rows are contiguous in expert order. With fixed
  // pointers every used expert is asked for first and computed in grouped
  // launches; otherwise each expert's gate and up products, SiLU·mul and
  // down product are enqueued before the next expert's pointers are asked
  // for (DeviceExperts' contract).
  expert_work_.clear();
  for (int e = 0; e < hp_.n_expert; ++e) {
    const int64_t off = expert_offset_[static_cast<size_t>(e)];
    const int64_t count = expert_offset_[static_cast<size_t>(e) + 1] - off;
    if (count == 0) continue;
    absl::StatusOr<DeviceExpertMatrices> mats =
        config_.device_experts->ExpertPointers(layer, e, ctx_.stream());
    if (!mats.ok()) return mats.status();
    if (group_fixed_experts_) {
      expert_work_.push_back({*mats, off, count});
    } else {
      MOETIER_RETURN_IF_ERROR(LaunchExpert(layer, mats->gate, mats->up, mats->down, off, count));
    }
  }
  if (!group_fixed_experts_) return absl::OkStatus();
  // Every used expert: their rows are all of the batch's choices.
  return ComputeExperts(layer, expert_work_, /*rows_are_all_choices=*/true);
}

absl::Status CudaMoeBlock::ComputeExperts(int layer, std::span<const ExpertWork> work,
                                          bool rows_are_all_choices) {
  const CudaMoeWeights& l = layers_[static_cast<size_t>(layer)];
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_ff = hp_.n_ff_exp;
  const cuda::CudaStream stream = ctx_.stream();
  // The jobs' products and row ranges are the ones LaunchExpert's MatMul
  // calls make (chunks of kCudaGemvMaxBatch rows), so the bits are the same.
  auto add_jobs = [](std::vector<cuda::GemvJob>& jobs, const void* w, const float* x,
                     int64_t x_cols, float* y, int64_t y_cols, int64_t off, int64_t count) {
    for (int64_t t0 = 0; t0 < count; t0 += cuda::kCudaGemvMaxBatch) {
      const int64_t rows = std::min<int64_t>(cuda::kCudaGemvMaxBatch, count - t0);
      jobs.push_back(cuda::GemvJob{w, x + (off + t0) * x_cols, y + (off + t0) * y_cols,
                                   static_cast<int32_t>(rows)});
    }
  };
  auto launch = [&](TensorType type, const std::vector<cuda::GemvJob>& jobs, size_t first,
                    size_t end, int64_t rows, int64_t cols) -> absl::Status {
    if (first == end) return absl::OkStatus();
    return cuda::GemvQuantGroup(type, jobs.data() + first, static_cast<int>(end - first), rows,
                                cols, stream);
  };
  auto gemv_sized = [&](const ExpertWork& w) {
    return !ctx_.gemm_possible(static_cast<int>(w.count));
  };

  // 1. gate and up: the GEMV-sized experts' jobs (gate's, then up's) in one
  //    launch where the types agree, the rest through the GEMM.
  gate_up_jobs_.clear();
  for (const ExpertWork& w : work) {
    if (gemv_sized(w)) add_jobs(gate_up_jobs_, w.mats.gate, expert_in_, n_embd, gate_out_, n_ff, w.off, w.count);
  }
  const size_t n_gate_jobs = gate_up_jobs_.size();
  for (const ExpertWork& w : work) {
    if (gemv_sized(w)) add_jobs(gate_up_jobs_, w.mats.up, expert_in_, n_embd, up_out_, n_ff, w.off, w.count);
  }
  if (l.gate_type == l.up_type) {
    MOETIER_RETURN_IF_ERROR(
        launch(l.gate_type, gate_up_jobs_, 0, gate_up_jobs_.size(), n_ff, n_embd));
  } else {
    MOETIER_RETURN_IF_ERROR(launch(l.gate_type, gate_up_jobs_, 0, n_gate_jobs, n_ff, n_embd));
    MOETIER_RETURN_IF_ERROR(
        launch(l.up_type, gate_up_jobs_, n_gate_jobs, gate_up_jobs_.size(), n_ff, n_embd));
  }
  for (const ExpertWork& w : work) {
    if (gemv_sized(w)) continue;
    MOETIER_RETURN_IF_ERROR(ctx_.MatMul(DeviceMatrix{l.gate_type, n_ff, n_embd, w.mats.gate},
                                        expert_in_ + w.off * n_embd, w.count,
                                        gate_out_ + w.off * n_ff));
    MOETIER_RETURN_IF_ERROR(ctx_.MatMul(DeviceMatrix{l.up_type, n_ff, n_embd, w.mats.up},
                                        expert_in_ + w.off * n_embd, w.count,
                                        up_out_ + w.off * n_ff));
  }
  // 2. SiLU·mul, element-wise: one call over every row when the experts
  //    hold all of them, else one per expert.
  if (rows_are_all_choices) {
    const int64_t total_rows = expert_offset_[static_cast<size_t>(hp_.n_expert)];
    MOETIER_RETURN_IF_ERROR(
        cuda::SiluMul(gate_out_, up_out_, total_rows * n_ff, gate_out_, stream));
  } else {
    for (const ExpertWork& w : work) {
      float* g = gate_out_ + w.off * n_ff;
      MOETIER_RETURN_IF_ERROR(cuda::SiluMul(g, up_out_ + w.off * n_ff, w.count * n_ff, g, stream));
    }
  }
  // 3. down, likewise.
  down_jobs_.clear();
  for (const ExpertWork& w : work) {
    if (gemv_sized(w)) {
      add_jobs(down_jobs_, w.mats.down, gate_out_, n_ff, down_out_, n_embd, w.off, w.count);
      continue;
    }
    MOETIER_RETURN_IF_ERROR(ctx_.MatMul(DeviceMatrix{l.down_type, n_embd, n_ff, w.mats.down},
                                        gate_out_ + w.off * n_ff, w.count,
                                        down_out_ + w.off * n_embd));
  }
  return launch(l.down_type, down_jobs_, 0, down_jobs_.size(), n_embd, n_ff);
}

absl::Status CudaMoeBlock::Forward(int layer, int n, int pos0) {
  if (layers_[static_cast<size_t>(layer)].dense_ffn) return DenseFfn(layer, n);
  const int top_k = hp_.n_expert_used;
  const bool predict = cache_ != nullptr && cache_->predicts() && n <= kCudaPrefetchMaxTokens &&
                       layer + 1 < hp_.n_layer &&
                       !layers_[static_cast<size_t>(layer) + 1].dense_ffn;
  if (RoutesOnDevice(n)) {
    // Routed, grouped and computed without the host.
    MOETIER_RETURN_IF_ERROR(DeviceRoutedExperts(layer, n));
  } else {
    MOETIER_RETURN_IF_ERROR(RouteAndGroup(layer, n, pos0, predict));
    if (cache_ != nullptr) {
      MOETIER_RETURN_IF_ERROR(CachedExperts(layer, n));
    } else {
      MOETIER_RETURN_IF_ERROR(LayerOfDeviceExperts(layer));
    }
  }
  // Weighted sum in the choice's order j = 0..k-1 (the router's, or the
  // override's with the weights ApplyRoutingHooks copied down before any
  // kernel of this block), then the residual.
  MOETIER_RETURN_IF_ERROR(cuda::MoeCombine(down_out_, slot_rows_ + n * top_k, topk_weights_, n,
                                           top_k, hp_.n_embd, batch_.x, ctx_.stream()));
  MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kExperts));
  if (layers_[static_cast<size_t>(layer)].has_shared_expert) {
    MOETIER_RETURN_IF_ERROR(SharedExpert(layer, n));
    MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kSharedExpert));
  }
  // The combine (and shared expert) is enqueued first: the prefetch copies
  // then overlap it and the next layer's mixer. While the host issues them
  // the device may run dry: that wait counts as host routing.
  if (predict) {
    MOETIER_RETURN_IF_ERROR(PrefetchNext(layer, n));
    MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kHostRouting));
  }
  return absl::OkStatus();
}

absl::Status CudaMoeBlock::SharedExpert(int layer, int n) {
  const CudaMoeWeights& l = layers_[static_cast<size_t>(layer)];
  MOETIER_RETURN_IF_ERROR(SwigluOf(l.shared_gate, l.shared_up, l.shared_down, hp_.n_ff_shared, n));
  if (l.shared_gate_inp.data == nullptr) {
    return cuda::AddInPlace(batch_.x, shared_down_out_, static_cast<int64_t>(n) * hp_.n_embd,
                            ctx_.stream());
  }
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(l.shared_gate_inp, batch_.xn, n, shared_logit_));
  return cuda::AddSigmoidScaledRows(batch_.x, shared_down_out_, shared_logit_, n, hp_.n_embd,
                                    ctx_.stream());
}

absl::Status CudaMoeBlock::DenseFfn(int layer, int n) {
  const CudaMoeWeights& l = layers_[static_cast<size_t>(layer)];
  MOETIER_RETURN_IF_ERROR(
      cuda::RmsNorm(batch_.x, l.ffn_norm, n, hp_.n_embd, hp_.rms_eps, batch_.xn, ctx_.stream()));
  MOETIER_RETURN_IF_ERROR(SwigluOf(l.dense_gate, l.dense_up, l.dense_down, hp_.n_ff_dense, n));
  MOETIER_RETURN_IF_ERROR(cuda::AddInPlace(batch_.x, shared_down_out_,
                                           static_cast<int64_t>(n) * hp_.n_embd, ctx_.stream()));
  return ctx_.MarkPhase(CudaPhase::kSharedExpert);
}

absl::Status CudaMoeBlock::SwigluOf(const DeviceMatrix& gate, const DeviceMatrix& up,
                                    const DeviceMatrix& down, int64_t n_ff, int n) {
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(gate, batch_.xn, n, shared_gate_out_));
  MOETIER_RETURN_IF_ERROR(ctx_.MatMul(up, batch_.xn, n, shared_up_out_));
  MOETIER_RETURN_IF_ERROR(
      cuda::SiluMul(shared_gate_out_, shared_up_out_, n * n_ff, shared_gate_out_, ctx_.stream()));
  return ctx_.MatMul(down, shared_gate_out_, n, shared_down_out_);
}

absl::Status CudaMoeBlock::CachedExperts(int layer, int n) {
  const int n_expert = hp_.n_expert;
  cache_->slots().Route(static_cast<uint32_t>(layer),
                        std::span<const int32_t>(host_topk_ids_,
                                                 static_cast<size_t>(n) * hp_.n_expert_used));
  // The layer's used experts, ascending, in groups that fit the cache.
  const size_t max_group = static_cast<size_t>(cache_->max_group());
  size_t count = 0;
  for (int e = 0; e < n_expert; ++e) {
    const int32_t rows = expert_offset_[static_cast<size_t>(e) + 1] -
                         expert_offset_[static_cast<size_t>(e)];
    if (rows == 0) continue;
    group_ids_[count] = e;
    group_rows_[count] = static_cast<uint32_t>(rows);
    if (++count == max_group) {
      MOETIER_RETURN_IF_ERROR(CachedGroup(layer, count));
      count = 0;
    }
  }
  if (count > 0) MOETIER_RETURN_IF_ERROR(CachedGroup(layer, count));
  return absl::OkStatus();
}

absl::Status CudaMoeBlock::CachedGroup(int layer, size_t count) {
  ExpertSlotCache& cache = cache_->slots();
  const uint32_t ulayer = static_cast<uint32_t>(layer);
  const std::span<const int32_t> ids(group_ids_.data(), count);
  cache.Place(ulayer, ids, std::span<const uint32_t>(group_rows_.data(), count), placements_);
  // Until Release the placed slots are pinned; on any failure the group's
  // fills are forgotten, so that no slot is believed to hold an expert its
  // copy may not have written.
  auto abandon = [&](absl::Status status) {
    cache.Release(ulayer);
    for (size_t i = 0; i < count; ++i) {
      const uint32_t e = static_cast<uint32_t>(ids[i]);
      if (placements_[i].fill && cache.Resident(ulayer, e)) cache.Discard(ulayer, e);
    }
    return status;
  };
  size_t n_need = 0;  // host copies: fills and host-computed experts
  for (size_t i = 0; i < count; ++i) {
    if (placements_[i].site == ExpertSite::kHost || placements_[i].fill) {
      need_ids_[n_need] = ids[i];
      need_index_[n_need] = static_cast<int32_t>(i);
      ++n_need;
    }
  }
  if (n_need > 0) {
    absl::Status s = cache_->Acquire(layer, std::span<const int32_t>(need_ids_.data(), n_need),
                                     std::span<ExpertMatrices>(need_mats_.data(), n_need));
    if (!s.ok()) return abandon(std::move(s));
  }
  // The device idles from its last work until the host, done placing and
  // fetching the group, enqueues more.
  if (absl::Status s = ctx_.MarkPhase(CudaPhase::kHostRouting); !s.ok()) {
    return abandon(std::move(s));
  }
  absl::Status s = CachedGroupWork(layer, count, n_need);
  if (!s.ok()) return abandon(std::move(s));
  cache.Release(ulayer);
  return absl::OkStatus();
}

absl::Status CudaMoeBlock::CachedGroupWork(int layer, size_t count, size_t n_need) {
  const int64_t n_embd = hp_.n_embd;
  auto* stream = static_cast<cudaStream_t>(ctx_.stream());
  auto rows_of = [&](int32_t e, int64_t* off) {
    *off = expert_offset_[static_cast<size_t>(e)];
    return expert_offset_[static_cast<size_t>(e) + 1] - *off;
  };
  // 1. The host experts' gathered rows go down first, so the host does not
  //    wait for the slot experts' kernels before computing.
  bool any_host = false;
  for (size_t j = 0; j < n_need; ++j) {
    const ExpertPlacement& p = placements_[static_cast<size_t>(need_index_[j])];
    if (p.site != ExpertSite::kHost) continue;
    int64_t off = 0;
    const int64_t rows = rows_of(need_ids_[j], &off);
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(cache_->host_in() + off * n_embd, expert_in_ + off * n_embd,
                        static_cast<size_t>(rows * n_embd) * sizeof(float),
                        cudaMemcpyDeviceToHost, stream),
        "copying expert inputs to the host"));
    any_host = true;
  }
  if (any_host) {
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaEventRecord(static_cast<cudaEvent_t>(host_rows_ready_), stream), "cudaEventRecord"));
  }
  // 2. The fills, on the copy stream.
  size_t n_fill = 0;
  for (size_t j = 0; j < n_need; ++j) {
    const ExpertPlacement& p = placements_[static_cast<size_t>(need_index_[j])];
    if (p.fill) fill_jobs_[n_fill++] = {p.slot, need_mats_[j]};
  }
  MOETIER_RETURN_IF_ERROR(
      cache_->EnqueueFills(layer, std::span<const SlotFillJob>(fill_jobs_.data(), n_fill)));
  // 3. The slot experts on the device, each slot's last read recorded after
  //    its kernels. Slots that already hold their expert (hits, and
  //    prefetches whose copy may still run) go first, after their fills, in
  //    grouped launches; then the slots filled for this group one at a time
  //    after each fill, so their kernels overlap the later copies.
  expert_work_.clear();
  for (size_t i = 0; i < count && config_.group_expert_launches; ++i) {
    const ExpertPlacement& p = placements_[i];
    if (p.site != ExpertSite::kSlot || p.fill) continue;
    int64_t off = 0;
    const int64_t rows = rows_of(group_ids_[i], &off);
    MOETIER_RETURN_IF_ERROR(cache_->WaitFilled(p.slot, ctx_.stream()));
    const SlotExpertPointers w = cache_->SlotPointers(layer, p.slot);
    expert_work_.push_back({DeviceExpertMatrices{w.gate, w.up, w.down}, off, rows});
  }
  if (!expert_work_.empty()) {
    MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kExpertFetch));
    MOETIER_RETURN_IF_ERROR(ComputeExperts(layer, expert_work_, /*rows_are_all_choices=*/false));
    MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kExperts));
    for (size_t i = 0; i < count; ++i) {
      const ExpertPlacement& p = placements_[i];
      if (p.site == ExpertSite::kSlot && !p.fill) {
        MOETIER_RETURN_IF_ERROR(cache_->MarkRead(p.slot, ctx_.stream()));
      }
    }
  }
  for (size_t i = 0; i < count; ++i) {
    const ExpertPlacement& p = placements_[i];
    // Without grouping every slot expert goes here, one at a time.
    if (p.site != ExpertSite::kSlot || (!p.fill && config_.group_expert_launches)) continue;
    int64_t off = 0;
    const int64_t rows = rows_of(group_ids_[i], &off);
    MOETIER_RETURN_IF_ERROR(cache_->WaitFilled(p.slot, ctx_.stream()));
    MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kExpertFetch));
    const SlotExpertPointers w = cache_->SlotPointers(layer, p.slot);
    MOETIER_RETURN_IF_ERROR(LaunchExpert(layer, w.gate, w.up, w.down, off, rows));
    MOETIER_RETURN_IF_ERROR(cache_->MarkRead(p.slot, ctx_.stream()));
    MOETIER_RETURN_IF_ERROR(ctx_.MarkPhase(CudaPhase::kExperts));
  }
  // 4. The host experts, while the device runs the slot experts; their
  //    outputs go up into their rows of down_out_ before the combine.
  if (!any_host) return absl::OkStatus();
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaEventSynchronize(static_cast<cudaEvent_t>(host_rows_ready_)),
               "waiting for expert inputs on the host"));
  for (size_t j = 0; j < n_need; ++j) {
    const ExpertPlacement& p = placements_[static_cast<size_t>(need_index_[j])];
    if (p.site != ExpertSite::kHost) continue;
    int64_t off = 0;
    const int64_t rows = rows_of(need_ids_[j], &off);
    cache_->ComputeOnHost(layer, need_mats_[j], off, static_cast<int>(rows));
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(down_out_ + off * n_embd, cache_->host_out() + off * n_embd,
                        static_cast<size_t>(rows * n_embd) * sizeof(float),
                        cudaMemcpyHostToDevice, stream),
        "copying host-computed expert outputs to the device"));
  }
  return ctx_.MarkPhase(CudaPhase::kHostExperts);
}

absl::Status CudaMoeBlock::PrefetchNext(int layer, int n) {
  const int next = layer + 1;
  const int n_expert = hp_.n_expert;
  // The predicted experts, distinct, in the predicted order.
  std::fill(predicted_.begin(), predicted_.end(), 0);
  size_t m = 0;
  for (int i = 0; i < n * hp_.n_expert_used; ++i) {
    const int32_t e = host_pred_ids_[i];
    // A NaN prediction (-1) predicts nothing; the next router reports it.
    if (e < 0 || e >= n_expert || predicted_[static_cast<size_t>(e)]) continue;
    predicted_[static_cast<size_t>(e)] = 1;
    group_ids_[m++] = e;
  }
  ExpertSlotCache& cache = cache_->slots();
  const size_t n_fills = cache.Prefetch(static_cast<uint32_t>(next),
                                        std::span<const int32_t>(group_ids_.data(), m),
                                        prefetch_fills_);
  const size_t group = static_cast<size_t>(config_.expert_source->max_experts_held());
  for (size_t g0 = 0; g0 < n_fills; g0 += group) {
    const size_t count = std::min(group, n_fills - g0);
    for (size_t i = 0; i < count; ++i) {
      need_ids_[i] = static_cast<int32_t>(prefetch_fills_[g0 + i].expert);
    }
    absl::Status s = cache_->Acquire(next, std::span<const int32_t>(need_ids_.data(), count),
                                     std::span<ExpertMatrices>(need_mats_.data(), count));
    if (s.ok()) {
      for (size_t i = 0; i < count; ++i) {
        fill_jobs_[i] = {prefetch_fills_[g0 + i].slot, need_mats_[i]};
      }
      s = cache_->EnqueueFills(next, std::span<const SlotFillJob>(fill_jobs_.data(), count));
    }
    if (!s.ok()) {
      // This group's copies may be partial and the later ones never start;
      // earlier groups' copies are whole.
      for (size_t i = g0; i < n_fills; ++i) {
        const SlotFill& f = prefetch_fills_[i];
        if (cache.Resident(f.layer, f.expert)) cache.Discard(f.layer, f.expert);
      }
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace moetier
