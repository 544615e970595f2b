// Host API of the CUDA kernels. Plain C++ (no CUDA syntax), so engine code in
// .cc files can include it. Like the CPU kernels these take raw device
// pointers, sizes and a stream, and know no model.
//
// Conventions for every function:
// - Pointers are device pointers (cudaMalloc or managed memory). Weight
//   pointers hold the tensor's GGUF bytes unchanged: `rows` rows of
//   TensorRowBytes(type, cols) bytes each, back to back.
// - `stream` is a cudaStream_t passed as void*; nullptr is the legacy default
//   stream. Work is only enqueued: nothing synchronizes, nothing allocates,
//   so every call may be captured in a CUDA graph.
// - Arguments are validated on the host; a bad one gives InvalidArgument that
//   names it. A failed launch gives Internal with CUDA's error string.
//   Errors of kernels that already ran surface at the caller's next
//   synchronization, as with any CUDA work.
// - Activations, norms, logits and attention are fp32; fp16 appears only in
//   the prefill GEMM's scratch buffers and, optionally, in the KV cache.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cuda/delta_rule.h"
#include "base/rope_angles.h"
#include "base/router_params.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier::cuda {

using CudaStream = void*;  // cudaStream_t

// The weight types these kernels read: F32, F16, BF16, Q8_0, Q4_0, Q4_K,
// Q5_K, Q6_K.
bool CudaWeightTypeSupported(TensorType type);

// Most activation rows one GemvQuant call takes.
inline constexpr int kCudaGemvMaxBatch = 8;

// --- Dequantization ------------------------------------------------------

// dst[i] = element i of the `n_elems` elements at `src` (a multiple of the
// type's block size). Bit-exact with DequantizeRow (tensor/quant_codec.h).
absl::Status DequantizeToF32(TensorType type, const void* src, int64_t n_elems, float* dst,
                             CudaStream stream);

// dst row i (n_elems floats) = row rows[i] of the matrix at `src` (rows of
// TensorRowBytes(type, n_elems) bytes), for i < n_rows; `rows` is a device
// array, read when the kernel runs (unchecked there: each must be a row of
// the matrix). Bit-exact with DequantizeRow. Gathers token embeddings by
// ids that live on the device.
absl::Status DequantizeRowsAt(TensorType type, const void* src, const int32_t* rows, int n_rows,
                              int64_t n_elems, float* dst, CudaStream stream);

// As DequantizeToF32, rounded to IEEE binary16 (round to nearest even);
// dst holds raw binary16 bits.
absl::Status DequantizeToF16(TensorType type, const void* src, int64_t n_elems, uint16_t* dst,
                             CudaStream stream);

// --- Decode: fused dequantize + matrix-vector ----------------------------

// y[b * rows + r] = sum_c W[r, c] * x[b * cols + c] for b < batch
// (1..kCudaGemvMaxBatch). x and y are fp32; cols is a multiple of the
// type's block size. Each weight element is decoded once per call and used
// for every activation row; sums are fp32, in an order that does not depend
// on `batch` but does on x's alignment (block types read a 16-byte aligned
// x in 8-element slices, any other x element by element), so callers that
// compare bits keep x 16-byte aligned, as cudaMalloc'd rows of whole blocks
// are. y must not overlap w or x.
absl::Status GemvQuant(TensorType type, const void* w, const float* x, int64_t rows, int64_t cols,
                       int batch, float* y, CudaStream stream);

// One product of a GemvQuantGroup: y[b * rows + r] = sum_c W[r, c] *
// x[b * cols + c] for b < n_rows (1..kCudaGemvMaxBatch), W the `rows` x
// `cols` matrix at w. Device pointers; x and y 4-byte aligned.
struct GemvJob {
  const void* w = nullptr;
  const float* x = nullptr;
  float* y = nullptr;
  int32_t n_rows = 0;
};

// Jobs one kernel launch of GemvQuantGroup takes; more are launched in turns.
inline constexpr int kCudaGemvMaxGroupJobs = 64;

