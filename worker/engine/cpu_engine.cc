#include "engine/cpu_engine.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/host_memory.h"
#include "engine/weight_checks.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier {
namespace {

bool CpuMixer(MixerKind) { return true; }
bool CpuFfn(FfnKind) { return true; }

constexpr BackendWeightSupport kCpuSupport = {
    .backend = "cpu",
    .matrix_type = &cpu::SupportsWeightType,
    .type_list =
        "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, "
        "Q5_K, Q6_K, IQ4_XS, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S",
    .alternative = "requantize the model or use --backend reference",
    .mixer = &CpuMixer,
    .ffn = &CpuFfn,
};

// The bytes a tensor spans: ne[2] matrices of ne[1] rows (expert matrices of a
// fused gate/up tensor interleave, so the span also covers the other half).
cpu::ByteRange Span(const WeightRef& r) {
  const uint64_t rows_bytes = static_cast<uint64_t>(r.ne[1]) * r.row_bytes;
  const uint64_t bytes = static_cast<uint64_t>(r.ne[2] - 1) * r.expert_stride_bytes + rows_bytes;
  return {r.data, r.data + bytes};
}

std::vector<cpu::ByteRange> WeightSpans(const ModelWeights& w, bool include_experts) {
  std::vector<cpu::ByteRange> spans;
  for (const WeightRef* r : WeightRefs(w, include_experts)) spans.push_back(Span(*r));
  return spans;
}

// Every sequence slot's state (and its checkpoint of the recurrent part) is
// allocated and zeroed at creation: a context that cannot fit is refused
// here, by name, rather than by the out-of-memory killer later.
absl::Status CheckSequenceStateFits(const Model& model, const CpuEngineConfig& config) {
  const SequenceStateSize size = SequenceStateSizeOf(model, config.kv_types);
  const uint64_t per_sequence = size.BytesAt(static_cast<uint64_t>(config.max_ctx)) +
                                size.recurrent_bytes;
  const uint64_t total = per_sequence * static_cast<uint64_t>(config.max_sequences);
  const uint64_t available = cpu::MemAvailableBytes();
  if (available == 0 || total <= available) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "the state of %d sequence(s) of %d tokens needs %.2f GiB (%d bytes of KV cache per token, "
      "%d bytes of recurrent state per sequence), more than the %.2f GiB of memory available; "
      "lower --ctx or store the cache in fewer bytes (--cache-type-k, --cache-type-v)",
      config.max_sequences, config.max_ctx, static_cast<double>(total) / (1 << 30),
      size.kv_bytes_per_token, size.recurrent_bytes, static_cast<double>(available) / (1 << 30)));
}

}  // namespace

absl::Status CpuEngine::CheckModel(const Model& model) {
  return CheckModelForBackend(model, kCpuSupport);
}

absl::StatusOr<std::unique_ptr<CpuEngine>> CpuEngine::Create(const Model& model,
                                                             const CpuEngineConfig& config) {
  const ModelHparams& hp = model.hparams;
  if (absl::Status s = CheckEngineSizes(hp, config.max_ctx, config.max_sequences, config.max_batch,
                                        /*batch_limit=*/8192);
      !s.ok()) {
    return s;
  }
  if (config.n_threads < 1 || config.n_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrFormat("thread count %d is outside 1..1024", config.n_threads));
  }
  if (absl::Status s = CheckModel(model); !s.ok()) return s;
  if (absl::Status s = CheckKvCacheTypes(config.kv_types, hp.head_dim, kKvCacheTypeChoices, "cpu");
      !s.ok()) {
    return s;
  }
  if (config.kv_types != KvCacheTypes{} && hp.head_dim > cpu::kMaxKvHeadDim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "heads of %d values are larger than the %d a stored KV cache row may hold; keep "
        "--cache-type-k and --cache-type-v at f32",
        hp.head_dim, cpu::kMaxKvHeadDim));
  }
  if (absl::Status s = CheckSequenceStateFits(model, config); !s.ok()) return s;
  if (config.expert_source != nullptr && config.expert_source->max_experts_held() < 1) {
    return absl::InvalidArgumentError("the expert source can hold no experts at once");
  }
  std::unique_ptr<CpuEngine> engine(new CpuEngine(model, config));
  if (config.copy_weights_to_huge_pages) {
    if (absl::Status s = engine->CopyWeightsToHugePages(); !s.ok()) return s;
  }
  engine->Allocate();
  return engine;
}

