#include "engine/qwen3moe_cpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_ops.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier {
namespace {

// Weight bytes a task should cover at least, so that dispatch and chunk
// bookkeeping stay small next to the kernel work.
constexpr uint64_t kMinTaskWeightBytes = 32 * 1024;
// Chunks per thread and job at most; several per thread balance uneven
// progress without stealing.
constexpr int kMaxChunksPerThread = 4;
// Element-wise work below this many values runs on the calling thread: a
// dispatch costs more than it saves (decode-sized rows).
constexpr int64_t kMinParallelElems = 32 * 1024;
// Prefetch serves decoding: a longer batch routes to most of a layer's
// experts, which its own Acquire fetches together anyway.
constexpr int kMaxPrefetchTokens = 4;

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<float> DecodeVector(const WeightRef& ref) {
  std::vector<float> out(static_cast<size_t>(ref.ne[0]));
  DequantizeRow(ref.type, ref.data, out.data(), ref.ne[0]);
  return out;
}

size_t MaxActRowBytes(int64_t k) {
  // F32 rows are the largest prepared format (4 bytes per value).
  size_t bytes = cpu::ActRowBytes(TensorType::kF32, k);
  if (k % 32 == 0) bytes = std::max(bytes, cpu::ActRowBytes(TensorType::kQ8_0, k));
  if (k % 256 == 0) bytes = std::max(bytes, cpu::ActRowBytes(TensorType::kQ4_K, k));
  return bytes;
}

absl::Status CheckMatrix(const WeightRef& ref, int64_t cols, int64_t rows, int64_t experts) {
  if (ref.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("tensor %s has no data", ref.name));
  }
  if (!cpu::SupportsWeightType(ref.type)) {
    return absl::UnimplementedError(absl::StrFormat(
        "tensor %s is %s, which the cpu backend cannot compute with; it supports F32, F16, BF16, "
        "Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (requantize the model or use --backend reference)",
        ref.name, std::string(TensorTypeName(ref.type))));
  }
  if (ref.ne[0] != cols || ref.ne[1] != rows || ref.ne[2] != experts) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s has shape {%d, %d, %d}, expected {%d, %d, %d}", ref.name,
                        ref.ne[0], ref.ne[1], ref.ne[2], cols, rows, experts));
  }
  if (cols % cpu::WeightBlockElems(ref.type) != 0 ||
      ref.row_bytes != static_cast<uint64_t>(TensorRowBytes(ref.type, cols))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s: rows of %d %s values are not whole blocks of %d bytes",
                        ref.name, cols, std::string(TensorTypeName(ref.type)), ref.row_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckVector(const WeightRef& ref, int64_t n) {
  if (ref.data == nullptr || ref.ne[0] != n || ref.ne[1] != 1 || ref.ne[2] != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s has shape {%d, %d, %d}, expected {%d}", ref.name, ref.ne[0],
                        ref.ne[1], ref.ne[2], n));
  }
  if (!GetTensorTypeInfo(ref.type).has_codec || n % GetTensorTypeInfo(ref.type).block_elems != 0) {
    return absl::UnimplementedError(
        absl::StrFormat("tensor %s has type %s, which cannot be decoded", ref.name,
                        std::string(TensorTypeName(ref.type))));
  }
  return absl::OkStatus();
}

// Every tensor of the weight table, for visiting them all; without the
// routed experts' tensors when they come from an ExpertWeightSource.
// `Weights` is Qwen3MoeWeights or const Qwen3MoeWeights.
template <typename Weights>
auto AllRefs(Weights& w, bool include_experts) {
  using Ref = std::conditional_t<std::is_const_v<Weights>, const WeightRef, WeightRef>;
  std::vector<Ref*> refs = {&w.token_embd, &w.output_norm, &w.output};
  for (auto& l : w.layers) {
    for (Ref* r : {&l.attn_norm, &l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output, &l.attn_q_norm,
                   &l.attn_k_norm, &l.ffn_norm, &l.ffn_gate_inp}) {
      refs.push_back(r);
    }
    if (include_experts) {
      for (Ref* r : {&l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps}) refs.push_back(r);
    }
  }
  return refs;
}

// The bytes a tensor spans: ne[2] matrices of ne[1] rows (expert matrices of a
// fused gate/up tensor interleave, so the span also covers the other half).
cpu::ByteRange Span(const WeightRef& r) {
  const uint64_t rows_bytes = static_cast<uint64_t>(r.ne[1]) * r.row_bytes;
  const uint64_t bytes = static_cast<uint64_t>(r.ne[2] - 1) * r.expert_stride_bytes + rows_bytes;
  return {r.data, r.data + bytes};
}

std::vector<cpu::ByteRange> WeightSpans(const Qwen3MoeWeights& w, bool include_experts) {
  std::vector<cpu::ByteRange> spans;
  for (const WeightRef* r : AllRefs(w, include_experts)) spans.push_back(Span(*r));
  return spans;
}

}  // namespace

