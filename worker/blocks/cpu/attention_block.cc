#include "blocks/cpu/attention_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_ops.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier {
namespace {

// Attention over fewer cached values than this runs on the calling thread.
constexpr int64_t kMinParallelElems = 32 * 1024;

// Writes head_dim values as one cached row of `type` at `dst`.
void StoreKvRow(TensorType type, const float* values, int head_dim, uint8_t* dst) {
  if (type == TensorType::kF32) {
    std::memcpy(dst, values, static_cast<size_t>(head_dim) * sizeof(float));
  } else {
    QuantizeRow(type, values, dst, head_dim);
  }
}

}  // namespace

CpuAttentionBlock::CpuAttentionBlock(const ModelHparams& hp,
                                     const std::vector<LayerWeights>& layers, int max_ctx,
                                     const KvCacheTypes& kv_types, CpuBatch& batch)
    : hp_(hp),
      layers_(layers),
      max_ctx_(max_ctx),
      kv_types_(kv_types),
      stored_kv_(kv_types != KvCacheTypes{}),
      batch_(batch),
      runner_(batch.runner()) {
  const size_t b = static_cast<size_t>(batch.max_batch());
  const size_t f = sizeof(float);
  const size_t q_dim = static_cast<size_t>(hp.n_head) * hp.head_dim;
  const size_t kv_dim = static_cast<size_t>(hp.n_head_kv) * hp.head_dim;
  for (const LayerWeights& l : layers) {
    if (!IsAttention(l.mixer)) {
      vectors_.emplace_back();
      continue;
    }
    vectors_.push_back({DecodedValues(l.attn_norm), DecodedValues(l.attn.q_norm),
                        DecodedValues(l.attn.k_norm), DecodedValues(l.attn.q_bias),
                        DecodedValues(l.attn.k_bias), DecodedValues(l.attn.v_bias),
                        DecodedValues(l.attn.output_bias), DecodedValues(l.attn.sinks)});
  }
  q_ = AlignedBytes(b * q_dim * f);
  bool any_gated = false;
  for (const LayerWeights& l : layers) any_gated = any_gated || l.mixer == MixerKind::kGatedAttention;
  if (any_gated) {
    gate_ = AlignedBytes(b * q_dim * f);
    q_and_gate_ = AlignedBytes(2 * b * q_dim * f);
  }
  k_ = AlignedBytes(b * kv_dim * f);
  v_ = AlignedBytes(b * kv_dim * f);
  attn_out_ = AlignedBytes(b * q_dim * f);
  rope_cos_ = AlignedBytes(b * static_cast<size_t>(hp.n_rot / 2) * f);
  rope_sin_ = AlignedBytes(b * static_cast<size_t>(hp.n_rot / 2) * f);
  const size_t threads = static_cast<size_t>(runner_.pool().size());
  const size_t group = static_cast<size_t>(hp.n_head / hp.n_head_kv);
  // One more score per head for an attention sink.
  scores_ = AlignedBytes(threads * group * static_cast<size_t>(max_ctx + 1) * f);
  if (stored_kv_) {
    kv_queries_ = AlignedBytes(threads * group * cpu::ActRowBytes(kv_types.k, hp.head_dim));
  }
  act_attn_ = AlignedBytes(b * MaxActRowBytes(static_cast<int64_t>(q_dim)));
  row_pos_.assign(b, 0);
  row_span_.assign(b, 0);
}

CpuKvLayer CpuAttentionBlock::NewKvLayer(int capacity) const {
  const size_t rows = static_cast<size_t>(capacity) * hp_.n_head_kv;
  return {AlignedBytes(rows * KvRowBytes(kv_types_.k, hp_.head_dim)),
          AlignedBytes(rows * KvRowBytes(kv_types_.v, hp_.head_dim))};
}

uint64_t CpuAttentionBlock::kv_bytes_per_token() const {
  uint64_t layers = 0;
  for (const LayerWeights& l : layers_) layers += IsAttention(l.mixer) ? 1 : 0;
  return layers * static_cast<uint64_t>(hp_.n_head_kv) *
         (KvRowBytes(kv_types_.k, hp_.head_dim) + KvRowBytes(kv_types_.v, hp_.head_dim));
}