CpuEngine::CpuEngine(const Model& model, const CpuEngineConfig& config)
    : hp_(model.hparams),
      weights_(model.weights),
      config_(config),
      pool_(config.n_threads),
      // At most 2 * n_expert jobs (gate and up of every expert) per dispatch.
      runner_(pool_, 2 * static_cast<size_t>(model.hparams.n_expert) + 4),
      slots_(this, config.max_sequences, config.max_ctx) {}

CpuEngine::~CpuEngine() = default;

absl::Status CpuEngine::CopyWeightsToHugePages() {
  // Experts from a source live elsewhere (the daemon's store): copying their
  // tensors would read the whole model file for bytes never used.
  const bool include_experts = config_.expert_source == nullptr;
  absl::StatusOr<cpu::HugePageCopy> copy =
      cpu::HugePageCopy::Create(WeightSpans(weights_, include_experts), true);
  if (!copy.ok()) return copy.status();
  for (WeightRef* r : WeightRefs(weights_, include_experts)) r->data = copy->Translate(r->data);
  weight_copy_ = std::move(*copy);
  return absl::OkStatus();
}

void CpuEngine::Allocate() {
  output_norm_ = DecodedValues(weights_.output_norm);
  batch_ = std::make_unique<CpuBatch>(hp_.n_embd, config_.max_batch, runner_);
  attention_ = std::make_unique<CpuAttentionBlock>(hp_, weights_.layers, config_.max_ctx,
                                                   config_.kv_types, *batch_);
  deltanet_ = std::make_unique<CpuDeltaNetBlock>(hp_, weights_.layers, *batch_);
  moe_ = std::make_unique<CpuMoeBlock>(
      hp_, weights_.layers,
      CpuMoeConfig{.expert_source = config_.expert_source,
                   .routing_observer = config_.routing_observer,
                   .routing_override = config_.routing_override},
      *batch_);
  state_.resize(static_cast<size_t>(config_.max_sequences));
  checkpoints_.resize(static_cast<size_t>(config_.max_sequences));
  for (size_t slot = 0; slot < state_.size(); ++slot) {
    for (const LayerWeights& l : weights_.layers) {
      LayerState s;
      if (IsAttention(l.mixer)) {
        s.kv = attention_->NewKvLayer(config_.max_ctx);
        checkpoints_[slot].emplace_back();
      } else {
        s.recurrent = deltanet_->NewStateLayer();
        checkpoints_[slot].push_back(deltanet_->NewStateLayer());
      }
      state_[slot].push_back(std::move(s));
    }
  }
  last_logits_.assign(static_cast<size_t>(hp_.n_vocab), 0.0f);
  const size_t max_parts =
      static_cast<size_t>(std::min(config_.max_sequences, config_.max_batch));
  parts_.reserve(max_parts);
  spans_.reserve(max_parts);
  kv_of_part_.reserve(max_parts);
  recurrent_of_part_.reserve(max_parts);
  batch_tokens_.reserve(static_cast<size_t>(config_.max_batch));
  out_rows_.reserve(static_cast<size_t>(config_.max_batch));
  out_steps_.reserve(max_parts);
  step_done_.reserve(static_cast<size_t>(config_.max_sequences));
  if (config_.max_sequences > 1) {
    many_logits_.assign(static_cast<size_t>(std::min<int>(kManyLogitsRows, max_parts)) *
                            static_cast<size_t>(hp_.n_vocab),
                        0.0f);
  }
}

uint64_t CpuEngine::allocated_bytes() const {
  uint64_t bytes = batch_->allocated_bytes() + attention_->allocated_bytes() +
                   deltanet_->allocated_bytes() + moe_->allocated_bytes() +
                   (last_logits_.size() + many_logits_.size()) * sizeof(float);
  if (weight_copy_.has_value()) bytes += weight_copy_->size();
  for (const std::vector<LayerState>& seq : state_) {
    for (const LayerState& l : seq) {
      bytes += l.kv.k.size() + l.kv.v.size() + l.recurrent.conv.size() + l.recurrent.delta.size();
    }
  }
  for (const std::vector<CpuRecurrentLayer>& seq : checkpoints_) {
    for (const CpuRecurrentLayer& l : seq) bytes += l.conv.size() + l.delta.size();
  }
  return bytes;
}

absl::StatusOr<std::unique_ptr<Sequence>> CpuEngine::NewSequence() { return slots_.Acquire(); }

