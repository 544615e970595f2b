#include "reference/reference_blocks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier::reference {
namespace {

// Rotates the pair (a, b) of one head by the angle of pair index i, with
// the file's rope scaling (whose magnitude applies at position 0 too).
void RotatePair(float& a, float& b, int i, int pos, const ModelHparams& hp) {
  const float factor =
      hp.rope_freq_factors.empty() ? 1.0f : hp.rope_freq_factors[static_cast<size_t>(i)];
  const double theta =
      pos * RopePairFrequency(i, hp.n_rot, hp.rope_freq_base, hp.rope_scaling, factor);
  const double c = std::cos(theta) * hp.rope_scaling.magnitude;
  const double s = std::sin(theta) * hp.rope_scaling.magnitude;
  const double x0 = a;
  const double x1 = b;
  a = static_cast<float>(x0 * c - x1 * s);
  b = static_cast<float>(x0 * s + x1 * c);
}

// Rope over the first n_rot dims of one head: NEOX pairs (i, i + n_rot/2),
// NORM pairs (2i, 2i + 1). Pairs the hyperparameters hold at position 0
// (multi-section rope) rotate by 0.
void Rope(float* head, const ModelHparams& hp, int pos) {
  const int n_rot = hp.n_rot;
  for (int i = 0; i < n_rot / 2; ++i) {
    const bool moves = hp.rope_pair_uses_position.empty() ||
                       hp.rope_pair_uses_position[static_cast<size_t>(i)] != 0;
    const int p = moves ? pos : 0;
    if (hp.rope_style == RopeStyle::kNeox) {
      RotatePair(head[i], head[i + n_rot / 2], i, p, hp);
    } else {
      RotatePair(head[2 * i], head[2 * i + 1], i, p, hp);
    }
  }
}

float Silu(float z) { return z / (1.0f + std::exp(-z)); }
double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }
double Softplus(double z) { return z > 20.0 ? z : std::log1p(std::exp(z)); }

// x / max(||x||, eps) in place (llama.cpp's l2_norm).
void L2Normalize(float* x, int64_t n, double eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::max(std::sqrt(sum), eps);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * scale);
}

uint64_t Bytes(const DenseMatrix& m) { return m.values.size() * sizeof(float); }

// y += bias, one value per row of y; an empty bias adds nothing.
void AddBias(const std::vector<float>& bias, float* y) {
  for (size_t i = 0; i < bias.size(); ++i) y[i] += bias[i];
}

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
      gated_(layer.mixer == MixerKind::kGatedAttention),
      window_(layer.attention_window),
      wq_(DequantizeMatrix(layer.attn.q)),
      wk_(DequantizeMatrix(layer.attn.k)),
      wv_(DequantizeMatrix(layer.attn.v)),
      wo_(DequantizeMatrix(layer.attn.output)),
      q_norm_(DequantizeVector(layer.attn.q_norm)),
      k_norm_(DequantizeVector(layer.attn.k_norm)),
      q_bias_(DequantizeVector(layer.attn.q_bias)),
      k_bias_(DequantizeVector(layer.attn.k_bias)),
      v_bias_(DequantizeVector(layer.attn.v_bias)),
      output_bias_(DequantizeVector(layer.attn.output_bias)),
      sinks_(DequantizeVector(layer.attn.sinks)) {
  const size_t n_q = static_cast<size_t>(hp.n_head) * hp.head_dim;
  const size_t n_kv = static_cast<size_t>(hp.n_head_kv) * hp.head_dim;
  k_cache_.assign(static_cast<size_t>(max_ctx) * n_kv, 0.0f);
  v_cache_.assign(static_cast<size_t>(max_ctx) * n_kv, 0.0f);
  q_.resize(n_q);
  gate_.resize(n_q);
  projected_.resize(static_cast<size_t>(wq_.rows));
  k_.resize(n_kv);
  v_.resize(n_kv);
  attn_out_.resize(n_q);
  scores_.resize(static_cast<size_t>(max_ctx) + 1);
}

