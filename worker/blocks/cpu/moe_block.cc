#include "blocks/cpu/moe_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_ops.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier {
namespace {

// Prefetch serves decoding: a longer batch routes to most of a layer's
// experts, which its own Acquire fetches together anyway.
constexpr int kMaxPrefetchTokens = 4;

ExpertMatrixShape ShapeOf(const WeightRef& w) {
  return {.type = w.type, .rows = w.rows(), .cols = w.cols(), .row_bytes = w.row_bytes};
}

}  // namespace

CpuMoeBlock::CpuMoeBlock(const ModelHparams& hp, const std::vector<LayerWeights>& layers,
                         const CpuMoeConfig& config, CpuBatch& batch)
    : hp_(hp), layers_(layers), config_(config), batch_(batch), runner_(batch.runner()) {
  for (const LayerWeights& l : layers) {
    ffn_norm_.push_back(DecodedValues(l.ffn_norm));
    selection_bias_.push_back(DecodedValues(l.moe.selection_bias));
    biases_.push_back({DecodedValues(l.moe.router_bias), DecodedValues(l.moe.gate_exps_bias),
                       DecodedValues(l.moe.up_exps_bias), DecodedValues(l.moe.down_exps_bias)});
    shapes_.push_back({ShapeOf(l.moe.gate_exps), ShapeOf(l.moe.up_exps), ShapeOf(l.moe.down_exps)});
  }
  const size_t b = static_cast<size_t>(batch.max_batch());
  const size_t bk = b * hp.n_expert_used;
  const size_t f = sizeof(float);
  router_logits_ = AlignedBytes(b * hp.n_expert * f);
  router_probs_ = AlignedBytes(b * hp.n_expert * f);
  topk_ids_.assign(bk, 0);
  topk_weights_.assign(bk, 0.0f);
  expert_count_.assign(hp.n_expert, 0);
  expert_offset_.assign(hp.n_expert + 1, 0);
  slot_token_.assign(bk, 0);
  token_slot_.assign(bk, 0);
  used_experts_.assign(hp.n_expert, 0);
  predicted_.assign(hp.n_expert, 0);
  expert_mats_.assign(hp.n_expert, ExpertMatrices{});
  expert_rows_.assign(hp.n_expert, ExpertRows{});
  gate_out_ = AlignedBytes(bk * hp.n_ff_exp * f);
  up_out_ = AlignedBytes(bk * hp.n_ff_exp * f);
  down_out_ = AlignedBytes(bk * hp.n_embd * f);
  act_gather_gate_ = AlignedBytes(bk * MaxActRowBytes(hp.n_embd));
  act_gather_up_ = AlignedBytes(bk * MaxActRowBytes(hp.n_embd));
  act_ff_ = AlignedBytes(bk * MaxActRowBytes(hp.n_ff_exp));
  // The shared expert's and the dense FFN's buffers, for the wider of them.
  int64_t dense_ff = 0;
  for (const LayerWeights& l : layers) {
    if (HasSharedExpert(l.ffn)) dense_ff = std::max<int64_t>(dense_ff, hp.n_ff_shared);
    if (!HasRoutedExperts(l.ffn)) dense_ff = std::max<int64_t>(dense_ff, hp.n_ff_dense);
  }
  if (dense_ff > 0) {
    shared_logit_ = AlignedBytes(b * f);
    shared_gate_out_ = AlignedBytes(b * dense_ff * f);
    shared_up_out_ = AlignedBytes(b * dense_ff * f);
    shared_down_out_ = AlignedBytes(b * hp.n_embd * f);
    act_shared_ = AlignedBytes(b * MaxActRowBytes(dense_ff));
  }
}

uint64_t CpuMoeBlock::allocated_bytes() const {
  uint64_t bytes = 0;
  for (const AlignedBytes* a :
       {&router_logits_, &router_probs_, &gate_out_, &up_out_, &down_out_, &act_gather_gate_,
        &act_gather_up_, &act_ff_, &shared_logit_, &shared_gate_out_, &shared_up_out_,
        &shared_down_out_, &act_shared_}) {
    bytes += a->size();
  }
  return bytes;
}