// ------------------------------------------------------------------ buffers

AlignedBytes::AlignedBytes(size_t bytes) : size_(bytes) {
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  data_ = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
  MOETIER_CPU_CHECK(data_ != nullptr, "out of memory allocating engine buffers");
  std::memset(data_, 0, rounded);
}

AlignedBytes::~AlignedBytes() { std::free(data_); }

AlignedBytes::AlignedBytes(AlignedBytes&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBytes& AlignedBytes::operator=(AlignedBytes&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

// A buffer of prepared activation rows. `fresh` marks that it holds the
// current sublayer input (xn_), so that matrices sharing that input (q/k/v,
// router/gate/up) prepare it once per format.
struct CpuQwen3Moe::ActCache {
  AlignedBytes bytes;
  bool fresh = false;
};

struct CpuQwen3Moe::MatJob {
  TensorType type;
  int64_t k;         // input length
  int64_t rows;      // output rows
  const uint8_t* w;  // row 0
  size_t w_row_bytes;
  const uint8_t* act;  // prepared activation rows
  size_t act_row_bytes;
  int64_t n_act;
  float* out;  // out[m * ldo + r]
  int64_t ldo;
};

struct CpuQwen3Moe::Task {
  int32_t job;
  int64_t r0, r1;
};

// ------------------------------------------------------------------ creation

absl::StatusOr<std::unique_ptr<CpuQwen3Moe>> CpuQwen3Moe::Create(const Qwen3MoeModel& model,
                                                                 const CpuEngineConfig& config) {
  const Qwen3MoeHparams& hp = model.hparams;
  if (config.max_ctx < 1 || config.max_ctx > hp.n_ctx_train) {
    return absl::InvalidArgumentError(
        absl::StrFormat("context length %d is outside 1..%d (the model's training context)",
                        config.max_ctx, hp.n_ctx_train));
  }
  if (config.n_threads < 1 || config.n_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrFormat("thread count %d is outside 1..1024", config.n_threads));
  }
  if (config.max_batch < 1 || config.max_batch > 8192) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch size %d is outside 1..8192", config.max_batch));
  }
  if (hp.n_layer < 1 || hp.n_embd < 1 || hp.n_head < 1 || hp.n_head_kv < 1 || hp.head_dim < 2 ||
      hp.head_dim % 2 != 0 || hp.n_head % hp.n_head_kv != 0 || hp.n_expert < 1 ||
      hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert || hp.n_ff_exp < 1 || hp.n_vocab < 1 ||
      static_cast<int>(model.weights.layers.size()) != hp.n_layer) {
    return absl::InvalidArgumentError("inconsistent qwen3moe hyperparameters");
  }
  const Qwen3MoeWeights& w = model.weights;
  const int64_t q_dim = static_cast<int64_t>(hp.n_head) * hp.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(hp.n_head_kv) * hp.head_dim;
  absl::Status status;
  auto check = [&](absl::Status s) {
    if (status.ok() && !s.ok()) status = std::move(s);
  };
  check(CheckMatrix(w.token_embd, hp.n_embd, hp.n_vocab, 1));
  check(CheckMatrix(w.output, hp.n_embd, hp.n_vocab, 1));
  check(CheckVector(w.output_norm, hp.n_embd));
  for (const Qwen3MoeLayerWeights& l : w.layers) {
    check(CheckVector(l.attn_norm, hp.n_embd));
    check(CheckVector(l.ffn_norm, hp.n_embd));
    check(CheckVector(l.attn_q_norm, hp.head_dim));
    check(CheckVector(l.attn_k_norm, hp.head_dim));
    check(CheckMatrix(l.attn_q, hp.n_embd, q_dim, 1));
    check(CheckMatrix(l.attn_k, hp.n_embd, kv_dim, 1));
    check(CheckMatrix(l.attn_v, hp.n_embd, kv_dim, 1));
    check(CheckMatrix(l.attn_output, q_dim, hp.n_embd, 1));
    check(CheckMatrix(l.ffn_gate_inp, hp.n_embd, hp.n_expert, 1));
    check(CheckMatrix(l.ffn_gate_exps, hp.n_embd, hp.n_ff_exp, hp.n_expert));
    check(CheckMatrix(l.ffn_up_exps, hp.n_embd, hp.n_ff_exp, hp.n_expert));
    check(CheckMatrix(l.ffn_down_exps, hp.n_ff_exp, hp.n_embd, hp.n_expert));
  }
  if (!status.ok()) return status;
  if (config.expert_source != nullptr && config.expert_source->max_experts_held() < 1) {
    return absl::InvalidArgumentError("the expert source can hold no experts at once");
  }
  std::unique_ptr<CpuQwen3Moe> engine(new CpuQwen3Moe(model, config));
  if (config.copy_weights_to_huge_pages) {
    if (absl::Status s = engine->CopyWeightsToHugePages(); !s.ok()) return s;
  }
  engine->Allocate();
  return engine;
}

