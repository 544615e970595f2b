#include "blocks/cpu/deltanet_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/gated_delta_rule.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier {
namespace {

// Element-wise work below this many values runs on the calling thread.
constexpr int64_t kMinParallelElems = 32 * 1024;

float Silu(float z) { return z / (1.0f + std::exp(-z)); }
float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }
float Softplus(float z) { return z > 20.0f ? z : std::log1p(std::exp(z)); }

// x / max(||x||, eps) then * scale, in place (llama.cpp's l2_norm).
void L2Normalize(float* x, int n, float eps, float scale) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float f = static_cast<float>(1.0 / std::max(std::sqrt(sum), static_cast<double>(eps))) *
                  scale;
  for (int i = 0; i < n; ++i) x[i] *= f;
}

}  // namespace

CpuDeltaNetBlock::CpuDeltaNetBlock(const ModelHparams& hp, const std::vector<LayerWeights>& layers,
                                   CpuBatch& batch)
    : hp_(hp), dn_(hp.deltanet), layers_(layers), batch_(batch), runner_(batch.runner()) {
  bool any = false;
  for (const LayerWeights& l : layers) {
    if (l.mixer != MixerKind::kGatedDeltaNet) {
      decoded_.emplace_back();
      continue;
    }
    any = true;
    const DeltaNetWeights& d = l.deltanet;
    decoded_.push_back({DecodedValues(l.attn_norm), DecodedValues(d.conv),
                        DecodedValues(d.dt_bias), DecodedValues(d.a), DecodedValues(d.norm)});
  }
  if (!any) return;
  const size_t b = static_cast<size_t>(batch.max_batch());
  const size_t f = sizeof(float);
  m_ = AlignedBytes(b * dn_.conv_dim() * f);
  u_ = AlignedBytes(b * dn_.conv_dim() * f);
  z_ = AlignedBytes(b * dn_.value_dim() * f);
  beta_ = AlignedBytes(b * dn_.n_v_heads * f);
  alpha_ = AlignedBytes(b * dn_.n_v_heads * f);
  o_ = AlignedBytes(b * dn_.value_dim() * f);
  act_out_ = AlignedBytes(b * MaxActRowBytes(dn_.value_dim()));
  chunk_scratch_floats_ = static_cast<int64_t>(
      cpu::GatedDeltaChunkScratchFloats(kChunkTokens, dn_.d_k, dn_.d_v));
  chunk_scratch_ = AlignedBytes(static_cast<size_t>(runner_.pool().size()) *
                                static_cast<size_t>(chunk_scratch_floats_) * f);
}

CpuRecurrentLayer CpuDeltaNetBlock::NewStateLayer() const {
  const size_t f = sizeof(float);
  return {AlignedBytes(static_cast<size_t>(dn_.conv_kernel - 1) * dn_.conv_dim() * f),
          AlignedBytes(static_cast<size_t>(dn_.n_v_heads) * dn_.d_k * dn_.d_v * f)};
}

uint64_t CpuDeltaNetBlock::state_bytes_per_layer() const {
  return (static_cast<uint64_t>(dn_.conv_kernel - 1) * dn_.conv_dim() +
          static_cast<uint64_t>(dn_.n_v_heads) * dn_.d_k * dn_.d_v) *
         sizeof(float);
}

uint64_t CpuDeltaNetBlock::allocated_bytes() const {
  uint64_t bytes = 0;
  for (const AlignedBytes* a : {&m_, &u_, &z_, &beta_, &alpha_, &o_, &act_out_, &chunk_scratch_}) {
    bytes += a->size();
  }
  return bytes;
}

void CpuDeltaNetBlock::Convolve(const Decoded& d, CpuRecurrentLayer& state,
                                const CpuRowSpan& span) {
  const int K = dn_.conv_kernel;
  const int64_t conv_dim = dn_.conv_dim();
  const int n = span.n;
  const float* m = m_.floats() + span.row0 * conv_dim;
  float* u = u_.floats() + span.row0 * conv_dim;
  float* hist = state.conv.floats();  // [K - 1][conv_dim]
  auto channels = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float* w = d.conv.data() + c * K;  // taps, oldest first
      // Input j of the window: history row K-1+j for j < 0, else m row j.
      auto input = [&](int j) {
        return j < 0 ? hist[(K - 1 + j) * conv_dim + c] : m[j * conv_dim + c];
      };
      for (int t = 0; t < n; ++t) {
        float sum = 0.0f;
        for (int i = 0; i < K; ++i) sum += w[i] * input(t - (K - 1) + i);
        u[t * conv_dim + c] = Silu(sum);
      }
      // The history becomes the last K - 1 raw inputs (in increasing order,
      // so a row is read before it is overwritten).
      for (int r = 0; r < K - 1; ++r) hist[r * conv_dim + c] = input(n - (K - 1) + r);
    }
  };
  if (static_cast<int64_t>(n) * conv_dim * K >= kMinParallelElems) {
    runner_.pool().ParallelForRange(conv_dim, 64,
                                    [&](int64_t c0, int64_t c1, int) { channels(c0, c1); });
  } else {
    channels(0, conv_dim);
  }
}