uint64_t Attention::weight_bytes() const {
  return Bytes(wq_) + Bytes(wk_) + Bytes(wv_) + Bytes(wo_) +
         (q_norm_.size() + k_norm_.size() + q_bias_.size() + k_bias_.size() + v_bias_.size() +
          output_bias_.size() + sinks_.size()) *
             sizeof(float);
}

void Attention::Forward(const float* xn, int pos, float* out) {
  const int64_t head_dim = hp_.head_dim;
  const int64_t n_q = static_cast<int64_t>(hp_.n_head) * head_dim;
  const int64_t n_kv = static_cast<int64_t>(hp_.n_head_kv) * head_dim;
  if (gated_) {
    // Per head: head_dim q values, then head_dim gate values.
    MatVec(wq_, xn, projected_.data());
    AddBias(q_bias_, projected_.data());
    for (int h = 0; h < hp_.n_head; ++h) {
      const float* src = projected_.data() + 2 * h * head_dim;
      std::copy_n(src, head_dim, q_.data() + h * head_dim);
      std::copy_n(src + head_dim, head_dim, gate_.data() + h * head_dim);
    }
  } else {
    MatVec(wq_, xn, q_.data());
    AddBias(q_bias_, q_.data());
  }
  MatVec(wk_, xn, k_.data());
  AddBias(k_bias_, k_.data());
  MatVec(wv_, xn, v_.data());
  AddBias(v_bias_, v_.data());

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
    Rope(head, hp_, pos);
  }
  for (int h = 0; h < hp_.n_head_kv; ++h) {
    float* head = k_.data() + h * head_dim;
    if (hp_.qk_norm == QkNorm::kPerHead) {
      RmsNorm(head, k_norm_.data(), head_dim, hp_.rms_eps, head);
    }
    Rope(head, hp_, pos);
  }
  std::copy(k_.begin(), k_.end(), k_cache_.begin() + pos * n_kv);
  std::copy(v_.begin(), v_.end(), v_cache_.begin() + pos * n_kv);

  const int group = hp_.n_head / hp_.n_head_kv;
  const double scale = hp_.attention_scale > 0.0f
                           ? static_cast<double>(hp_.attention_scale)
                           : 1.0 / std::sqrt(static_cast<double>(head_dim));
  // Positions first..pos: all, or the layer's window.
  const int first = window_ > 0 ? std::max(0, pos - window_ + 1) : 0;
  const int n_pos = pos + 1 - first;
  for (int h = 0; h < hp_.n_head; ++h) {
    const int kv_head = h / group;
    const float* q = q_.data() + h * head_dim;
    for (int t = first; t <= pos; ++t) {
      const float* k = k_cache_.data() + t * n_kv + kv_head * head_dim;
      double dot = 0.0;
      for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(q[d]) * k[d];
      scores_[t - first] = static_cast<float>(dot * scale);
    }
    // A sink is one more logit in the softmax, whose share goes nowhere.
    if (!sinks_.empty()) scores_[n_pos] = sinks_[h];
    Softmax(scores_.data(), sinks_.empty() ? n_pos : n_pos + 1);
    float* o = attn_out_.data() + h * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) {
      double sum = 0.0;
      for (int t = first; t <= pos; ++t) {
        sum += static_cast<double>(scores_[t - first]) *
               v_cache_[static_cast<size_t>(t * n_kv + kv_head * head_dim + d)];
      }
      o[d] = static_cast<float>(sum);
    }
  }
  if (gated_) {
    for (int64_t i = 0; i < n_q; ++i) {
      attn_out_[i] = static_cast<float>(attn_out_[i] * Sigmoid(gate_[i]));
    }
  }
  MatVec(wo_, attn_out_.data(), out);
  AddBias(output_bias_, out);
}

// ------------------------------------------------------------------ Gated DeltaNet

