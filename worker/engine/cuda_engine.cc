#include "engine/cuda_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backend/cuda/cuda_device.h"
#include "base/check.h"
#include "blocks/cuda/cuda_check.h"
#include "engine/weight_checks.h"
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
// The delta rule's and the conv's limits (backend/cuda/delta_rule.h,
// cuda_deltanet.cu).
constexpr int kMaxDeltaNetKeyDim = cuda::delta_chunk::kMaxDk;
constexpr int kMaxConvKernel = 64;

// Every block of the layer plan (model.h) has a CUDA block.
bool CudaMixer(MixerKind) { return true; }
bool CudaFfn(FfnKind) { return true; }

constexpr BackendWeightSupport kCudaSupport = {
    .backend = "CUDA",
    .matrix_type = &cuda::CudaWeightTypeSupported,
    .type_list = "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K",
    .alternative = "requantize the model, or use the cpu backend, which computes more types",
    .mixer = &CudaMixer,
    .ffn = &CudaFfn,
};

// The dense matrices a layer reads (its mixer's, the router, a shared
// expert's or its dense FFN's), uploaded with the embedding and output.
std::vector<const WeightRef*> DenseMatrices(const LayerWeights& l) {
  std::vector<const WeightRef*> out;
  if (HasRoutedExperts(l.ffn)) {
    out.push_back(&l.moe.router);
  } else {
    for (const WeightRef* r : {&l.dense.gate, &l.dense.up, &l.dense.down}) out.push_back(r);
  }
  if (IsAttention(l.mixer)) {
    for (const WeightRef* r : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.output}) out.push_back(r);
  } else {
    const DeltaNetWeights& d = l.deltanet;
    for (const WeightRef* r : {&d.qkv, &d.z, &d.beta, &d.alpha, &d.out}) out.push_back(r);
  }
  if (HasSharedExpert(l.ffn)) {
    for (const WeightRef* r : {&l.moe.shared_gate, &l.moe.shared_up, &l.moe.shared_down}) {
      out.push_back(r);
    }
  }
  return out;
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
  // Uploaded once with the model: the block may group a layer's experts.
  bool pointers_stay_valid() const override { return true; }

 private:
  std::vector<LayerExperts> layers_;
  int n_expert_;
};

}  // namespace

// ------------------------------------------------------------------ creation

absl::Status CudaEngine::CheckModel(const Model& model) {
  const ModelHparams& hp = model.hparams;
  if (hp.head_dim > kMaxHeadDim || hp.n_expert > kMaxExperts || hp.n_expert_used > kMaxTopK) {
    return absl::UnimplementedError(absl::StrFormat(
        "the CUDA engine handles head_dim up to %d, %d experts and top-%d routing; this model "
        "has head_dim %d, %d experts, top-%d (use the cpu backend)",
        kMaxHeadDim, kMaxExperts, kMaxTopK, hp.head_dim, hp.n_expert, hp.n_expert_used));
  }
  const bool recurrent =
      std::any_of(model.weights.layers.begin(), model.weights.layers.end(),
                  [](const LayerWeights& l) { return l.mixer == MixerKind::kGatedDeltaNet; });
  const DeltaNetParams& dn = hp.deltanet;
  if (recurrent &&
      (dn.d_k < 1 || dn.d_k > kMaxDeltaNetKeyDim || dn.d_v < 1 || dn.conv_kernel < 1 ||
       dn.conv_kernel > kMaxConvKernel || dn.n_k_heads < 1 || dn.n_v_heads % dn.n_k_heads != 0)) {
    return absl::UnimplementedError(absl::StrFormat(
        "the CUDA engine's Gated DeltaNet handles key heads of up to %d values and conv "
        "kernels of up to %d taps, with value heads a multiple of key heads; this model has "
        "d_k %d, d_v %d, a %d-tap conv, %d key and %d value heads (use the cpu backend)",
        kMaxDeltaNetKeyDim, kMaxConvKernel, dn.d_k, dn.d_v, dn.conv_kernel, dn.n_k_heads,
        dn.n_v_heads));
  }
  // gpt-oss's parts: its graph runs on the reference and CPU engines.
  const bool has_gpt_oss_parts = std::any_of(
      model.weights.layers.begin(), model.weights.layers.end(), [](const LayerWeights& l) {
        return l.attention_window > 0 || l.attn.sinks.present() || l.attn.output_bias.present() ||
               l.moe.router_bias.present() || l.moe.gate_exps_bias.present() ||
               l.moe.up_exps_bias.present() || l.moe.down_exps_bias.present();
      });
  if (has_gpt_oss_parts || hp.expert_activation != ExpertActivation::kSwiglu ||
      hp.router.gating == RouterGating::kSoftmaxOfChosen) {
    return absl::UnimplementedError(absl::StrFormat(
        "the CUDA engine lacks what %s models need (sliding-window attention, attention sinks, "
        "biases on the attention output, the router and the experts, the clamped SwiGLU, the "
        "softmax over the chosen experts); use the cpu backend",
        hp.architecture));
  }
  return CheckModelForBackend(model, kCudaSupport);
}

