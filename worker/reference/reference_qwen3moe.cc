#include "base/check.h"
#include "reference/reference_qwen3moe.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "absl/strings/str_format.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier {
namespace {


// The router's renormalization floor, as llama.cpp's build_moe_ffn clamps it.
constexpr float kMinExpertWeightSum = 6.103515625e-5f;

std::vector<float> DequantizeVector(const WeightRef& ref) {
  MOETIER_CHECK(ref.ne[1] == 1 && ref.ne[2] == 1);
  std::vector<float> out(ref.ne[0]);
  DequantizeRow(ref.type, ref.data, out.data(), ref.ne[0]);
  return out;
}

// y = W·x, accumulated in double.
void MatVec(const DenseMatrix& w, const float* x, float* y) {
  for (int64_t r = 0; r < w.rows; ++r) {
    const float* row = w.row(r);
    double sum = 0.0;
    for (int64_t c = 0; c < w.cols; ++c) sum += static_cast<double>(row[c]) * x[c];
    y[r] = static_cast<float>(sum);
  }
}

// y = x / sqrt(mean(x²) + eps) · w (ggml_rms_norm then the weight).
void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(sum / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * scale) * w[i];
}

// NEOX rope over one head: pairs (i, i + head_dim/2).
void RopeNeox(float* head, int64_t head_dim, int pos, double base) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double theta =
        pos * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double c = std::cos(theta);
    const double s = std::sin(theta);
    const double x0 = head[i];
    const double x1 = head[i + half];
    head[i] = static_cast<float>(x0 * c - x1 * s);
    head[i + half] = static_cast<float>(x0 * s + x1 * c);
  }
}

// In-place softmax of n values; the sum runs in double.
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

float Silu(float z) { return z / (1.0f + std::exp(-z)); }

uint64_t MatrixBytes(const WeightRef& ref) {
  return static_cast<uint64_t>(ref.ne[0] * ref.ne[1] * ref.ne[2]) * sizeof(float);
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

uint64_t ReferenceWeightBytes(const Qwen3MoeModel& model) {
  const Qwen3MoeWeights& w = model.weights;
  uint64_t bytes = MatrixBytes(w.token_embd) + MatrixBytes(w.output_norm) + MatrixBytes(w.output);
  for (const Qwen3MoeLayerWeights& l : w.layers) {
    for (const WeightRef* ref : {&l.attn_norm, &l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output,
                                 &l.attn_q_norm, &l.attn_k_norm, &l.ffn_norm, &l.ffn_gate_inp,
                                 &l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps}) {
      bytes += MatrixBytes(*ref);
    }
  }
  return bytes;
}

absl::StatusOr<std::unique_ptr<ReferenceQwen3Moe>> ReferenceQwen3Moe::Create(
    const Qwen3MoeModel& model, int max_ctx) {
  const Qwen3MoeHparams& hp = model.hparams;
  if (max_ctx < 1 || max_ctx > hp.n_ctx_train) {
    return absl::InvalidArgumentError(
        absl::StrFormat("context length %d is outside 1..%d (the model's training context)",
                        max_ctx, hp.n_ctx_train));
  }
  const uint64_t kv_bytes = 2ull * hp.n_layer * static_cast<uint64_t>(max_ctx) * hp.n_head_kv *
                            hp.head_dim * sizeof(float);
  const uint64_t need = ReferenceWeightBytes(model) + kv_bytes;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    const uint64_t have = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
    if (need > have) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the fp32 reference needs %.1f GiB for this model (weights as fp32 plus a %d-token "
          "KV cache) but the machine has %.1f GiB; use a smaller model or another backend",
          need / 1073741824.0, max_ctx, have / 1073741824.0));
    }
  }
  return std::unique_ptr<ReferenceQwen3Moe>(new ReferenceQwen3Moe(model, max_ctx));
}

