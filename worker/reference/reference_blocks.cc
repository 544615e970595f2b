#include "reference/reference_blocks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier::reference {
namespace {

// The router's renormalization floor, as llama.cpp's build_moe_ffn clamps it.
constexpr float kMinExpertWeightSum = 6.103515625e-5f;

// Rotates the pair (a, b) of one head by the angle of pair index i.
void RotatePair(float& a, float& b, int64_t i, int n_rot, int pos, double base) {
  const double theta =
      pos * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
  const double c = std::cos(theta);
  const double s = std::sin(theta);
  const double x0 = a;
  const double x1 = b;
  a = static_cast<float>(x0 * c - x1 * s);
  b = static_cast<float>(x0 * s + x1 * c);
}

// Rope over the first n_rot dims of one head: NEOX pairs (i, i + n_rot/2),
// NORM pairs (2i, 2i + 1).
void Rope(float* head, RopeStyle style, int n_rot, int pos, double base) {
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    if (style == RopeStyle::kNeox) {
      RotatePair(head[i], head[i + n_rot / 2], i, n_rot, pos, base);
    } else {
      RotatePair(head[2 * i], head[2 * i + 1], i, n_rot, pos, base);
    }
  }
}

float Silu(float z) { return z / (1.0f + std::exp(-z)); }

uint64_t Bytes(const DenseMatrix& m) { return m.values.size() * sizeof(float); }

}  // namespace

DenseMatrix DequantizeMatrix(const WeightRef& ref, int64_t expert) {
  MOETIER_CHECK(expert >= 0 && expert < ref.ne[2]);
  DenseMatrix m;
  m.rows = ref.ne[1];
  m.cols = ref.ne[0];
  m.values.resize(static_cast<size_t>(m.rows * m.cols));
  const uint8_t* base = ref.expert(expert);
  for (int64_t r = 0; r < m.rows; ++r) {
    DequantizeRow(ref.type, base + r * ref.row_bytes, m.values.data() + r * m.cols, m.cols);
  }
  return m;
}

std::vector<float> DequantizeVector(const WeightRef& ref) {
  if (!ref.present()) return {};
  MOETIER_CHECK(ref.ne[1] == 1 && ref.ne[2] == 1);
  std::vector<float> out(ref.ne[0]);
  DequantizeRow(ref.type, ref.data, out.data(), ref.ne[0]);
  return out;
}

void MatVec(const DenseMatrix& w, const float* x, float* y) {
  for (int64_t r = 0; r < w.rows; ++r) {
    const float* row = w.row(r);
    double sum = 0.0;
    for (int64_t c = 0; c < w.cols; ++c) sum += static_cast<double>(row[c]) * x[c];
    y[r] = static_cast<float>(sum);
  }
}

void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(sum / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * scale) * w[i];
}

void Softmax(float* v, int64_t n) {
  const float max = *std::max_element(v, v + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    v[i] = std::exp(v[i] - max);
    sum += v[i];
  }
  const double inv = 1.0 / sum;
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(v[i] * inv);
}

// ------------------------------------------------------------------ attention

Attention::Attention(const ModelHparams& hp, const LayerWeights& layer, int max_ctx)
    : hp_(hp),
      wq_(DequantizeMatrix(layer.attn.q)),
      wk_(DequantizeMatrix(layer.attn.k)),
      wv_(DequantizeMatrix(layer.attn.v)),
      wo_(DequantizeMatrix(layer.attn.output)),
      q_norm_(DequantizeVector(layer.attn.q_norm)),
      k_norm_(DequantizeVector(layer.attn.k_norm)) {
  const size_t n_q = static_cast<size_t>(hp.n_head) * hp.head_dim;
  const size_t n_kv = static_cast<size_t>(hp.n_head_kv) * hp.head_dim;
  k_cache_.assign(static_cast<size_t>(max_ctx) * n_kv, 0.0f);
  v_cache_.assign(static_cast<size_t>(max_ctx) * n_kv, 0.0f);
  q_.resize(n_q);
  k_.resize(n_kv);
  v_.resize(n_kv);
  attn_out_.resize(n_q);
  scores_.resize(static_cast<size_t>(max_ctx));
}

uint64_t Attention::weight_bytes() const {
  return Bytes(wq_) + Bytes(wk_) + Bytes(wv_) + Bytes(wo_) +
         (q_norm_.size() + k_norm_.size()) * sizeof(float);
}

