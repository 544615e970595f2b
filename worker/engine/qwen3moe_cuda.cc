#include "engine/qwen3moe_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backend/cuda/cuda_device.h"
#include "base/check.h"
#include "engine/cuda_check.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier {
namespace {

using cuda::CudaStream;

// RouterTopK's and Attention's limits (backend/cuda/cuda_ops.cu).
constexpr int kMaxExperts = 1024;
constexpr int kMaxTopK = 64;
constexpr int kMaxHeadDim = 256;
// Attention and RoPE put tokens on the grid's y dimension.
constexpr int kMaxBatch = 8192;

absl::Status CheckMatrix(const WeightRef& ref, int64_t cols, int64_t rows, int64_t experts) {
  if (ref.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("tensor %s has no data", ref.name));
  }
  if (!cuda::CudaWeightTypeSupported(ref.type)) {
    return absl::UnimplementedError(absl::StrFormat(
        "tensor %s is %s, which the CUDA backend cannot compute with; it supports F32, F16, BF16, "
        "Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (requantize the model or use the cpu backend)",
        ref.name, std::string(TensorTypeName(ref.type))));
  }
  if (ref.ne[0] != cols || ref.ne[1] != rows || ref.ne[2] != experts) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s has shape {%d, %d, %d}, expected {%d, %d, %d}", ref.name,
                        ref.ne[0], ref.ne[1], ref.ne[2], cols, rows, experts));
  }
  if (cols % GetTensorTypeInfo(ref.type).block_elems != 0 ||
      ref.row_bytes != static_cast<uint64_t>(TensorRowBytes(ref.type, cols))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s: rows of %d %s values are not whole blocks of %d bytes",
                        ref.name, cols, std::string(TensorTypeName(ref.type)), ref.row_bytes));
  }
  if (experts > 1 &&
      ref.expert_stride_bytes < static_cast<uint64_t>(rows) * ref.row_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s: experts %d bytes apart overlap their %d rows", ref.name,
        ref.expert_stride_bytes, rows));
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

// The bytes a matrix tensor spans: ne[2] matrices of ne[1] rows (the experts
// of a fused gate/up tensor interleave, so its span covers the other half
// too, and the two halves' spans overlap).
struct HostSpan {
  const uint8_t* begin;
  const uint8_t* end;
  std::vector<std::string> names;
  uint8_t* device = nullptr;
};

HostSpan SpanOf(const WeightRef& r) {
  const uint64_t bytes = static_cast<uint64_t>(r.ne[2] - 1) * r.expert_stride_bytes +
                         static_cast<uint64_t>(r.ne[1]) * r.row_bytes;
  return {r.data, r.data + bytes, {r.name}, nullptr};
}

// Every expert of the model in device memory, uploaded with the rest of the
// weights: the DeviceExperts the engine uses when the config gives none.
class ResidentExperts final : public DeviceExperts {
 public:
  struct LayerExperts {
    const uint8_t* gate = nullptr;
    const uint8_t* up = nullptr;
    const uint8_t* down = nullptr;
    uint64_t gate_stride = 0, up_stride = 0, down_stride = 0;
  };

  ResidentExperts(std::vector<LayerExperts> layers, int n_expert)
      : layers_(std::move(layers)), n_expert_(n_expert) {}

  absl::StatusOr<DeviceExpertMatrices> ExpertPointers(int layer, int expert,
                                                      CudaStream /*stream*/) override {
    if (layer < 0 || layer >= static_cast<int>(layers_.size()) || expert < 0 ||
        expert >= n_expert_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("no expert %d of layer %d (the model has %d layers of %d experts)",
                          expert, layer, layers_.size(), n_expert_));
    }
    const LayerExperts& l = layers_[static_cast<size_t>(layer)];
    const uint64_t e = static_cast<uint64_t>(expert);
    return DeviceExpertMatrices{l.gate + e * l.gate_stride, l.up + e * l.up_stride,
                                l.down + e * l.down_stride};
  }

 private:
  std::vector<LayerExperts> layers_;
  int n_expert_;
};

}  // namespace

// ------------------------------------------------------------------ creation

absl::StatusOr<std::unique_ptr<CudaQwen3Moe>> CudaQwen3Moe::Create(const Qwen3MoeModel& model,
                                                                   const CudaEngineConfig& config) {
  const Qwen3MoeHparams& hp = model.hparams;
  if (config.max_ctx < 1 || config.max_ctx > hp.n_ctx_train) {
    return absl::InvalidArgumentError(
        absl::StrFormat("context length %d is outside 1..%d (the model's training context)",
                        config.max_ctx, hp.n_ctx_train));
  }
  if (config.max_batch < 1 || config.max_batch > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch size %d is outside 1..%d", config.max_batch, kMaxBatch));
  }
  if (config.gemv_max_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gemv_max_rows %d is negative", config.gemv_max_rows));
  }
  if (hp.n_layer < 1 || hp.n_embd < 1 || hp.n_head < 1 || hp.n_head_kv < 1 || hp.head_dim < 2 ||
      hp.head_dim % 2 != 0 || hp.n_head % hp.n_head_kv != 0 || hp.n_expert < 1 ||
      hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert || hp.n_ff_exp < 1 || hp.n_vocab < 1 ||
      static_cast<int>(model.weights.layers.size()) != hp.n_layer) {
    return absl::InvalidArgumentError("inconsistent qwen3moe hyperparameters");
  }
  if (config.device_experts != nullptr && config.expert_source != nullptr) {
    return absl::InvalidArgumentError(
        "give the engine either device_experts or an expert_source (with its VRAM cache), not "
        "both");
  }
  if (config.expert_source != nullptr) {
    const CudaExpertCacheConfig& c = config.expert_cache;
    if (c.pool_bytes < -1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "expert cache size %d bytes is negative (-1 sizes it from free VRAM)", c.pool_bytes));
    }
    if (c.static_host_layers < -1 || c.static_host_layers > hp.n_layer) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "static placement with %d host layers is outside -1..%d (the model's MoE layers)",
          c.static_host_layers, hp.n_layer));
    }
  }
  if (hp.head_dim > kMaxHeadDim || hp.n_expert > kMaxExperts || hp.n_expert_used > kMaxTopK) {
    return absl::UnimplementedError(absl::StrFormat(
        "the CUDA engine handles head_dim up to %d, %d experts and top-%d routing; this model "
        "has head_dim %d, %d experts, top-%d (use the cpu backend)",
        kMaxHeadDim, kMaxExperts, kMaxTopK, hp.head_dim, hp.n_expert, hp.n_expert_used));
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
    // With an external expert source only the types and shapes matter: the
    // engine never reads these tensors' bytes.
    check(CheckMatrix(l.ffn_gate_exps, hp.n_embd, hp.n_ff_exp, hp.n_expert));
    check(CheckMatrix(l.ffn_up_exps, hp.n_embd, hp.n_ff_exp, hp.n_expert));
    check(CheckMatrix(l.ffn_down_exps, hp.n_ff_exp, hp.n_embd, hp.n_expert));
  }
  if (!status.ok()) return status;

  // Only the count: listing the devices would create a context on each.
  const int n_devices = CudaDeviceCount();
  if (n_devices == 0) {
    absl::StatusOr<std::vector<CudaDeviceInfo>> devices = ListCudaDevices();
    return absl::UnavailableError(absl::StrFormat(
        "no CUDA device on this machine (%s); use the cpu backend",
        devices.ok() ? "none found" : devices.status().message()));
  }
  if (config.device < 0 || config.device >= n_devices) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CUDA device %d does not exist; this machine has cuda:0..cuda:%d", config.device,
        n_devices - 1));
  }
  if (config.use_cublas && !cuda::CudaBlasAvailable()) {
    return absl::InvalidArgumentError(
        "use_cublas is set but this build has no cuBLAS; use the tiled GEMM (use_cublas = false)");
  }

  std::unique_ptr<CudaQwen3Moe> engine(new CudaQwen3Moe(model, config));
  MOETIER_RETURN_IF_ERROR(engine->Init(model));
  return engine;
}

