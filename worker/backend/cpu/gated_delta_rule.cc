#include "backend/cpu/gated_delta_rule.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_kernels.h"

namespace moetier::cpu {

void GatedDeltaTokens(const GatedDeltaHead& h, int n) {
  const int d_k = h.d_k;
  const int d_v = h.d_v;
  constexpr int kMaxValueDim = 512;
  MOETIER_CPU_CHECK(d_v <= kMaxValueDim, "value head too wide");
  float kv[kMaxValueDim];
  // The state, the inputs and the output never overlap: saying so lets the
  // compiler vectorize the row loops without run-time overlap checks.
  float* __restrict S = h.state;
  for (int t = 0; t < n; ++t) {
    const float* __restrict q = h.q + t * h.qk_stride;
    const float* __restrict k = h.k + t * h.qk_stride;
    const float* __restrict v = h.v + t * h.v_stride;
    const float decay = std::exp(h.log_decay[t * h.gate_stride]);
    const float beta = h.beta[t * h.gate_stride];
    // S <- decay S and kv = S^T k in one pass over the rows.
    std::fill(kv, kv + d_v, 0.0f);
    for (int r = 0; r < d_k; ++r) {
      float* __restrict s = S + r * d_v;
      const float kr = k[r];
      for (int c = 0; c < d_v; ++c) {
        s[c] *= decay;
        kv[c] += s[c] * kr;
      }
    }
    for (int c = 0; c < d_v; ++c) kv[c] = beta * (v[c] - kv[c]);  // the delta
    // S <- S + k delta^T and o = S^T q in a second pass.
    float* __restrict o = h.out + t * h.out_stride;
    std::fill(o, o + d_v, 0.0f);
    for (int r = 0; r < d_k; ++r) {
      float* __restrict s = S + r * d_v;
      const float kr = k[r];
      const float qr = q[r];
      for (int c = 0; c < d_v; ++c) {
        s[c] += kr * kv[c];
        o[c] += s[c] * qr;
      }
    }
  }
}

size_t GatedDeltaChunkScratchFloats(int chunk, int d_k, int d_v) {
  (void)d_k;
  // The accumulated log-decay, the state's decay weights, and U.
  return static_cast<size_t>(chunk) * (2 + static_cast<size_t>(d_v));
}

namespace {

// One chunk of c tokens (the head's pointers already at its first token).
void Chunk(const GatedDeltaHead& h, int c, float* scratch) {
  const int d_k = h.d_k;
  const int d_v = h.d_v;
  float* gc = scratch;          // [c] log G_t, the decay accumulated up to t
  float* to_end = gc + c;       // [c] G_c / G_t
  float* U = to_end + c;        // [c][d_v]
  float* S = h.state;
  auto q = [&](int t) { return h.q + t * h.qk_stride; };
  auto k = [&](int t) { return h.k + t * h.qk_stride; };
  auto o = [&](int t) { return h.out + t * h.out_stride; };

  double sum = 0.0;
  for (int t = 0; t < c; ++t) {
    sum += h.log_decay[t * h.gate_stride];
    gc[t] = static_cast<float>(sum);
  }
  for (int t = 0; t < c; ++t) to_end[t] = std::exp(gc[c - 1] - gc[t]);

  // U = K S_0 and O = Q S_0, one pass over the rows of S_0 per token.
  for (int t = 0; t < c; ++t) {
    float* u = U + static_cast<int64_t>(t) * d_v;
    float* out = o(t);
    std::fill(u, u + d_v, 0.0f);
    std::fill(out, out + d_v, 0.0f);
    const float* kt = k(t);
    const float* qt = q(t);
    for (int r = 0; r < d_k; ++r) {
      AxpyF32(kt[r], S + static_cast<int64_t>(r) * d_v, u, d_v);
      AxpyF32(qt[r], S + static_cast<int64_t>(r) * d_v, out, d_v);
    }
  }
  // Forward substitution of (I + A) U = diag(beta) (V - diag(G) K S_0):
  // row t needs the rows before it.
  for (int t = 0; t < c; ++t) {
    const float beta = h.beta[t * h.gate_stride];
    const float g_t = std::exp(gc[t]);
    float* u = U + static_cast<int64_t>(t) * d_v;
    const float* v = h.v + t * h.v_stride;
    for (int x = 0; x < d_v; ++x) u[x] = beta * (v[x] - g_t * u[x]);
    for (int i = 0; i < t; ++i) {
      const float a = beta * std::exp(gc[t] - gc[i]) * DotF32(k(t), k(i), d_k);
      AxpyF32(-a, U + static_cast<int64_t>(i) * d_v, u, d_v);
    }
  }
  // O = diag(G) Q S_0 + (causal decayed Q K^T) U.
  for (int t = 0; t < c; ++t) {
    float* out = o(t);
    ScaleF32(std::exp(gc[t]), out, d_v);
    for (int i = 0; i <= t; ++i) {
      const float a = std::exp(gc[t] - gc[i]) * DotF32(q(t), k(i), d_k);
      AxpyF32(a, U + static_cast<int64_t>(i) * d_v, out, d_v);
    }
  }
  // S_c = G_c S_0 + K^T diag(G_c / G_i) U.
  const float g_c = std::exp(gc[c - 1]);
  for (int r = 0; r < d_k; ++r) {
    float* s = S + static_cast<int64_t>(r) * d_v;
    ScaleF32(g_c, s, d_v);
    for (int i = 0; i < c; ++i) {
      AxpyF32(to_end[i] * k(i)[r], U + static_cast<int64_t>(i) * d_v, s, d_v);
    }
  }
}

}  // namespace

void GatedDeltaChunked(const GatedDeltaHead& head, int n, int chunk, float* scratch) {
  MOETIER_CPU_CHECK(chunk >= 1, "chunk must hold a token");
  GatedDeltaHead h = head;
  for (int t0 = 0; t0 < n; t0 += chunk) {
    const int c = std::min(chunk, n - t0);
    Chunk(h, c, scratch);
    h.q += c * h.qk_stride;
    h.k += c * h.qk_stride;
    h.v += c * h.v_stride;
    h.log_decay += c * h.gate_stride;
    h.beta += c * h.gate_stride;
    h.out += c * h.out_stride;
  }
}

}  // namespace moetier::cpu
