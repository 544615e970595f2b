// Host implementations of the gated delta rule for the tests: random
// problems laid out as the Gated DeltaNet block lays them out, the
// token-by-token recurrence as the CPU block runs it (fp32) or in float64,
// and the chunked form of backend/cuda/delta_rule.h evaluated phase by
// phase in the order of the CUDA kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/delta_rule.h"

namespace moetier::cuda::delta_chunk::host {

struct Shape {
  int n_tokens, n_k_heads, n_v_heads, d_k, d_v;
  bool tiled;
};

// Inputs laid out as the DeltaNet block lays them out: one row per token of
// q heads | k heads | v heads (the conv output), gates [n][n_v_heads].
struct Problem {
  Shape shape;
  std::vector<float> qkv;   // [n][2 * key_dim + value_dim]
  std::vector<float> beta;  // [n][n_v_heads], in (0, 1)
  std::vector<float> g;     // [n][n_v_heads], <= 0
  std::vector<float> state0;  // [n_v_heads][d_v][d_k] (the kernels' layout)

  int key_dim() const { return shape.n_k_heads * shape.d_k; }
  int value_dim() const { return shape.n_v_heads * shape.d_v; }
  int64_t row() const { return 2 * key_dim() + value_dim(); }
  const float* q(int t, int h) const { return qkv.data() + t * row() + h * shape.d_k; }
  const float* k(int t, int h) const { return q(t, h) + key_dim(); }
  const float* v(int t, int j) const {
    return qkv.data() + t * row() + 2 * key_dim() + j * shape.d_v;
  }
};

inline void L2Normalize(float* x, int n, float scale) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += double(x[i]) * x[i];
  const float f = static_cast<float>(1.0 / std::max(std::sqrt(sum), 1e-6)) * scale;
  for (int i = 0; i < n; ++i) x[i] *= f;
}

// `decay_scale` scales the log decays: 0 keeps everything, large values
// forget within a few tokens.
inline Problem MakeProblem(const Shape& s, uint32_t seed, float decay_scale, bool random_state) {
  Problem p;
  p.shape = s;
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  p.qkv.resize(static_cast<size_t>(s.n_tokens * p.row()));
  for (float& x : p.qkv) x = gauss(rng);
  for (int t = 0; t < s.n_tokens; ++t) {
    for (int h = 0; h < s.n_k_heads; ++h) {
      L2Normalize(p.qkv.data() + t * p.row() + h * s.d_k, s.d_k,
                  1.0f / std::sqrt(static_cast<float>(s.d_k)));
      L2Normalize(p.qkv.data() + t * p.row() + p.key_dim() + h * s.d_k, s.d_k, 1.0f);
    }
  }
  const size_t n_gates = static_cast<size_t>(s.n_tokens * s.n_v_heads);
  p.beta.resize(n_gates);
  p.g.resize(n_gates);
  for (size_t i = 0; i < n_gates; ++i) {
    p.beta[i] = 1.0f / (1.0f + std::exp(-gauss(rng)));
    const float z = gauss(rng) - 1.0f;
    p.g[i] = -decay_scale * std::log1p(std::exp(z));
  }
  p.state0.assign(static_cast<size_t>(s.n_v_heads) * s.d_v * s.d_k, 0.0f);
  if (random_state) {
    for (float& x : p.state0) x = 0.3f * gauss(rng);
  }
  return p;
}

// The CPU block's recurrence (blocks/cpu/deltanet_block.cc, Recur) in fp32,
// or in float64 (Real = double); the state in the kernels' [j][d_v][d_k]
// layout.
template <typename Real>
void TokenByToken(const Problem& p, std::vector<float>& state, std::vector<float>& out) {
  const Shape& s = p.shape;
  out.assign(static_cast<size_t>(s.n_tokens) * p.value_dim(), 0.0f);
  std::vector<Real> S(static_cast<size_t>(s.d_k) * s.d_v);  // [d_k][d_v]
  std::vector<Real> kv(static_cast<size_t>(s.d_v));
  for (int j = 0; j < s.n_v_heads; ++j) {
    // The model's mapping (model.h, DeltaNetParams::k_head_of).
    const int kh = s.tiled ? j % s.n_k_heads : j / (s.n_v_heads / s.n_k_heads);
    float* st = state.data() + static_cast<size_t>(j) * s.d_v * s.d_k;
    for (int r = 0; r < s.d_k; ++r) {
      for (int c = 0; c < s.d_v; ++c) S[r * s.d_v + c] = st[c * s.d_k + r];
    }
    for (int t = 0; t < s.n_tokens; ++t) {
      const float* q = p.q(t, kh);
      const float* k = p.k(t, kh);
      const float* v = p.v(t, j);
      const Real decay = std::exp(static_cast<Real>(p.g[t * s.n_v_heads + j]));
      const Real beta = p.beta[t * s.n_v_heads + j];
      std::fill(kv.begin(), kv.end(), Real(0));
      for (int r = 0; r < s.d_k; ++r) {
        for (int c = 0; c < s.d_v; ++c) {
          S[r * s.d_v + c] *= decay;
          kv[c] += S[r * s.d_v + c] * k[r];
        }
      }
      for (int c = 0; c < s.d_v; ++c) kv[c] = beta * (v[c] - kv[c]);
      std::vector<Real> o(static_cast<size_t>(s.d_v), Real(0));
      for (int r = 0; r < s.d_k; ++r) {
        for (int c = 0; c < s.d_v; ++c) {
          S[r * s.d_v + c] += k[r] * kv[c];
          o[c] += S[r * s.d_v + c] * q[r];
        }
      }
      for (int c = 0; c < s.d_v; ++c) {
        out[static_cast<size_t>(t) * p.value_dim() + j * s.d_v + c] = static_cast<float>(o[c]);
      }
    }
    for (int r = 0; r < s.d_k; ++r) {
      for (int c = 0; c < s.d_v; ++c) st[c * s.d_k + r] = static_cast<float>(S[r * s.d_v + c]);
    }
  }
}