CudaQwen3Moe::CudaQwen3Moe(const Qwen3MoeModel& model, const CudaEngineConfig& config)
    : hp_(model.hparams), config_(config) {}

CudaQwen3Moe::~CudaQwen3Moe() {
  // Errors are ignored here: a failed device leaves nothing to do but free.
  cudaSetDevice(config_.device);
  if (stream_ != nullptr) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  cache_.reset();  // waits for its copies, releases the source, frees the pool
  if (host_rows_ready_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(host_rows_ready_));
  blas_.reset();  // its stream is ours
  for (void* p : device_blocks_) cudaFree(p);
  for (void* p : pinned_blocks_) cudaFreeHost(p);
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  cudaGetLastError();
}

absl::StatusOr<void*> CudaQwen3Moe::DeviceAlloc(uint64_t bytes, const std::string& what) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, std::max<uint64_t>(bytes, 1));
  if (err == cudaSuccess) {
    device_blocks_.push_back(p);
    return p;
  }
  cudaGetLastError();
  size_t free_bytes = 0, total_bytes = 0;
  std::string memory = "unknown";
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    memory = absl::StrFormat("%.2f GiB free of %.2f GiB", free_bytes / 1073741824.0,
                             total_bytes / 1073741824.0);
  }
  cudaGetLastError();
  const std::string message = absl::StrFormat(
      "cudaMalloc of %d bytes (%.1f MiB) for %s on cuda:%d failed: %s; device memory: %s; "
      "already allocated by this engine: %.2f GiB of weights, %.2f GiB of buffers",
      bytes, bytes / 1048576.0, what, config_.device, cudaGetErrorString(err), memory,
      weight_bytes_ / 1073741824.0, buffer_bytes_ / 1073741824.0);
  if (err != cudaErrorMemoryAllocation) return absl::InternalError(message);
  return absl::ResourceExhaustedError(
      message + " (use a smaller model, a shorter context or a smaller batch)");
}

absl::StatusOr<float*> CudaQwen3Moe::UploadVector(const WeightRef& ref) {
  std::vector<float> values(static_cast<size_t>(ref.ne[0]));
  DequantizeRow(ref.type, ref.data, values.data(), ref.ne[0]);
  const uint64_t bytes = values.size() * sizeof(float);
  absl::StatusOr<void*> p = DeviceAlloc(bytes, "tensor " + ref.name);
  if (!p.ok()) return p.status();
  weight_bytes_ += bytes;
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaMemcpy(*p, values.data(), bytes, cudaMemcpyHostToDevice),
                                   "copying tensor " + ref.name + " to the device"));
  return static_cast<float*>(*p);
}

absl::Status CudaQwen3Moe::Init(const Qwen3MoeModel& model) {
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaSetDevice(config_.device),
                                   absl::StrFormat("cudaSetDevice(%d)", config_.device)));
  cudaStream_t stream = nullptr;
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  stream_ = stream;
  const bool gemm_possible = config_.gemv_max_rows < config_.max_batch;
  if (gemm_possible && config_.use_cublas) {
    absl::StatusOr<std::unique_ptr<cuda::CudaBlas>> blas = cuda::CudaBlas::Create();
    if (!blas.ok()) return blas.status();
    blas_ = *std::move(blas);
  }
  MOETIER_RETURN_IF_ERROR(UploadWeights(model));
  MOETIER_RETURN_IF_ERROR(AllocateBuffers());
  // The uploads and memsets ran on the legacy stream, which the engine's
  // non-blocking stream does not wait for, and a cudaMemcpy from pageable
  // memory may return before its DMA is done.
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaDeviceSynchronize(), "waiting for the weight uploads to the device"));
  expert_count_.assign(static_cast<size_t>(hp_.n_expert), 0);
  expert_offset_.assign(static_cast<size_t>(hp_.n_expert) + 1, 0);
  if (config_.expert_source == nullptr) return absl::OkStatus();

  // After every other allocation: an automatic pool takes what is left.
  absl::StatusOr<std::unique_ptr<CudaExpertCache>> cache =
      CudaExpertCache::Create(model, *config_.expert_source, config_.expert_cache,
                              config_.dma_ranges, config_.max_batch, stream_);
  if (!cache.ok()) return cache.status();
  cache_ = *std::move(cache);
  cudaEvent_t ready = nullptr;
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
                                   "cudaEventCreate"));
  host_rows_ready_ = ready;
  const size_t n_expert = static_cast<size_t>(hp_.n_expert);
  group_ids_.assign(n_expert, 0);
  group_rows_.assign(n_expert, 0);
  placements_.assign(n_expert, {});
  need_ids_.assign(n_expert, 0);
  need_index_.assign(n_expert, 0);
  need_mats_.assign(n_expert, {});
  fill_jobs_.assign(n_expert, {});
  prefetch_fills_.assign(n_expert, {});
  predicted_.assign(n_expert, 0);
  return absl::OkStatus();
}