// GemvQuant for n_jobs matrices of one type and shape (a layer's experts)
// in as few launches as kCudaGemvMaxGroupJobs allows: each job's outputs are
// GemvQuant(type, w, x, rows, cols, n_rows, y)'s bit for bit. The jobs'
// outputs must not overlap each other's inputs.
absl::Status GemvQuantGroup(TensorType type, const GemvJob* jobs, int n_jobs, int64_t rows,
                            int64_t cols, CudaStream stream);

// GemvQuantGroup over jobs in device memory, written by an earlier kernel
// on the stream (BuildExpertJobs): `n_tables` tables of `max_jobs` jobs
// each, back to back, of which the first *n_jobs (device) of every table
// run; the others are not read. Each job's outputs are GemvQuant's bits.
// Its weights must be aligned as GemvQuant requires (not checked here: the
// table's writer checks them).
absl::Status GemvQuantJobTables(TensorType type, const GemvJob* jobs, const int32_t* n_jobs,
                                int max_jobs, int n_tables, int64_t rows, int64_t cols,
                                CudaStream stream);

// --- Prefill: dequantize to fp16 + GEMM ----------------------------------

// A cuBLAS handle. Create() fails with Unimplemented where the build found
// no cuBLAS, and with Unavailable where there is no usable device.
class CudaBlas {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBlas>> Create();
  ~CudaBlas();
  CudaBlas(const CudaBlas&) = delete;
  CudaBlas& operator=(const CudaBlas&) = delete;

  void* handle() const { return handle_; }  // cublasHandle_t

 private:
  explicit CudaBlas(void* handle) : handle_(handle) {}
  void* handle_;
};

// True when this build links cuBLAS.
bool CudaBlasAvailable();

// y[t * rows + r] = sum_c W[r, c] * x[t * cols + c] for t < n_tokens.
// W is dequantized into `w_scratch` (rows * cols binary16 values) and x
// rounded into `x_scratch` (n_tokens * cols values); the product
// accumulates in fp32 into fp32 y. With `blas` it runs cublasGemmEx;
// with blas == nullptr a shared-memory tiled kernel (slower, for builds
// without cuBLAS and as a cross-check). fp16 holds |values| up to 65504:
// larger activations become inf.
absl::Status GemmQuant(CudaBlas* blas, TensorType type, const void* w, const float* x,
                       int64_t rows, int64_t cols, int64_t n_tokens, uint16_t* w_scratch,
                       uint16_t* x_scratch, float* y, CudaStream stream);

// --- Row operations (fp32) -----------------------------------------------

// For each of n_rows rows of n values: y = x / sqrt(mean(x^2) + eps) * w,
// the same w for every row (so one call also does a per-head QK-norm with
// n_rows = tokens * heads, n = head_dim). y may equal x.
absl::Status RmsNorm(const float* x, const float* w, int64_t n_rows, int n, float eps, float* y,
                     CudaStream stream);

// NEOX rotary embedding in place on x laid out [n_tokens][n_heads][head_dim]:
// token t is at position positions[t] (device array); pairs
// (x[i], x[i + n_rot/2]) rotate by theta_i = pos * RopePairFrequency(i)
// (base^(-2i / n_rot) unscaled), computed in double as cpu::RopeAngles does,
// cos and sin times the scaling's magnitude; freq_factors (a device array of
// n_rot / 2 divisors of the angles, llama's rope_freqs; null: none). Dims
// from n_rot on are unchanged. With pair_uses_position (a device array of n_rot / 2 flags;
// null: every pair), pairs whose flag is 0 rotate by position 0, i.e. stay
// as they are but for the magnitude (multi-section rope of text tokens).
absl::Status RopeNeox(float* x, const int32_t* positions, int n_tokens, int n_heads, int head_dim,
                      int n_rot, float freq_base, const RopeScaling& scaling,
                      const float* freq_factors, const uint8_t* pair_uses_position,
                      CudaStream stream);

// NORM rotary embedding (llama's): as RopeNeox, but pair i is the adjacent
// (x[2i], x[2i + 1]).
absl::Status RopeAdjacentPairs(float* x, const int32_t* positions, int n_tokens, int n_heads,
                               int head_dim, int n_rot, float freq_base, const RopeScaling& scaling,
                               const float* freq_factors, const uint8_t* pair_uses_position,
                               CudaStream stream);

