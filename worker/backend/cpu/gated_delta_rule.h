// The gated delta rule of one value head (Gated DeltaNet, SPEC §3.4) over n
// consecutive tokens, in two forms that give the same values within
// rounding:
//
//   per token t:  S <- exp(g_t) S;  S <- S + k_t (beta_t (v_t - S^T k_t))^T;
//                 o_t = S^T q_t
//
// with S a d_k × d_v matrix (row r holds key dim r). GatedDeltaTokens runs
// the recurrence as written: two passes over S per token, the decode path.
// GatedDeltaChunked (the prefill path) solves the same recurrence a chunk of
// tokens at a time: with G_t the decay accumulated inside the chunk,
//
//   (I + A) U = diag(beta) (V - diag(G) K S_0),
//     A[t][i] = beta_t (G_t / G_i) k_t.k_i  for i < t,
//   O   = diag(G) Q S_0 + ((G_t / G_i) q_t.k_i, i <= t) U,
//   S_c = G_c S_0 + sum_i (G_c / G_i) k_i u_i^T,
//
// so S is read and written once per chunk instead of twice per token, and
// every decay ratio is exp of a non-positive sum (no overflow).
#pragma once

#include <cstddef>
#include <cstdint>

namespace moetier::cpu {

struct GatedDeltaHead {
  const float* q;  // token t at q + t * qk_stride, d_k values (already normed, scaled)
  const float* k;  // token t at k + t * qk_stride, d_k values
  int64_t qk_stride;
  const float* v;  // token t at v + t * v_stride, d_v values
  int64_t v_stride;
  const float* log_decay;  // g_t at log_decay[t * gate_stride] (g <= 0)
  const float* beta;       // beta_t at beta[t * gate_stride]
  int64_t gate_stride;
  float* out;  // o_t at out + t * out_stride, d_v values
  int64_t out_stride;
  float* state;  // S, [d_k][d_v], read and updated
  int d_k;
  int d_v;
};

void GatedDeltaTokens(const GatedDeltaHead& head, int n);

// Floats of scratch GatedDeltaChunked needs for chunks of `chunk` tokens.
size_t GatedDeltaChunkScratchFloats(int chunk, int d_k, int d_v);
// `scratch` holds GatedDeltaChunkScratchFloats(chunk, ...) floats.
void GatedDeltaChunked(const GatedDeltaHead& head, int n, int chunk, float* scratch);

}  // namespace moetier::cpu