ReferenceQwen3Moe::ReferenceQwen3Moe(const Qwen3MoeModel& model, int max_ctx)
    : hp_(model.hparams), max_ctx_(max_ctx) {
  const Qwen3MoeWeights& w = model.weights;
  token_embd_ = DequantizeMatrix(w.token_embd);
  output_norm_ = DequantizeVector(w.output_norm);
  output_ = DequantizeMatrix(w.output);
  const int64_t n_kv = static_cast<int64_t>(hp_.n_head_kv) * hp_.head_dim;
  layers_.resize(w.layers.size());
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const Qwen3MoeLayerWeights& src = w.layers[il];
    Layer& l = layers_[il];
    l.attn_norm = DequantizeVector(src.attn_norm);
    l.wq = DequantizeMatrix(src.attn_q);
    l.wk = DequantizeMatrix(src.attn_k);
    l.wv = DequantizeMatrix(src.attn_v);
    l.wo = DequantizeMatrix(src.attn_output);
    l.q_norm = DequantizeVector(src.attn_q_norm);
    l.k_norm = DequantizeVector(src.attn_k_norm);
    l.ffn_norm = DequantizeVector(src.ffn_norm);
    l.router = DequantizeMatrix(src.ffn_gate_inp);
    for (int e = 0; e < hp_.n_expert; ++e) {
      l.gate.push_back(DequantizeMatrix(src.ffn_gate_exps, e));
      l.up.push_back(DequantizeMatrix(src.ffn_up_exps, e));
      l.down.push_back(DequantizeMatrix(src.ffn_down_exps, e));
    }
    l.k_cache.assign(static_cast<size_t>(max_ctx_ * n_kv), 0.0f);
    l.v_cache.assign(static_cast<size_t>(max_ctx_ * n_kv), 0.0f);
  }
  x_.resize(hp_.n_embd);
  xn_.resize(hp_.n_embd);
  q_.resize(static_cast<size_t>(hp_.n_head) * hp_.head_dim);
  k_.resize(n_kv);
  v_.resize(n_kv);
  attn_out_.resize(q_.size());
  scores_.resize(max_ctx_);
  sub_out_.resize(hp_.n_embd);
  router_logits_.resize(hp_.n_expert);
  gate_act_.resize(hp_.n_ff_exp);
  up_act_.resize(hp_.n_ff_exp);
  expert_out_.resize(hp_.n_embd);
  expert_order_.resize(hp_.n_expert);
}

absl::Status ReferenceQwen3Moe::Forward(std::span<const int32_t> tokens, int pos0, LogitRows rows,
                                        float* logits) {
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens to run");
  if (pos0 < 0 || pos0 > cached_tokens_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "start position %d is outside 0..%d (the positions cached so far)", pos0, cached_tokens_));
  }
  if (static_cast<int64_t>(pos0) + static_cast<int64_t>(tokens.size()) > max_ctx_) {
    return absl::OutOfRangeError(
        absl::StrFormat("%d tokens from position %d exceed the context of %d tokens", tokens.size(),
                        pos0, max_ctx_));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token id %d at input index %d is outside the vocabulary 0..%d",
                          tokens[i], i, hp_.n_vocab - 1));
    }
  }
  const size_t n = tokens.size();
  for (size_t i = 0; i < n; ++i) {
    float* row = nullptr;
    if (rows == LogitRows::kAll) {
      row = logits + i * static_cast<size_t>(hp_.n_vocab);
    } else if (i + 1 == n) {
      row = logits;
    }
    ForwardToken(tokens[i], pos0 + static_cast<int>(i), row);
    // The cache now holds exactly positions 0..pos0+i.
    cached_tokens_ = pos0 + static_cast<int>(i) + 1;
  }
  return absl::OkStatus();
}

void ReferenceQwen3Moe::ForwardToken(int32_t token, int pos, float* logits) {
  const int64_t n_embd = hp_.n_embd;
  std::copy_n(token_embd_.row(token), n_embd, x_.data());
  for (Layer& layer : layers_) {
    RmsNorm(x_.data(), layer.attn_norm.data(), n_embd, hp_.rms_eps, xn_.data());
    Attention(layer, pos);
    for (int64_t i = 0; i < n_embd; ++i) x_[i] += sub_out_[i];
    RmsNorm(x_.data(), layer.ffn_norm.data(), n_embd, hp_.rms_eps, xn_.data());
    MoeFfn(layer);
    for (int64_t i = 0; i < n_embd; ++i) x_[i] += sub_out_[i];
  }
  if (logits == nullptr) return;
  RmsNorm(x_.data(), output_norm_.data(), n_embd, hp_.rms_eps, xn_.data());
  MatVec(output_, xn_.data(), logits);
}