CpuQwen3Moe::CpuQwen3Moe(const Qwen3MoeModel& model, const CpuEngineConfig& config)
    : hp_(model.hparams), weights_(model.weights), config_(config), pool_(config.n_threads) {}

absl::Status CpuQwen3Moe::CopyWeightsToHugePages() {
  // Experts from a source live elsewhere (the daemon's store): copying their
  // tensors would read the whole model file for bytes never used.
  const bool include_experts = config_.expert_source == nullptr;
  absl::StatusOr<cpu::HugePageCopy> copy =
      cpu::HugePageCopy::Create(WeightSpans(weights_, include_experts), true);
  if (!copy.ok()) return copy.status();
  for (WeightRef* r : AllRefs(weights_, include_experts)) r->data = copy->Translate(r->data);
  weight_copy_ = std::move(*copy);
  return absl::OkStatus();
}

CpuQwen3Moe::~CpuQwen3Moe() = default;

void CpuQwen3Moe::Allocate() {
  const size_t b = static_cast<size_t>(config_.max_batch);
  const size_t bk = b * hp_.n_expert_used;
  const size_t f = sizeof(float);
  const size_t n_embd = hp_.n_embd;
  const size_t q_dim = static_cast<size_t>(hp_.n_head) * hp_.head_dim;
  const size_t kv_dim = static_cast<size_t>(hp_.n_head_kv) * hp_.head_dim;

  output_norm_ = DecodeVector(weights_.output_norm);
  for (const Qwen3MoeLayerWeights& l : weights_.layers) {
    norms_.push_back({DecodeVector(l.attn_norm), DecodeVector(l.ffn_norm),
                      DecodeVector(l.attn_q_norm), DecodeVector(l.attn_k_norm)});
    k_cache_.emplace_back(static_cast<size_t>(config_.max_ctx) * kv_dim * f);
    v_cache_.emplace_back(static_cast<size_t>(config_.max_ctx) * kv_dim * f);
  }
  x_ = AlignedBytes(b * n_embd * f);
  xn_ = AlignedBytes(b * n_embd * f);
  q_ = AlignedBytes(b * q_dim * f);
  k_ = AlignedBytes(b * kv_dim * f);
  v_ = AlignedBytes(b * kv_dim * f);
  attn_out_ = AlignedBytes(b * q_dim * f);
  sub_out_ = AlignedBytes(b * n_embd * f);
  rope_cos_ = AlignedBytes(b * (hp_.head_dim / 2) * f);
  rope_sin_ = AlignedBytes(b * (hp_.head_dim / 2) * f);
  scores_ = AlignedBytes(static_cast<size_t>(config_.n_threads) * (hp_.n_head / hp_.n_head_kv) *
                         config_.max_ctx * f);
  router_logits_ = AlignedBytes(b * hp_.n_expert * f);
  router_probs_ = AlignedBytes(b * hp_.n_expert * f);
  topk_ids_.assign(bk, 0);
  topk_weights_.assign(bk, 0.0f);
  expert_count_.assign(hp_.n_expert, 0);
  expert_offset_.assign(hp_.n_expert + 1, 0);
  slot_token_.assign(bk, 0);
  token_slot_.assign(bk, 0);
  used_experts_.assign(hp_.n_expert, 0);
  predicted_.assign(hp_.n_expert, 0);
  expert_mats_.assign(hp_.n_expert, ExpertMatrices{});
  gate_out_ = AlignedBytes(bk * hp_.n_ff_exp * f);
  up_out_ = AlignedBytes(bk * hp_.n_ff_exp * f);
  down_out_ = AlignedBytes(bk * n_embd * f);
  act_gather_gate_ = AlignedBytes(bk * MaxActRowBytes(hp_.n_embd));
  act_gather_up_ = AlignedBytes(bk * MaxActRowBytes(hp_.n_embd));
  auto cache = [](size_t rows, int64_t k) {
    auto c = std::make_unique<ActCache>();
    c->bytes = AlignedBytes(rows * MaxActRowBytes(k));
    return c;
  };
  for (auto& c : act_in_) c = cache(b, hp_.n_embd);
  act_attn_ = cache(b, static_cast<int64_t>(q_dim));
  act_ff_ = cache(bk, hp_.n_ff_exp);
  // At most 2 * n_expert jobs (gate and up of every expert) per dispatch.
  jobs_.resize(2 * static_cast<size_t>(hp_.n_expert) + 4);
  tasks_.resize(jobs_.size() * kMaxChunksPerThread * config_.n_threads);
}