uint64_t CpuAttentionBlock::allocated_bytes() const {
  uint64_t bytes = 0;
  for (const AlignedBytes* a : {&q_, &gate_, &q_and_gate_, &k_, &v_, &attn_out_, &rope_cos_,
                                &rope_sin_, &scores_, &kv_queries_, &act_attn_}) {
    bytes += a->size();
  }
  return bytes;
}

void CpuAttentionBlock::BeginBatch(std::span<const CpuRowSpan> spans) {
  const int half = hp_.n_rot / 2;
  rows_ = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    MOETIER_CPU_CHECK(spans[i].row0 == rows_, "batch spans out of order");
    for (int j = 0; j < spans[i].n; ++j) {
      const int t = rows_++;
      row_pos_[static_cast<size_t>(t)] = spans[i].pos0 + j;
      row_span_[static_cast<size_t>(t)] = static_cast<int>(i);
      float* c = rope_cos_.floats() + t * half;
      float* s = rope_sin_.floats() + t * half;
      cpu::RopeAngles(spans[i].pos0 + j, hp_.n_rot, hp_.rope_freq_base, hp_.rope_scaling,
                      hp_.rope_freq_factors.empty() ? nullptr : hp_.rope_freq_factors.data(), c, s);
      // Multi-section rope: these pairs rotate by position 0.
      for (size_t p = 0; p < hp_.rope_pair_uses_position.size(); ++p) {
        if (hp_.rope_pair_uses_position[p] == 0) {
          c[p] = hp_.rope_scaling.magnitude;
          s[p] = 0.0f;
        }
      }
    }
  }
}

