// The gated delta rule of the Gated DeltaNet mixer: the kernels' arguments
// (DeltaRuleArgs, for GatedDeltaRule and GatedDeltaRuleChunked in
// cuda_kernels.h), and its chunked form (the WY / UT-transform form of
// flash-linear-attention's chunk_gated_delta_rule) as per-element formulas
// that the CUDA kernels (cuda_delta_rule.cu) and a plain host loop
// (tests/cuda/delta_rule_chunk_test.cc) both evaluate, so that the
// algorithm itself is checked on machines without a GPU. Plain C++; the
// functions are __host__ __device__ under nvcc.
//
// The recurrence, per value head, state S (d_k x d_v), token t with key k_t,
// query q_t, value v_t, beta_t and log-decay g_t <= 0:
//   S_t = e^{g_t} S_{t-1} + k_t d_t^T,  d_t = beta_t (v_t - e^{g_t} S_{t-1}^T k_t),
//   o_t = S_t^T q_t.
// Over a chunk of L tokens starting from S_0, with G_t = g_1 + ... + g_t:
//   A[t][s] = beta_t e^{G_t - G_s} k_t . k_s   (s < t; strictly lower)
//   T = (I + A)^{-1}                            (unit lower triangular)
//   W = T diag(beta e^G) K,  U = T diag(beta) V
//   D = U - W S_0                               (the rows d_t^T)
//   O = diag(e^G) Q S_0 + P D,  P[t][s] = e^{G_t - G_s} q_t . k_s  (s <= t)
//   S_L = e^{G_L} S_0 + K^T diag(e^{G_L - G}) D
// which is the token-by-token result reordered (SPEC.md §3.3: "it computes
// the same values"). Every exponent is of a difference G_t - G_s <= 0 or of
// G_t itself, so nothing overflows.
//
// Work is split in two passes: Prepare (per chunk and value head, chunks in
// parallel: G, A, T, W, U, P into a scratch buffer) and Scan (per value
// head and tile of value columns, chunks in order: D, O, S).
#pragma once

#include <cmath>
#include <cstdint>

#include "base/host_device.h"