void CpuDeltaNetBlock::Recur(CpuRecurrentLayer& state, const CpuRowSpan& span, int j0, int j1,
                             int thread) {
  const int64_t conv_dim = dn_.conv_dim();
  const int64_t key_dim = dn_.key_dim();
  const int64_t value_dim = dn_.value_dim();
  const int n = span.n;
  const float* u = u_.floats() + span.row0 * conv_dim;
  for (int j = j0; j < j1; ++j) {
    const int kh = dn_.k_head_of(j);
    cpu::GatedDeltaHead head;
    head.q = u + kh * dn_.d_k;
    head.k = u + key_dim + kh * dn_.d_k;
    head.qk_stride = conv_dim;
    head.v = u + 2 * key_dim + static_cast<int64_t>(j) * dn_.d_v;
    head.v_stride = conv_dim;
    head.log_decay = alpha_.floats() + span.row0 * dn_.n_v_heads + j;
    head.beta = beta_.floats() + span.row0 * dn_.n_v_heads + j;
    head.gate_stride = dn_.n_v_heads;
    head.out = o_.floats() + span.row0 * value_dim + static_cast<int64_t>(j) * dn_.d_v;
    head.out_stride = value_dim;
    head.state = state.delta.floats() + static_cast<int64_t>(j) * dn_.d_k * dn_.d_v;
    head.d_k = dn_.d_k;
    head.d_v = dn_.d_v;
    if (n >= kChunkedMinTokens) {
      cpu::GatedDeltaChunked(head, n, kChunkTokens, chunk_scratch_.floats() + thread * chunk_scratch_floats_);
    } else {
      cpu::GatedDeltaTokens(head, n);
    }
  }
}

void CpuDeltaNetBlock::Forward(int layer, std::span<const CpuRowSpan> spans,
                               std::span<CpuRecurrentLayer* const> state) {
  const LayerWeights& lw = layers_[static_cast<size_t>(layer)];
  const DeltaNetWeights& w = lw.deltanet;
  const Decoded& d = decoded_[static_cast<size_t>(layer)];
  const int64_t n_embd = hp_.n_embd;
  const int64_t conv_dim = dn_.conv_dim();
  const int64_t key_dim = dn_.key_dim();
  const int64_t value_dim = dn_.value_dim();
  const int h_v = dn_.n_v_heads;
  MOETIER_CPU_CHECK(state.size() == spans.size() && !spans.empty(), "a state per span");
  const int n = spans.back().row0 + spans.back().n;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].pos0 != 0) continue;
    std::memset(state[i]->conv.data(), 0, state[i]->conv.size());
    std::memset(state[i]->delta.data(), 0, state[i]->delta.size());
  }
  batch_.NormRows(0, n, d.attn_norm.data(), hp_.rms_eps);

  // The four input projections read one prepared input.
  MatJob* jobs = runner_.jobs();
  const WeightRef* mats[4] = {&w.qkv, &w.z, &w.beta, &w.alpha};
  float* outs[4] = {m_.floats(), z_.floats(), beta_.floats(), alpha_.floats()};
  for (int i = 0; i < 4; ++i) {
    jobs[i] = MakeMatJob(*mats[i], mats[i]->data, batch_.PrepareInput(n, mats[i]->type), n, outs[i]);
  }
  runner_.Run(jobs, 4, CpuPhase::kDeltaNetProjections);

  const double start = CpuMatRunner::Now();
  for (size_t i = 0; i < spans.size(); ++i) Convolve(d, *state[i], spans[i]);
  // q and k L2-normed per key head (q also scaled), the gates per value head.
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dn_.d_k));
  for (int t = 0; t < n; ++t) {
    float* row = u_.floats() + t * conv_dim;
    for (int h = 0; h < dn_.n_k_heads; ++h) {
      L2Normalize(row + h * dn_.d_k, dn_.d_k, hp_.rms_eps, q_scale);
      L2Normalize(row + key_dim + h * dn_.d_k, dn_.d_k, hp_.rms_eps, 1.0f);
    }
    for (int j = 0; j < h_v; ++j) {
      float& beta = beta_.floats()[t * h_v + j];
      beta = Sigmoid(beta);
      float& alpha = alpha_.floats()[t * h_v + j];
      alpha = d.a[j] * Softplus(alpha + d.dt_bias[j]);  // g, the log of the decay
    }
  }
  // One task per span and value head.
  const int64_t tasks = static_cast<int64_t>(spans.size()) * h_v;
  if (static_cast<int64_t>(n) * h_v * dn_.d_k * dn_.d_v >= kMinParallelElems && tasks > 1) {
    runner_.pool().ParallelFor(tasks, [&](int64_t task, int thread) {
      const size_t i = static_cast<size_t>(task / h_v);
      const int j = static_cast<int>(task % h_v);
      Recur(*state[i], spans[i], j, j + 1, thread);
    });
  } else {
    for (size_t i = 0; i < spans.size(); ++i) Recur(*state[i], spans[i], 0, h_v, 0);
  }
  // Gated RMSNorm of each head's output with silu(z).
  for (int t = 0; t < n; ++t) {
    for (int j = 0; j < h_v; ++j) {
      float* o = o_.floats() + t * value_dim + j * dn_.d_v;
      const float* z = z_.floats() + t * value_dim + j * dn_.d_v;
      cpu::RmsNorm(o, d.norm.data(), dn_.d_v, hp_.rms_eps, o);
      for (int c = 0; c < dn_.d_v; ++c) o[c] *= Silu(z[c]);
    }
  }
  runner_.AddPhaseTime(CpuPhase::kDeltaNet, CpuMatRunner::Now() - start);

  const uint8_t* act = runner_.PrepareAct(act_out_, o_.floats(), n, value_dim, w.out.type);
  float* sub = batch_.row_scratch();
  jobs[0] = MakeMatJob(w.out, w.out.data, act, n, sub);
  runner_.Run(jobs, 1, CpuPhase::kDeltaNetProjections);
  float* x = batch_.x();
  for (int64_t i = 0; i < n * n_embd; ++i) x[i] += sub[i];
}

}  // namespace moetier