GatedDeltaNet::GatedDeltaNet(const ModelHparams& hp, const LayerWeights& layer)
    : hp_(hp),
      dn_(hp.deltanet),
      qkv_(DequantizeMatrix(layer.deltanet.qkv)),
      z_(DequantizeMatrix(layer.deltanet.z)),
      beta_(DequantizeMatrix(layer.deltanet.beta)),
      alpha_(DequantizeMatrix(layer.deltanet.alpha)),
      out_(DequantizeMatrix(layer.deltanet.out)),
      conv_(DequantizeMatrix(layer.deltanet.conv)),
      dt_bias_(DequantizeVector(layer.deltanet.dt_bias)),
      a_(DequantizeVector(layer.deltanet.a)),
      norm_(DequantizeVector(layer.deltanet.norm)) {
  const size_t conv_dim = static_cast<size_t>(dn_.conv_dim());
  conv_state_.assign(static_cast<size_t>(dn_.conv_kernel - 1) * conv_dim, 0.0f);
  state_.assign(static_cast<size_t>(dn_.n_v_heads) * dn_.d_k * dn_.d_v, 0.0);
  m_.resize(conv_dim);
  u_.resize(conv_dim);
  z_act_.resize(static_cast<size_t>(dn_.value_dim()));
  o_.resize(static_cast<size_t>(dn_.value_dim()));
  n_.resize(static_cast<size_t>(dn_.value_dim()));
  b_act_.resize(static_cast<size_t>(dn_.n_v_heads));
  a_act_.resize(static_cast<size_t>(dn_.n_v_heads));
}

uint64_t GatedDeltaNet::weight_bytes() const {
  return Bytes(qkv_) + Bytes(z_) + Bytes(beta_) + Bytes(alpha_) + Bytes(out_) + Bytes(conv_) +
         (dt_bias_.size() + a_.size() + norm_.size()) * sizeof(float);
}

uint64_t GatedDeltaNet::state_bytes() const {
  return conv_state_.size() * sizeof(float) + state_.size() * sizeof(double);
}

void GatedDeltaNet::SaveState() {
  saved_conv_state_ = conv_state_;
  saved_state_ = state_;
}

void GatedDeltaNet::RestoreState() {
  conv_state_ = saved_conv_state_;
  state_ = saved_state_;
}

void GatedDeltaNet::Forward(const float* xn, int pos, float* out) {
  if (pos == 0) {
    std::fill(conv_state_.begin(), conv_state_.end(), 0.0f);
    std::fill(state_.begin(), state_.end(), 0.0);
  }
  const int K = dn_.conv_kernel;
  const int d_k = dn_.d_k;
  const int d_v = dn_.d_v;
  const int64_t conv_dim = dn_.conv_dim();
  const int64_t key_dim = dn_.key_dim();
  MatVec(qkv_, xn, m_.data());
  MatVec(z_, xn, z_act_.data());
  MatVec(beta_, xn, b_act_.data());
  MatVec(alpha_, xn, a_act_.data());

  // Causal depthwise conv over the last K inputs (the current one last),
  // then SiLU; the state keeps the last K - 1 raw inputs.
  for (int64_t c = 0; c < conv_dim; ++c) {
    const float* w = conv_.row(c);
    double sum = static_cast<double>(w[K - 1]) * m_[c];
    for (int i = 0; i < K - 1; ++i) {
      sum += static_cast<double>(w[i]) * conv_state_[static_cast<size_t>(i) * conv_dim + c];
    }
    u_[c] = Silu(static_cast<float>(sum));
  }
  if (K > 1) {
    std::copy(conv_state_.begin() + conv_dim, conv_state_.end(), conv_state_.begin());
    std::copy(m_.begin(), m_.end(), conv_state_.end() - conv_dim);
  }

  // q and k L2-normed per head, q scaled by 1/sqrt(d_k).
  float* q = u_.data();
  float* k = u_.data() + key_dim;
  const float* v = u_.data() + 2 * key_dim;
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(d_k));
  for (int h = 0; h < dn_.n_k_heads; ++h) {
    L2Normalize(q + h * d_k, d_k, hp_.rms_eps);
    L2Normalize(k + h * d_k, d_k, hp_.rms_eps);
    for (int i = 0; i < d_k; ++i) q[h * d_k + i] = static_cast<float>(q[h * d_k + i] * q_scale);
  }

  // The gated delta rule per value head.
  for (int j = 0; j < dn_.n_v_heads; ++j) {
    const int kh = dn_.k_head_of(j);
    const float* qh = q + kh * d_k;
    const float* kv_k = k + kh * d_k;
    const float* vj = v + j * d_v;
    const double beta = Sigmoid(b_act_[j]);
    const double g = a_[j] * Softplus(static_cast<double>(a_act_[j]) + dt_bias_[j]);
    const double decay = std::exp(g);
    double* S = state_.data() + static_cast<size_t>(j) * d_k * d_v;  // [d_k][d_v]
    for (int i = 0; i < d_k * d_v; ++i) S[i] *= decay;
    for (int c = 0; c < d_v; ++c) {
      double kv = 0.0;
      for (int r = 0; r < d_k; ++r) kv += S[r * d_v + c] * kv_k[r];
      const double delta = beta * (vj[c] - kv);
      for (int r = 0; r < d_k; ++r) S[r * d_v + c] += kv_k[r] * delta;
    }
    float* oj = o_.data() + j * d_v;
    for (int c = 0; c < d_v; ++c) {
      double sum = 0.0;
      for (int r = 0; r < d_k; ++r) sum += S[r * d_v + c] * qh[r];
      oj[c] = static_cast<float>(sum);
    }
    // Gated RMSNorm: RMSNorm(o_j) * ssm_norm * silu(z_j).
    RmsNorm(oj, norm_.data(), d_v, hp_.rms_eps, n_.data() + j * d_v);
    for (int c = 0; c < d_v; ++c) n_[j * d_v + c] *= Silu(z_act_[j * d_v + c]);
  }
  MatVec(out_, n_.data(), out);
}

