// The qwen3moe forward pass on the CPU (SPEC.md §3.0–3.1), computed straight
// from the file's quantized blocks with the kernels of backend/cpu.
//
// Every buffer, the KV cache included, is allocated at creation; the token
// loop allocates nothing. Tokens are processed in batches of up to
// max_batch: every matrix reads its weight rows once per batch, and the MoE
// layer groups the batch's tokens by expert so that each selected expert's
// weights are streamed once per layer per batch. Activations are quantized
// once per matrix input and shared by all rows (and, for q/k/v and
// gate/up, by all matrices reading that input).
//
// Results do not depend on the thread count or the batch size: each output
// element is computed by one kernel call whose arithmetic is fixed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cpu/huge_page_copy.h"
#include "backend/cpu/thread_pool.h"
#include "engine/expert_source.h"
#include "engine/forward_engine.h"
#include "engine/routing_hook.h"
#include "model/qwen3moe_model.h"

namespace moetier {

struct CpuEngineConfig {
  int max_ctx = 4096;   // KV cache length in tokens; 1..n_ctx_train
  int n_threads = 1;    // threads including the caller's
  int max_batch = 256;  // tokens processed together; longer inputs are split
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

// A 64-byte aligned array that is sized once.
class AlignedBytes {
 public:
  AlignedBytes() = default;
  explicit AlignedBytes(size_t bytes);
  ~AlignedBytes();
  AlignedBytes(AlignedBytes&& other) noexcept;
  AlignedBytes& operator=(AlignedBytes&& other) noexcept;
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;

  uint8_t* data() const { return data_; }
  float* floats() const { return reinterpret_cast<float*>(data_); }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Where Forward spends its time, accumulated since creation or the last
// ResetPhaseTimes() (wall seconds on the calling thread). Matrix phases cover
// their whole parallel dispatch; kOther is everything else (embedding, norms,
// rope, activation quantization, routing, combining).
enum class CpuPhase : int {
  kDenseMatmul = 0,  // q, k, v and attention output projections
  kRouter,           // router logits
  kExperts,          // expert gate, up and down projections
  kOutput,           // output projection
  kAttention,        // attention over the KV cache
  kExpertFetch,      // waiting for an ExpertWeightSource (store hits, misses read from disk)
  kOther,
  kCount,
};
std::string_view CpuPhaseName(CpuPhase phase);

class CpuQwen3Moe final : public ForwardEngine {
 public:
  // Fails when a weight type has no CPU kernel, a shape is inconsistent, or
  // the configuration is out of range; the message names what to change.
  // Forward fails (with the source's or hook's Status, the cache valid up to
  // the last whole batch) when the expert source or a routing hook fails.
  static absl::StatusOr<std::unique_ptr<CpuQwen3Moe>> Create(const Qwen3MoeModel& model,
                                                             const CpuEngineConfig& config);
  ~CpuQwen3Moe() override;

  absl::Status Forward(std::span<const int32_t> tokens, int pos0, LogitRows rows,
                       float* logits) override;
  void Reset() override { cached_tokens_ = 0; }
  int n_vocab() const override { return hp_.n_vocab; }
  int max_ctx() const override { return config_.max_ctx; }
  int cached_tokens() const override { return cached_tokens_; }

  const CpuEngineConfig& config() const { return config_; }
  double phase_seconds(CpuPhase phase) const { return phase_seconds_[static_cast<int>(phase)]; }
  void ResetPhaseTimes() { phase_seconds_.fill(0.0); }
  // Bytes of buffers and KV cache the engine allocated.
  uint64_t allocated_bytes() const;

 private:
  struct MatJob;  // one matrix product in a fused dispatch
  struct Task;    // a row range of one job
  struct ActCache;

  CpuQwen3Moe(const Qwen3MoeModel& model, const CpuEngineConfig& config);
  absl::Status CopyWeightsToHugePages();
  void Allocate();

  // One batch of n tokens at positions pos0.. (n <= max_batch).
  absl::Status ForwardBatch(const int32_t* tokens, int n, int pos0, LogitRows rows, float* logits);
  void Attention(int layer, int n, int pos0);
  absl::Status MoeFfn(int layer, int n, int pos0);
  // `layer`'s router on the residual stream x_: its ffn-normed input in xn_
  // (prepared inputs forgotten), probabilities in router_probs_, the top-k
  // in topk_ids_ / topk_weights_.
  void RouteTokens(int layer, int n);
  // Offers the expert source the experts `layer`'s router picks for the
  // current hidden state (engine/expert_source.h, Prefetch).
  absl::Status PrefetchNextLayer(int layer, int n);
  // The routing hooks for the batch's top-k choice of `layer`.
  absl::Status ApplyRoutingHooks(int layer, int n, int pos0);
  // The matrices of used_experts_[first, first + count) into expert_mats_,
  // from the source or the mapping.
  absl::Status AcquireExperts(int layer, int first, int count);

