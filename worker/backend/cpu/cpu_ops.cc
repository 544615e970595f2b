#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_kernels.h"
#include "base/expert_activation.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier::cpu {

void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

void RmsNormHeads(float* x, const float* w, int n_heads, int head_dim, float eps) {
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + static_cast<int64_t>(h) * head_dim;
    RmsNorm(xh, w, head_dim, eps, xh);
  }
}

void RopeAngles(int64_t pos, int n_rot, float freq_base, const RopeScaling& scaling,
                const float* freq_factors, float* cos_theta, float* sin_theta) {
  for (int i = 0; i < n_rot / 2; ++i) {
    const float factor = freq_factors != nullptr ? freq_factors[i] : 1.0f;
    const double theta =
        static_cast<double>(pos) * RopePairFrequency(i, n_rot, freq_base, scaling, factor);
    cos_theta[i] = static_cast<float>(std::cos(theta)) * scaling.magnitude;
    sin_theta[i] = static_cast<float>(std::sin(theta)) * scaling.magnitude;
  }
}

void RopeNeox(float* x, int n_heads, int head_dim, int n_rot, const float* cos_theta,
              const float* sin_theta) {
  const int half = n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float x0 = xh[i];
      const float x1 = xh[i + half];
      xh[i] = x0 * cos_theta[i] - x1 * sin_theta[i];
      xh[i + half] = x0 * sin_theta[i] + x1 * cos_theta[i];
    }
  }
}

void RopeAdjacentPairs(float* x, int n_heads, int head_dim, int n_rot, const float* cos_theta,
                       const float* sin_theta) {
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < n_rot / 2; ++i) {
      const float x0 = xh[2 * i];
      const float x1 = xh[2 * i + 1];
      xh[2 * i] = x0 * cos_theta[i] - x1 * sin_theta[i];
      xh[2 * i + 1] = x0 * sin_theta[i] + x1 * cos_theta[i];
    }
  }
}