double CpuEngine::AccountedSeconds() const {
  double accounted = 0.0;
  for (double seconds : runner_.phase_seconds()) accounted += seconds;
  return accounted;
}

absl::Status CpuEngine::Forward(Sequence& seq, std::span<const int32_t> tokens, LogitRows host_rows,
                                float* host_logits) {
  have_logits_ = false;
  if (absl::Status s = slots_.CheckTokens(seq, tokens, hp_.n_vocab); !s.ok()) return s;
  if (host_rows != LogitRows::kNone && host_logits == nullptr) {
    return absl::InvalidArgumentError("no logits buffer");
  }
  std::vector<LayerState>& state = state_[static_cast<size_t>(seq.slot())];
  const int pos0 = seq.length();
  const double start = CpuMatRunner::Now();
  const double accounted = AccountedSeconds();
  const int n = static_cast<int>(tokens.size());
  const size_t n_vocab = static_cast<size_t>(hp_.n_vocab);
  for (int done = 0; done < n;) {
    const int batch = std::min(config_.max_batch, n - done);
    const bool last_batch = done + batch == n;
    // kAll: every row straight to the caller; otherwise only the final row,
    // into the engine's own row.
    float* out = nullptr;
    int first_row = batch - 1;
    if (host_rows == LogitRows::kAll) {
      out = host_logits + static_cast<size_t>(done) * n_vocab;
      first_row = 0;
    } else if (last_batch) {
      out = last_logits_.data();
    }
    out_rows_.clear();
    if (out != nullptr) {
      for (int r = first_row; r < batch; ++r) out_rows_.push_back(r);
    }
    const BatchPart part{&state, CpuRowSpan{.row0 = 0, .n = batch, .pos0 = pos0 + done}};
    if (absl::Status s = ForwardBatch(std::span<const BatchPart>(&part, 1), tokens.data() + done,
                                      batch, out_rows_, out);
        !s.ok()) {
      return s;
    }
    done += batch;
    slots_.SetLength(seq, pos0 + done);
  }
  if (host_rows == LogitRows::kAll) {
    std::memcpy(last_logits_.data(), host_logits + (tokens.size() - 1) * n_vocab,
                n_vocab * sizeof(float));
  } else if (host_rows == LogitRows::kLast) {
    std::memcpy(host_logits, last_logits_.data(), n_vocab * sizeof(float));
  }
  have_logits_ = true;
  runner_.AddPhaseTime(CpuPhase::kOther,
                       (CpuMatRunner::Now() - start) - (AccountedSeconds() - accounted));
  return absl::OkStatus();
}

absl::Status CpuEngine::ForwardMany(std::span<const SequenceStep> steps) {
  have_logits_ = false;
  if (absl::Status s = CheckDistinctSequences(steps); !s.ok()) return s;
  for (const SequenceStep& step : steps) {
    if (absl::Status s = slots_.CheckTokens(*step.seq, step.tokens, hp_.n_vocab); !s.ok()) return s;
  }
  if (steps.size() > 1 &&
      (config_.routing_observer != nullptr ||
       (config_.routing_override != nullptr && !config_.routing_override->routes_rows_alone()))) {
    return absl::FailedPreconditionError(
        "routing hooks (trace recording or replay) follow one sequence at a time; run the "
        "sequences one by one");
  }
  const double start = CpuMatRunner::Now();
  const double accounted = AccountedSeconds();
  const size_t n_vocab = static_cast<size_t>(hp_.n_vocab);
  // Distinct sequences of this engine: at most max_sequences steps.
  step_done_.assign(steps.size(), 0);
  size_t first_left = 0;  // the first step with tokens left
  while (first_left < steps.size()) {
    parts_.clear();
    batch_tokens_.clear();
    out_rows_.clear();
    out_steps_.clear();
    int rows = 0;
    const int max_out_rows =
        many_logits_.empty() ? 1 : static_cast<int>(many_logits_.size() / n_vocab);
    for (size_t i = first_left; i < steps.size() && rows < config_.max_batch; ++i) {
      const SequenceStep& step = steps[i];
      const int left = static_cast<int>(step.tokens.size()) - step_done_[i];
      if (left == 0) continue;
      const bool wants_row = step.last_logits != nullptr;
      // A pass ends before a step whose logits row would not fit.
      if (wants_row && static_cast<int>(out_steps_.size()) == max_out_rows) break;
      const int take = std::min(left, config_.max_batch - rows);
      const int pos0 = step.seq->length();  // advanced after each pass
      parts_.push_back({&state_[static_cast<size_t>(step.seq->slot())],
                        CpuRowSpan{.row0 = rows, .n = take, .pos0 = pos0}});
      batch_tokens_.insert(batch_tokens_.end(), step.tokens.begin() + step_done_[i],
                           step.tokens.begin() + step_done_[i] + take);
      rows += take;
      if (take == left && wants_row) {
        out_rows_.push_back(rows - 1);
        out_steps_.push_back(i);
      }
    }
    float* out = out_rows_.empty() ? nullptr
                 : many_logits_.empty() ? steps[out_steps_[0]].last_logits
                                        : many_logits_.data();
    if (absl::Status s = ForwardBatch(parts_, batch_tokens_.data(), rows, out_rows_, out);
        !s.ok()) {
      return s;
    }
    size_t part = 0;
    for (size_t i = first_left; part < parts_.size(); ++i) {
      if (parts_[part].state != &state_[static_cast<size_t>(steps[i].seq->slot())]) continue;
      step_done_[i] += parts_[part].span.n;
      slots_.SetLength(*steps[i].seq, parts_[part].span.pos0 + parts_[part].span.n);
      ++part;
    }
    if (!many_logits_.empty()) {
      for (size_t r = 0; r < out_steps_.size(); ++r) {
        std::memcpy(steps[out_steps_[r]].last_logits, many_logits_.data() + r * n_vocab,
                    n_vocab * sizeof(float));
      }
    }
    while (first_left < steps.size() &&
           step_done_[first_left] == static_cast<int>(steps[first_left].tokens.size())) {
      ++first_left;
    }
  }
  runner_.AddPhaseTime(CpuPhase::kOther,
                       (CpuMatRunner::Now() - start) - (AccountedSeconds() - accounted));
  return absl::OkStatus();
}