uint64_t CpuQwen3Moe::allocated_bytes() const {
  uint64_t bytes = 0;
  if (weight_copy_.has_value()) bytes += weight_copy_->size();
  for (const AlignedBytes& a : k_cache_) bytes += a.size();
  for (const AlignedBytes& a : v_cache_) bytes += a.size();
  for (const AlignedBytes* a : {&x_, &xn_, &q_, &k_, &v_, &attn_out_, &sub_out_, &rope_cos_,
                                &rope_sin_, &scores_, &router_logits_, &router_probs_, &gate_out_,
                                &up_out_, &down_out_, &act_gather_gate_, &act_gather_up_}) {
    bytes += a->size();
  }
  for (const ActCache* c :
       {act_in_[0].get(), act_in_[1].get(), act_in_[2].get(), act_attn_.get(), act_ff_.get()}) {
    bytes += c->bytes.size();
  }
  return bytes;
}

// ------------------------------------------------------------------ helpers

const uint8_t* CpuQwen3Moe::PrepareAct(ActCache& cache, const float* x, int64_t n, int64_t k,
                                       TensorType type) {
  const size_t row_bytes = cpu::ActRowBytes(type, k);
  MOETIER_CPU_CHECK(static_cast<size_t>(n) * row_bytes <= cache.bytes.size(),
                    "activation buffer too small");
  uint8_t* dst = cache.bytes.data();
  // Rows are independent; split them when there are enough to matter.
  if (n >= 2 && n * k >= kMinParallelElems) {
    pool_.ParallelForRange(n, 1, [&](int64_t begin, int64_t end, int) {
      cpu::QuantizeActRows(type, x + begin * k, k, k, end - begin, dst + begin * row_bytes);
    });
  } else {
    cpu::QuantizeActRows(type, x, k, k, n, dst);
  }
  return dst;
}

const uint8_t* CpuQwen3Moe::PrepareInput(int n, TensorType type) {
  // One buffer per format: the format alone decides the bytes.
  ActCache& cache = *act_in_[static_cast<int>(cpu::ActFormatFor(type))];
  if (!cache.fresh) {
    PrepareAct(cache, xn_.floats(), n, hp_.n_embd, type);
    cache.fresh = true;
  }
  return cache.bytes.data();
}

void CpuQwen3Moe::ForgetInputs() {
  for (auto& c : act_in_) c->fresh = false;
}

CpuQwen3Moe::MatJob CpuQwen3Moe::Job(const WeightRef& w, const uint8_t* w_data, const uint8_t* act,
                                     int64_t n_act, float* out) {
  return {.type = w.type,
          .k = w.cols(),
          .rows = w.rows(),
          .w = w_data,
          .w_row_bytes = w.row_bytes,
          .act = act,
          .act_row_bytes = cpu::ActRowBytes(w.type, w.cols()),
          .n_act = n_act,
          .out = out,
          .ldo = w.rows()};
}

void CpuQwen3Moe::RunJobs(const MatJob* jobs, int n_jobs, CpuPhase phase) {
  const double start = NowSeconds();
  const int64_t max_chunks = static_cast<int64_t>(kMaxChunksPerThread) * config_.n_threads;
  size_t n_tasks = 0;
  for (int j = 0; j < n_jobs; ++j) {
    const MatJob& job = jobs[j];
    if (job.n_act == 0 || job.rows == 0) continue;
    const uint64_t bytes = static_cast<uint64_t>(job.rows) * job.w_row_bytes;
    int64_t chunks = static_cast<int64_t>(bytes / kMinTaskWeightBytes);
    chunks = std::clamp<int64_t>(chunks, 1, std::min<int64_t>(max_chunks, job.rows));
    // Whole groups of 16 rows keep the kernels' row loops long.
    const int64_t per_chunk = ((job.rows + chunks - 1) / chunks + 15) / 16 * 16;
    for (int64_t r0 = 0; r0 < job.rows; r0 += per_chunk) {
      MOETIER_CPU_CHECK(n_tasks < tasks_.size(), "task list too small");
      tasks_[n_tasks++] = {j, r0, std::min(job.rows, r0 + per_chunk)};
    }
  }
  pool_.ParallelFor(static_cast<int64_t>(n_tasks), [&](int64_t t, int) {
    const Task& task = tasks_[t];
    const MatJob& job = jobs[task.job];
    cpu::MatMul(job.type, job.k, job.w, job.w_row_bytes, task.r0, task.r1, job.act,
                job.act_row_bytes, job.n_act, job.out, job.ldo);
  });
  phase_seconds_[static_cast<int>(phase)] += NowSeconds() - start;
}

// ------------------------------------------------------------------ forward