void SoftmaxInPlace(float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::fmax(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void AddBiasRows(const float* bias, float* rows, int64_t n, int64_t width) {
  if (bias == nullptr) return;
  for (int64_t r = 0; r < n; ++r) {
    float* row = rows + r * width;
    for (int64_t i = 0; i < width; ++i) row[i] += bias[i];
  }
}

void SwigluOaiMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = SwigluOai(gate[i], up[i]);
}

void AttentionHeads(const float* q, const float* k_cache, const float* v_cache,
                    int64_t kv_head_stride, int64_t kv_stride, int64_t n_kv, int n_head,
                    int n_head_kv, int head_dim, float scale, int h_begin, int h_end, float* scores,
                    float* out, const float* sinks) {
  MOETIER_CPU_CHECK(n_head_kv > 0 && n_head % n_head_kv == 0,
                    "n_head must be a multiple of n_head_kv");
  MOETIER_CPU_CHECK(n_kv > 0, "attention needs at least one position");
  const int group = n_head / n_head_kv;
  // Consecutive query heads share a KV head: hand them over together.
  for (int h = h_begin; h < h_end;) {
    const int g = h / group;
    const int end = std::min(h_end, (g + 1) * group);
    const int64_t offset = static_cast<int64_t>(h) * head_dim;
    AttendF32(q + offset, end - h, k_cache + g * kv_head_stride, v_cache + g * kv_head_stride,
              kv_stride, n_kv, head_dim, scale, scores, out + offset,
              sinks != nullptr ? sinks + h : nullptr);
    h = end;
  }
}

void AttentionHeadsStored(const float* q, const KvRows& k, const KvRows& v, int64_t n_kv,
                          int n_head, int n_head_kv, int head_dim, float scale, int h_begin,
                          int h_end, const KvAttendScratch& scratch, float* out,
                          const float* sinks) {
  MOETIER_CPU_CHECK(n_head_kv > 0 && n_head % n_head_kv == 0,
                    "n_head must be a multiple of n_head_kv");
  MOETIER_CPU_CHECK(n_kv > 0, "attention needs at least one position");
  const int group = n_head / n_head_kv;
  const size_t query_bytes = ActRowBytes(k.type, head_dim);
  for (int h = h_begin; h < h_end;) {
    const int g = h / group;
    const int end = std::min(h_end, (g + 1) * group);
    const int n_q = end - h;
    const int64_t offset = static_cast<int64_t>(h) * head_dim;
    QuantizeActRows(k.type, q + offset, head_dim, head_dim, n_q, scratch.queries);
    // A head's scores are followed by its sink's logit, where it has one.
    const int64_t stride = sinks != nullptr ? n_kv + 1 : n_kv;
    MatMul(k.type, head_dim, k.data + g * k.head_stride, static_cast<size_t>(k.row_stride), 0, n_kv,
           scratch.queries, query_bytes, n_q, scratch.scores, stride);
    // The softmax of AttendF32 at the active level, on the scaled scores.
    for (int i = 0; i < n_q; ++i) {
      float* s = scratch.scores + i * stride;
      ScaleF32(scale, s, n_kv);
      if (sinks != nullptr) s[n_kv] = sinks[h + i];
      SoftmaxF32(s, stride);
      std::fill_n(out + offset + static_cast<int64_t>(i) * head_dim, head_dim, 0.0f);
    }
    AccumulateKvValues(v.type, v.data + g * v.head_stride, v.row_stride, n_kv, scratch.scores,
                       stride, n_q, head_dim, out + offset);
    h = end;
  }
}

void RouterTopK(const float* logits, int n_expert, int k, const RouterParams& router,
                const float* selection_bias, float* probs, int32_t* ids, float* weights) {
  MOETIER_CPU_CHECK(k >= 1 && k <= n_expert, "top-k out of range");
  switch (router.gating) {
    case RouterGating::kSigmoid:
      // ggml_sigmoid's formula, so that the CPU and llama.cpp choose alike.
      for (int e = 0; e < n_expert; ++e) probs[e] = 1.0f / (1.0f + std::exp(-logits[e]));
      break;
    case RouterGating::kSoftmax:
      for (int e = 0; e < n_expert; ++e) probs[e] = logits[e];
      SoftmaxInPlace(probs, n_expert);
      break;
    case RouterGating::kSoftmaxOfChosen:
      for (int e = 0; e < n_expert; ++e) probs[e] = logits[e];
      break;
  }
  auto selection = [&](int e) {
    return selection_bias != nullptr ? probs[e] + selection_bias[e] : probs[e];
  };
  for (int j = 0; j < k; ++j) {
    int best = -1;
    float best_value = 0.0f;
    for (int e = 0; e < n_expert; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || ids[i] == e;
      if (taken) continue;
      const float value = selection(e);
      if (best < 0 || value > best_value) {
        best = e;
        best_value = value;
      }
    }
    ids[j] = best;
  }
  RouterWeightsOf(probs, ids, k, router, weights);
}

void RouterWeightsOf(const float* probs, const int32_t* ids, int k, const RouterParams& router,
                     float* weights) {
  for (int j = 0; j < k; ++j) weights[j] = probs[ids[j]];
  if (router.gating == RouterGating::kSoftmaxOfChosen) SoftmaxInPlace(weights, k);
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) sum += weights[j];
  if (router.renormalize) {
    const float denom = std::fmax(sum, kMinRouterWeightSum);
    for (int j = 0; j < k; ++j) weights[j] /= denom;
  }
  if (router.weights_scale != 1.0f) {
    for (int j = 0; j < k; ++j) weights[j] *= router.weights_scale;
  }
}

void EmbeddingRow(TensorType type, const void* row, int64_t n, float* out) {
  DequantizeRow(type, row, out, n);
}

}  // namespace moetier::cpu