absl::Status CudaQwen3Moe::UploadWeights(const Qwen3MoeModel& model) {
  const Qwen3MoeWeights& w = model.weights;
  const bool own_experts = config_.device_experts == nullptr && config_.expert_source == nullptr;
  std::vector<const WeightRef*> matrices = {&w.token_embd, &w.output};
  for (const Qwen3MoeLayerWeights& l : w.layers) {
    for (const WeightRef* r : {&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output, &l.ffn_gate_inp}) {
      matrices.push_back(r);
    }
    if (own_experts) {
      for (const WeightRef* r : {&l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps}) {
        matrices.push_back(r);
      }
    }
  }
  // One device block per run of overlapping host spans: a tied output shares
  // the embedding's bytes and fused gate/up halves share theirs, and each
  // must be uploaded once.
  std::vector<HostSpan> spans;
  spans.reserve(matrices.size());
  for (const WeightRef* r : matrices) spans.push_back(SpanOf(*r));
  std::sort(spans.begin(), spans.end(),
            [](const HostSpan& a, const HostSpan& b) { return a.begin < b.begin; });
  std::vector<HostSpan> merged;
  for (HostSpan& s : spans) {
    if (!merged.empty() && s.begin < merged.back().end) {
      HostSpan& m = merged.back();
      m.end = std::max(m.end, s.end);
      for (std::string& name : s.names) m.names.push_back(std::move(name));
    } else {
      merged.push_back(std::move(s));
    }
  }
  for (HostSpan& m : merged) {
    const uint64_t bytes = static_cast<uint64_t>(m.end - m.begin);
    const std::string what = "tensor " + absl::StrJoin(m.names, " + ");
    absl::StatusOr<void*> p = DeviceAlloc(bytes, what);
    if (!p.ok()) return p.status();
    m.device = static_cast<uint8_t*>(*p);
    weight_bytes_ += bytes;
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaMemcpy(m.device, m.begin, bytes, cudaMemcpyHostToDevice),
                                     "copying " + what + " to the device"));
  }
  // The device address of a host address inside an uploaded span.
  auto translate = [&merged](const uint8_t* host) -> const uint8_t* {
    auto it = std::upper_bound(merged.begin(), merged.end(), host,
                               [](const uint8_t* p, const HostSpan& s) { return p < s.begin; });
    MOETIER_CHECK(it != merged.begin());
    --it;
    MOETIER_CHECK(host >= it->begin && host < it->end);
    return it->device + (host - it->begin);
  };
  auto matrix = [&](const WeightRef& r) {
    return Matrix{r.type, r.ne[1], r.ne[0], translate(r.data)};
  };
  token_embd_ = matrix(w.token_embd);
  output_ = matrix(w.output);
  absl::StatusOr<float*> output_norm = UploadVector(w.output_norm);
  if (!output_norm.ok()) return output_norm.status();
  output_norm_ = *output_norm;
  std::vector<ResidentExperts::LayerExperts> resident;
  layers_.resize(w.layers.size());
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const Qwen3MoeLayerWeights& src = w.layers[il];
    Layer& l = layers_[il];
    for (auto [dst, ref] : {std::pair{&l.attn_norm, &src.attn_norm},
                            std::pair{&l.ffn_norm, &src.ffn_norm},
                            std::pair{&l.q_norm, &src.attn_q_norm},
                            std::pair{&l.k_norm, &src.attn_k_norm}}) {
      absl::StatusOr<float*> v = UploadVector(*ref);
      if (!v.ok()) return v.status();
      *dst = *v;
    }
    l.wq = matrix(src.attn_q);
    l.wk = matrix(src.attn_k);
    l.wv = matrix(src.attn_v);
    l.wo = matrix(src.attn_output);
    l.router = matrix(src.ffn_gate_inp);
    l.gate_type = src.ffn_gate_exps.type;
    l.up_type = src.ffn_up_exps.type;
    l.down_type = src.ffn_down_exps.type;
    if (own_experts) {
      resident.push_back({translate(src.ffn_gate_exps.data), translate(src.ffn_up_exps.data),
                          translate(src.ffn_down_exps.data),
                          src.ffn_gate_exps.expert_stride_bytes,
                          src.ffn_up_exps.expert_stride_bytes,
                          src.ffn_down_exps.expert_stride_bytes});
    }
  }
  if (own_experts) {
    own_experts_ = std::make_unique<ResidentExperts>(std::move(resident), hp_.n_expert);
    experts_ = own_experts_.get();
  } else {
    experts_ = config_.device_experts;  // null with an expert source: the cache's slots
  }
  return absl::OkStatus();
}