// The kernels' arguments over the problem (no outputs: the host loops
// below write their own).
inline DeltaRuleArgs ArgsOf(const Problem& p) {
  const Shape& s = p.shape;
  DeltaRuleArgs a{};
  a.q = p.qkv.data();
  a.k = p.qkv.data() + p.key_dim();
  a.qk_stride = p.row();
  a.v = p.qkv.data() + 2 * p.key_dim();
  a.v_stride = p.row();
  a.beta = p.beta.data();
  a.g = p.g.data();
  a.n_tokens = s.n_tokens;
  a.n_k_heads = s.n_k_heads;
  a.n_v_heads = s.n_v_heads;
  a.d_k = s.d_k;
  a.d_v = s.d_v;
  a.v_heads_tiled = s.tiled;
  return a;
}

inline ChunkIn InputOf(const Problem& p, int chunk, int j) {
  return ChunkInputsOf(ArgsOf(p), chunk, j);
}

// The two passes of cuda_delta_rule.cu, phase by phase, each phase's
// elements in any order (here: sequentially) after the previous phase.
inline void Chunked(const Problem& p, std::vector<float>& state, std::vector<float>& out) {
  const Shape& s = p.shape;
  out.assign(static_cast<size_t>(s.n_tokens) * p.value_dim(), 0.0f);
  const int n_chunks = (s.n_tokens + kChunk - 1) / kChunk;
  std::vector<float> scratch(
      static_cast<size_t>(ScratchFloats(s.n_tokens, s.n_v_heads, s.d_k, s.d_v)), NAN);
  // Prepare: one block per (chunk, value head).
  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    for (int j = 0; j < s.n_v_heads; ++j) {
      const ChunkIn in = InputOf(p, chunk, j);
      const ChunkScratch sp = ScratchOf(scratch.data(), chunk, j, s.n_v_heads, s.d_k, s.d_v);
      std::vector<float> G(kChunk), BG(kChunk), A(kChunk * kChunk), T(kChunk * kChunk, NAN);
      CumulativeLogDecay(in, G.data());
      for (int i = 0; i < in.len; ++i) {
        sp.G[i] = G[i];
        BG[i] = ScaledBeta(in, G.data(), i);
      }
      for (int t = 0; t < in.len; ++t) {
        for (int u = 0; u < t; ++u) A[t * kChunk + u] = KktEntry(in, G.data(), t, u);
      }
      for (int t = 1; t < in.len; ++t) {
        for (int u = 0; u < t; ++u) T[t * kChunk + u] = InverseEntry(A.data(), T.data(), t, u);
      }
      for (int t = 0; t < in.len; ++t) {
        for (int r = 0; r < s.d_k; ++r) sp.W[t * s.d_k + r] = WEntry(in, BG.data(), T.data(), t, r);
        for (int c = 0; c < s.d_v; ++c) sp.U[t * s.d_v + c] = UEntry(in, T.data(), t, c);
      }
      for (int t = 0; t < kChunk; ++t) {
        for (int u = 0; u < kChunk; ++u) {
          sp.P[t * kChunk + u] = t < in.len && u < in.len ? PEntry(in, G.data(), t, u) : 0.0f;
        }
      }
    }
  }
  // Scan: one block per (value head, tile of columns), chunks in order.
  for (int j = 0; j < s.n_v_heads; ++j) {
    for (int c0 = 0; c0 < s.d_v; c0 += kScanTile) {
      const int tile = std::min(kScanTile, s.d_v - c0);
      float* st = state.data() + (static_cast<size_t>(j) * s.d_v + c0) * s.d_k;
      std::vector<float> S(st, st + static_cast<size_t>(tile) * s.d_k);
      std::vector<float> D(kChunk * kScanTile), G(kChunk), E(kChunk);
      for (int chunk = 0; chunk < n_chunks; ++chunk) {
        const ChunkIn in = InputOf(p, chunk, j);
        const ChunkScratch sp = ScratchOf(scratch.data(), chunk, j, s.n_v_heads, s.d_k, s.d_v);
        for (int i = 0; i < in.len; ++i) G[i] = sp.G[i];
        for (int i = 0; i < in.len; ++i) E[i] = DecayToEnd(G.data(), in.len, i);
        for (int t = 0; t < in.len; ++t) {
          for (int c = 0; c < tile; ++c) {
            D[t * tile + c] = NewValueEntry(sp, S.data(), s.d_k, s.d_v, c0, t, c);
          }
        }
        for (int t = 0; t < in.len; ++t) {
          for (int c = 0; c < tile; ++c) {
            out[static_cast<size_t>(chunk * kChunk + t) * p.value_dim() + j * s.d_v + c0 + c] =
                OutputEntry(in, G.data(), sp.P, S.data(), D.data(), tile, t, c);
          }
        }
        std::vector<float> next(S.size());
        for (int c = 0; c < tile; ++c) {
          for (int r = 0; r < s.d_k; ++r) {
            next[c * s.d_k + r] = NextStateEntry(in, G.data(), E.data(), S.data(), D.data(), tile, r, c);
          }
        }
        S = next;
      }
      std::copy(S.begin(), S.end(), st);
    }
  }
}

// max |a - b| over max |b| (the scale of the values compared).
inline double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, std::fabs(double(b[i])));
    const double d = std::fabs(double(a[i]) - b[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst / std::max(scale, 1e-30);
}

}  // namespace moetier::cuda::delta_chunk::host