absl::Status CpuQwen3Moe::Forward(std::span<const int32_t> tokens, int pos0, LogitRows rows,
                                  float* logits) {
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens to run");
  if (pos0 < 0 || pos0 > cached_tokens_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "start position %d is outside 0..%d (the cached positions)", pos0, cached_tokens_));
  }
  if (static_cast<int64_t>(pos0) + static_cast<int64_t>(tokens.size()) > config_.max_ctx) {
    return absl::OutOfRangeError(
        absl::StrFormat("%d tokens at position %d exceed the context length %d", tokens.size(),
                        pos0, config_.max_ctx));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "token %d at index %d is outside the vocabulary 0..%d", tokens[i], i, hp_.n_vocab - 1));
    }
  }
  if (logits == nullptr) return absl::InvalidArgumentError("no logits buffer");
  cached_tokens_ = pos0;
  const double start = NowSeconds();
  double accounted = 0.0;
  for (double seconds : phase_seconds_) accounted += seconds;
  const int n = static_cast<int>(tokens.size());
  for (int done = 0; done < n;) {
    const int batch = std::min(config_.max_batch, n - done);
    // kLast wants logits from the final batch only.
    float* out = nullptr;
    if (rows == LogitRows::kAll) {
      out = logits + static_cast<int64_t>(done) * hp_.n_vocab;
    } else if (done + batch == n) {
      out = logits;
    }
    if (absl::Status s = ForwardBatch(tokens.data() + done, batch, pos0 + done, rows, out);
        !s.ok()) {
      return s;
    }
    done += batch;
    cached_tokens_ = pos0 + done;
  }
  double now_accounted = 0.0;
  for (double seconds : phase_seconds_) now_accounted += seconds;
  phase_seconds_[static_cast<int>(CpuPhase::kOther)] +=
      (NowSeconds() - start) - (now_accounted - accounted);
  return absl::OkStatus();
}

absl::Status CpuQwen3Moe::ForwardBatch(const int32_t* tokens, int n, int pos0, LogitRows rows,
                                       float* logits) {
  const int64_t n_embd = hp_.n_embd;
  float* x = x_.floats();
  const WeightRef& embd = weights_.token_embd;
  for (int t = 0; t < n; ++t) {
    cpu::EmbeddingRow(embd.type, embd.row(tokens[t]), n_embd, x + t * n_embd);
  }
  const int half = hp_.head_dim / 2;
  for (int t = 0; t < n; ++t) {
    cpu::RopeAngles(pos0 + t, hp_.head_dim, hp_.rope_freq_base, rope_cos_.floats() + t * half,
                    rope_sin_.floats() + t * half);
  }
  for (int l = 0; l < hp_.n_layer; ++l) {
    Attention(l, n, pos0);
    if (absl::Status s = MoeFfn(l, n, pos0); !s.ok()) return s;
  }
  if (logits == nullptr) return absl::OkStatus();
  // Final norm and output projection, for every row or just the last.
  const int first = rows == LogitRows::kAll ? 0 : n - 1;
  const int count = n - first;
  float* xn = xn_.floats();
  for (int t = first; t < n; ++t) {
    cpu::RmsNorm(x + t * n_embd, output_norm_.data(), n_embd, hp_.rms_eps,
                 xn + (t - first) * n_embd);
  }
  const WeightRef& out = weights_.output;
  ForgetInputs();
  const uint8_t* act = PrepareInput(count, out.type);
  const MatJob job = Job(out, out.data, act, count, logits);
  RunJobs(&job, 1, CpuPhase::kOutput);
  return absl::OkStatus();
}