absl::Status CudaQwen3Moe::AllocateBuffers() {
  const uint64_t b = static_cast<uint64_t>(config_.max_batch);
  const uint64_t bk = b * static_cast<uint64_t>(hp_.n_expert_used);
  const uint64_t n_embd = static_cast<uint64_t>(hp_.n_embd);
  const uint64_t q_dim = static_cast<uint64_t>(hp_.n_head) * hp_.head_dim;
  const uint64_t kv_dim = static_cast<uint64_t>(hp_.n_head_kv) * hp_.head_dim;
  const uint64_t n_ff = static_cast<uint64_t>(hp_.n_ff_exp);
  const uint64_t n_expert = static_cast<uint64_t>(hp_.n_expert);

  auto alloc = [&](auto*& dst, uint64_t elems, const std::string& what) -> absl::Status {
    const uint64_t bytes = elems * sizeof(*dst);
    absl::StatusOr<void*> p = DeviceAlloc(bytes, what);
    if (!p.ok()) return p.status();
    buffer_bytes_ += bytes;
    dst = static_cast<std::remove_reference_t<decltype(dst)>>(*p);
    return absl::OkStatus();
  };
  const uint64_t kv_elems = static_cast<uint64_t>(config_.max_ctx) * kv_dim;
  for (size_t il = 0; il < layers_.size(); ++il) {
    Layer& l = layers_[il];
    const std::string what = absl::StrFormat("the KV cache of layer %d (%d tokens)", il,
                                             config_.max_ctx);
    MOETIER_RETURN_IF_ERROR(alloc(l.k_cache, kv_elems, what));
    MOETIER_RETURN_IF_ERROR(alloc(l.v_cache, kv_elems, what));
    // Never read before written, but zeros keep a stray read finite.
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaMemset(l.k_cache, 0, kv_elems * sizeof(float)),
                                     "cudaMemset of the KV cache"));
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaMemset(l.v_cache, 0, kv_elems * sizeof(float)),
                                     "cudaMemset of the KV cache"));
  }
  MOETIER_RETURN_IF_ERROR(alloc(positions_, static_cast<uint64_t>(config_.max_ctx), "positions"));
  {
    std::vector<int32_t> positions(static_cast<size_t>(config_.max_ctx));
    for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaMemcpy(positions_, positions.data(),
                                                positions.size() * sizeof(int32_t),
                                                cudaMemcpyHostToDevice),
                                     "copying rope positions to the device"));
  }
  MOETIER_RETURN_IF_ERROR(alloc(x_, b * n_embd, "activations (residual)"));
  MOETIER_RETURN_IF_ERROR(alloc(xn_, b * n_embd, "activations (normed)"));
  MOETIER_RETURN_IF_ERROR(alloc(q_, b * q_dim, "activations (q)"));
  MOETIER_RETURN_IF_ERROR(alloc(k_, b * kv_dim, "activations (k)"));
  MOETIER_RETURN_IF_ERROR(alloc(v_, b * kv_dim, "activations (v)"));
  MOETIER_RETURN_IF_ERROR(alloc(attn_out_, b * q_dim, "activations (attention)"));
  MOETIER_RETURN_IF_ERROR(alloc(sub_out_, b * n_embd, "activations (sublayer output)"));
  MOETIER_RETURN_IF_ERROR(alloc(router_logits_, b * n_expert, "router logits"));
  MOETIER_RETURN_IF_ERROR(alloc(router_probs_, b * n_expert, "router probabilities"));
  MOETIER_RETURN_IF_ERROR(alloc(topk_ids_, bk, "router choices"));
  MOETIER_RETURN_IF_ERROR(alloc(topk_weights_, bk, "router weights"));
  MOETIER_RETURN_IF_ERROR(alloc(slot_rows_, 2 * bk, "expert row maps"));
  MOETIER_RETURN_IF_ERROR(alloc(expert_in_, bk * n_embd, "expert inputs"));
  MOETIER_RETURN_IF_ERROR(alloc(gate_out_, bk * n_ff, "expert gate outputs"));
  MOETIER_RETURN_IF_ERROR(alloc(up_out_, bk * n_ff, "expert up outputs"));
  MOETIER_RETURN_IF_ERROR(alloc(down_out_, bk * n_embd, "expert outputs"));
  MOETIER_RETURN_IF_ERROR(
      alloc(logits_, b * static_cast<uint64_t>(hp_.n_vocab), "logits"));
  if (config_.gemv_max_rows < config_.max_batch) {
    // The GEMM's fp16 scratch: the largest matrix it may be given, and
    // max_batch rows of the widest input (an expert never gets more rows
    // than the batch has tokens).
    const uint64_t vocab_matrix = static_cast<uint64_t>(hp_.n_vocab) * n_embd;
    const uint64_t widest = std::max({n_embd, q_dim, n_ff});
    const uint64_t largest = std::max({vocab_matrix, q_dim * n_embd, kv_dim * n_embd,
                                       n_expert * n_embd, n_ff * n_embd});
    MOETIER_RETURN_IF_ERROR(alloc(w_scratch_, largest, "GEMM weight scratch (fp16)"));
    MOETIER_RETURN_IF_ERROR(alloc(x_scratch_, b * widest, "GEMM activation scratch (fp16)"));
    w_scratch_elems_ = static_cast<int64_t>(largest);
    x_scratch_elems_ = static_cast<int64_t>(b * widest);
  }
  const CudaExpertCacheConfig& cache_config = config_.expert_cache;
  const bool may_predict = config_.expert_source != nullptr && cache_config.prefetch &&
                           cache_config.static_host_layers < 0 && hp_.n_layer > 1;
  // The next layer's router for decode batches (prefetch).
  const uint64_t pred_rows =
      static_cast<uint64_t>(std::min(config_.max_batch, kCudaPrefetchMaxTokens));
  const uint64_t pk = may_predict ? pred_rows * static_cast<uint64_t>(hp_.n_expert_used) : 0;
  if (may_predict) {
    MOETIER_RETURN_IF_ERROR(alloc(pred_xn_, pred_rows * n_embd, "predicted router input"));
    MOETIER_RETURN_IF_ERROR(alloc(pred_logits_, pred_rows * n_expert, "predicted router logits"));
    MOETIER_RETURN_IF_ERROR(
        alloc(pred_probs_, pred_rows * n_expert, "predicted router probabilities"));
    MOETIER_RETURN_IF_ERROR(alloc(pred_ids_, pk, "predicted router choices"));
    MOETIER_RETURN_IF_ERROR(alloc(pred_weights_, pk, "predicted router weights"));
  }
  for (auto [dst, elems] : {std::pair{&host_topk_ids_, bk}, std::pair{&host_slot_rows_, 2 * bk},
                            std::pair{&host_pred_ids_, pk}}) {
    if (elems == 0) continue;
    void* p = nullptr;
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaMallocHost(&p, elems * sizeof(int32_t)),
                                     absl::StrFormat("cudaMallocHost of %d bytes",
                                                     elems * sizeof(int32_t))));
    pinned_blocks_.push_back(p);
    *dst = static_cast<int32_t*>(p);
  }
  const bool any_hook = config_.routing_observer != nullptr || config_.routing_override != nullptr;
  const uint64_t probs_elems = config_.routing_override != nullptr ? b * n_expert : 0;
  for (auto [dst, elems] : {std::pair{&host_topk_weights_, any_hook ? bk : 0},
                            std::pair{&host_router_probs_, probs_elems}}) {
    if (elems == 0) continue;
    void* p = nullptr;
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaMallocHost(&p, elems * sizeof(float)),
                                     absl::StrFormat("cudaMallocHost of %d bytes for routing",
                                                     elems * sizeof(float))));
    pinned_blocks_.push_back(p);
    *dst = static_cast<float*>(p);
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ forward

absl::StatusOr<uint64_t> CudaQwen3Moe::ResizeExpertCache(uint64_t pool_bytes) {
  if (cache_ == nullptr) {
    return absl::FailedPreconditionError(
        "this CUDA worker holds every expert in device memory and has no expert cache to resize");
  }
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaSetDevice(config_.device),
                                   absl::StrFormat("cudaSetDevice(%d)", config_.device)));
  return cache_->Resize(pool_bytes, stream_);
}

absl::Status CudaQwen3Moe::Sync(const char* where) {
  return CudaCall(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)),
                  absl::StrFormat("CUDA work of %s", where));
}