// ------------------------------------------------------------------ FFN

SwigluFfn::SwigluFfn(const WeightRef& gate, const WeightRef& up, const WeightRef& down)
    : gate_(DequantizeMatrix(gate)),
      up_(DequantizeMatrix(up)),
      down_(DequantizeMatrix(down)),
      gate_act_(static_cast<size_t>(gate_.rows)),
      up_act_(static_cast<size_t>(up_.rows)) {}

uint64_t SwigluFfn::weight_bytes() const { return Bytes(gate_) + Bytes(up_) + Bytes(down_); }

void SwigluFfn::Forward(const float* x, float* out) {
  MatVec(gate_, x, gate_act_.data());
  MatVec(up_, x, up_act_.data());
  for (size_t j = 0; j < gate_act_.size(); ++j) gate_act_[j] = Silu(gate_act_[j]) * up_act_[j];
  MatVec(down_, gate_act_.data(), out);
}

// ------------------------------------------------------------------ MoE

Moe::Moe(const ModelHparams& hp, const LayerWeights& layer)
    : hp_(hp),
      router_(DequantizeMatrix(layer.moe.router)),
      selection_bias_(DequantizeVector(layer.moe.selection_bias)),
      router_bias_(DequantizeVector(layer.moe.router_bias)) {
  if (HasSharedExpert(layer.ffn)) {
    shared_ = std::make_unique<SwigluFfn>(layer.moe.shared_gate, layer.moe.shared_up,
                                          layer.moe.shared_down);
    shared_gate_inp_ = DequantizeVector(layer.moe.shared_gate_inp);
  }
  for (int e = 0; e < hp.n_expert; ++e) {
    gate_.push_back(DequantizeMatrix(layer.moe.gate_exps, e));
    up_.push_back(DequantizeMatrix(layer.moe.up_exps, e));
    down_.push_back(DequantizeMatrix(layer.moe.down_exps, e));
  }
  // One bias row per expert.
  for (auto [ref, out] : {std::pair{&layer.moe.gate_exps_bias, &gate_bias_},
                          std::pair{&layer.moe.up_exps_bias, &up_bias_},
                          std::pair{&layer.moe.down_exps_bias, &down_bias_}}) {
    if (!ref->present()) continue;
    const DenseMatrix rows = DequantizeMatrix(*ref);
    for (int64_t e = 0; e < rows.rows; ++e) out->emplace_back(rows.row(e), rows.row(e) + rows.cols);
  }
  probs_.resize(hp.n_expert);
  selection_.resize(hp.n_expert);
  weights_.resize(hp.n_expert_used);
  gate_act_.resize(hp.n_ff_exp);
  up_act_.resize(hp.n_ff_exp);
  expert_out_.resize(hp.n_embd);
  order_.resize(hp.n_expert);
}