  // Prepares n rows of k floats (row stride k) for weights of `type` into
  // `cache`.
  const uint8_t* PrepareAct(ActCache& cache, const float* x, int64_t n, int64_t k, TensorType type);
  // The n rows of the sublayer input xn_ prepared for `type`, prepared at
  // most once per format between ForgetInputs() calls.
  const uint8_t* PrepareInput(int n, TensorType type);
  void ForgetInputs();  // xn_ changed: prepared copies are stale
  // The product of w's matrix at w_data (a 2-D tensor, or one expert of a
  // 3-D one) with n_act prepared rows; out gets one row of w.rows() values
  // per activation row.
  static MatJob Job(const WeightRef& w, const uint8_t* w_data, const uint8_t* act, int64_t n_act,
                    float* out);
  // Runs the jobs in one parallel dispatch, split into row chunks; the time
  // goes to `phase`.
  void RunJobs(const MatJob* jobs, int n_jobs, CpuPhase phase);

  Qwen3MoeHparams hp_;
  // The weights the engine reads: the model's, or their huge-page copy.
  Qwen3MoeWeights weights_;
  std::optional<cpu::HugePageCopy> weight_copy_;
  CpuEngineConfig config_;
  cpu::ThreadPool pool_;
  int cached_tokens_ = 0;
  std::array<double, static_cast<int>(CpuPhase::kCount)> phase_seconds_{};

  // Small weights decoded to f32 once.
  std::vector<float> output_norm_;
  struct LayerNorms {
    std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;
  };
  std::vector<LayerNorms> norms_;

  // KV cache: per layer [n_head_kv][max_ctx][head_dim] (head-major, so that
  // attention streams each KV head's rows contiguously).
  std::vector<AlignedBytes> k_cache_, v_cache_;

  // Activations for one batch (B = max_batch, K = n_expert_used).
  AlignedBytes x_;                                // [B][n_embd] residual stream
  AlignedBytes xn_;                               // [B][n_embd] normed sublayer input
  AlignedBytes q_;                                // [B][n_head * head_dim]
  AlignedBytes k_;                                // [B][n_head_kv * head_dim]
  AlignedBytes v_;                                // [B][n_head_kv * head_dim]
  AlignedBytes attn_out_;                         // [B][n_head * head_dim]
  AlignedBytes sub_out_;                          // [B][n_embd]
  AlignedBytes rope_cos_, rope_sin_;              // [B][head_dim / 2]
  AlignedBytes scores_;                           // [n_threads][n_head / n_head_kv][max_ctx]
  AlignedBytes router_logits_;                    // [B][n_expert]
  AlignedBytes router_probs_;                     // [B][n_expert]
  std::vector<int32_t> topk_ids_;                 // [B * K]
  std::vector<float> topk_weights_;               // [B * K]
  std::vector<int32_t> expert_count_;             // [n_expert]
  std::vector<int32_t> expert_offset_;            // [n_expert + 1]
  std::vector<int32_t> slot_token_;               // [B * K] token of each expert-grouped row
  std::vector<int32_t> token_slot_;               // [B * K] grouped row of (token, j)
  std::vector<int32_t> used_experts_;             // [n_expert] experts with rows, ascending
  std::vector<int32_t> predicted_;                // [n_expert] next layer's predicted experts
  std::vector<ExpertMatrices> expert_mats_;       // [n_expert] per used_experts_ entry
  AlignedBytes gate_out_;                         // [B * K][n_ff_exp]
  AlignedBytes up_out_;                           // [B * K][n_ff_exp]
  AlignedBytes down_out_;                         // [B * K][n_embd]
  AlignedBytes act_gather_gate_, act_gather_up_;  // [B * K] prepared rows of n_embd
  // Prepared sublayer inputs of k = n_embd, one buffer per activation format
  // so that matrices of different types can share one input.
  std::array<std::unique_ptr<ActCache>, 3> act_in_;
  std::unique_ptr<ActCache> act_attn_;  // prepared inputs of k = n_head * head_dim
  std::unique_ptr<ActCache> act_ff_;    // prepared inputs of k = n_ff_exp ([B * K] rows)
  std::vector<MatJob> jobs_;
  std::vector<Task> tasks_;
};

// The factory forward_engine.h declares, for the standalone worker.
absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCpuQwen3MoeEngine(
    const Qwen3MoeModel& model, const CpuEngineConfig& config);

}  // namespace moetier