absl::Status CudaQwen3Moe::MatMul(const Matrix& w, const float* x, int64_t n, float* y) {
  if (n <= config_.gemv_max_rows) {
    for (int64_t t0 = 0; t0 < n; t0 += cuda::kCudaGemvMaxBatch) {
      const int rows = static_cast<int>(std::min<int64_t>(cuda::kCudaGemvMaxBatch, n - t0));
      MOETIER_RETURN_IF_ERROR(cuda::GemvQuant(w.type, w.data, x + t0 * w.cols, w.rows, w.cols,
                                              rows, y + t0 * w.rows, stream_));
    }
    return absl::OkStatus();
  }
  MOETIER_CHECK(w_scratch_ != nullptr && w.rows * w.cols <= w_scratch_elems_ &&
                n * w.cols <= x_scratch_elems_);
  return cuda::GemmQuant(blas_.get(), w.type, w.data, x, w.rows, w.cols, n, w_scratch_,
                         x_scratch_, y, stream_);
}

absl::Status CudaQwen3Moe::Forward(std::span<const int32_t> tokens, int pos0, LogitRows rows,
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
  // The current device is per host thread; the caller's may differ.
  MOETIER_RETURN_IF_ERROR(CudaCall(cudaSetDevice(config_.device),
                                   absl::StrFormat("cudaSetDevice(%d)", config_.device)));
  cached_tokens_ = pos0;
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
    absl::Status s = ForwardBatch(tokens.data() + done, batch, pos0 + done, rows, out);
    if (cache_ != nullptr) {
      // The last hold of the batch (a prefetch's, or a group's whose copies
      // nothing waited for) ends with it, also on failure.
      const absl::Status released = cache_->FinishHold();
      if (s.ok()) s = released;
    }
    MOETIER_RETURN_IF_ERROR(s);
    done += batch;
    cached_tokens_ = pos0 + done;
  }
  return absl::OkStatus();
}

absl::Status CudaQwen3Moe::ForwardBatch(const int32_t* tokens, int n, int pos0, LogitRows rows,
                                        float* logits) {
  const int64_t n_embd = hp_.n_embd;
  const uint64_t embd_row_bytes =
      static_cast<uint64_t>(TensorRowBytes(token_embd_.type, token_embd_.cols));
  const auto* embd = static_cast<const uint8_t*>(token_embd_.data);
  for (int t = 0; t < n; ++t) {
    MOETIER_RETURN_IF_ERROR(cuda::DequantizeToF32(
        token_embd_.type, embd + static_cast<uint64_t>(tokens[t]) * embd_row_bytes, n_embd,
        x_ + t * n_embd, stream_));
  }
  for (int l = 0; l < hp_.n_layer; ++l) {
    MOETIER_RETURN_IF_ERROR(AttentionBlock(l, n, pos0));
    MOETIER_RETURN_IF_ERROR(MoeBlock(l, n, pos0));
  }
  if (logits != nullptr) {
    // Final norm and output projection, for every row or just the last.
    const int first = rows == LogitRows::kAll ? 0 : n - 1;
    const int count = n - first;
    MOETIER_RETURN_IF_ERROR(cuda::RmsNorm(x_ + first * n_embd, output_norm_, count,
                                          static_cast<int>(n_embd), hp_.rms_eps, xn_, stream_));
    MOETIER_RETURN_IF_ERROR(MatMul(output_, xn_, count, logits_));
    const uint64_t bytes = static_cast<uint64_t>(count) * hp_.n_vocab * sizeof(float);
    MOETIER_RETURN_IF_ERROR(CudaCall(cudaMemcpyAsync(logits, logits_, bytes,
                                                     cudaMemcpyDeviceToHost,
                                                     static_cast<cudaStream_t>(stream_)),
                                     "copying logits to the host"));
  }
  // Also when no logits are wanted: the batch's cache entries are complete
  // (and any fault reported) before cached_tokens() counts them.
  return Sync("the forward pass");
}

absl::Status CudaQwen3Moe::AttentionBlock(int layer, int n, int pos0) {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  const int n_embd = hp_.n_embd;
  const int head_dim = hp_.head_dim;
  MOETIER_RETURN_IF_ERROR(cuda::RmsNorm(x_, l.attn_norm, n, n_embd, hp_.rms_eps, xn_, stream_));
  MOETIER_RETURN_IF_ERROR(MatMul(l.wq, xn_, n, q_));
  MOETIER_RETURN_IF_ERROR(MatMul(l.wk, xn_, n, k_));
  MOETIER_RETURN_IF_ERROR(MatMul(l.wv, xn_, n, v_));
  // QK-norm per head (in place), then NEOX rope over the whole head.
  MOETIER_RETURN_IF_ERROR(cuda::RmsNorm(q_, l.q_norm, static_cast<int64_t>(n) * hp_.n_head,
                                        head_dim, hp_.rms_eps, q_, stream_));
  MOETIER_RETURN_IF_ERROR(cuda::RmsNorm(k_, l.k_norm, static_cast<int64_t>(n) * hp_.n_head_kv,
                                        head_dim, hp_.rms_eps, k_, stream_));
  const int32_t* positions = positions_ + pos0;
  MOETIER_RETURN_IF_ERROR(cuda::RopeNeox(q_, positions, n, hp_.n_head, head_dim, head_dim,
                                         hp_.rope_freq_base, stream_));
  MOETIER_RETURN_IF_ERROR(cuda::RopeNeox(k_, positions, n, hp_.n_head_kv, head_dim, head_dim,
                                         hp_.rope_freq_base, stream_));
  // Head-major cache: KV head g's row for position p at g * max_ctx * head_dim
  // + p * head_dim.
  const int64_t kv_head_stride = static_cast<int64_t>(config_.max_ctx) * head_dim;
  MOETIER_RETURN_IF_ERROR(cuda::StoreKv(k_, n, hp_.n_head_kv, head_dim, l.k_cache,
                                        TensorType::kF32, kv_head_stride, head_dim, pos0,
                                        stream_));
  MOETIER_RETURN_IF_ERROR(cuda::StoreKv(v_, n, hp_.n_head_kv, head_dim, l.v_cache,
                                        TensorType::kF32, kv_head_stride, head_dim, pos0,
                                        stream_));
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  MOETIER_RETURN_IF_ERROR(cuda::Attention(q_, l.k_cache, l.v_cache, TensorType::kF32,
                                          kv_head_stride, head_dim, n, pos0, hp_.n_head,
                                          hp_.n_head_kv, head_dim, scale, attn_out_, stream_));
  MOETIER_RETURN_IF_ERROR(MatMul(l.wo, attn_out_, n, sub_out_));
  return cuda::AddInPlace(x_, sub_out_, static_cast<int64_t>(n) * n_embd, stream_);
}