absl::Status CpuMoeBlock::AcquireExperts(int layer, int first, int count) {
  const std::span<const int32_t> ids(used_experts_.data() + first, static_cast<size_t>(count));
  const std::span<ExpertMatrices> mats(expert_mats_.data() + first, static_cast<size_t>(count));
  ExpertWeightSource* source = config_.expert_source;
  if (source == nullptr) {
    const MoeWeights& w = layers_[static_cast<size_t>(layer)].moe;
    for (int i = 0; i < count; ++i) {
      mats[i] = {w.gate_exps.expert(ids[i]), w.up_exps.expert(ids[i]),
                 w.down_exps.expert(ids[i])};
    }
    return absl::OkStatus();
  }
  const double start = CpuMatRunner::Now();
  absl::Status status = source->Acquire(layer, ids, mats);
  runner_.AddPhaseTime(CpuPhase::kExpertFetch, CpuMatRunner::Now() - start);
  return status;
}


absl::Status CpuMoeBlock::ApplyRoutingHooks(int layer, int n, int pos0) {
  const int top_k = hp_.n_expert_used;
  const size_t n_choices = static_cast<size_t>(n) * top_k;
  RoutingBatch batch = RoutingBatchAt(hp_, layer, n, pos0);
  if (RoutingOverride* override = config_.routing_override; override != nullptr) {
    const std::span<int32_t> ids(topk_ids_.data(), n_choices);
    if (absl::Status s = override->Override(batch, ids); !s.ok()) return s;
    if (absl::Status s = CheckOverriddenExperts(batch, ids); !s.ok()) return s;
    // The router's probabilities of the chosen experts, weighted as the
    // router weights its own choice.
    for (int t = 0; t < n; ++t) {
      cpu::RouterWeightsOf(router_probs_.floats() + static_cast<size_t>(t) * hp_.n_expert,
                           ids.data() + static_cast<size_t>(t) * top_k, top_k, hp_.router,
                           topk_weights_.data() + static_cast<size_t>(t) * top_k);
    }
  }
  if (RoutingObserver* observer = config_.routing_observer; observer != nullptr) {
    batch.experts = std::span<const int32_t>(topk_ids_.data(), n_choices);
    batch.weights = std::span<const float>(topk_weights_.data(), n_choices);
    if (absl::Status s = observer->OnRouting(batch); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CpuMoeBlock::Forward(int layer, int n, int pos0) {
  const LayerWeights& weights = layers_[static_cast<size_t>(layer)];
  if (!HasRoutedExperts(weights.ffn)) {
    batch_.NormRows(0, n, ffn_norm_[static_cast<size_t>(layer)].data(), hp_.rms_eps);
    const DenseFfnWeights& d = weights.dense;
    SwigluIntoResidual(nullptr, d.gate, d.up, d.down, hp_.n_ff_dense, n, CpuPhase::kDenseFfn);
    return MaybePrefetchNextLayer(layer, n, pos0);
  }
  const ExpertLayerShape& shape = shapes_[static_cast<size_t>(layer)];
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_ff = hp_.n_ff_exp;
  const int n_expert = hp_.n_expert;
  const int top_k = hp_.n_expert_used;
  RouteTokens(layer, n);
  if (config_.routing_override != nullptr || config_.routing_observer != nullptr) {
    if (absl::Status s = ApplyRoutingHooks(layer, n, pos0); !s.ok()) return s;
  }
  if (config_.expert_source != nullptr) {
    config_.expert_source->Route(layer, std::span<const int32_t>(topk_ids_.data(),
                                                                 static_cast<size_t>(n) * top_k));
  }

  // Group the (token, choice) pairs by expert.
  std::fill(expert_count_.begin(), expert_count_.end(), 0);
  for (int i = 0; i < n * top_k; ++i) ++expert_count_[topk_ids_[i]];
  expert_offset_[0] = 0;
  for (int e = 0; e < n_expert; ++e) expert_offset_[e + 1] = expert_offset_[e] + expert_count_[e];
  std::fill(expert_count_.begin(), expert_count_.end(), 0);
  for (int t = 0; t < n; ++t) {
    for (int j = 0; j < top_k; ++j) {
      const int e = topk_ids_[t * top_k + j];
      const int slot = expert_offset_[e] + expert_count_[e]++;
      slot_token_[slot] = t;
      token_slot_[t * top_k + j] = slot;
    }
  }
  const int n_slots = n * top_k;

  // The experts' inputs: the prepared rows of xn, gathered into expert order.
  const size_t gate_row_bytes = cpu::ActRowBytes(shape.gate.type, n_embd);
  const size_t up_row_bytes = cpu::ActRowBytes(shape.up.type, n_embd);
  const uint8_t* gate_src = batch_.PrepareInput(n, shape.gate.type);
  const uint8_t* up_src = batch_.PrepareInput(n, shape.up.type);
  const bool same_format = cpu::ActFormatFor(shape.gate.type) == cpu::ActFormatFor(shape.up.type);
  uint8_t* gate_act = act_gather_gate_.data();
  uint8_t* up_act = same_format ? gate_act : act_gather_up_.data();
  for (int s = 0; s < n_slots; ++s) {
    std::memcpy(gate_act + s * gate_row_bytes, gate_src + slot_token_[s] * gate_row_bytes,
                gate_row_bytes);
    if (!same_format) {
      std::memcpy(up_act + s * up_row_bytes, up_src + slot_token_[s] * up_row_bytes, up_row_bytes);
    }
  }

  // The experts this batch uses, in ascending order. From a source they
  // come in groups of at most what it can hold at once (all of them from
  // the mapping): each group is acquired, computed and released before the
  // next, and since every row is computed on its own the grouping changes
  // no result.
  int n_used = 0;
  for (int e = 0; e < n_expert; ++e) {
    if (expert_offset_[e + 1] > expert_offset_[e]) used_experts_[n_used++] = e;
  }
  const LayerBiases& biases = biases_[static_cast<size_t>(layer)];
  auto bias_of = [](const std::vector<float>& all, int e, int64_t width) {
    return all.empty() ? nullptr : all.data() + e * width;
  };
  const int group_max =
      config_.expert_source != nullptr ? config_.expert_source->max_experts_held() : n_used;
  float* down_out = down_out_.floats();
  for (int g0 = 0; g0 < n_used; g0 += group_max) {
    const int g1 = std::min(n_used, g0 + group_max);
    if (absl::Status s = AcquireExperts(layer, g0, g1 - g0); !s.ok()) return s;
    // The group's rows are contiguous: experts ascend, and so do their rows.
    const int64_t s0 = expert_offset_[used_experts_[g0]];
    const int64_t s1 = expert_offset_[used_experts_[g1 - 1] + 1];
    for (int i = g0; i < g1; ++i) {
      const int e = used_experts_[i];
      expert_rows_[i - g0] = {.mats = expert_mats_[i],
                              .row0 = expert_offset_[e] - s0,
                              .rows = expert_offset_[e + 1] - expert_offset_[e],
                              .gate_bias = bias_of(biases.gate, e, n_ff),
                              .up_bias = bias_of(biases.up, e, n_ff),
                              .down_bias = bias_of(biases.down, e, n_embd)};
    }
    const ExpertGroupIo io{.gate_act = gate_act + s0 * gate_row_bytes,
                           .up_act = up_act + s0 * up_row_bytes,
                           .gate_out = gate_out_.floats() + s0 * n_ff,
                           .up_out = up_out_.floats() + s0 * n_ff,
                           .down_act = &act_ff_,
                           .down_out = down_out + s0 * n_embd};
    ComputeExpertGroup(
        runner_, shape,
        std::span<const ExpertRows>(expert_rows_.data(), static_cast<size_t>(g1 - g0)), s1 - s0, io,
        hp_.expert_activation);
    if (config_.expert_source != nullptr) config_.expert_source->Release(layer);
  }

  // Weighted sum in the router's order, then the residual.
  float* x = batch_.x();
  float* acc = batch_.row_scratch();
  for (int t = 0; t < n; ++t) {
    float* xt = x + t * n_embd;
    std::fill(acc, acc + n_embd, 0.0f);
    for (int j = 0; j < top_k; ++j) {
      cpu::AxpyF32(topk_weights_[t * top_k + j], down_out + token_slot_[t * top_k + j] * n_embd,
                   acc, n_embd);
    }
    for (int64_t i = 0; i < n_embd; ++i) xt[i] += acc[i];
  }
  if (HasSharedExpert(weights.ffn)) {
    const MoeWeights& w = weights.moe;
    SwigluIntoResidual(&w.shared_gate_inp, w.shared_gate, w.shared_up, w.shared_down,
                       hp_.n_ff_shared, n, CpuPhase::kSharedExpert);
  }
  return MaybePrefetchNextLayer(layer, n, pos0);
}

absl::Status CpuMoeBlock::MaybePrefetchNextLayer(int layer, int n, int pos0) {
  if (config_.expert_source == nullptr || !config_.expert_source->wants_prefetch() ||
      layer + 1 >= hp_.n_layer || n > kMaxPrefetchTokens ||
      !HasRoutedExperts(layers_[static_cast<size_t>(layer) + 1].ffn)) {
    return absl::OkStatus();
  }
  return PrefetchNextLayer(layer + 1, n, pos0);
}

void CpuMoeBlock::RouteTokens(int layer, int n) {
  const int n_expert = hp_.n_expert;
  const int top_k = hp_.n_expert_used;
  batch_.NormRows(0, n, ffn_norm_[static_cast<size_t>(layer)].data(), hp_.rms_eps);
  const WeightRef& router = layers_[static_cast<size_t>(layer)].moe.router;
  MatJob* jobs = runner_.jobs();
  jobs[0] = MakeMatJob(router, router.data, batch_.PrepareInput(n, router.type), n,
                       router_logits_.floats());
  runner_.Run(jobs, 1, CpuPhase::kRouter);
  if (const std::vector<float>& logit_bias = biases_[static_cast<size_t>(layer)].router;
      !logit_bias.empty()) {
    cpu::AddBiasRows(logit_bias.data(), router_logits_.floats(), n, n_expert);
  }
  const std::vector<float>& bias = selection_bias_[static_cast<size_t>(layer)];
  for (int t = 0; t < n; ++t) {
    cpu::RouterTopK(router_logits_.floats() + t * n_expert, n_expert, top_k, hp_.router,
                    bias.empty() ? nullptr : bias.data(), router_probs_.floats() + t * n_expert,
                    topk_ids_.data() + t * top_k, topk_weights_.data() + t * top_k);
  }
}

void CpuMoeBlock::SwigluIntoResidual(const WeightRef* gate_inp, const WeightRef& gate,
                                     const WeightRef& up, const WeightRef& down, int64_t n_ff,
                                     int n, CpuPhase phase) {
  const int64_t n_embd = hp_.n_embd;
  const bool gated = gate_inp != nullptr && gate_inp->present();
  MatJob* jobs = runner_.jobs();
  int n_jobs = 0;
  jobs[n_jobs++] =
      MakeMatJob(gate, gate.data, batch_.PrepareInput(n, gate.type), n, shared_gate_out_.floats());
  jobs[n_jobs++] =
      MakeMatJob(up, up.data, batch_.PrepareInput(n, up.type), n, shared_up_out_.floats());
  if (gated) {
    jobs[n_jobs++] = MakeMatJob(*gate_inp, gate_inp->data, batch_.PrepareInput(n, gate_inp->type),
                                n, shared_logit_.floats());
  }
  runner_.Run(jobs, n_jobs, phase);
  runner_.SiluMulRows(shared_gate_out_.floats(), shared_up_out_.floats(), n, n_ff);
  const uint8_t* act =
      runner_.PrepareAct(act_shared_, shared_gate_out_.floats(), n, n_ff, down.type);
  jobs[0] = MakeMatJob(down, down.data, act, n, shared_down_out_.floats());
  runner_.Run(jobs, 1, phase);
  float* x = batch_.x();
  for (int t = 0; t < n; ++t) {
    const float scale = gated ? 1.0f / (1.0f + std::exp(-shared_logit_.floats()[t])) : 1.0f;
    cpu::AxpyF32(scale, shared_down_out_.floats() + t * n_embd, x + t * n_embd, n_embd);
  }
}

absl::Status CpuMoeBlock::PrefetchNextLayer(int layer, int n, int pos0) {
  const int top_k = hp_.n_expert_used;
  const RoutingBatch batch = RoutingBatchAt(hp_, layer, n, pos0);
  const std::span<int32_t> guess(topk_ids_.data(), static_cast<size_t>(n) * top_k);
  RoutingOverride* override = config_.routing_override;
  if (override != nullptr && override->PredictNext(batch, guess)) {
    if (absl::Status s = CheckOverriddenExperts(batch, guess); !s.ok()) return s;
  } else {
    // The next layer's router on the hidden state as it stands now, before
    // that layer's mixer: a close enough guess of its real input.
    RouteTokens(layer, n);
  }
  int n_predicted = 0;
  for (int t = 0; t < n; ++t) {
    for (int j = 0; j < top_k; ++j) {
      const int32_t e = topk_ids_[t * top_k + j];
      if (std::find(predicted_.begin(), predicted_.begin() + n_predicted, e) ==
          predicted_.begin() + n_predicted) {
        predicted_[n_predicted++] = e;
      }
    }
  }
  batch_.ForgetInputs();
  const double start = CpuMatRunner::Now();
  absl::Status status = config_.expert_source->Prefetch(
      layer, std::span<const int32_t>(predicted_.data(), static_cast<size_t>(n_predicted)));
  runner_.AddPhaseTime(CpuPhase::kExpertFetch, CpuMatRunner::Now() - start);
  return status;
}

}  // namespace moetier