// Attention's q and k heads before the cache, in one launch: each head of
// q ([n_tokens][n_head][head_dim]) and of k ([n_tokens][n_head_kv][head_dim])
// RMS-normed over its head_dim values with q_norm / k_norm (both null: no
// norm), then rotated as RopeNeox (or, with `adjacent`, RopeAdjacentPairs)
// rotates it. The same bits as RmsNorm per head followed by the rope.
absl::Status QkNormRope(float* q, float* k, const float* q_norm, const float* k_norm,
                        const int32_t* positions, int n_tokens, int n_head, int n_head_kv,
                        int head_dim, int n_rot, float freq_base, const RopeScaling& scaling,
                        const float* freq_factors, bool adjacent, const uint8_t* pair_uses_position,
                        float eps, CudaStream stream);

// out[i] = silu(gate[i]) * up[i]; out may alias either input.
absl::Status SiluMul(const float* gate, const float* up, int64_t n, float* out, CudaStream stream);

// MoE routing for n_tokens rows of n_expert logits as `router` says
// (base/router_params.h): the probabilities into probs
// ([n_tokens][n_expert]); the k largest of probs + selection_bias (device
// fp32 [n_expert]; null: none) in descending order, ties to the lower id,
// into ids ([n_tokens][k]); their probabilities, renormalized and scaled,
// into weights. The same fp32 arithmetic as cpu::RouterTopK. n_expert <=
// 1024, k <= 64.
absl::Status RouterTopK(const float* logits, int n_tokens, int n_expert, int k,
                        const RouterParams& router, const float* selection_bias, float* probs,
                        int32_t* ids, float* weights, CudaStream stream);

// One KV cache as attention reads it: KV head g's row for position t starts
// at byte g * head_stride + t * row_stride of `data` and holds head_dim
// values of `type` (CudaKvCacheTypeSupported), in the ggml encoding.
struct KvCacheView {
  const void* data = nullptr;
  TensorType type = TensorType::kF32;
  int64_t head_stride = 0;  // bytes
  int64_t row_stride = 0;   // bytes
};

// The KV cache types the kernels store and read: F32, F16, Q8_0 and Q4_0
// (the block types need head_dim a multiple of 32).
inline constexpr TensorType kCudaKvCacheTypes[] = {TensorType::kF32, TensorType::kF16,
                                                   TensorType::kQ8_0, TensorType::kQ4_0};
bool CudaKvCacheTypeSupported(TensorType type);

// Causal GQA attention of n_tokens query tokens that follow n_past cached
// ones: query token i (at position n_past + i) attends to cache positions
// [0, n_past + i], which must already hold its own K and V. q and out are
// [n_tokens][n_head][head_dim]; query head h reads KV head
// h / (n_head / n_head_kv). Keys and values may be of different types and
// are read as stored (a block value is its fp16 scale times its level, as
// the CPU codec decodes it); strides are multiples of 4 bytes for F32, 2
// for the others. Decode is n_tokens = 1. head_dim <= 256. The softmax runs
// in fp32 in one pass (running max).
//
// With `n_past_on_device`, the int32 it points to (device memory, read when
// the kernel runs) is added to n_past: a captured CUDA graph replays with
// the position its step writes there.
absl::Status Attention(const float* q, const KvCacheView& k, const KvCacheView& v, int n_tokens,
                       int64_t n_past, int n_head, int n_head_kv, int head_dim, float scale,
                       float* out, CudaStream stream,
                       const int32_t* n_past_on_device = nullptr);

// --- Gated attention and the shared expert (fp32) -----------------------

// Splits each of n_rows rows of 2n values into its halves: first row r =
// src[2rn .. 2rn + n), second row r = src[2rn + n .. 2(r+1)n) (a gated q
// projection's per-head q and gate, with n_rows = tokens * heads).
absl::Status SplitRowHalves(const float* src, int64_t n_rows, int n, float* first, float* second,
                            CudaStream stream);

// x[i] *= sigmoid(gate[i]) = 1 / (1 + exp(-gate[i])) for i < n.
absl::Status MulSigmoid(float* x, const float* gate, int64_t n, CudaStream stream);

// x[r * n + i] += sigmoid(logits[r]) * y[r * n + i] (the shared expert's
// gated output into the residual).
absl::Status AddSigmoidScaledRows(float* x, const float* y, const float* logits, int64_t n_rows,
                                  int n, CudaStream stream);