absl::StatusOr<std::unique_ptr<CudaEngine>> CudaEngine::Create(const Model& model,
                                                               const CudaEngineConfig& config) {
  const ModelHparams& hp = model.hparams;
  if (absl::Status s =
          CheckEngineSizes(hp, config.max_ctx, config.max_sequences, config.max_batch, kMaxBatch);
      !s.ok()) {
    return s;
  }
  if (config.gemv_max_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gemv_max_rows %d is negative", config.gemv_max_rows));
  }
  if (config.deltanet_chunk_min_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "deltanet_chunk_min_tokens %d must be at least 1", config.deltanet_chunk_min_tokens));
  }
  if (absl::Status s =
          CheckKvCacheTypes(config.kv_types, hp.head_dim, cuda::kCudaKvCacheTypes, "cuda");
      !s.ok()) {
    return s;
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
  if (absl::Status s = CheckModel(model); !s.ok()) return s;

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

  std::unique_ptr<CudaEngine> engine(new CudaEngine(model, config));
  MOETIER_RETURN_IF_ERROR(engine->Init(model));
  return engine;
}

CudaEngine::CudaEngine(const Model& model, const CudaEngineConfig& config)
    : hp_(model.hparams),
      config_(config),
      slots_(this, config.max_sequences, config.max_ctx),
      ctx_(std::make_unique<CudaContext>(config.device, config.gemv_max_rows,
                                         config.use_cublas)) {}

CudaEngine::~CudaEngine() {
  if (ctx_ != nullptr) (void)ctx_->MakeCurrent();
  for (void* exec : decode_graphs_) {
    if (exec != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  }
  // The blocks first: the MoE block's cache waits for copies on the
  // context's streams, which go with the context.
  moe_.reset();
  deltanet_.reset();
  attention_.reset();
}

absl::Status CudaEngine::Init(const Model& model) {
  MOETIER_RETURN_IF_ERROR(ctx_->Init(config_.max_batch));
  attention_ = std::make_unique<CudaAttentionBlock>(hp_, config_.kv_types, *ctx_, batch_);
  deltanet_ = std::make_unique<CudaDeltaNetBlock>(hp_, *ctx_, batch_,
                                                  config_.deltanet_chunk_min_tokens);
  for (const LayerWeights& l : model.weights.layers) mixers_.push_back(l.mixer);
  std::vector<CudaMoeWeights> moe_weights;
  MOETIER_RETURN_IF_ERROR(UploadWeights(model, moe_weights));
  CudaMoeConfig moe;
  moe.max_batch = config_.max_batch;
  moe.device_experts =
      config_.expert_source != nullptr
          ? nullptr
          : (config_.device_experts != nullptr ? config_.device_experts : own_experts_.get());
  moe.expert_source = config_.expert_source;
  moe.routing_counter = config_.routing_counter;
  moe.expert_cache = config_.expert_cache;
  moe.dma_ranges = config_.dma_ranges;
  moe.routing_observer = config_.routing_observer;
  moe.routing_override = config_.routing_override;
  moe.group_expert_launches = config_.group_expert_launches;
  moe.route_on_device = config_.route_on_device;
  moe_ = std::make_unique<CudaMoeBlock>(hp_, RoutedExpertShapesOf(model), *ctx_, batch_,
                                        std::move(moe));
  for (size_t il = 0; il < moe_weights.size(); ++il) {
    moe_->SetWeights(static_cast<int>(il), moe_weights[il]);
  }
  MOETIER_RETURN_IF_ERROR(AllocateBuffers());
  // The uploads and memsets ran on the legacy stream, which the engine's
  // non-blocking stream does not wait for, and a cudaMemcpy from pageable
  // memory may return before its DMA is done.
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaDeviceSynchronize(), "waiting for the weight uploads to the device"));
  // After every other allocation: an automatic pool takes what is left.
  return moe_->CreateExpertCache();
}