void CpuQwen3Moe::Attention(int layer, int n, int pos0) {
  const Qwen3MoeLayerWeights& lw = weights_.layers[layer];
  const LayerNorms& norms = norms_[layer];
  const int64_t n_embd = hp_.n_embd;
  const int64_t q_dim = static_cast<int64_t>(hp_.n_head) * hp_.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(hp_.n_head_kv) * hp_.head_dim;
  float* x = x_.floats();
  float* xn = xn_.floats();
  for (int t = 0; t < n; ++t) {
    cpu::RmsNorm(x + t * n_embd, norms.attn_norm.data(), n_embd, hp_.rms_eps, xn + t * n_embd);
  }
  // q, k and v read the same normed input: it is prepared once per format.
  ForgetInputs();
  const WeightRef* mats[3] = {&lw.attn_q, &lw.attn_k, &lw.attn_v};
  float* outs[3] = {q_.floats(), k_.floats(), v_.floats()};
  MatJob* jobs = jobs_.data();
  for (int i = 0; i < 3; ++i) {
    const WeightRef& m = *mats[i];
    const uint8_t* act = PrepareInput(n, m.type);
    jobs[i] = Job(m, m.data, act, n, outs[i]);
  }
  RunJobs(jobs, 3, CpuPhase::kDenseMatmul);

  // QK-norm, then NEOX rope, then into the cache.
  const int half = hp_.head_dim / 2;
  const int64_t kv_head_stride = static_cast<int64_t>(config_.max_ctx) * hp_.head_dim;
  float* kc = k_cache_[layer].floats();
  float* vc = v_cache_[layer].floats();
  for (int t = 0; t < n; ++t) {
    float* qt = q_.floats() + t * q_dim;
    float* kt = k_.floats() + t * kv_dim;
    cpu::RmsNormHeads(qt, norms.q_norm.data(), hp_.n_head, hp_.head_dim, hp_.rms_eps);
    cpu::RmsNormHeads(kt, norms.k_norm.data(), hp_.n_head_kv, hp_.head_dim, hp_.rms_eps);
    const float* c = rope_cos_.floats() + t * half;
    const float* s = rope_sin_.floats() + t * half;
    cpu::RopeNeox(qt, hp_.n_head, hp_.head_dim, hp_.head_dim, c, s);
    cpu::RopeNeox(kt, hp_.n_head_kv, hp_.head_dim, hp_.head_dim, c, s);
    // Head-major cache: each KV head's rows are contiguous.
    const float* vt = v_.floats() + t * kv_dim;
    for (int g = 0; g < hp_.n_head_kv; ++g) {
      const int64_t at = g * kv_head_stride + static_cast<int64_t>(pos0 + t) * hp_.head_dim;
      std::memcpy(kc + at, kt + g * hp_.head_dim, hp_.head_dim * sizeof(float));
      std::memcpy(vc + at, vt + g * hp_.head_dim, hp_.head_dim * sizeof(float));
    }
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(hp_.head_dim));
  // One task per token and KV head: the query heads sharing a KV head read
  // its cached rows together.
  const int n_head_kv = hp_.n_head_kv;
  const int group = hp_.n_head / n_head_kv;
  const int64_t scores_per_thread = static_cast<int64_t>(group) * config_.max_ctx;
  auto attend = [&](int64_t task, int thread) {
    const int t = static_cast<int>(task / n_head_kv);
    const int g = static_cast<int>(task % n_head_kv);
    cpu::AttentionHeads(q_.floats() + t * q_dim, kc, vc, kv_head_stride, hp_.head_dim, pos0 + t + 1,
                        hp_.n_head, n_head_kv, hp_.head_dim, scale, g * group, (g + 1) * group,
                        scores_.floats() + thread * scores_per_thread,
                        attn_out_.floats() + t * q_dim);
  };
  // Cached values the batch reads, to decide whether splitting pays.
  const double attn_start = NowSeconds();
  const int64_t attn_elems = static_cast<int64_t>(n) * (pos0 + n) * kv_dim;
  if (attn_elems >= kMinParallelElems) {
    pool_.ParallelFor(static_cast<int64_t>(n) * n_head_kv, attend);
  } else {
    for (int64_t task = 0; task < static_cast<int64_t>(n) * n_head_kv; ++task) attend(task, 0);
  }
  phase_seconds_[static_cast<int>(CpuPhase::kAttention)] += NowSeconds() - attn_start;

  const WeightRef& wo = lw.attn_output;
  const uint8_t* act = PrepareAct(*act_attn_, attn_out_.floats(), n, q_dim, wo.type);
  jobs[0] = Job(wo, wo.data, act, n, sub_out_.floats());
  RunJobs(jobs, 1, CpuPhase::kDenseMatmul);
  const float* sub = sub_out_.floats();
  for (int64_t i = 0; i < n * n_embd; ++i) x[i] += sub[i];
}

absl::Status CpuQwen3Moe::AcquireExperts(int layer, int first, int count) {
  const std::span<const int32_t> ids(used_experts_.data() + first, static_cast<size_t>(count));
  const std::span<ExpertMatrices> mats(expert_mats_.data() + first, static_cast<size_t>(count));
  ExpertWeightSource* source = config_.expert_source;
  if (source == nullptr) {
    const Qwen3MoeLayerWeights& lw = weights_.layers[layer];
    for (int i = 0; i < count; ++i) {
      mats[i] = {lw.ffn_gate_exps.expert(ids[i]), lw.ffn_up_exps.expert(ids[i]),
                 lw.ffn_down_exps.expert(ids[i])};
    }
    return absl::OkStatus();
  }
  const double start = NowSeconds();
  absl::Status status = source->Acquire(layer, ids, mats);
  phase_seconds_[static_cast<int>(CpuPhase::kExpertFetch)] += NowSeconds() - start;
  return status;
}