absl::Status CudaQwen3Moe::RouteAndGroup(int layer, int n, int pos0, bool predict) {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  const int n_embd = hp_.n_embd;
  const int n_expert = hp_.n_expert;
  const int top_k = hp_.n_expert_used;
  const int n_slots = n * top_k;
  auto* stream = static_cast<cudaStream_t>(stream_);

  // Router: softmax over all experts, top-k, renormalized (as the reference).
  MOETIER_RETURN_IF_ERROR(cuda::RmsNorm(x_, l.ffn_norm, n, n_embd, hp_.rms_eps, xn_, stream_));
  MOETIER_RETURN_IF_ERROR(MatMul(l.router, xn_, n, router_logits_));
  MOETIER_RETURN_IF_ERROR(cuda::RouterTopK(router_logits_, n, n_expert, top_k, true,
                                           router_probs_, topk_ids_, topk_weights_, stream_));
  MOETIER_RETURN_IF_ERROR(CudaCall(
      cudaMemcpyAsync(host_topk_ids_, topk_ids_, static_cast<size_t>(n_slots) * sizeof(int32_t),
                      cudaMemcpyDeviceToHost, stream),
      "copying the router's choice to the host"));
  const bool hooks = config_.routing_override != nullptr || config_.routing_observer != nullptr;
  if (config_.routing_override != nullptr) {
    // The override's weights come from the router's probabilities.
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(host_router_probs_, router_probs_,
                        static_cast<size_t>(n) * n_expert * sizeof(float), cudaMemcpyDeviceToHost,
                        stream),
        "copying the router's probabilities to the host"));
  } else if (hooks) {
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(host_topk_weights_, topk_weights_,
                        static_cast<size_t>(n_slots) * sizeof(float), cudaMemcpyDeviceToHost,
                        stream),
        "copying the router's weights to the host"));
  }
  if (predict) {
    // The next layer's router on the same hidden state: its choice is
    // usually close to the one that layer will make, early enough to start
    // the copies during this layer's experts. A routing override is not
    // asked (it answers once per layer, when the layer runs), so while a
    // trace is replayed this predicts the router, not the trace.
    const Layer& next = layers_[static_cast<size_t>(layer) + 1];
    MOETIER_RETURN_IF_ERROR(
        cuda::RmsNorm(x_, next.ffn_norm, n, n_embd, hp_.rms_eps, pred_xn_, stream_));
    MOETIER_RETURN_IF_ERROR(MatMul(next.router, pred_xn_, n, pred_logits_));
    MOETIER_RETURN_IF_ERROR(cuda::RouterTopK(pred_logits_, n, n_expert, top_k, true, pred_probs_,
                                             pred_ids_, pred_weights_, stream_));
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(host_pred_ids_, pred_ids_, static_cast<size_t>(n_slots) * sizeof(int32_t),
                        cudaMemcpyDeviceToHost, stream),
        "copying the predicted choice to the host"));
  }
  MOETIER_RETURN_IF_ERROR(Sync("the router"));
  for (int i = 0; i < n_slots; ++i) {
    const int32_t e = host_topk_ids_[i];
    if (e < 0 || e >= n_expert) {
      // RouterTopK gives -1 only when the probabilities are NaN.
      return absl::InternalError(absl::StrFormat(
          "layer %d: the router chose expert %d for token %d of the batch (non-finite "
          "activations?)",
          layer, e, i / top_k));
    }
  }
  // An override's ids are checked there: from here every id is a valid
  // expert.
  if (hooks) MOETIER_RETURN_IF_ERROR(ApplyRoutingHooks(layer, n, pos0));

  // Group the (token, choice) pairs by expert, experts ascending. From here
  // until the next layer's Sync the device may still read host_slot_rows_
  // (the copy below), and nothing on the host writes it before that Sync.
  std::fill(expert_count_.begin(), expert_count_.end(), 0);
  for (int i = 0; i < n_slots; ++i) ++expert_count_[static_cast<size_t>(host_topk_ids_[i])];
  expert_offset_[0] = 0;
  for (int e = 0; e < n_expert; ++e) {
    expert_offset_[static_cast<size_t>(e) + 1] =
        expert_offset_[static_cast<size_t>(e)] + expert_count_[static_cast<size_t>(e)];
  }
  std::fill(expert_count_.begin(), expert_count_.end(), 0);
  // host_slot_rows_[slot] is the token of grouped row `slot`;
  // host_slot_rows_[n_slots + t * top_k + j] the grouped row of (t, j).
  int32_t* slot_token = host_slot_rows_;
  int32_t* token_slot = host_slot_rows_ + n_slots;
  for (int t = 0; t < n; ++t) {
    for (int j = 0; j < top_k; ++j) {
      const int e = host_topk_ids_[t * top_k + j];
      const size_t ue = static_cast<size_t>(e);
      const int slot = expert_offset_[ue] + expert_count_[ue]++;
      slot_token[slot] = t;
      token_slot[t * top_k + j] = slot;
    }
  }
  MOETIER_RETURN_IF_ERROR(CudaCall(
      cudaMemcpyAsync(slot_rows_, host_slot_rows_,
                      2 * static_cast<size_t>(n_slots) * sizeof(int32_t), cudaMemcpyHostToDevice,
                      stream),
      "copying the expert row maps to the device"));
  return cuda::GatherRows(xn_, slot_rows_, n_slots, n_embd, expert_in_, stream_);
}