// Reads xn_, writes sub_out_ = W_o · attention.
void ReferenceQwen3Moe::Attention(Layer& layer, int pos) {
  const int64_t head_dim = hp_.head_dim;
  const int64_t n_kv = static_cast<int64_t>(hp_.n_head_kv) * head_dim;
  MatVec(layer.wq, xn_.data(), q_.data());
  MatVec(layer.wk, xn_.data(), k_.data());
  MatVec(layer.wv, xn_.data(), v_.data());

  // QK-norm per head, before rope; norms are in place (RmsNorm reads each
  // x[i] before it writes y[i]).
  for (int h = 0; h < hp_.n_head; ++h) {
    float* head = q_.data() + h * head_dim;
    RmsNorm(head, layer.q_norm.data(), head_dim, hp_.rms_eps, head);
    RopeNeox(head, head_dim, pos, hp_.rope_freq_base);
  }
  for (int h = 0; h < hp_.n_head_kv; ++h) {
    float* head = k_.data() + h * head_dim;
    RmsNorm(head, layer.k_norm.data(), head_dim, hp_.rms_eps, head);
    RopeNeox(head, head_dim, pos, hp_.rope_freq_base);
  }
  std::copy(k_.begin(), k_.end(), layer.k_cache.begin() + pos * n_kv);
  std::copy(v_.begin(), v_.end(), layer.v_cache.begin() + pos * n_kv);

  const int group = hp_.n_head / hp_.n_head_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  for (int h = 0; h < hp_.n_head; ++h) {
    const int kv_head = h / group;
    const float* q = q_.data() + h * head_dim;
    for (int t = 0; t <= pos; ++t) {
      const float* k = layer.k_cache.data() + t * n_kv + kv_head * head_dim;
      double dot = 0.0;
      for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(q[d]) * k[d];
      scores_[t] = static_cast<float>(dot * scale);
    }
    Softmax(scores_.data(), pos + 1);
    float* out = attn_out_.data() + h * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) {
      double sum = 0.0;
      for (int t = 0; t <= pos; ++t) {
        sum += static_cast<double>(scores_[t]) *
               layer.v_cache[static_cast<size_t>(t * n_kv + kv_head * head_dim + d)];
      }
      out[d] = static_cast<float>(sum);
    }
  }
  MatVec(layer.wo, attn_out_.data(), sub_out_.data());
}

// Reads xn_, writes sub_out_ = Σ_k w_k · expert_k(xn_).
void ReferenceQwen3Moe::MoeFfn(const Layer& layer) {
  MatVec(layer.router, xn_.data(), router_logits_.data());
  Softmax(router_logits_.data(), hp_.n_expert);
  const std::vector<float>& probs = router_logits_;
  std::iota(expert_order_.begin(), expert_order_.end(), 0);
  // Descending probability; equal probabilities keep the lower index first.
  std::sort(expert_order_.begin(), expert_order_.end(),
            [&](int a, int b) { return probs[a] != probs[b] ? probs[a] > probs[b] : a < b; });
  const int k = hp_.n_expert_used;
  float weight_sum = 0.0f;
  for (int i = 0; i < k; ++i) weight_sum += probs[expert_order_[i]];
  const float norm = std::max(weight_sum, kMinExpertWeightSum);

  std::fill(sub_out_.begin(), sub_out_.end(), 0.0f);
  for (int i = 0; i < k; ++i) {
    const int e = expert_order_[i];
    const float w = probs[e] / norm;
    MatVec(layer.gate[e], xn_.data(), gate_act_.data());
    MatVec(layer.up[e], xn_.data(), up_act_.data());
    for (int j = 0; j < hp_.n_ff_exp; ++j) gate_act_[j] = Silu(gate_act_[j]) * up_act_[j];
    MatVec(layer.down[e], gate_act_.data(), expert_out_.data());
    for (int64_t j = 0; j < hp_.n_embd; ++j) sub_out_[j] += w * expert_out_[j];
  }
}

}  // namespace moetier