namespace moetier::cuda {

// The recurrence over n_tokens tokens, per value head j (SPEC.md §3.3 step
// 8), reading key head KeyHeadOf(j). Pointers are device pointers for the
// kernels. q and k are L2-normed (q also scaled by 1/sqrt(d_k)).
struct DeltaRuleArgs {
  const float* q;     // token t's key head h at q + t * qk_stride + h * d_k
  const float* k;     // likewise
  int64_t qk_stride;
  const float* v;     // token t's value head j at v + t * v_stride + j * d_v
  int64_t v_stride;
  const float* beta;  // [n_tokens][n_v_heads], in (0, 1)
  const float* g;     // [n_tokens][n_v_heads], log decays (<= 0)
  // [n_v_heads][d_v][d_k]: each value column's d_k state entries
  // contiguous (S_j transposed); read, then replaced by the state after
  // the last token.
  float* state;
  float* out;         // token t's value head j at out + t * out_stride + j * d_v
  int64_t out_stride;
  int n_tokens;
  int n_k_heads;
  int n_v_heads;      // a multiple of n_k_heads
  int d_k;
  int d_v;
  bool v_heads_tiled;  // which key head a value head reads (KeyHeadOf)
};

// The key head value head j reads: j mod n_k_heads (tiled, qwen35moe) or
// j / (n_v_heads / n_k_heads) (grouped, qwen3next).
MOETIER_HOST_DEVICE inline int KeyHeadOf(int j, int n_k_heads, int n_v_heads, bool tiled) {
  return tiled ? j % n_k_heads : j / (n_v_heads / n_k_heads);
}

namespace delta_chunk {

inline constexpr int kChunk = 64;     // tokens per chunk (as HF's and llama.cpp's)
inline constexpr int kScanTile = 16;  // value columns per Scan block
inline constexpr int kMaxDk = 256;    // key head size the kernels hold in shared memory

MOETIER_HOST_DEVICE inline float Exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

MOETIER_HOST_DEVICE inline float Dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// One value head's inputs over one chunk: token i (0 <= i < len) of the
// chunk has its query at q + i * qk_stride, key at k + i * qk_stride, value
// at v + i * v_stride and gates at beta[i * gate_stride], g[i * gate_stride].
struct ChunkIn {
  const float* q;
  const float* k;
  const float* v;
  const float* beta;
  const float* g;
  int64_t qk_stride;
  int64_t v_stride;
  int64_t gate_stride;
  int len;
  int d_k;
  int d_v;
  MOETIER_HOST_DEVICE const float* q_of(int i) const { return q + i * qk_stride; }
  MOETIER_HOST_DEVICE const float* k_of(int i) const { return k + i * qk_stride; }
  MOETIER_HOST_DEVICE const float* v_of(int i) const { return v + i * v_stride; }
  MOETIER_HOST_DEVICE float beta_of(int i) const { return beta[i * gate_stride]; }
  MOETIER_HOST_DEVICE float g_of(int i) const { return g[i * gate_stride]; }
};

// Value head j's inputs over chunk `chunk` of the arguments' tokens.
MOETIER_HOST_DEVICE inline ChunkIn ChunkInputsOf(const DeltaRuleArgs& a, int chunk, int j) {
  const int64_t t0 = static_cast<int64_t>(chunk) * kChunk;
  const int kh = KeyHeadOf(j, a.n_k_heads, a.n_v_heads, a.v_heads_tiled);
  ChunkIn in;
  in.q = a.q + t0 * a.qk_stride + static_cast<int64_t>(kh) * a.d_k;
  in.k = a.k + t0 * a.qk_stride + static_cast<int64_t>(kh) * a.d_k;
  in.v = a.v + t0 * a.v_stride + static_cast<int64_t>(j) * a.d_v;
  in.beta = a.beta + t0 * a.n_v_heads + j;
  in.g = a.g + t0 * a.n_v_heads + j;
  in.qk_stride = a.qk_stride;
  in.v_stride = a.v_stride;
  in.gate_stride = a.n_v_heads;
  in.len = a.n_tokens - t0 < kChunk ? static_cast<int>(a.n_tokens - t0) : kChunk;
  in.d_k = a.d_k;
  in.d_v = a.d_v;
  return in;
}

// Where one chunk's prepared values sit in the scratch buffer, for value
// head j of n_v_heads: per token (G, W row, U row) and per chunk (P), so
// that each chunk's values are whole and a batch's chunks do not interleave.
struct ChunkScratch {
  float* G;  // [len] at stride 1
  float* W;  // [len][d_k]
  float* U;  // [len][d_v]
  float* P;  // [kChunk][kChunk]
};

// Scratch floats for n_tokens tokens of n_v_heads heads.
MOETIER_HOST_DEVICE inline int64_t ScratchFloats(int n_tokens, int n_v_heads, int d_k, int d_v) {
  const int64_t n_chunks = (n_tokens + kChunk - 1) / kChunk;
  const int64_t per_head_chunk = kChunk * (1 + static_cast<int64_t>(d_k) + d_v) + kChunk * kChunk;
  return n_chunks * n_v_heads * per_head_chunk;
}

// The scratch of chunk `chunk`, value head j.
MOETIER_HOST_DEVICE inline ChunkScratch ScratchOf(float* scratch, int chunk, int j, int n_v_heads,
                                                  int d_k, int d_v) {
  const int64_t per_head_chunk = kChunk * (1 + static_cast<int64_t>(d_k) + d_v) + kChunk * kChunk;
  float* base = scratch + (static_cast<int64_t>(chunk) * n_v_heads + j) * per_head_chunk;
  ChunkScratch s;
  s.G = base;
  s.W = s.G + kChunk;
  s.U = s.W + static_cast<int64_t>(kChunk) * d_k;
  s.P = s.U + static_cast<int64_t>(kChunk) * d_v;
  return s;
}

// ---------------------------------------------------------------- Prepare

// G[i] = g_0 + ... + g_i, in order (one thread).
MOETIER_HOST_DEVICE inline void CumulativeLogDecay(const ChunkIn& in, float* G) {
  float acc = 0.0f;
  for (int i = 0; i < in.len; ++i) {
    acc += in.g_of(i);
    G[i] = acc;
  }
}

// A[t][s] for s < t.
MOETIER_HOST_DEVICE inline float KktEntry(const ChunkIn& in, const float* G, int t, int s) {
  return in.beta_of(t) * Exp(G[t] - G[s]) * Dot(in.k_of(t), in.k_of(s), in.d_k);
}

// T[t][s] for s < t, from A (row-major, kChunk wide) and the rows of T
// above t: T[t][s] = -A[t][s] - sum_{s < m < t} A[t][m] T[m][s]. Row t
// needs rows s+1 .. t-1 complete; entries of one row are independent.
MOETIER_HOST_DEVICE inline float InverseEntry(const float* A, const float* T, int t, int s) {
  float sum = A[t * kChunk + s];
  for (int m = s + 1; m < t; ++m) sum += A[t * kChunk + m] * T[m * kChunk + s];
  return -sum;
}

// T's diagonal is 1 and its upper part 0; InverseEntry gives the rest.
MOETIER_HOST_DEVICE inline float InverseAt(const float* T, int t, int s) {
  return s == t ? 1.0f : (s < t ? T[t * kChunk + s] : 0.0f);
}

// BG[s] = beta_s e^{G_s}, once per token for WEntry.
MOETIER_HOST_DEVICE inline float ScaledBeta(const ChunkIn& in, const float* G, int s) {
  return in.beta_of(s) * Exp(G[s]);
}

// W[t][r] = sum_{s <= t} T[t][s] BG[s] k_s[r].
MOETIER_HOST_DEVICE inline float WEntry(const ChunkIn& in, const float* BG, const float* T, int t,
                                        int r) {
  float sum = 0.0f;
  for (int s = 0; s <= t; ++s) sum += InverseAt(T, t, s) * BG[s] * in.k_of(s)[r];
  return sum;
}

// U[t][c] = sum_{s <= t} T[t][s] beta_s v_s[c].
MOETIER_HOST_DEVICE inline float UEntry(const ChunkIn& in, const float* T, int t, int c) {
  float sum = 0.0f;
  for (int s = 0; s <= t; ++s) sum += InverseAt(T, t, s) * in.beta_of(s) * in.v_of(s)[c];
  return sum;
}

// P[t][s] = e^{G_t - G_s} q_t . k_s for s <= t, 0 above the diagonal.
MOETIER_HOST_DEVICE inline float PEntry(const ChunkIn& in, const float* G, int t, int s) {
  if (s > t) return 0.0f;
  return Exp(G[t] - G[s]) * Dot(in.q_of(t), in.k_of(s), in.d_k);
}

// ---------------------------------------------------------------- Scan
//
// S is one tile of value columns of the state, column c's d_k entries
// contiguous (S + c * d_k: the layout of the kernels' state, transposed
// from the d_k x d_v matrix of the formulas). D is [kChunk][tile].

// D[t][c] = U[t][c0 + c] - W_t . S_c (S holds columns c0 ..).
MOETIER_HOST_DEVICE inline float NewValueEntry(const ChunkScratch& p, const float* S, int d_k,
                                               int d_v, int c0, int t, int c) {
  return p.U[t * d_v + c0 + c] - Dot(p.W + t * d_k, S + c * d_k, d_k);
}

// O[t][c] = e^{G_t} q_t . S_c + sum_{s <= t} P[t][s] D[s][c].
MOETIER_HOST_DEVICE inline float OutputEntry(const ChunkIn& in, const float* G, const float* P,
                                             const float* S, const float* D, int tile, int t,
                                             int c) {
  float sum = 0.0f;
  for (int s = 0; s <= t; ++s) sum += P[t * kChunk + s] * D[s * tile + c];
  return Exp(G[t]) * Dot(in.q_of(t), S + c * in.d_k, in.d_k) + sum;
}

// E[s] = e^{G_L - G_s}, once per token for NextStateEntry (L = len - 1
// here, the chunk's last token; E[len - 1] = 1).
MOETIER_HOST_DEVICE inline float DecayToEnd(const float* G, int len, int s) {
  return Exp(G[len - 1] - G[s]);
}

// The state after the chunk: e^{G_L} S_c[r] + sum_s E[s] k_s[r] D[s][c].
MOETIER_HOST_DEVICE inline float NextStateEntry(const ChunkIn& in, const float* G, const float* E,
                                                const float* S, const float* D, int tile, int r,
                                                int c) {
  float sum = 0.0f;
  for (int s = 0; s < in.len; ++s) sum += E[s] * in.k_of(s)[r] * D[s * tile + c];
  return Exp(G[in.len - 1]) * S[c * in.d_k + r] + sum;
}

}  // namespace delta_chunk
}  // namespace moetier::cuda