// --- Gated DeltaNet (fp32) -------------------------------------------------

// Causal depthwise conv over time with state, then SiLU: for channel c and
// token t, y[t][c] = silu(sum_{i<K} w[c][i] * s[t - (K-1) + i][c]), where s
// is the rows of x ([n_tokens][channels]) preceded by the K - 1 rows of
// `state` ([K-1][channels], oldest first; zeros at a sequence's start).
// Afterwards `state` holds the last K - 1 rows of s (raw inputs). w is
// [channels][K], tap K-1 on the current token. y must not alias x. K <= 64.
absl::Status CausalConv1dSilu(const float* x, const float* w, float* state, int n_tokens,
                              int channels, int kernel, float* y, CudaStream stream);

// In place, per head h of token t (head_dim values at
// x + t * token_stride + h * head_dim): x / max(||x||, eps) * scale, the
// squares summed in double (llama.cpp's l2_norm; the CPU block's).
absl::Status L2NormHeads(float* x, int n_tokens, int n_heads, int head_dim, int64_t token_stride,
                         float eps, float scale, CudaStream stream);

// Per token t and value head j (arrays [n_tokens][n_heads]):
// beta_out = sigmoid(beta_in), g_out = a[j] * softplus(alpha_in + dt_bias[j])
// (the log decay; softplus(z) = z above 20). Outputs may alias the inputs.
absl::Status DeltaRuleGates(const float* beta_in, const float* alpha_in, const float* a,
                            const float* dt_bias, int n_tokens, int n_heads, float* beta_out,
                            float* g_out, CudaStream stream);

// The gated delta rule token by token (DeltaRuleArgs in delta_rule.h): one
// warp per value column, d_k <= 256. Each column's arithmetic does not
// depend on n_tokens, so a batch gives the bits of its tokens one by one.
absl::Status GatedDeltaRule(const DeltaRuleArgs& args, CudaStream stream);

// The same values in chunks of 64 tokens (delta_rule.h's chunked form),
// equal to GatedDeltaRule within fp32 rounding. `scratch` holds
// GatedDeltaRuleChunkedScratchFloats(n_tokens, ...) floats.
absl::Status GatedDeltaRuleChunked(const DeltaRuleArgs& args, float* scratch,
                                   int64_t scratch_floats, CudaStream stream);
int64_t GatedDeltaRuleChunkedScratchFloats(int n_tokens, int n_v_heads, int d_k, int d_v);

// For each of n_rows rows of n values: y = RMSNorm(x) * w * silu(z), the
// same w for every row (the Gated DeltaNet's output norm, rows = tokens *
// value heads). y may equal x.
absl::Status RmsNormGated(const float* x, const float* w, const float* z, int64_t n_rows, int n,
                          float eps, float* y, CudaStream stream);

// --- Engine glue (fp32) ---------------------------------------------------

// x[i] += y[i] for i < n (the residual add).
absl::Status AddInPlace(float* x, const float* y, int64_t n, CudaStream stream);

// rows[r * n + i] += bias[i] for r < n_rows, i < n (a projection's bias).
absl::Status AddRowBias(float* rows, const float* bias, int64_t n_rows, int n, CudaStream stream);

// dst row i = src row rows[i] for i < n_rows, rows of n floats; rows is a
// device array of indices into src (each in 0..n_src_rows-1, unchecked on the
// device). Gathers a batch's token rows into expert order.
absl::Status GatherRows(const float* src, const int32_t* rows, int64_t n_rows, int n, float* dst,
                        CudaStream stream);

// Writes the keys (or values) of n_tokens tokens, src laid out
// [n_tokens][n_head_kv][head_dim] fp32, into a cache with Attention's
// layout: token t's head g goes to the row at byte
// g * head_stride + (pos0 + t) * row_stride. F16 rounds to nearest even;
// Q8_0 and Q4_0 blocks get exactly the bytes of the CPU codec's
// QuantizeRow (ggml's reference rules).
// `pos0_on_device`, when given, is added to pos0 as Attention's
// n_past_on_device is to n_past.
absl::Status StoreKv(const float* src, int n_tokens, int n_head_kv, int head_dim, void* cache,
                     TensorType kv_type, int64_t head_stride, int64_t row_stride, int64_t pos0,
                     CudaStream stream, const int32_t* pos0_on_device = nullptr);