absl::Status CudaEngine::UploadWeights(const Model& model,
                                       std::vector<CudaMoeWeights>& moe_weights) {
  const ModelWeights& w = model.weights;
  const bool own_experts = config_.device_experts == nullptr && config_.expert_source == nullptr;
  std::vector<const WeightRef*> matrices = {&w.token_embd, &w.output};
  for (const LayerWeights& l : w.layers) {
    for (const WeightRef* r : DenseMatrices(l)) matrices.push_back(r);
    if (own_experts && HasRoutedExperts(l.ffn)) {
      for (const WeightRef* r : {&l.moe.gate_exps, &l.moe.up_exps, &l.moe.down_exps}) {
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
    absl::StatusOr<void*> p = ctx_->DeviceAlloc(bytes, what);
    if (!p.ok()) return p.status();
    m.device = static_cast<uint8_t*>(*p);
    ctx_->add_weight_bytes(bytes);
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
    return DeviceMatrix{r.type, r.ne[1], r.ne[0], translate(r.data)};
  };
  auto upload = [&](const WeightRef& r) -> absl::StatusOr<float*> {
    if (!r.present()) return nullptr;
    return ctx_->UploadFloats(DecodedValues(r), "tensor " + r.name);
  };
  token_embd_ = matrix(w.token_embd);
  output_ = matrix(w.output);
  absl::StatusOr<float*> output_norm = upload(w.output_norm);
  if (!output_norm.ok()) return output_norm.status();
  output_norm_ = *output_norm;
  std::vector<ResidentExperts::LayerExperts> resident;
  moe_weights.assign(w.layers.size(), CudaMoeWeights{});
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const LayerWeights& src = w.layers[il];
    if (IsAttention(src.mixer)) {
      CudaAttentionWeights a;
      for (auto [dst, ref] :
           {std::pair{&a.attn_norm, &src.attn_norm}, std::pair{&a.q_norm, &src.attn.q_norm},
            std::pair{&a.k_norm, &src.attn.k_norm}, std::pair{&a.q_bias, &src.attn.q_bias},
            std::pair{&a.k_bias, &src.attn.k_bias}, std::pair{&a.v_bias, &src.attn.v_bias}}) {
        absl::StatusOr<float*> v = upload(*ref);
        if (!v.ok()) return v.status();
        *dst = *v;
      }
      a.q = matrix(src.attn.q);
      a.k = matrix(src.attn.k);
      a.v = matrix(src.attn.v);
      a.output = matrix(src.attn.output);
      a.gated = src.mixer == MixerKind::kGatedAttention;
      attention_->SetWeights(static_cast<int>(il), a);
    } else {
      const DeltaNetWeights& d = src.deltanet;
      CudaDeltaNetWeights dw;
      for (auto [dst, ref] : {std::pair{&dw.attn_norm, &src.attn_norm},
                              std::pair{&dw.dt_bias, &d.dt_bias}, std::pair{&dw.a, &d.a},
                              std::pair{&dw.norm, &d.norm}}) {
        absl::StatusOr<float*> v = upload(*ref);
        if (!v.ok()) return v.status();
        *dst = *v;
      }
      absl::StatusOr<float*> conv =
          ctx_->UploadFloats(DecodedValues(d.conv), "tensor " + d.conv.name);
      if (!conv.ok()) return conv.status();
      dw.conv = *conv;
      dw.qkv = matrix(d.qkv);
      dw.z = matrix(d.z);
      dw.beta = matrix(d.beta);
      dw.alpha = matrix(d.alpha);
      dw.out = matrix(d.out);
      deltanet_->SetWeights(static_cast<int>(il), dw);
    }
    CudaMoeWeights& m = moe_weights[il];
    absl::StatusOr<float*> ffn_norm = upload(src.ffn_norm);
    if (!ffn_norm.ok()) return ffn_norm.status();
    m.ffn_norm = *ffn_norm;
    if (!HasRoutedExperts(src.ffn)) {
      m.dense_ffn = true;
      m.dense_gate = matrix(src.dense.gate);
      m.dense_up = matrix(src.dense.up);
      m.dense_down = matrix(src.dense.down);
      if (own_experts) resident.emplace_back();  // one entry per layer, none used
      continue;
    }
    m.router = matrix(src.moe.router);
    absl::StatusOr<float*> selection_bias = upload(src.moe.selection_bias);
    if (!selection_bias.ok()) return selection_bias.status();
    m.selection_bias = *selection_bias;
    m.gate_type = src.moe.gate_exps.type;
    m.up_type = src.moe.up_exps.type;
    m.down_type = src.moe.down_exps.type;
    if (HasSharedExpert(src.ffn)) {
      // The gate's one row, decoded: any codec, an exact fp32 product.
      absl::StatusOr<float*> gate_inp = upload(src.moe.shared_gate_inp);
      if (!gate_inp.ok()) return gate_inp.status();
      m.has_shared_expert = true;
      if (*gate_inp != nullptr) {
        m.shared_gate_inp = DeviceMatrix{TensorType::kF32, 1, hp_.n_embd, *gate_inp};
      }
      m.shared_gate = matrix(src.moe.shared_gate);
      m.shared_up = matrix(src.moe.shared_up);
      m.shared_down = matrix(src.moe.shared_down);
    }
    if (own_experts) {
      resident.push_back({translate(src.moe.gate_exps.data), translate(src.moe.up_exps.data),
                          translate(src.moe.down_exps.data), src.moe.gate_exps.expert_stride_bytes,
                          src.moe.up_exps.expert_stride_bytes,
                          src.moe.down_exps.expert_stride_bytes});
    }
  }
  if (own_experts) {
    own_experts_ = std::make_unique<ResidentExperts>(std::move(resident), hp_.n_expert);
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::AllocateBuffers() {
  const uint64_t b = static_cast<uint64_t>(config_.max_batch);
  const uint64_t n_embd = static_cast<uint64_t>(hp_.n_embd);
  const uint64_t q_dim = static_cast<uint64_t>(hp_.n_head) * hp_.head_dim;
  const uint64_t kv_dim = static_cast<uint64_t>(hp_.n_head_kv) * hp_.head_dim;
  const uint64_t n_ff = static_cast<uint64_t>(hp_.n_ff_exp);
  // The shared expert and the dense FFN share buffers (CudaMoeBlock).
  const uint64_t n_ff_shared = static_cast<uint64_t>(std::max(hp_.n_ff_shared, hp_.n_ff_dense));
  const uint64_t n_expert = static_cast<uint64_t>(hp_.n_expert);
  const uint64_t conv_dim = static_cast<uint64_t>(hp_.deltanet.conv_dim());
  const uint64_t value_dim = static_cast<uint64_t>(hp_.deltanet.value_dim());
  // Per sequence slot and layer: a KV cache, or a recurrent state and its
  // checkpoint.
  state_.resize(static_cast<size_t>(config_.max_sequences));
  checkpoints_.resize(static_cast<size_t>(config_.max_sequences));
  for (size_t slot = 0; slot < state_.size(); ++slot) {
    for (int il = 0; il < hp_.n_layer; ++il) {
      LayerState layer;
      CudaRecurrentLayer checkpoint;
      if (IsAttention(mixers_[static_cast<size_t>(il)])) {
        absl::StatusOr<CudaKvLayer> kv = attention_->NewKvLayer(config_.max_ctx, il);
        if (!kv.ok()) return kv.status();
        layer.kv = *kv;
      } else {
        const std::string what =
            absl::StrFormat("the recurrent state of layer %d, sequence slot %d", il, slot);
        absl::StatusOr<CudaRecurrentLayer> state = deltanet_->NewStateLayer(what);
        if (!state.ok()) return state.status();
        layer.recurrent = *state;
        absl::StatusOr<CudaRecurrentLayer> saved =
            deltanet_->NewStateLayer("the checkpoint of " + what);
        if (!saved.ok()) return saved.status();
        checkpoint = *saved;
      }
      state_[slot].push_back(layer);
      checkpoints_[slot].push_back(checkpoint);
    }
  }
  MOETIER_RETURN_IF_ERROR(ctx_->AllocBuffer(batch_.x, b * n_embd, "activations (residual)"));
  MOETIER_RETURN_IF_ERROR(ctx_->AllocBuffer(batch_.xn, b * n_embd, "activations (normed)"));
  MOETIER_RETURN_IF_ERROR(
      ctx_->AllocBuffer(batch_.sub_out, b * n_embd, "activations (sublayer output)"));
  MOETIER_RETURN_IF_ERROR(attention_->Allocate(config_.max_batch, config_.max_ctx));
  MOETIER_RETURN_IF_ERROR(deltanet_->Allocate(config_.max_batch));
  MOETIER_RETURN_IF_ERROR(moe_->Allocate());
  MOETIER_RETURN_IF_ERROR(
      ctx_->AllocBuffer(logits_, b * static_cast<uint64_t>(hp_.n_vocab), "logits"));
  MOETIER_RETURN_IF_ERROR(ctx_->AllocBuffer(sampled_, 1, "the sampled token"));
  MOETIER_RETURN_IF_ERROR(ctx_->AllocPinned(host_sampled_, 1, "the sampled token"));
  MOETIER_RETURN_IF_ERROR(ctx_->AllocBuffer(
      step_rows_, static_cast<uint64_t>(config_.max_sequences) * hp_.n_vocab,
      "the logits rows kept for SampleStep"));
  // Sampling from the row's best candidates: their ids, then the penalized
  // tokens' ids; their logits, then the penalized tokens' logits.
  const int64_t candidate_keys = cuda::TopCandidatesScratchKeys(hp_.n_vocab);
  MOETIER_RETURN_IF_ERROR(ctx_->AllocBuffer(candidate_scratch_,
                                            static_cast<uint64_t>(candidate_keys),
                                            "the sampler's candidate scratch"));
  candidate_scratch_keys_ = candidate_keys;
  MOETIER_RETURN_IF_ERROR(ctx_->AllocBuffer(candidate_ids_, 2 * cuda::kMaxTopCandidates,
                                            "the sampler's candidate ids"));
  MOETIER_RETURN_IF_ERROR(ctx_->AllocPinned(host_candidate_ids_, 2 * cuda::kMaxTopCandidates,
                                            "the sampler's candidate ids"));
  MOETIER_RETURN_IF_ERROR(ctx_->AllocBuffer(candidate_logits_, 2 * cuda::kMaxTopCandidates,
                                            "the sampler's candidate logits"));
  MOETIER_RETURN_IF_ERROR(ctx_->AllocPinned(host_candidate_logits_, 2 * cuda::kMaxTopCandidates,
                                            "the sampler's candidate logits"));
  MOETIER_RETURN_IF_ERROR(ctx_->AllocBuffer(tokens_, b, "the batch's tokens"));
  MOETIER_RETURN_IF_ERROR(ctx_->AllocPinned(host_tokens_, b, "the batch's tokens"));
  MOETIER_RETURN_IF_ERROR(ctx_->AllocBuffer(step_, 2, "the decode step's token and position"));
  MOETIER_RETURN_IF_ERROR(
      ctx_->AllocPinned(host_step_, 2, "the decode step's token and position"));
  decode_graphs_.assign(static_cast<size_t>(config_.max_sequences), nullptr);
  host_row_.assign(static_cast<size_t>(hp_.n_vocab), 0.0f);
  if (ctx_->gemm_possible(config_.max_batch)) {
    // The GEMM's fp16 scratch: the largest matrix it may be given, and
    // max_batch rows of the widest input (an expert never gets more rows
    // than the batch has tokens). A gated q projection has 2 * q_dim rows.
    const uint64_t vocab_matrix = static_cast<uint64_t>(hp_.n_vocab) * n_embd;
    const uint64_t widest = std::max({n_embd, q_dim, n_ff, n_ff_shared, value_dim});
    const uint64_t largest =
        std::max({vocab_matrix, 2 * q_dim * n_embd, kv_dim * n_embd, n_expert * n_embd,
                  n_ff * n_embd, n_ff_shared * n_embd, conv_dim * n_embd, value_dim * n_embd});
    MOETIER_RETURN_IF_ERROR(ctx_->AllocGemmScratch(static_cast<int64_t>(largest),
                                                   static_cast<int64_t>(b * widest)));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ forward

absl::StatusOr<uint64_t> CudaEngine::ResizeExpertCache(uint64_t pool_bytes) {
  return moe_->ResizeExpertCache(pool_bytes);
}

absl::Status CudaEngine::Forward(Sequence& seq, std::span<const int32_t> tokens,
                                 LogitRows host_rows, float* host_logits) {
  last_row_ = nullptr;
  // A kept row may be logits_ itself, which this pass rewrites.
  std::fill(step_row_of_.begin(), step_row_of_.end(), nullptr);
  if (absl::Status s = slots_.CheckTokens(seq, tokens, hp_.n_vocab); !s.ok()) return s;
  if (host_rows != LogitRows::kNone && host_logits == nullptr) {
    return absl::InvalidArgumentError("no logits buffer");
  }
  MOETIER_RETURN_IF_ERROR(ctx_->MakeCurrent());
  if (DecodesWithGraph(seq, tokens, host_rows)) {
    return DecodeWithGraph(seq, tokens[0], host_rows, host_logits);
  }
  const int pos0 = seq.length();
  const int n = static_cast<int>(tokens.size());
  for (int done = 0; done < n;) {
    const int batch = std::min(config_.max_batch, n - done);
    const bool last_batch = done + batch == n;
    // Every row to the host for kAll; otherwise only the final batch's last
    // row is computed, and stays on the device unless kLast asks for it.
    out_rows_.clear();
    out_dst_.clear();
    if (host_rows == LogitRows::kAll) {
      for (int r = 0; r < batch; ++r) {
        out_rows_.push_back(r);
        out_dst_.push_back(host_logits + static_cast<int64_t>(done + r) * hp_.n_vocab);
      }
    } else if (last_batch) {
      out_rows_.push_back(batch - 1);
      out_dst_.push_back(host_rows == LogitRows::kLast ? host_logits : nullptr);
    }
    parts_.assign(1, BatchPart{seq.slot(), CudaRowSpan{.row0 = 0, .n = batch, .pos0 = pos0 + done}});
    absl::Status s = ForwardBatch(parts_, tokens.data() + done, batch, out_rows_, out_dst_);
    // The last hold of the batch ends with it, also on failure.
    const absl::Status released = moe_->FinishBatch();
    if (s.ok()) s = released;
    MOETIER_RETURN_IF_ERROR(s);
    done += batch;
    slots_.SetLength(seq, pos0 + done);
    if (last_batch) last_row_ = logits_ + static_cast<int64_t>(out_rows_.size() - 1) * hp_.n_vocab;
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::ForwardMany(std::span<const SequenceStep> steps) {
  last_row_ = nullptr;
  step_row_of_.assign(steps.size(), nullptr);
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
  MOETIER_RETURN_IF_ERROR(ctx_->MakeCurrent());
  // One sequence's one-token step (a server decoding one request): its
  // graph, as Forward would.
  if (steps.size() == 1 && (steps[0].last_logits != nullptr || steps[0].sample_in_engine) &&
      DecodesWithGraph(*steps[0].seq, steps[0].tokens, LogitRows::kLast)) {
    const LogitRows host_rows =
        steps[0].last_logits != nullptr ? LogitRows::kLast : LogitRows::kNone;
    absl::Status s =
        DecodeWithGraph(*steps[0].seq, steps[0].tokens[0], host_rows, steps[0].last_logits);
    // Its row (logits_) is SampleStep's, not Sample's.
    if (s.ok() && steps[0].sample_in_engine) step_row_of_[0] = last_row_;
    last_row_ = nullptr;
    return s;
  }
  int kept = 0;  // rows kept for SampleStep so far
  // Passes of up to max_batch rows, the steps' tokens in order: a step
  // that does not fit whole runs its first tokens in this pass and the
  // rest in the next.
  step_done_.assign(steps.size(), 0);
  size_t first_left = 0;  // the first step with tokens left
  while (first_left < steps.size()) {
    parts_.clear();
    batch_tokens_.clear();
    out_rows_.clear();
    out_dst_.clear();
    out_steps_.clear();
    part_steps_.clear();
    int rows = 0;
    for (size_t i = first_left; i < steps.size() && rows < config_.max_batch; ++i) {
      const SequenceStep& step = steps[i];
      const int left = static_cast<int>(step.tokens.size()) - step_done_[i];
      if (left == 0) continue;
      const int take = std::min(left, config_.max_batch - rows);
      parts_.push_back(BatchPart{step.seq->slot(),
                                 CudaRowSpan{.row0 = rows, .n = take, .pos0 = step.seq->length()}});
      part_steps_.push_back(i);
      batch_tokens_.insert(batch_tokens_.end(), step.tokens.begin() + step_done_[i],
                           step.tokens.begin() + step_done_[i] + take);
      rows += take;
      if (take == left && (step.last_logits != nullptr || step.sample_in_engine)) {
        out_rows_.push_back(rows - 1);
        out_dst_.push_back(step.last_logits);
        out_steps_.push_back(i);
      }
    }
    absl::Status s = ForwardBatch(parts_, batch_tokens_.data(), rows, out_rows_, out_dst_);
    const absl::Status released = moe_->FinishBatch();
    if (s.ok()) s = released;
    if (!s.ok()) {
      // A failed call keeps no rows, not even those of its earlier passes.
      std::fill(step_row_of_.begin(), step_row_of_.end(), nullptr);
      return s;
    }
    for (size_t p = 0; p < parts_.size(); ++p) {
      const size_t i = part_steps_[p];
      step_done_[i] += parts_[p].span.n;
      slots_.SetLength(*steps[i].seq, parts_[p].span.pos0 + parts_[p].span.n);
    }
    // Rows kept for SampleStep leave logits_ before the next pass rewrites
    // it (the copies run first on the stream).
    for (size_t r = 0; r < out_steps_.size(); ++r) {
      const size_t i = out_steps_[r];
      if (!steps[i].sample_in_engine) continue;
      float* kept_row = step_rows_ + static_cast<int64_t>(kept++) * hp_.n_vocab;
      MOETIER_RETURN_IF_ERROR(CudaCall(
          cudaMemcpyAsync(kept_row, logits_ + static_cast<int64_t>(r) * hp_.n_vocab,
                          static_cast<size_t>(hp_.n_vocab) * sizeof(float),
                          cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(ctx_->stream())),
          "keeping a step's logits row"));
      step_row_of_[i] = kept_row;
    }
    while (first_left < steps.size() &&
           step_done_[first_left] == static_cast<int>(steps[first_left].tokens.size())) {
      ++first_left;
    }
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::ForwardBatch(std::span<const BatchPart> parts, const int32_t* tokens,
                                      int n, std::span<const int> out_rows,
                                      std::span<float* const> host_rows,
                                      const int32_t* step_on_device) {
  const cuda::CudaStream stream = ctx_->stream();
  const int64_t n_embd = hp_.n_embd;
  const auto* embd = static_cast<const uint8_t*>(token_embd_.data);
  MOETIER_RETURN_IF_ERROR(ctx_->StartPhases());
  if (step_on_device != nullptr) {
    MOETIER_CHECK(parts.size() == 1 && n == 1);
    MOETIER_RETURN_IF_ERROR(cuda::DequantizeRowsAt(token_embd_.type, embd, step_on_device, 1,
                                                   n_embd, batch_.x, stream));
  } else {
    // The ids go down once (pinned: rewritten only after this pass's Sync)
    // and one launch gathers every row.
    std::copy(tokens, tokens + n, host_tokens_);
    MOETIER_RETURN_IF_ERROR(CudaCall(
        cudaMemcpyAsync(tokens_, host_tokens_, static_cast<size_t>(n) * sizeof(int32_t),
                        cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)),
        "copying the batch's tokens to the device"));
    MOETIER_RETURN_IF_ERROR(
        cuda::DequantizeRowsAt(token_embd_.type, embd, tokens_, n, n_embd, batch_.x, stream));
  }
  MOETIER_RETURN_IF_ERROR(ctx_->MarkPhase(CudaPhase::kEmbed));
  spans_.clear();
  for (const BatchPart& part : parts) spans_.push_back(part.span);
  for (int l = 0; l < hp_.n_layer; ++l) {
    switch (mixers_[static_cast<size_t>(l)]) {
      case MixerKind::kAttention:
      case MixerKind::kGatedAttention:
        kv_of_part_.clear();
        for (const BatchPart& part : parts) {
          kv_of_part_.push_back(&state_[static_cast<size_t>(part.slot)][static_cast<size_t>(l)].kv);
        }
        MOETIER_RETURN_IF_ERROR(attention_->Forward(
            l, spans_, kv_of_part_, step_on_device != nullptr ? step_on_device + 1 : nullptr));
        break;
      case MixerKind::kGatedDeltaNet:
        recurrent_of_part_.clear();
        for (const BatchPart& part : parts) {
          recurrent_of_part_.push_back(
              &state_[static_cast<size_t>(part.slot)][static_cast<size_t>(l)].recurrent);
        }
        MOETIER_RETURN_IF_ERROR(deltanet_->Forward(l, spans_, recurrent_of_part_));
        break;
    }
    // Every layer's FFN is the MoE block (with or without a shared expert).
    // Routing hooks see the first part's positions: with hooks that follow
    // positions a batch holds one sequence (ForwardMany refuses more).
    MOETIER_RETURN_IF_ERROR(moe_->Forward(l, n, parts.front().span.pos0));
  }
  if (!out_rows.empty()) {
    // Final norm and output projection for the rows asked for, gathered
    // into rows 0.. of xn and logits_; runs of consecutive rows go at once.
    const int count = static_cast<int>(out_rows.size());
    for (int r = 0; r < count;) {
      int run = 1;
      while (r + run < count && out_rows[r + run] == out_rows[r] + run) ++run;
      MOETIER_RETURN_IF_ERROR(cuda::RmsNorm(batch_.x + out_rows[r] * n_embd, output_norm_, run,
                                            static_cast<int>(n_embd), hp_.rms_eps,
                                            batch_.xn + r * n_embd, stream));
      r += run;
    }
    MOETIER_RETURN_IF_ERROR(ctx_->MatMul(output_, batch_.xn, count, logits_));
    const int64_t n_vocab = hp_.n_vocab;
    for (int r = 0; r < count;) {
      if (host_rows[r] == nullptr) {
        ++r;
        continue;
      }
      int run = 1;
      while (r + run < count && host_rows[r + run] == host_rows[r] + run * n_vocab) ++run;
      MOETIER_RETURN_IF_ERROR(CudaCall(
          cudaMemcpyAsync(host_rows[r], logits_ + r * n_vocab, run * n_vocab * sizeof(float),
                          cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)),
          "copying logits to the host"));
      r += run;
    }
    MOETIER_RETURN_IF_ERROR(ctx_->MarkPhase(CudaPhase::kOutput));
  }
  // Being captured: the replay's caller waits.
  if (step_on_device != nullptr) return absl::OkStatus();
  // Also when no logits are wanted: the batch's cache entries are complete
  // (and any fault reported) before the sequences count them.
  MOETIER_RETURN_IF_ERROR(ctx_->Sync("the forward pass"));
  ctx_->CollectPhases();
  return absl::OkStatus();
}

int CudaEngine::captured_decode_graphs() const {
  int n = 0;
  for (void* exec : decode_graphs_) n += exec != nullptr;
  return n;
}

bool CudaEngine::DecodesWithGraph(const Sequence& seq, std::span<const int32_t> tokens,
                                  LogitRows host_rows) const {
  // A sequence's first token may clear recurrent state (position 0), which
  // a replay would repeat; a step at a later position never does.
  return config_.use_cuda_graphs && graphs_failed_.ok() && !ctx_->phase_timing() &&
         tokens.size() == 1 &&
         seq.length() > 0 && host_rows != LogitRows::kAll && moe_->RoutesOnDevice(1);
}

absl::Status CudaEngine::CaptureDecodeGraph(int slot, int pos0, void** exec) {
  auto* stream = static_cast<cudaStream_t>(ctx_->stream());
  parts_.assign(1, BatchPart{slot, CudaRowSpan{.row0 = 0, .n = 1, .pos0 = pos0}});
  out_rows_.assign(1, 0);
  out_dst_.assign(1, nullptr);
  MOETIER_RETURN_IF_ERROR(
      CudaCall(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
               "beginning the decode graph's capture"));
  const absl::Status forward = ForwardBatch(parts_, nullptr, 1, out_rows_, out_dst_, step_);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  // The captured pass ran no work: nothing for FinishBatch to report yet.
  moe_->NoteReplayedBatch(0);
  absl::Status status = forward;
  if (status.ok()) status = CudaCall(ended, "capturing the decode graph");
  if (status.ok()) {
    cudaGraphExec_t instance = nullptr;
    status = CudaCall(cudaGraphInstantiate(&instance, graph, 0), "instantiating the decode graph");
    if (status.ok()) *exec = instance;
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();  // a failed capture leaves its error behind
  return status;
}

absl::Status CudaEngine::DecodeWithGraph(Sequence& seq, int32_t token, LogitRows host_rows,
                                         float* host_logits) {
  auto* stream = static_cast<cudaStream_t>(ctx_->stream());
  const int slot = seq.slot();
  const int pos0 = seq.length();
  void*& exec = decode_graphs_[static_cast<size_t>(slot)];
  if (exec == nullptr) {
    if (absl::Status s = CaptureDecodeGraph(slot, pos0, &exec); !s.ok()) {
      // Decoding goes on without graphs, with the same bits.
      graphs_failed_ = s;
      const int32_t tokens[1] = {token};
      return Forward(seq, tokens, host_rows, host_logits);
    }
  }
  // The pinned step is written again only after this step's Sync.
  host_step_[0] = token;
  host_step_[1] = pos0;
  absl::Status s = CudaCall(
      cudaMemcpyAsync(step_, host_step_, 2 * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
      "copying the decode step to the device");
  if (s.ok()) {
    s = CudaCall(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), stream),
                 "launching the decode graph");
  }
  if (s.ok()) moe_->NoteReplayedBatch(1);
  if (s.ok() && host_rows == LogitRows::kLast) {
    s = CudaCall(cudaMemcpyAsync(host_logits, logits_, static_cast<size_t>(hp_.n_vocab) * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream),
                 "copying logits to the host");
  }
  if (s.ok()) s = ctx_->Sync("the forward pass");
  const absl::Status released = moe_->FinishBatch();
  if (s.ok()) s = released;
  MOETIER_RETURN_IF_ERROR(s);
  slots_.SetLength(seq, pos0 + 1);
  last_row_ = logits_;
  return absl::OkStatus();
}

absl::Status CudaEngine::CopyRecurrentState(int slot, bool save) {
  const std::vector<LayerState>& state = state_[static_cast<size_t>(slot)];
  const std::vector<CudaRecurrentLayer>& saved = checkpoints_[static_cast<size_t>(slot)];
  MOETIER_RETURN_IF_ERROR(ctx_->MakeCurrent());
  for (size_t l = 0; l < state.size(); ++l) {
    if (IsAttention(mixers_[l])) continue;  // KV rows below the length stay
    MOETIER_RETURN_IF_ERROR(save ? deltanet_->CopyState(state[l].recurrent, saved[l])
                                 : deltanet_->CopyState(saved[l], state[l].recurrent));
  }
  return ctx_->Sync(save ? "saving a checkpoint" : "restoring a checkpoint");
}

absl::Status CudaEngine::SkipPositionsForTiming(Sequence& seq, int n) {
  if (n < 0) return absl::InvalidArgumentError("a negative number of positions to skip");
  if (absl::Status s = slots_.CheckAppend(seq, static_cast<size_t>(n)); !s.ok()) return s;
  last_row_ = nullptr;
  if (seq.length() == 0) {
    // As a computed start would: the recurrent layers begin empty.
    MOETIER_RETURN_IF_ERROR(ctx_->MakeCurrent());
    const std::vector<LayerState>& state = state_[static_cast<size_t>(seq.slot())];
    for (size_t l = 0; l < state.size(); ++l) {
      if (IsAttention(mixers_[l])) continue;
      MOETIER_RETURN_IF_ERROR(deltanet_->ClearState(state[l].recurrent));
    }
    MOETIER_RETURN_IF_ERROR(ctx_->Sync("clearing a sequence's recurrent state"));
  }
  slots_.SetLength(seq, seq.length() + n);
  return absl::OkStatus();
}

absl::Status CudaEngine::SaveCheckpoint(Sequence& seq) {
  if (absl::Status s = slots_.CheckAppend(seq, 0); !s.ok()) return s;
  MOETIER_RETURN_IF_ERROR(CopyRecurrentState(seq.slot(), /*save=*/true));
  slots_.SetCheckpoint(seq, seq.length());
  return absl::OkStatus();
}

absl::Status CudaEngine::RestoreCheckpoint(Sequence& seq) {
  if (absl::Status s = slots_.CheckAppend(seq, 0); !s.ok()) return s;
  if (seq.checkpoint_length() < 0) {
    return absl::FailedPreconditionError("the sequence has no checkpoint to restore");
  }
  MOETIER_RETURN_IF_ERROR(CopyRecurrentState(seq.slot(), /*save=*/false));
  slots_.SetLength(seq, seq.checkpoint_length());
  last_row_ = nullptr;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCudaEngine(const Model& model,
                                                                const CudaEngineConfig& config) {
  absl::StatusOr<std::unique_ptr<CudaEngine>> engine = CudaEngine::Create(model, config);
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<ForwardEngine>(std::move(*engine));
}

}  // namespace moetier