uint64_t Moe::weight_bytes() const {
  uint64_t bytes =
      Bytes(router_) + (shared_ != nullptr ? shared_->weight_bytes() : 0) +
      (shared_gate_inp_.size() + selection_bias_.size() + router_bias_.size()) * sizeof(float);
  for (const auto* biases : {&gate_bias_, &up_bias_, &down_bias_}) {
    for (const std::vector<float>& b : *biases) bytes += b.size() * sizeof(float);
  }
  for (size_t e = 0; e < gate_.size(); ++e) bytes += Bytes(gate_[e]) + Bytes(up_[e]) + Bytes(down_[e]);
  return bytes;
}

void Moe::Forward(const float* xn, float* out) {
  const RouterParams& router = hp_.router;
  MatVec(router_, xn, probs_.data());
  AddBias(router_bias_, probs_.data());
  switch (router.gating) {
    case RouterGating::kSigmoid:
      for (float& p : probs_) p = static_cast<float>(Sigmoid(p));
      break;
    case RouterGating::kSoftmax:
      Softmax(probs_.data(), hp_.n_expert);
      break;
    case RouterGating::kSoftmaxOfChosen:  // the logits choose; the weights come below
      break;
  }
  // The bias only chooses; the weights stay the unbiased probabilities.
  selection_ = probs_;
  for (size_t e = 0; e < selection_bias_.size(); ++e) selection_[e] += selection_bias_[e];
  std::iota(order_.begin(), order_.end(), 0);
  // Descending; equal values keep the lower index first.
  std::sort(order_.begin(), order_.end(), [&](int a, int b) {
    return selection_[a] != selection_[b] ? selection_[a] > selection_[b] : a < b;
  });
  const int k = hp_.n_expert_used;
  std::vector<float>& weights = weights_;
  for (int i = 0; i < k; ++i) weights[i] = probs_[order_[i]];
  if (router.gating == RouterGating::kSoftmaxOfChosen) Softmax(weights.data(), k);
  float norm = 1.0f;
  if (router.renormalize) {
    float weight_sum = 0.0f;
    for (int i = 0; i < k; ++i) weight_sum += weights[i];
    norm = std::max(weight_sum, kMinRouterWeightSum);
  }
  std::fill(out, out + hp_.n_embd, 0.0f);
  for (int i = 0; i < k; ++i) {
    const int e = order_[i];
    const float w = weights[i] / norm * router.weights_scale;
    MatVec(gate_[e], xn, gate_act_.data());
    MatVec(up_[e], xn, up_act_.data());
    if (!gate_bias_.empty()) AddBias(gate_bias_[e], gate_act_.data());
    if (!up_bias_.empty()) AddBias(up_bias_[e], up_act_.data());
    for (int j = 0; j < hp_.n_ff_exp; ++j) {
      gate_act_[j] = hp_.expert_activation == ExpertActivation::kSwigluOai
                         ? SwigluOai(gate_act_[j], up_act_[j])
                         : Silu(gate_act_[j]) * up_act_[j];
    }
    MatVec(down_[e], gate_act_.data(), expert_out_.data());
    if (!down_bias_.empty()) AddBias(down_bias_[e], expert_out_.data());
    for (int64_t j = 0; j < hp_.n_embd; ++j) out[j] += w * expert_out_[j];
  }
  if (shared_ == nullptr) return;
  // The shared expert, gated by sigmoid(w . x) where it has a gate.
  float gate = 1.0f;
  if (!shared_gate_inp_.empty()) {
    double logit = 0.0;
    for (int64_t j = 0; j < hp_.n_embd; ++j)
      logit += static_cast<double>(shared_gate_inp_[j]) * xn[j];
    gate = static_cast<float>(Sigmoid(logit));
  }
  shared_->Forward(xn, expert_out_.data());
  for (int64_t j = 0; j < hp_.n_embd; ++j) out[j] += gate * expert_out_[j];
}

}  // namespace moetier::reference