// A MoE layer's grouping done on the device, so that the host need not see
// the router's choice: the row maps GatherRows and MoeCombine read, and the
// GEMV job tables of the used experts (GemvQuantJobTables), exactly as the
// MoE block builds them on the host (expert_rows.h): experts ascending,
// rows in choice order, jobs of up to kCudaGemvMaxBatch rows from each
// expert's first row. An id that is not an expert gets a row after all
// experts' rows and no job, and bad_choice records it.
struct ExpertJobsArgs {
  const int32_t* topk_ids = nullptr;  // [n_tokens * top_k]
  int n_tokens = 0;
  int top_k = 0;
  int n_expert = 0;
  // [n_expert][3]: gate, up and down weights of each expert of the layer.
  const void* const* expert_weights = nullptr;
  const float* expert_in = nullptr;  // [n_choices][n_embd], the gathered rows
  // Optional: the layer's input rows [n_tokens][n_embd], which the gathered
  // rows copy. A job of one row reads its token's row here instead, so a
  // caller whose jobs all have one row (a single token: its k experts are
  // distinct) need not gather at all.
  const float* token_rows = nullptr;
  float* gate_out = nullptr;         // [n_choices][n_ff]
  float* up_out = nullptr;           // [n_choices][n_ff]
  float* down_out = nullptr;         // [n_choices][n_embd]
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  // [2 * n_choices]: row -> token, then (token, j) -> row.
  int32_t* slot_rows = nullptr;
  // [3][n_choices]: the gate, up and down tables; *n_jobs jobs in each.
  GemvJob* jobs = nullptr;
  int32_t* n_jobs = nullptr;
  // 0, or 1 + the first choice t * top_k + j whose id is not an expert.
  int32_t* bad_choice = nullptr;
};

// Most choices (n_tokens * top_k) BuildExpertJobs takes: one thread each.
inline constexpr int kCudaExpertJobsMaxChoices = 1024;

absl::Status BuildExpertJobs(const ExpertJobsArgs& args, CudaStream stream);

// The MoE weighted sum into the residual: for each token t < n_tokens,
// x[t * n + i] += sum over j = 0..k-1, in that order, of
// weights[t * k + j] * expert_out[rows[t * k + j] * n + i]. The order is
// fixed and there are no atomics, so results do not depend on the launch.
absl::Status MoeCombine(const float* expert_out, const int32_t* rows, const float* weights,
                        int n_tokens, int k, int n, float* x, CudaStream stream);

// --- Sampling --------------------------------------------------------------

// ids[r] = argmax of row r of [n_rows][n_vocab] logits, ties to the lower id.
absl::Status ArgmaxRows(const float* logits, int n_rows, int n_vocab, int32_t* ids,
                        CudaStream stream);

// One token drawn from softmax(logits / temperature) by the inverse of its
// cumulative distribution at `uniform` (in [0, 1), drawn by the caller so
// that seeding stays on the host). temperature <= 0 is argmax.
absl::Status SampleTemperature(const float* logits, int n_vocab, float temperature, float uniform,
                               int32_t* id, CudaStream stream);

// The most candidates TopCandidates selects.
inline constexpr int kMaxTopCandidates = 512;

// Device keys of scratch TopCandidates needs for a row of n_vocab.
int64_t TopCandidatesScratchKeys(int n_vocab);

// The row's m best logits in the host sampler's order (higher logit first,
// equal logits lower id first; candidate_keys.h): ids[0, m) best first, and
// values[i] = logits[ids[i]]. m in 1..min(kMaxTopCandidates, n_vocab);
// `scratch` holds at least TopCandidatesScratchKeys(n_vocab) keys.
absl::Status TopCandidates(const float* logits, int n_vocab, int m, uint64_t* scratch,
                           int64_t scratch_keys, int32_t* ids, float* values, CudaStream stream);

// out[i] = logits[ids[i]] for i < n (ids on the device, each in the row).
absl::Status GatherLogits(const float* logits, const int32_t* ids, int n, float* out,
                          CudaStream stream);

}  // namespace moetier::cuda