absl::Status CpuEngine::SkipPositionsForTiming(Sequence& seq, int n) {
  if (n < 0) return absl::InvalidArgumentError("a negative number of positions to skip");
  if (absl::Status s = slots_.CheckAppend(seq, static_cast<size_t>(n)); !s.ok()) return s;
  have_logits_ = false;
  if (seq.length() == 0) {
    // As a computed start would: the recurrent layers begin empty, so that
    // runs from a fresh sequence repeat themselves.
    std::vector<LayerState>& layers = state_[static_cast<size_t>(seq.slot())];
    for (size_t l = 0; l < layers.size(); ++l) {
      if (weights_.layers[l].mixer != MixerKind::kGatedDeltaNet) continue;
      CpuRecurrentLayer& r = layers[l].recurrent;
      if (r.conv.size() > 0) std::memset(r.conv.data(), 0, r.conv.size());
      std::memset(r.delta.data(), 0, r.delta.size());
    }
  }
  slots_.SetLength(seq, seq.length() + n);
  return absl::OkStatus();
}

absl::Status CpuEngine::ForwardBatch(std::span<const BatchPart> parts, const int32_t* tokens,
                                     int n, std::span<const int> out_rows, float* logits) {
  const int64_t n_embd = hp_.n_embd;
  float* x = batch_->x();
  const WeightRef& embd = weights_.token_embd;
  for (int t = 0; t < n; ++t) {
    cpu::EmbeddingRow(embd.type, embd.row(tokens[t]), n_embd, x + t * n_embd);
  }
  spans_.clear();
  for (const BatchPart& part : parts) spans_.push_back(part.span);
  attention_->BeginBatch(spans_);
  for (int l = 0; l < hp_.n_layer; ++l) {
    const LayerWeights& layer = weights_.layers[static_cast<size_t>(l)];
    switch (layer.mixer) {
      case MixerKind::kAttention:
      case MixerKind::kGatedAttention:
        kv_of_part_.clear();
        for (const BatchPart& part : parts) kv_of_part_.push_back(&(*part.state)[l].kv);
        attention_->Forward(l, spans_, kv_of_part_);
        break;
      case MixerKind::kGatedDeltaNet:
        recurrent_of_part_.clear();
        for (const BatchPart& part : parts) {
          recurrent_of_part_.push_back(&(*part.state)[l].recurrent);
        }
        deltanet_->Forward(l, spans_, recurrent_of_part_);
        break;
    }
    switch (layer.ffn) {
      case FfnKind::kMoe:
      case FfnKind::kMoeWithSharedExpert:
      case FfnKind::kDense:
        // Routing hooks see the first part's positions: with hooks that
        // follow positions a batch holds one sequence (ForwardMany refuses
        // more).
        if (absl::Status s = moe_->Forward(l, n, parts.front().span.pos0); !s.ok()) return s;
        break;
    }
  }
  if (logits == nullptr || out_rows.empty()) return absl::OkStatus();
  // Final norm and output projection, for the rows asked for.
  const int count = static_cast<int>(out_rows.size());
  batch_->NormRowList(out_rows, output_norm_.data(), hp_.rms_eps);
  const WeightRef& out = weights_.output;
  MatJob* jobs = runner_.jobs();
  jobs[0] = MakeMatJob(out, out.data, batch_->PrepareInput(count, out.type), count, logits);
  runner_.Run(jobs, 1, CpuPhase::kOutput);
  return absl::OkStatus();
}