absl::Status CpuQwen3Moe::ApplyRoutingHooks(int layer, int n, int pos0) {
  const int top_k = hp_.n_expert_used;
  const size_t n_choices = static_cast<size_t>(n) * top_k;
  RoutingBatch batch{.layer = layer,
                     .n_layer = hp_.n_layer,
                     .n_expert = hp_.n_expert,
                     .top_k = top_k,
                     .pos0 = pos0,
                     .n_tokens = n,
                     .experts = {},
                     .weights = {}};
  if (RoutingOverride* override = config_.routing_override; override != nullptr) {
    const std::span<int32_t> ids(topk_ids_.data(), n_choices);
    if (absl::Status s = override->Override(batch, ids); !s.ok()) return s;
    for (int t = 0; t < n; ++t) {
      const int32_t* chosen = ids.data() + static_cast<size_t>(t) * top_k;
      for (int j = 0; j < top_k; ++j) {
        if (chosen[j] < 0 || chosen[j] >= hp_.n_expert) {
          return absl::InternalError(absl::StrFormat(
              "routing override chose expert %d for layer %d at position %d; the model has "
              "experts 0..%d",
              chosen[j], layer, pos0 + t, hp_.n_expert - 1));
        }
      }
      // The router's probabilities of the chosen experts, summed and
      // divided in RouterTopK's order and precision, so that the router's
      // own choice gets its own weights bit for bit.
      const float* probs = router_probs_.floats() + static_cast<size_t>(t) * hp_.n_expert;
      float* weights = topk_weights_.data() + static_cast<size_t>(t) * top_k;
      float sum = 0.0f;
      for (int j = 0; j < top_k; ++j) {
        weights[j] = probs[chosen[j]];
        sum += weights[j];
      }
      const float denom = std::fmax(sum, 6.1035e-5f);
      for (int j = 0; j < top_k; ++j) weights[j] /= denom;
    }
  }
  if (RoutingObserver* observer = config_.routing_observer; observer != nullptr) {
    batch.experts = std::span<const int32_t>(topk_ids_.data(), n_choices);
    batch.weights = std::span<const float>(topk_weights_.data(), n_choices);
    if (absl::Status s = observer->OnRouting(batch); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CpuQwen3Moe::MoeFfn(int layer, int n, int pos0) {
  const Qwen3MoeLayerWeights& lw = weights_.layers[layer];
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_ff = hp_.n_ff_exp;
  const int n_expert = hp_.n_expert;
  const int top_k = hp_.n_expert_used;
  float* x = x_.floats();
  MatJob* jobs = jobs_.data();
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
  const WeightRef& gate = lw.ffn_gate_exps;
  const WeightRef& up = lw.ffn_up_exps;
  const WeightRef& down = lw.ffn_down_exps;
  const size_t gate_row_bytes = cpu::ActRowBytes(gate.type, n_embd);
  const size_t up_row_bytes = cpu::ActRowBytes(up.type, n_embd);
  const uint8_t* gate_src = PrepareInput(n, gate.type);
  const uint8_t* up_src = PrepareInput(n, up.type);
  const bool same_format = cpu::ActFormatFor(gate.type) == cpu::ActFormatFor(up.type);
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
  const int group_max =
      config_.expert_source != nullptr ? config_.expert_source->max_experts_held() : n_used;
  float* gate_out = gate_out_.floats();
  float* up_out = up_out_.floats();
  float* down_out = down_out_.floats();
  const size_t down_row_bytes = cpu::ActRowBytes(down.type, n_ff);
  for (int g0 = 0; g0 < n_used; g0 += group_max) {
    const int g1 = std::min(n_used, g0 + group_max);
    if (absl::Status s = AcquireExperts(layer, g0, g1 - g0); !s.ok()) return s;
    // The group's rows are contiguous: experts ascend, and so do their rows.
    const int64_t s0 = expert_offset_[used_experts_[g0]];
    const int64_t s1 = expert_offset_[used_experts_[g1 - 1] + 1];
    int n_jobs = 0;
    for (int i = g0; i < g1; ++i) {
      const int e = used_experts_[i];
      const int64_t count = expert_offset_[e + 1] - expert_offset_[e];
      const int64_t off = expert_offset_[e];
      jobs[n_jobs++] = Job(gate, expert_mats_[i].gate, gate_act + off * gate_row_bytes, count,
                           gate_out + off * n_ff);
      jobs[n_jobs++] =
          Job(up, expert_mats_[i].up, up_act + off * up_row_bytes, count, up_out + off * n_ff);
    }
    RunJobs(jobs, n_jobs, CpuPhase::kExperts);

    float* g = gate_out + s0 * n_ff;
    const float* u = up_out + s0 * n_ff;
    const int64_t rows = s1 - s0;
    if (rows * n_ff >= kMinParallelElems) {
      pool_.ParallelForRange(rows, 1, [&](int64_t begin, int64_t end, int) {
        cpu::SiluMul(g + begin * n_ff, u + begin * n_ff, (end - begin) * n_ff, g + begin * n_ff);
      });
    } else {
      cpu::SiluMul(g, u, rows * n_ff, g);
    }
    // Row 0 of down_act is the group's first row, s0.
    const uint8_t* down_act = PrepareAct(*act_ff_, g, rows, n_ff, down.type);
    n_jobs = 0;
    for (int i = g0; i < g1; ++i) {
      const int e = used_experts_[i];
      const int64_t count = expert_offset_[e + 1] - expert_offset_[e];
      const int64_t off = expert_offset_[e];
      jobs[n_jobs++] = Job(down, expert_mats_[i].down, down_act + (off - s0) * down_row_bytes,
                           count, down_out + off * n_embd);
    }
    RunJobs(jobs, n_jobs, CpuPhase::kExperts);
    if (config_.expert_source != nullptr) config_.expert_source->Release(layer);
  }

  // Weighted sum in the router's order, then the residual.
  for (int t = 0; t < n; ++t) {
    float* xt = x + t * n_embd;
    float* acc = sub_out_.floats();
    std::fill(acc, acc + n_embd, 0.0f);
    for (int j = 0; j < top_k; ++j) {
      cpu::AxpyF32(topk_weights_[t * top_k + j], down_out + token_slot_[t * top_k + j] * n_embd,
                   acc, n_embd);
    }
    for (int64_t i = 0; i < n_embd; ++i) xt[i] += acc[i];
  }
  if (config_.expert_source != nullptr && config_.expert_source->wants_prefetch() &&
      layer + 1 < hp_.n_layer && n <= kMaxPrefetchTokens) {
    return PrefetchNextLayer(layer + 1, n);
  }
  return absl::OkStatus();
}

void CpuQwen3Moe::RouteTokens(int layer, int n) {
  const int64_t n_embd = hp_.n_embd;
  const int n_expert = hp_.n_expert;
  const int top_k = hp_.n_expert_used;
  float* xn = xn_.floats();
  for (int t = 0; t < n; ++t) {
    cpu::RmsNorm(x_.floats() + t * n_embd, norms_[layer].ffn_norm.data(), n_embd, hp_.rms_eps,
                 xn + t * n_embd);
  }
  ForgetInputs();
  // Softmax over all experts, top-k, renormalized.
  const WeightRef& router = weights_.layers[layer].ffn_gate_inp;
  const uint8_t* act = PrepareInput(n, router.type);
  jobs_[0] = Job(router, router.data, act, n, router_logits_.floats());
  RunJobs(jobs_.data(), 1, CpuPhase::kRouter);
  for (int t = 0; t < n; ++t) {
    cpu::RouterTopK(router_logits_.floats() + t * n_expert, n_expert, top_k, true,
                    router_probs_.floats() + t * n_expert, topk_ids_.data() + t * top_k,
                    topk_weights_.data() + t * top_k);
  }
}

absl::Status CpuQwen3Moe::PrefetchNextLayer(int layer, int n) {
  // The next layer's router on the hidden state as it stands now, before
  // that layer's attention: a close enough guess of its real input.
  const int top_k = hp_.n_expert_used;
  RouteTokens(layer, n);
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
  ForgetInputs();
  const double start = NowSeconds();
  absl::Status status = config_.expert_source->Prefetch(
      layer, std::span<const int32_t>(predicted_.data(), static_cast<size_t>(n_predicted)));
  phase_seconds_[static_cast<int>(CpuPhase::kExpertFetch)] += NowSeconds() - start;
  return status;
}

std::string_view CpuPhaseName(CpuPhase phase) {
  switch (phase) {
    case CpuPhase::kDenseMatmul:
      return "attention projections";
    case CpuPhase::kRouter:
      return "router";
    case CpuPhase::kExperts:
      return "experts";
    case CpuPhase::kOutput:
      return "output projection";
    case CpuPhase::kAttention:
      return "attention";
    case CpuPhase::kExpertFetch:
      return "expert fetch";
    case CpuPhase::kOther:
      return "other";
    case CpuPhase::kCount:
      break;
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCpuQwen3MoeEngine(
    const Qwen3MoeModel& model, const CpuEngineConfig& config) {
  absl::StatusOr<std::unique_ptr<CpuQwen3Moe>> engine = CpuQwen3Moe::Create(model, config);
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<ForwardEngine>(std::move(*engine));
}

absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCpuEngine(const Qwen3MoeModel& model,
                                                               const EngineOptions& options) {
  CpuEngineConfig config;
  config.max_ctx = options.max_ctx;
  config.n_threads = options.n_threads;
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
            CreateCpuQwen3MoeEngine(model, config);
        // Without transparent huge pages the mapping is the only choice left.
        if (engine.ok() || engine.status().code() != absl::StatusCode::kFailedPrecondition) {
          return engine;
        }
        config.copy_weights_to_huge_pages = false;
      }
      break;
  }
  return CreateCpuQwen3MoeEngine(model, config);
}

}  // namespace moetier