void CpuAttentionBlock::Forward(int layer, std::span<const CpuRowSpan> spans,
                                std::span<const CpuKvLayer* const> kv) {
  const AttentionWeights& w = layers_[static_cast<size_t>(layer)].attn;
  const bool gated = layers_[static_cast<size_t>(layer)].mixer == MixerKind::kGatedAttention;
  const LayerVectors& vectors = vectors_[static_cast<size_t>(layer)];
  const int64_t n_embd = hp_.n_embd;
  const int head_dim = hp_.head_dim;
  const int64_t q_dim = static_cast<int64_t>(hp_.n_head) * head_dim;
  const int64_t kv_dim = static_cast<int64_t>(hp_.n_head_kv) * head_dim;
  const int n = rows_;
  MOETIER_CPU_CHECK(kv.size() == spans.size(), "a KV cache per span");
  for (const CpuRowSpan& span : spans) {
    MOETIER_CPU_CHECK(span.pos0 + span.n <= max_ctx_, "attention past the context");
  }
  batch_.NormRows(0, n, vectors.attn_norm.data(), hp_.rms_eps);

  // q, k and v read the same normed input: it is prepared once per format.
  const WeightRef* mats[3] = {&w.q, &w.k, &w.v};
  float* outs[3] = {gated ? q_and_gate_.floats() : q_.floats(), k_.floats(), v_.floats()};
  MatJob* jobs = runner_.jobs();
  for (int i = 0; i < 3; ++i) {
    const WeightRef& m = *mats[i];
    jobs[i] = MakeMatJob(m, m.data, batch_.PrepareInput(n, m.type), n, outs[i]);
  }
  runner_.Run(jobs, 3, CpuPhase::kAttentionProjections);
  const std::vector<float>* biases[3] = {&vectors.q_bias, &vectors.k_bias, &vectors.v_bias};
  const int64_t widths[3] = {gated ? 2 * q_dim : q_dim, kv_dim, kv_dim};
  for (int i = 0; i < 3; ++i) {
    const std::vector<float>& bias = *biases[i];
    if (bias.empty()) continue;
    MOETIER_CPU_CHECK(static_cast<int64_t>(bias.size()) == widths[i], "a bias per projection row");
    cpu::AddBiasRows(bias.data(), outs[i], n, widths[i]);
  }
  if (gated) {
    // Each head's head_dim q values, then its head_dim gate values.
    for (int t = 0; t < n; ++t) {
      for (int h = 0; h < hp_.n_head; ++h) {
        const float* src = q_and_gate_.floats() + (t * 2 * hp_.n_head + 2 * h) * head_dim;
        std::memcpy(q_.floats() + t * q_dim + h * head_dim, src, head_dim * sizeof(float));
        std::memcpy(gate_.floats() + t * q_dim + h * head_dim, src + head_dim,
                    head_dim * sizeof(float));
      }
    }
  }

  // The q/k norm, then rope, then into the cache.
  const int half = hp_.n_rot / 2;
  const int64_t k_row = static_cast<int64_t>(KvRowBytes(kv_types_.k, head_dim));
  const int64_t v_row = static_cast<int64_t>(KvRowBytes(kv_types_.v, head_dim));
  auto key_rows = [&](int t) {
    const CpuKvLayer& layer_kv = *kv[static_cast<size_t>(row_span_[static_cast<size_t>(t)])];
    return cpu::KvRows{kv_types_.k, layer_kv.k.data(),
                       static_cast<int64_t>(layer_kv.k.size()) / hp_.n_head_kv, k_row};
  };
  auto value_rows = [&](int t) {
    const CpuKvLayer& layer_kv = *kv[static_cast<size_t>(row_span_[static_cast<size_t>(t)])];
    return cpu::KvRows{kv_types_.v, layer_kv.v.data(),
                       static_cast<int64_t>(layer_kv.v.size()) / hp_.n_head_kv, v_row};
  };
  for (int t = 0; t < n; ++t) {
    float* qt = q_.floats() + t * q_dim;
    float* kt = k_.floats() + t * kv_dim;
    switch (hp_.qk_norm) {
      case QkNorm::kNone:
        break;
      case QkNorm::kPerHead:
        cpu::RmsNormHeads(qt, vectors.q_norm.data(), hp_.n_head, head_dim, hp_.rms_eps);
        cpu::RmsNormHeads(kt, vectors.k_norm.data(), hp_.n_head_kv, head_dim, hp_.rms_eps);
        break;
      case QkNorm::kWhole:
        cpu::RmsNorm(qt, vectors.q_norm.data(), q_dim, hp_.rms_eps, qt);
        cpu::RmsNorm(kt, vectors.k_norm.data(), kv_dim, hp_.rms_eps, kt);
        break;
    }
    const float* c = rope_cos_.floats() + t * half;
    const float* s = rope_sin_.floats() + t * half;
    switch (hp_.rope_style) {
      case RopeStyle::kNeox:
        cpu::RopeNeox(qt, hp_.n_head, head_dim, hp_.n_rot, c, s);
        cpu::RopeNeox(kt, hp_.n_head_kv, head_dim, hp_.n_rot, c, s);
        break;
      case RopeStyle::kNorm:
        cpu::RopeAdjacentPairs(qt, hp_.n_head, head_dim, hp_.n_rot, c, s);
        cpu::RopeAdjacentPairs(kt, hp_.n_head_kv, head_dim, hp_.n_rot, c, s);
        break;
    }
    // Head-major cache: each KV head's rows are contiguous.
    const float* vt = v_.floats() + t * kv_dim;
    const CpuKvLayer& layer_kv = *kv[static_cast<size_t>(row_span_[static_cast<size_t>(t)])];
    const int64_t k_head_stride = static_cast<int64_t>(layer_kv.k.size()) / hp_.n_head_kv;
    const int64_t v_head_stride = static_cast<int64_t>(layer_kv.v.size()) / hp_.n_head_kv;
    const int64_t pos = row_pos_[static_cast<size_t>(t)];
    for (int g = 0; g < hp_.n_head_kv; ++g) {
      StoreKvRow(kv_types_.k, kt + g * head_dim, head_dim,
                 layer_kv.k.data() + g * k_head_stride + pos * k_row);
      StoreKvRow(kv_types_.v, vt + g * head_dim, head_dim,
                 layer_kv.v.data() + g * v_head_stride + pos * v_row);
    }
  }

  const float scale = hp_.attention_scale > 0.0f
                          ? hp_.attention_scale
                          : 1.0f / std::sqrt(static_cast<float>(head_dim));
  // One task per token and KV head: the query heads sharing a KV head read
  // its cached rows together.
  const int n_head_kv = hp_.n_head_kv;
  const int group = hp_.n_head / n_head_kv;
  const int64_t scores_per_thread = static_cast<int64_t>(group) * (max_ctx_ + 1);
  const int window = layers_[static_cast<size_t>(layer)].attention_window;
  const float* sinks = vectors.sinks.empty() ? nullptr : vectors.sinks.data();
  const size_t queries_per_thread = kv_queries_.size() / runner_.pool().size();
  auto attend = [&](int64_t task, int thread) {
    const int t = static_cast<int>(task / n_head_kv);
    const int g = static_cast<int>(task % n_head_kv);
    // Positions [first, pos]: all of them, or the layer's window.
    const int pos = row_pos_[static_cast<size_t>(t)];
    const int first = window > 0 ? std::max(0, pos - window + 1) : 0;
    const int context = pos + 1 - first;
    cpu::KvRows k_rows = key_rows(t);
    cpu::KvRows v_rows = value_rows(t);
    k_rows.data += first * k_rows.row_stride;
    v_rows.data += first * v_rows.row_stride;
    float* scores = scores_.floats() + thread * scores_per_thread;
    if (!stored_kv_) {
      cpu::AttentionHeads(q_.floats() + t * q_dim, reinterpret_cast<const float*>(k_rows.data),
                          reinterpret_cast<const float*>(v_rows.data),
                          k_rows.head_stride / static_cast<int64_t>(sizeof(float)), head_dim,
                          context, hp_.n_head, n_head_kv, head_dim, scale, g * group,
                          (g + 1) * group, scores, attn_out_.floats() + t * q_dim, sinks);
      return;
    }
    const cpu::KvAttendScratch scratch{scores, kv_queries_.data() + thread * queries_per_thread};
    cpu::AttentionHeadsStored(q_.floats() + t * q_dim, k_rows, v_rows, context, hp_.n_head,
                              n_head_kv, head_dim, scale, g * group, (g + 1) * group, scratch,
                              attn_out_.floats() + t * q_dim, sinks);
  };
  // Cached values the batch reads, to decide whether splitting pays.
  const double attn_start = CpuMatRunner::Now();
  int64_t attn_elems = 0;
  for (int t = 0; t < n; ++t) {
    const int pos = row_pos_[static_cast<size_t>(t)];
    attn_elems += (window > 0 ? std::min(pos + 1, window) : pos + 1) * kv_dim;
  }
  if (attn_elems >= kMinParallelElems) {
    runner_.pool().ParallelFor(static_cast<int64_t>(n) * n_head_kv, attend);
  } else {
    for (int64_t task = 0; task < static_cast<int64_t>(n) * n_head_kv; ++task) attend(task, 0);
  }
  runner_.AddPhaseTime(CpuPhase::kAttention, CpuMatRunner::Now() - attn_start);

  if (gated) {
    float* o = attn_out_.floats();
    const float* g = gate_.floats();
    for (int64_t i = 0; i < n * q_dim; ++i) o[i] *= 1.0f / (1.0f + std::exp(-g[i]));
  }
  const uint8_t* act = runner_.PrepareAct(act_attn_, attn_out_.floats(), n, q_dim, w.output.type);
  float* sub = batch_.row_scratch();
  jobs[0] = MakeMatJob(w.output, w.output.data, act, n, sub);
  runner_.Run(jobs, 1, CpuPhase::kAttentionProjections);
  if (!vectors.output_bias.empty()) cpu::AddBiasRows(vectors.output_bias.data(), sub, n, n_embd);
  float* x = batch_.x();
  for (int64_t i = 0; i < n * n_embd; ++i) x[i] += sub[i];
}

}  // namespace moetier