absl::Status CudaQwen3Moe::ApplyRoutingHooks(int layer, int n, int pos0) {
  const int n_expert = hp_.n_expert;
  const int top_k = hp_.n_expert_used;
  const size_t n_choices = static_cast<size_t>(n) * top_k;
  auto* stream = static_cast<cudaStream_t>(stream_);
  RoutingBatch batch{.layer = layer,
                     .n_layer = hp_.n_layer,
                     .n_expert = n_expert,
                     .top_k = top_k,
                     .pos0 = pos0,
                     .n_tokens = n,
                     .experts = {},
                     .weights = {}};
  if (RoutingOverride* override = config_.routing_override; override != nullptr) {
    const std::span<int32_t> ids(host_topk_ids_, n_choices);
    MOETIER_RETURN_IF_ERROR(override->Override(batch, ids));
    for (int t = 0; t < n; ++t) {
      const int32_t* chosen = ids.data() + static_cast<size_t>(t) * top_k;
      for (int j = 0; j < top_k; ++j) {
        if (chosen[j] < 0 || chosen[j] >= n_expert) {
          return absl::InternalError(absl::StrFormat(
              "routing override chose expert %d for layer %d at position %d; the model has "
              "experts 0..%d",
              chosen[j], layer, pos0 + t, n_expert - 1));
        }
      }
      // The router's probabilities of the chosen experts, summed and
      // divided in RouterTopK's order and precision (IEEE fp32 on both
      // sides), so that the router's own choice gets its own weights bit
      // for bit.
      const float* probs = host_router_probs_ + static_cast<size_t>(t) * n_expert;
      float* weights = host_topk_weights_ + static_cast<size_t>(t) * top_k;
      float sum = 0.0f;
      for (int j = 0; j < top_k; ++j) {
        weights[j] = probs[chosen[j]];
        sum += weights[j];
      }
      const float denom = std::fmax(sum, 6.1035e-5f);
      for (int j = 0; j < top_k; ++j) weights[j] /= denom;
    }
    // On the stream before anything that reads them (the combine reads the
    // weights). The host writes these pinned buffers again only after the
    // next layer's Sync, by when both copies are done.
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(topk_ids_, host_topk_ids_, n_choices * sizeof(int32_t),
                        cudaMemcpyHostToDevice, stream),
        "copying the overridden choice to the device"));
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(topk_weights_, host_topk_weights_, n_choices * sizeof(float),
                        cudaMemcpyHostToDevice, stream),
        "copying the overridden weights to the device"));
  }
  if (RoutingObserver* observer = config_.routing_observer; observer != nullptr) {
    batch.experts = std::span<const int32_t>(host_topk_ids_, n_choices);
    batch.weights = std::span<const float>(host_topk_weights_, n_choices);
    MOETIER_RETURN_IF_ERROR(observer->OnRouting(batch));
  }
  return absl::OkStatus();
}

absl::Status CudaQwen3Moe::LaunchExpert(int layer, const void* gate_w, const void* up_w,
                                        const void* down_w, int64_t off, int64_t count) {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_ff = hp_.n_ff_exp;
  const Matrix gate{l.gate_type, n_ff, n_embd, gate_w};
  const Matrix up{l.up_type, n_ff, n_embd, up_w};
  const Matrix down{l.down_type, n_embd, n_ff, down_w};
  float* g = gate_out_ + off * n_ff;
  float* u = up_out_ + off * n_ff;
  MOETIER_RETURN_IF_ERROR(MatMul(gate, expert_in_ + off * n_embd, count, g));
  MOETIER_RETURN_IF_ERROR(MatMul(up, expert_in_ + off * n_embd, count, u));
  MOETIER_RETURN_IF_ERROR(cuda::SiluMul(g, u, count * n_ff, g, stream_));
  return MatMul(down, g, count, down_out_ + off * n_embd);
}

absl::Status CudaQwen3Moe::MoeBlock(int layer, int n, int pos0) {
  const int n_expert = hp_.n_expert;
  const int top_k = hp_.n_expert_used;
  const bool predict = cache_ != nullptr && cache_->predicts() && n <= kCudaPrefetchMaxTokens &&
                       layer + 1 < hp_.n_layer;
  MOETIER_RETURN_IF_ERROR(RouteAndGroup(layer, n, pos0, predict));
  if (cache_ != nullptr) {
    MOETIER_RETURN_IF_ERROR(CachedExperts(layer, n));
  } else {
    // Each used expert's rows are contiguous in expert order: gate and up
    // products, SiLU·mul, down product, all enqueued before the next
    // expert's pointers are asked for (DeviceExperts' contract).
    for (int e = 0; e < n_expert; ++e) {
      const int64_t off = expert_offset_[static_cast<size_t>(e)];
      const int64_t count = expert_offset_[static_cast<size_t>(e) + 1] - off;
      if (count == 0) continue;
      absl::StatusOr<DeviceExpertMatrices> mats = experts_->ExpertPointers(layer, e, stream_);
      if (!mats.ok()) return mats.status();
      MOETIER_RETURN_IF_ERROR(LaunchExpert(layer, mats->gate, mats->up, mats->down, off, count));
    }
  }
  // Weighted sum in the choice's order j = 0..k-1 (the router's, or the
  // override's with the weights ApplyRoutingHooks copied down before any
  // kernel of this block), then the residual.
  MOETIER_RETURN_IF_ERROR(cuda::MoeCombine(down_out_, slot_rows_ + n * top_k, topk_weights_, n,
                                           top_k, hp_.n_embd, x_, stream_));
  // The combine is enqueued first: the prefetch copies then overlap it and
  // the next layer's attention.
  if (predict) MOETIER_RETURN_IF_ERROR(PrefetchNext(layer, n));
  return absl::OkStatus();
}

absl::Status CudaQwen3Moe::CachedExperts(int layer, int n) {
  const int n_expert = hp_.n_expert;
  cache_->slots().Route(static_cast<uint32_t>(layer),
                        std::span<const int32_t>(host_topk_ids_,
                                                 static_cast<size_t>(n) * hp_.n_expert_used));
  // The layer's used experts, ascending, in groups that fit the cache.
  const size_t max_group = static_cast<size_t>(cache_->max_group());
  size_t count = 0;
  for (int e = 0; e < n_expert; ++e) {
    const int32_t rows = expert_offset_[static_cast<size_t>(e) + 1] -
                         expert_offset_[static_cast<size_t>(e)];
    if (rows == 0) continue;
    group_ids_[count] = e;
    group_rows_[count] = static_cast<uint32_t>(rows);
    if (++count == max_group) {
      MOETIER_RETURN_IF_ERROR(CachedGroup(layer, count));
      count = 0;
    }
  }
  if (count > 0) MOETIER_RETURN_IF_ERROR(CachedGroup(layer, count));
  return absl::OkStatus();
}

absl::Status CudaQwen3Moe::CachedGroup(int layer, size_t count) {
  ExpertSlotCache& cache = cache_->slots();
  const uint32_t ulayer = static_cast<uint32_t>(layer);
  const std::span<const int32_t> ids(group_ids_.data(), count);
  cache.Place(ulayer, ids, std::span<const uint32_t>(group_rows_.data(), count), placements_);
  // Until Release the placed slots are pinned; on any failure the group's
  // fills are forgotten, so that no slot is believed to hold an expert its
  // copy may not have written.
  auto abandon = [&](absl::Status status) {
    cache.Release(ulayer);
    for (size_t i = 0; i < count; ++i) {
      const uint32_t e = static_cast<uint32_t>(ids[i]);
      if (placements_[i].fill && cache.Resident(ulayer, e)) cache.Discard(ulayer, e);
    }
    return status;
  };
  size_t n_need = 0;  // host copies: fills and host-computed experts
  for (size_t i = 0; i < count; ++i) {
    if (placements_[i].site == ExpertSite::kHost || placements_[i].fill) {
      need_ids_[n_need] = ids[i];
      need_index_[n_need] = static_cast<int32_t>(i);
      ++n_need;
    }
  }
  if (n_need > 0) {
    absl::Status s = cache_->Acquire(layer, std::span<const int32_t>(need_ids_.data(), n_need),
                                     std::span<ExpertMatrices>(need_mats_.data(), n_need));
    if (!s.ok()) return abandon(std::move(s));
  }
  absl::Status s = CachedGroupWork(layer, count, n_need);
  if (!s.ok()) return abandon(std::move(s));
  cache.Release(ulayer);
  return absl::OkStatus();
}