void Attention::Forward(const float* xn, int pos, float* out) {
  const int64_t head_dim = hp_.head_dim;
  const int64_t n_q = static_cast<int64_t>(hp_.n_head) * head_dim;
  const int64_t n_kv = static_cast<int64_t>(hp_.n_head_kv) * head_dim;
  MatVec(wq_, xn, q_.data());
  MatVec(wk_, xn, k_.data());
  MatVec(wv_, xn, v_.data());

  // The q/k norm before rope; norms are in place (RmsNorm reads each x[i]
  // before it writes y[i]).
  if (hp_.qk_norm == QkNorm::kWhole) {
    RmsNorm(q_.data(), q_norm_.data(), n_q, hp_.rms_eps, q_.data());
    RmsNorm(k_.data(), k_norm_.data(), n_kv, hp_.rms_eps, k_.data());
  }
  for (int h = 0; h < hp_.n_head; ++h) {
    float* head = q_.data() + h * head_dim;
    if (hp_.qk_norm == QkNorm::kPerHead) {
      RmsNorm(head, q_norm_.data(), head_dim, hp_.rms_eps, head);
    }
    Rope(head, hp_.rope_style, hp_.n_rot, pos, hp_.rope_freq_base);
  }
  for (int h = 0; h < hp_.n_head_kv; ++h) {
    float* head = k_.data() + h * head_dim;
    if (hp_.qk_norm == QkNorm::kPerHead) {
      RmsNorm(head, k_norm_.data(), head_dim, hp_.rms_eps, head);
    }
    Rope(head, hp_.rope_style, hp_.n_rot, pos, hp_.rope_freq_base);
  }
  std::copy(k_.begin(), k_.end(), k_cache_.begin() + pos * n_kv);
  std::copy(v_.begin(), v_.end(), v_cache_.begin() + pos * n_kv);

  const int group = hp_.n_head / hp_.n_head_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  for (int h = 0; h < hp_.n_head; ++h) {
    const int kv_head = h / group;
    const float* q = q_.data() + h * head_dim;
    for (int t = 0; t <= pos; ++t) {
      const float* k = k_cache_.data() + t * n_kv + kv_head * head_dim;
      double dot = 0.0;
      for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(q[d]) * k[d];
      scores_[t] = static_cast<float>(dot * scale);
    }
    Softmax(scores_.data(), pos + 1);
    float* o = attn_out_.data() + h * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) {
      double sum = 0.0;
      for (int t = 0; t <= pos; ++t) {
        sum += static_cast<double>(scores_[t]) *
               v_cache_[static_cast<size_t>(t * n_kv + kv_head * head_dim + d)];
      }
      o[d] = static_cast<float>(sum);
    }
  }
  MatVec(wo_, attn_out_.data(), out);
}

// ------------------------------------------------------------------ MoE

Moe::Moe(const ModelHparams& hp, const LayerWeights& layer)
    : hp_(hp), router_(DequantizeMatrix(layer.moe.router)) {
  for (int e = 0; e < hp.n_expert; ++e) {
    gate_.push_back(DequantizeMatrix(layer.moe.gate_exps, e));
    up_.push_back(DequantizeMatrix(layer.moe.up_exps, e));
    down_.push_back(DequantizeMatrix(layer.moe.down_exps, e));
  }
  logits_.resize(hp.n_expert);
  gate_act_.resize(hp.n_ff_exp);
  up_act_.resize(hp.n_ff_exp);
  expert_out_.resize(hp.n_embd);
  order_.resize(hp.n_expert);
}

uint64_t Moe::weight_bytes() const {
  uint64_t bytes = Bytes(router_);
  for (size_t e = 0; e < gate_.size(); ++e) bytes += Bytes(gate_[e]) + Bytes(up_[e]) + Bytes(down_[e]);
  return bytes;
}

void Moe::Forward(const float* xn, float* out) {
  MatVec(router_, xn, logits_.data());
  Softmax(logits_.data(), hp_.n_expert);
  const std::vector<float>& probs = logits_;
  std::iota(order_.begin(), order_.end(), 0);
  // Descending probability; equal probabilities keep the lower index first.
  std::sort(order_.begin(), order_.end(),
            [&](int a, int b) { return probs[a] != probs[b] ? probs[a] > probs[b] : a < b; });
  const int k = hp_.n_expert_used;
  float norm = 1.0f;
  if (hp_.router.renormalize) {
    float weight_sum = 0.0f;
    for (int i = 0; i < k; ++i) weight_sum += probs[order_[i]];
    norm = std::max(weight_sum, kMinExpertWeightSum);
  }
  std::fill(out, out + hp_.n_embd, 0.0f);
  for (int i = 0; i < k; ++i) {
    const int e = order_[i];
    const float w = probs[e] / norm;
    MatVec(gate_[e], xn, gate_act_.data());
    MatVec(up_[e], xn, up_act_.data());
    for (int j = 0; j < hp_.n_ff_exp; ++j) gate_act_[j] = Silu(gate_act_[j]) * up_act_[j];
    MatVec(down_[e], gate_act_.data(), expert_out_.data());
    for (int64_t j = 0; j < hp_.n_embd; ++j) out[j] += w * expert_out_[j];
  }
}

}  // namespace moetier::reference
