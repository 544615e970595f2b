// Row-wise operations of a transformer forward pass on f32 data. Like the
// matrix kernels they take raw pointers and sizes and know no model; none of
// them allocates.
#pragma once

#include <cstdint>

#include "base/rope_angles.h"
#include "base/router_params.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier::cpu {

// y[i] = x[i] / sqrt(mean_j x[j]^2 + eps) * w[i] (SPEC §3.0; the sum of
// squares is accumulated in double). x and y may be the same array.
void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y);

// RMSNorm of n_heads consecutive vectors of head_dim values, in place, all
// with the same weight (a per-head QK-norm).
void RmsNormHeads(float* x, const float* w, int n_heads, int head_dim, float eps);

// cos and sin of the rotary angles at position `pos`, times the scaling's
// magnitude: theta_i = pos * RopePairFrequency(i) for i in [0, n_rot / 2)
// (base^(-2i / n_rot) when unscaled), freq_factors (n_rot / 2 of them, or
// null) dividing each pair's angle.
void RopeAngles(int64_t pos, int n_rot, float freq_base, const RopeScaling& scaling,
                const float* freq_factors, float* cos_theta, float* sin_theta);

// NEOX rotary embedding in place: for each of n_heads heads (head h at
// x + h * head_dim) rotates the pairs (x[i], x[i + n_rot/2]), i < n_rot / 2,
// by the angles from RopeAngles. Dims from n_rot to head_dim are unchanged.
void RopeNeox(float* x, int n_heads, int head_dim, int n_rot, const float* cos_theta,
              const float* sin_theta);

// NORM rotary embedding in place (llama's, SPEC §3.0): as RopeNeox, but the
// pairs are adjacent, (x[2i], x[2i + 1]) for i < n_rot / 2.
void RopeAdjacentPairs(float* x, int n_heads, int head_dim, int n_rot, const float* cos_theta,
                       const float* sin_theta);

// x = softmax(x), computed in f32 with a double-precision sum.
void SoftmaxInPlace(float* x, int64_t n);

// rows[r][i] += bias[i] for `n` rows of `width` values; a null bias adds
// nothing.
void AddBiasRows(const float* bias, float* rows, int64_t n, int64_t width);

// out[i] = silu(gate[i]) * up[i], silu(z) = z / (1 + e^-z). out may alias
// either input.
void SiluMul(const float* gate, const float* up, int64_t n, float* out);
// out[i] = SwigluOai(gate[i], up[i]) (base/expert_activation.h); out may
// alias either input.
void SwigluOaiMul(const float* gate, const float* up, int64_t n, float* out);

// Causal attention of one query over cached positions [0, n_kv) for query
// heads [h_begin, h_end): out_h = softmax(scale * q_h . k_t) . v_t, where
// query head h reads KV head h / (n_head / n_head_kv). Head h of q and out
// is at offset h * head_dim. In each cache, KV head g's row for position t
// starts at g * kv_head_stride + t * kv_stride floats: {kv_head_stride,
// kv_stride} = {head_dim, n_head_kv * head_dim} for position-major caches,
// {max_ctx * head_dim, head_dim} for head-major ones (whose rows are
// contiguous, which streams faster). `scores` holds min(h_end - h_begin,
// n_head / n_head_kv) * (n_kv + 1) floats of scratch.
// With `sinks` (n_head logits, gpt-oss's attention sinks), query head h's
// softmax has sinks[h] as one more logit in its denominator, which adds no
// value: the weights of the positions then sum to less than 1.
void AttentionHeads(const float* q, const float* k_cache, const float* v_cache,
                    int64_t kv_head_stride, int64_t kv_stride, int64_t n_kv, int n_head,
                    int n_head_kv, int head_dim, float scale, int h_begin, int h_end, float* scores,
                    float* out, const float* sinks = nullptr);

// A KV cache stored as rows of one type (F32, F16, Q8_0 or Q4_0): KV head
// g's row of head_dim values for position t starts at byte
// g * head_stride + t * row_stride of `data`.
struct KvRows {
  TensorType type = TensorType::kF32;
  const uint8_t* data = nullptr;
  int64_t head_stride = 0;
  int64_t row_stride = 0;
};

// One calling thread's scratch for AttentionHeadsStored, for n_head /
// n_head_kv query heads over up to max_kv positions.
struct KvAttendScratch {
  float* scores = nullptr;     // group * (max_kv + 1) floats
  uint8_t* queries = nullptr;  // group rows of ActRowBytes(k type, head_dim), 64-byte aligned
};

// AttentionHeads over caches in any KV cache type, reading the stored rows
// as they are: the scores are the matrix kernel's dot products of the
// key rows with the query heads prepared as that type's activations
// (QuantizeActRows, as for a weight of the type), and each value row is
// decoded once and added into every head of its group
// (AccumulateKvValues). `sinks` as for AttentionHeads.
void AttentionHeadsStored(const float* q, const KvRows& k, const KvRows& v, int64_t n_kv,
                          int n_head, int n_head_kv, int head_dim, float scale, int h_begin,
                          int h_end, const KvAttendScratch& scratch, float* out,
                          const float* sinks = nullptr);

// MoE routing as `router` says (base/router_params.h, SPEC §3.0
// build_moe_ffn): the probabilities (softmax or per-expert sigmoid of the
// logits, or the logits themselves) into `probs` (n_expert floats); the k
// largest of probs + selection_bias (null: none) in descending order, ties
// to the lower id, into ids; their weights into `weights`
// (RouterWeightsOf).
void RouterTopK(const float* logits, int n_expert, int k, const RouterParams& router,
                const float* selection_bias, float* probs, int32_t* ids, float* weights);

// The mixing weights of experts ids[0..k) given the router's probabilities:
// probs[ids[j]] (their softmax for RouterGating::kSoftmaxOfChosen),
// summed in order and, when renormalized, divided by
// max(sum, kMinRouterWeightSum), then multiplied by the weights' scale.
// RouterTopK's own weights come from it, so a choice equal to the router's
// gets the router's weights bit for bit.
void RouterWeightsOf(const float* probs, const int32_t* ids, int k, const RouterParams& router,
                     float* weights);

// One embedding row decoded to f32. Precondition: the type has a codec and
// n is a multiple of its block size.
void EmbeddingRow(TensorType type, const void* row, int64_t n, float* out);

}  // namespace moetier::cpu