absl::Status CudaQwen3Moe::CachedGroupWork(int layer, size_t count, size_t n_need) {
  const int64_t n_embd = hp_.n_embd;
  auto* stream = static_cast<cudaStream_t>(stream_);
  auto rows_of = [&](int32_t e, int64_t* off) {
    *off = expert_offset_[static_cast<size_t>(e)];
    return expert_offset_[static_cast<size_t>(e) + 1] - *off;
  };
  // 1. The host experts' gathered rows go down first, so the host does not
  //    wait for the slot experts' kernels before computing.
  bool any_host = false;
  for (size_t j = 0; j < n_need; ++j) {
    const ExpertPlacement& p = placements_[static_cast<size_t>(need_index_[j])];
    if (p.site != ExpertSite::kHost) continue;
    int64_t off = 0;
    const int64_t rows = rows_of(need_ids_[j], &off);
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(cache_->host_in() + off * n_embd, expert_in_ + off * n_embd,
                        static_cast<size_t>(rows * n_embd) * sizeof(float),
                        cudaMemcpyDeviceToHost, stream),
        "copying expert inputs to the host"));
    any_host = true;
  }
  if (any_host) {
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaEventRecord(static_cast<cudaEvent_t>(host_rows_ready_), stream), "cudaEventRecord"));
  }
  // 2. The fills, on the copy stream.
  size_t n_fill = 0;
  for (size_t j = 0; j < n_need; ++j) {
    const ExpertPlacement& p = placements_[static_cast<size_t>(need_index_[j])];
    if (p.fill) fill_jobs_[n_fill++] = {p.slot, need_mats_[j]};
  }
  MOETIER_RETURN_IF_ERROR(
      cache_->EnqueueFills(layer, std::span<const SlotFillJob>(fill_jobs_.data(), n_fill)));
  // 3. The slot experts on the device, each after its slot's fill, and each
  //    slot's last read recorded after its kernels.
  for (size_t i = 0; i < count; ++i) {
    const ExpertPlacement& p = placements_[i];
    if (p.site != ExpertSite::kSlot) continue;
    int64_t off = 0;
    const int64_t rows = rows_of(group_ids_[i], &off);
    MOETIER_RETURN_IF_ERROR(cache_->WaitFilled(p.slot, stream_));
    const SlotExpertPointers w = cache_->SlotPointers(layer, p.slot);
    MOETIER_RETURN_IF_ERROR(LaunchExpert(layer, w.gate, w.up, w.down, off, rows));
    MOETIER_RETURN_IF_ERROR(cache_->MarkRead(p.slot, stream_));
  }
  // 4. The host experts, while the device runs the slot experts; their
  //    outputs go up into their rows of down_out_ before the combine.
  if (!any_host) return absl::OkStatus();
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaEventSynchronize(static_cast<cudaEvent_t>(host_rows_ready_)),
               "waiting for expert inputs on the host"));
  for (size_t j = 0; j < n_need; ++j) {
    const ExpertPlacement& p = placements_[static_cast<size_t>(need_index_[j])];
    if (p.site != ExpertSite::kHost) continue;
    int64_t off = 0;
    const int64_t rows = rows_of(need_ids_[j], &off);
    cache_->ComputeOnHost(layer, need_mats_[j], off, static_cast<int>(rows));
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(down_out_ + off * n_embd, cache_->host_out() + off * n_embd,
                        static_cast<size_t>(rows * n_embd) * sizeof(float),
                        cudaMemcpyHostToDevice, stream),
        "copying host-computed expert outputs to the device"));
  }
  return absl::OkStatus();
}

absl::Status CudaQwen3Moe::PrefetchNext(int layer, int n) {
  const int next = layer + 1;
  const int n_expert = hp_.n_expert;
  // The predicted experts, distinct, in the predicted order.
  std::fill(predicted_.begin(), predicted_.end(), 0);
  size_t m = 0;
  for (int i = 0; i < n * hp_.n_expert_used; ++i) {
    const int32_t e = host_pred_ids_[i];
    // A NaN prediction (-1) predicts nothing; the next router reports it.
    if (e < 0 || e >= n_expert || predicted_[static_cast<size_t>(e)]) continue;
    predicted_[static_cast<size_t>(e)] = 1;
    group_ids_[m++] = e;
  }
  ExpertSlotCache& cache = cache_->slots();
  const size_t n_fills = cache.Prefetch(static_cast<uint32_t>(next),
                                        std::span<const int32_t>(group_ids_.data(), m),
                                        prefetch_fills_);
  const size_t group = static_cast<size_t>(config_.expert_source->max_experts_held());
  for (size_t g0 = 0; g0 < n_fills; g0 += group) {
    const size_t count = std::min(group, n_fills - g0);
    for (size_t i = 0; i < count; ++i) {
      need_ids_[i] = static_cast<int32_t>(prefetch_fills_[g0 + i].expert);
    }
    absl::Status s = cache_->Acquire(next, std::span<const int32_t>(need_ids_.data(), count),
                                     std::span<ExpertMatrices>(need_mats_.data(), count));
    if (s.ok()) {
      for (size_t i = 0; i < count; ++i) {
        fill_jobs_[i] = {prefetch_fills_[g0 + i].slot, need_mats_[i]};
      }
      s = cache_->EnqueueFills(next, std::span<const SlotFillJob>(fill_jobs_.data(), count));
    }
    if (!s.ok()) {
      // This group's copies may be partial and the later ones never start;
      // earlier groups' copies are whole.
      for (size_t i = g0; i < n_fills; ++i) {
        const SlotFill& f = prefetch_fills_[i];
        if (cache.Resident(f.layer, f.expert)) cache.Discard(f.layer, f.expert);
      }
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCudaQwen3MoeEngine(
    const Qwen3MoeModel& model, const CudaEngineConfig& config) {
  absl::StatusOr<std::unique_ptr<CudaQwen3Moe>> engine = CudaQwen3Moe::Create(model, config);
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<ForwardEngine>(std::move(*engine));
}

}  // namespace moetier