absl::Status CpuEngine::SaveCheckpoint(Sequence& seq) {
  if (absl::Status s = slots_.CheckAppend(seq, 0); !s.ok()) return s;
  const size_t slot = static_cast<size_t>(seq.slot());
  for (size_t l = 0; l < state_[slot].size(); ++l) {
    const CpuRecurrentLayer& from = state_[slot][l].recurrent;
    CpuRecurrentLayer& to = checkpoints_[slot][l];
    std::memcpy(to.conv.data(), from.conv.data(), from.conv.size());
    std::memcpy(to.delta.data(), from.delta.data(), from.delta.size());
  }
  slots_.SetCheckpoint(seq, seq.length());
  return absl::OkStatus();
}

absl::Status CpuEngine::RestoreCheckpoint(Sequence& seq) {
  if (absl::Status s = slots_.CheckAppend(seq, 0); !s.ok()) return s;
  if (seq.checkpoint_length() < 0) {
    return absl::FailedPreconditionError("the sequence has no checkpoint to restore");
  }
  const size_t slot = static_cast<size_t>(seq.slot());
  for (size_t l = 0; l < state_[slot].size(); ++l) {
    const CpuRecurrentLayer& from = checkpoints_[slot][l];
    CpuRecurrentLayer& to = state_[slot][l].recurrent;
    std::memcpy(to.conv.data(), from.conv.data(), from.conv.size());
    std::memcpy(to.delta.data(), from.delta.data(), from.delta.size());
  }
  slots_.SetLength(seq, seq.checkpoint_length());
  have_logits_ = false;
  return absl::OkStatus();
}

absl::StatusOr<int32_t> CpuEngine::Sample(Sampler& sampler) {
  if (!have_logits_) {
    return absl::FailedPreconditionError("no logits to sample from: run Forward first");
  }
  return sampler.Sample(last_logits_);
}

absl::StatusOr<std::span<const float>> CpuEngine::LastLogitsRow() {
  if (!have_logits_) {
    return absl::FailedPreconditionError("no logits kept: run Forward first");
  }
  return std::span<const float>(last_logits_);
}

absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCpuEngineWithConfig(
    const Model& model, const CpuEngineConfig& config) {
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(model, config);
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<ForwardEngine>(std::move(*engine));
}

absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCpuEngine(const Model& model,
                                                               const EngineOptions& options) {
  CpuEngineConfig config;
  config.max_ctx = options.max_ctx;
  config.max_sequences = options.max_sequences;
  config.n_threads = options.n_threads;
  config.kv_types = options.kv_types;
  config.expert_source = options.expert_source;
  config.routing_observer = options.routing_observer;
  config.routing_override = options.routing_override;
  switch (options.weight_pages) {
    case WeightPages::kHuge:
      config.copy_weights_to_huge_pages = true;
      break;
    case WeightPages::kMapped:
      break;
    case WeightPages::kAuto:
      config.copy_weights_to_huge_pages = cpu::HugePageCopyPays(cpu::UnionBytes(
          WeightSpans(model.weights, /*include_experts=*/options.expert_source == nullptr)));
      if (config.copy_weights_to_huge_pages) {
        absl::StatusOr<std::unique_ptr<ForwardEngine>> engine =
            CreateCpuEngineWithConfig(model, config);
        // Without transparent huge pages the mapping is the only choice left.
        if (engine.ok() || engine.status().code() != absl::StatusCode::kFailedPrecondition) {
          return engine;
        }
        config.copy_weights_to_huge_pages = false;
      }
      break;
  }
  return CreateCpuEngineWithConfig(model, config);
}

}  // namespace moetier
