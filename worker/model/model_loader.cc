#include "model/model_loader.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "model/decodable_types.h"
#include "model/rope_scaling.h"

namespace moetier {
namespace {

std::string ShapeString(const std::array<int64_t, 4>& ne) {
  int n = 4;
  while (n > 1 && ne[n - 1] == 1) --n;
  return absl::StrCat("{", absl::StrJoin(ne.begin(), ne.begin() + n, ", "), "}");
}

}  // namespace

ModelLoader::ModelLoader(const GgufModel& gguf, absl::string_view arch)
    : gguf_(gguf),
      path_(gguf.shards().front()->path()),
      arch_(arch),
      meta_(gguf.metadata()) {}

std::string ModelLoader::Key(absl::string_view suffix) const {
  return absl::StrCat(arch_, ".", suffix);
}

absl::Status ModelLoader::Error(absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what));
}

absl::Status ModelLoader::Unsupported(absl::string_view what) const {
  return absl::UnimplementedError(absl::StrCat(path_, ": ", what));
}

bool ModelLoader::Has(absl::string_view suffix) const { return meta_.Has(Key(suffix)); }

bool ModelLoader::HasNonZero(absl::string_view suffix) const {
  return Has(suffix) && meta_.GetUintOr(Key(suffix), 1) != 0;
}

absl::StatusOr<int> ModelLoader::RequiredDim(absl::string_view suffix, uint64_t max) const {
  const std::string key = Key(suffix);
  absl::StatusOr<uint64_t> v = meta_.GetUint(key);
  if (!v.ok()) return Error(v.status().message());
  if (*v == 0 || *v > max) {
    return Error(absl::StrFormat("%s = %d is out of range (1..%d)", key, *v, max));
  }
  return static_cast<int>(*v);
}

absl::StatusOr<int> ModelLoader::OptionalDim(absl::string_view suffix, uint64_t max,
                                             int fallback) const {
  if (!Has(suffix)) return fallback;
  return RequiredDim(suffix, max);
}

absl::StatusOr<uint64_t> ModelLoader::OptionalUint(absl::string_view suffix, uint64_t max,
                                                   uint64_t fallback) const {
  if (!Has(suffix)) return fallback;
  const std::string key = Key(suffix);
  absl::StatusOr<uint64_t> v = meta_.GetUint(key);
  if (!v.ok()) return Error(v.status().message());
  if (*v > max) return Error(absl::StrFormat("%s = %d is out of range (0..%d)", key, *v, max));
  return *v;
}

absl::StatusOr<double> ModelLoader::OptionalFloat(absl::string_view suffix, double fallback) const {
  if (!Has(suffix)) return fallback;
  const std::string key = Key(suffix);
  absl::StatusOr<double> v = meta_.GetFloat(key);
  if (!v.ok()) return Error(v.status().message());
  if (!std::isfinite(*v)) return Error(absl::StrFormat("%s = %g is not finite", key, *v));
  return *v;
}

// The rope.scaling.* keys (llama.cpp's defaults: type linear, factor from
// rope.scale_linear when rope.scaling.factor is absent, the original context
// the trained one). A key of the wrong type is an error, not a default.
absl::Status ModelLoader::ReadRopeScaling(ModelHparams& hp) const {
  RopeScalingKeys keys;
  keys.original_context = hp.n_ctx_train;
  if (Has("rope.scaling.type")) {
    absl::StatusOr<std::string> type = meta_.GetString(Key("rope.scaling.type"));
    if (!type.ok()) return Error(type.status().message());
    keys.type = *type;
  } else {
    keys.type = "linear";
  }
  for (const char* suffix : {"rope.scaling.factor", "rope.scale_linear"}) {
    if (!Has(suffix)) continue;
    absl::StatusOr<double> factor = meta_.GetFloat(Key(suffix));
    if (!factor.ok()) return Error(factor.status().message());
    keys.factor = *factor;
    break;
  }
  if (Has("rope.scaling.original_context_length")) {
    absl::StatusOr<int> n = RequiredDim("rope.scaling.original_context_length", INT32_MAX);
    if (!n.ok()) return n.status();
    keys.original_context = *n;
  }
  if (Has("rope.scaling.attn_factor")) {
    absl::StatusOr<double> attn_factor = meta_.GetFloat(Key("rope.scaling.attn_factor"));
    if (!attn_factor.ok()) return Error(attn_factor.status().message());
    keys.attn_factor = *attn_factor;
  }
  absl::StatusOr<RopeScaling> scaling =
      MakeRopeScaling(keys, hp.n_rot, hp.rope_freq_base, Key("rope.scaling."));
  if (!scaling.ok()) {
    return absl::Status(scaling.status().code(),
                        absl::StrCat(path_, ": ", scaling.status().message()));
  }
  hp.rope_scaling = *scaling;
  hp.rope_scaling_keys = keys;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int>> ModelLoader::UniformPerLayer(absl::string_view suffix,
                                                                int n_layer, uint64_t max) const {
  const std::string key = Key(suffix);
  if (!meta_.Has(key)) return std::optional<int>();
  absl::StatusOr<std::vector<uint64_t>> values = meta_.GetUintOrArray(key, n_layer);
  if (!values.ok()) return Error(values.status().message());
  if (values->empty()) return Error(absl::StrCat(key, " is an empty array"));
  const uint64_t first = values->front();
  for (size_t i = 0; i < values->size(); ++i) {
    if ((*values)[i] != first) {
      return Unsupported(absl::StrFormat(
          "%s differs between layers (layer 0: %d, layer %d: %d); per-layer values are "
          "not supported",
          key, first, i, (*values)[i]));
    }
  }
  if (first == 0 || first > max) {
    return Error(absl::StrFormat("%s = %d is out of range (1..%d)", key, first, max));
  }
  return std::optional<int>(static_cast<int>(first));
}

absl::StatusOr<int> ModelLoader::RequiredUniformPerLayer(absl::string_view suffix, int n_layer,
                                                         uint64_t max) const {
  absl::StatusOr<std::optional<int>> value = UniformPerLayer(suffix, n_layer, max);
  if (!value.ok()) return value.status();
  if (!value->has_value()) return Error(absl::StrCat("required key ", Key(suffix), " is missing"));
  return **value;
}

absl::Status ModelLoader::ReadCommonHparams(ModelHparams& hp) const {
  hp.architecture = arch_;
  absl::StatusOr<int> block_count = RequiredDim("block_count", kMaxModelLayers);
  if (!block_count.ok()) return block_count.status();
  absl::StatusOr<uint64_t> nextn_key = OptionalUint("nextn_predict_layers", kMaxModelLayers, 0);
  if (!nextn_key.ok()) return nextn_key.status();
  const uint64_t nextn = *nextn_key;
  if (nextn >= static_cast<uint64_t>(*block_count)) {
    return Error(absl::StrFormat("%s = %d leaves no layers of %s = %d", Key("nextn_predict_layers"),
                                 nextn, Key("block_count"), *block_count));
  }
  hp.n_layer = *block_count - static_cast<int>(nextn);

  absl::StatusOr<int> n_ctx = RequiredDim("context_length", uint64_t{1} << 31);
  if (!n_ctx.ok()) return n_ctx.status();
  hp.n_ctx_train = *n_ctx;
  absl::StatusOr<int> n_embd = RequiredDim("embedding_length", kMaxModelDim);
  if (!n_embd.ok()) return n_embd.status();
  hp.n_embd = *n_embd;

  absl::StatusOr<int> n_head =
      RequiredUniformPerLayer("attention.head_count", hp.n_layer, kMaxModelDim);
  if (!n_head.ok()) return n_head.status();
  hp.n_head = *n_head;
  absl::StatusOr<std::optional<int>> n_head_kv =
      UniformPerLayer("attention.head_count_kv", hp.n_layer, kMaxModelDim);
  if (!n_head_kv.ok()) return n_head_kv.status();
  hp.n_head_kv = n_head_kv->value_or(hp.n_head);
  if (hp.n_head % hp.n_head_kv != 0) {
    return Error(absl::StrFormat("%s = %d is not a multiple of %s = %d",
                                 Key("attention.head_count"), hp.n_head,
                                 Key("attention.head_count_kv"), hp.n_head_kv));
  }

  absl::StatusOr<int> key_length =
      OptionalDim("attention.key_length", kMaxModelDim, hp.n_embd / hp.n_head);
  if (!key_length.ok()) return key_length.status();
  hp.head_dim = *key_length;
  if (hp.head_dim < 1) {
    return Error(absl::StrFormat("%s = %d and %s = %d give no head size",
                                 Key("embedding_length"), hp.n_embd, Key("attention.head_count"),
                                 hp.n_head));
  }
  absl::StatusOr<int> value_length =
      OptionalDim("attention.value_length", kMaxModelDim, hp.head_dim);
  if (!value_length.ok()) return value_length.status();
  if (*value_length != hp.head_dim) {
    return Unsupported(absl::StrFormat("%s = %d differs from %s = %d",
                                       Key("attention.value_length"), *value_length,
                                       Key("attention.key_length"), hp.head_dim));
  }
  absl::StatusOr<int> n_rot = OptionalDim("rope.dimension_count", kMaxModelDim, hp.head_dim);
  if (!n_rot.ok()) return n_rot.status();
  if (*n_rot % 2 != 0 || *n_rot > hp.head_dim) {
    return Error(absl::StrFormat("%s = %d must be even and at most the head size %d",
                                 Key("rope.dimension_count"), *n_rot, hp.head_dim));
  }
  hp.n_rot = *n_rot;

  hp.rope_freq_base = static_cast<float>(meta_.GetFloatOr(Key("rope.freq_base"), 10000.0));
  if (!(hp.rope_freq_base > 0.0f) || !std::isfinite(hp.rope_freq_base)) {
    return Error(
        absl::StrFormat("%s = %g must be positive", Key("rope.freq_base"), hp.rope_freq_base));
  }
  if (absl::Status s = ReadRopeScaling(hp); !s.ok()) return s;
  absl::StatusOr<double> eps = meta_.GetFloat(Key("attention.layer_norm_rms_epsilon"));
  if (!eps.ok()) return Error(eps.status().message());
  if (!(*eps > 0.0 && *eps < 1.0)) {
    return Error(absl::StrFormat("%s = %g is out of range (0, 1)",
                                 Key("attention.layer_norm_rms_epsilon"), *eps));
  }
  hp.rms_eps = static_cast<float>(*eps);

  const GgufTensorInfo* embd = gguf_.FindTensor("token_embd.weight");
  if (embd == nullptr) return Error("tensor 'token_embd.weight' is missing");
  if (embd->ne[1] <= 0 || static_cast<uint64_t>(embd->ne[1]) > kMaxModelDim * 64) {
    return Error(
        absl::StrFormat("tensor 'token_embd.weight' has %d rows (vocabulary size)", embd->ne[1]));
  }
  hp.n_vocab = static_cast<int>(embd->ne[1]);
  return absl::OkStatus();
}

absl::Status ModelLoader::ReadExpertCounts(ModelHparams& hp) const {
  if (!Has("expert_count")) {
    return Unsupported(absl::StrFormat(
        "%s is missing: this is a dense %s model, and moetier serves models with routed "
        "experts",
        Key("expert_count"), arch_));
  }
  absl::StatusOr<int> n_expert = RequiredDim("expert_count", kMaxModelExperts);
  if (!n_expert.ok()) return n_expert.status();
  hp.n_expert = *n_expert;
  absl::StatusOr<int> n_expert_used = RequiredDim("expert_used_count", kMaxModelExperts);
  if (!n_expert_used.ok()) return n_expert_used.status();
  hp.n_expert_used = *n_expert_used;
  if (hp.n_expert_used > hp.n_expert) {
    return Error(absl::StrFormat("%s = %d exceeds %s = %d", Key("expert_used_count"),
                                 hp.n_expert_used, Key("expert_count"), hp.n_expert));
  }
  // llama.cpp reads these for every architecture and, with more than one
  // group, first keeps the groups whose two best experts score highest
  // (DeepSeek-V3's and Ling 2.0's routing): a router this build does not
  // have, so such a file would route differently here.
  absl::StatusOr<uint64_t> groups = OptionalUint("expert_group_count", kMaxModelExperts, 0);
  if (!groups.ok()) return groups.status();
  if (*groups > 1) {
    return Unsupported(absl::StrFormat("%s = %d: group-limited expert routing is not supported",
                                       Key("expert_group_count"), *groups));
  }
  return absl::OkStatus();
}

absl::StatusOr<WeightRef> ModelLoader::Tensor(const std::string& name,
                                              std::array<int64_t, 4> ne) const {
  const GgufTensorInfo* info = gguf_.FindTensor(name);
  if (info == nullptr) return Error(absl::StrCat("tensor '", name, "' is missing"));
  return Check(*info, ne);
}

absl::StatusOr<WeightRef> ModelLoader::LayerTensor(int il, absl::string_view suffix,
                                                   std::array<int64_t, 4> ne) const {
  return Tensor(absl::StrCat("blk.", il, ".", suffix), ne);
}

absl::Status ModelLoader::ReadLayerTensors(int il,
                                           std::initializer_list<LayerTensorSpec> specs) const {
  for (const LayerTensorSpec& t : specs) {
    absl::StatusOr<WeightRef> r = LayerTensor(il, t.suffix, t.ne);
    if (!r.ok()) return r.status();
    *t.out = *std::move(r);
  }
  return absl::OkStatus();
}

absl::StatusOr<WeightRef> ModelLoader::Check(const GgufTensorInfo& info,
                                             std::array<int64_t, 4> ne) const {
  if (info.ne != ne) {
    return Error(absl::StrFormat("tensor '%s' has shape %s, expected %s", info.name,
                                 ShapeString(info.ne), ShapeString(ne)));
  }
  const TensorTypeInfo& type = GetTensorTypeInfo(info.type);
  if (!type.has_codec) {
    return Unsupported(
        absl::StrFormat("tensor '%s' has type %s, which moetier cannot decode (supported: %s)",
                        info.name, type.name, SupportedTypeNames()));
  }
  if (info.ne[0] % type.block_elems != 0) {
    return Error(absl::StrFormat(
        "tensor '%s': row length %d is not a multiple of the %s block size %d", info.name,
        info.ne[0], type.name, type.block_elems));
  }
  const std::span<const uint8_t> bytes = gguf_.TensorData(info);
  const uint64_t row_bytes = static_cast<uint64_t>(TensorRowBytes(info.type, info.ne[0]));
  const uint64_t expected_bytes =
      row_bytes * static_cast<uint64_t>(info.ne[1] * info.ne[2] * info.ne[3]);
  if (bytes.size() != expected_bytes) {
    return Error(absl::StrFormat("tensor '%s' holds %d bytes, its shape needs %d", info.name,
                                 bytes.size(), expected_bytes));
  }
  WeightRef ref;
  ref.name = info.name;
  ref.type = info.type;
  ref.ne = info.ne;
  ref.data = bytes.data();
  ref.row_bytes = row_bytes;
  ref.expert_stride_bytes = row_bytes * static_cast<uint64_t>(info.ne[1]);
  return ref;
}

WeightRef ModelLoader::RowSlice(const WeightRef& whole, int64_t first, int64_t count) {
  WeightRef part = whole;
  part.data = whole.data + first * whole.row_bytes;
  part.ne[1] = count;
  // expert_stride_bytes stays that of the whole tensor: experts are still
  // that far apart.
  return part;
}

absl::StatusOr<WeightRef> ModelLoader::GatherRows(const WeightRef& whole,
                                                  std::span<const int64_t> rows, std::string name,
                                                  ModelWeights& w) {
  // The rows come from a checked tensor and the caller's shape arithmetic:
  // a row outside it is a loader bug, not a bad file.
  if (whole.ne[2] != 1 || whole.ne[3] != 1 ||
      std::any_of(rows.begin(), rows.end(), [&](int64_t r) { return r < 0 || r >= whole.ne[1]; })) {
    return absl::InternalError(
        absl::StrFormat("%s: rows to regroup fall outside the 2-D tensor %s", name, whole.name));
  }
  // At least the 32 bytes GGUF aligns tensors to, which the kernels may
  // assume; 64 also keeps whole cache lines.
  constexpr std::align_val_t kAlign{64};
  const size_t bytes = std::max<size_t>(rows.size() * whole.row_bytes, 1);
  std::shared_ptr<uint8_t[]> buffer(static_cast<uint8_t*>(::operator new[](bytes, kAlign)),
                                    [](uint8_t* p) { ::operator delete[](p, kAlign); });
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(buffer.get() + i * whole.row_bytes, whole.row(rows[i]), whole.row_bytes);
  }
  WeightRef part = whole;
  part.name = std::move(name);
  part.data = buffer.get();
  part.ne = {whole.ne[0], static_cast<int64_t>(rows.size()), 1, 1};
  part.expert_stride_bytes = rows.size() * whole.row_bytes;
  w.regrouped.push_back(std::move(buffer));
  return part;
}

absl::Status ModelLoader::ReadEmbeddingAndOutput(const ModelHparams& hp, bool output_may_be_tied,
                                                 ModelWeights& w) const {
  const int64_t n_embd = hp.n_embd;
  const int64_t n_vocab = hp.n_vocab;
  absl::StatusOr<WeightRef> ref = Tensor("token_embd.weight", {n_embd, n_vocab, 1, 1});
  if (!ref.ok()) return ref.status();
  w.token_embd = *std::move(ref);
  ref = Tensor("output_norm.weight", {n_embd, 1, 1, 1});
  if (!ref.ok()) return ref.status();
  w.output_norm = *std::move(ref);
  if (HasTensor("output.weight") || !output_may_be_tied) {
    ref = Tensor("output.weight", {n_embd, n_vocab, 1, 1});
    if (!ref.ok()) return ref.status();
    w.output = *std::move(ref);
    w.output_tied = false;
  } else {
    w.output = w.token_embd;
    w.output_tied = true;
  }
  return absl::OkStatus();
}

absl::Status ModelLoader::RequireRopeOverWholeHead(const ModelHparams& hp) const {
  if (hp.n_rot == hp.head_dim) return absl::OkStatus();
  return Unsupported(absl::StrFormat("%s = %d differs from the head size %d",
                                     Key("rope.dimension_count"), hp.n_rot, hp.head_dim));
}

absl::Status ModelLoader::ReadExpertWidth(ModelHparams& hp) const {
  if (HasNonZero("expert_feed_forward_length")) {
    absl::StatusOr<int> n_ff_exp = RequiredDim("expert_feed_forward_length", kMaxModelDim);
    if (!n_ff_exp.ok()) return n_ff_exp.status();
    hp.n_ff_exp = *n_ff_exp;
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<int>> n_ff =
      UniformPerLayer("feed_forward_length", hp.n_layer, kMaxModelDim);
  if (!n_ff.ok()) return n_ff.status();
  if (!n_ff->has_value() || **n_ff / hp.n_expert_used == 0) {
    return Error(absl::StrFormat("neither %s nor a usable %s is present",
                                 Key("expert_feed_forward_length"), Key("feed_forward_length")));
  }
  hp.n_ff_exp = **n_ff / hp.n_expert_used;
  return absl::OkStatus();
}

absl::Status ModelLoader::ReadAttention(int il, const ModelHparams& hp, AttentionWeights& out,
                                        AttentionOptions options) const {
  const bool gated_q = options.gated_q;
  const int64_t n_embd = hp.n_embd;
  const int64_t head_dim = hp.head_dim;
  const int64_t n_q = hp.n_head * head_dim;
  const int64_t q_rows = gated_q ? 2 * n_q : n_q;
  const int64_t n_kv = hp.n_head_kv * head_dim;
  const std::string blk = absl::StrCat("blk.", il, ".");
  std::vector<const char*> refused_biases = {"attn_qkv.bias"};
  if (!options.output_bias) refused_biases.push_back("attn_output.bias");
  if (!options.qkv_biases) {
    refused_biases.insert(refused_biases.begin(), {"attn_q.bias", "attn_k.bias", "attn_v.bias"});
  }
  for (const char* bias : refused_biases) {
    if (!HasTensor(absl::StrCat(blk, bias))) continue;
    if (options.qkv_biases || options.output_bias) {
      std::vector<std::string> allowed;
      if (options.qkv_biases) allowed = {"attn_q", "attn_k", "attn_v"};
      if (options.output_bias) allowed.push_back("attn_output");
      return Unsupported(absl::StrFormat("tensor '%s%s': %s models have biases on %s only", blk,
                                         bias, arch_, absl::StrJoin(allowed, ", ")));
    }
    return Unsupported(absl::StrFormat(
        "tensor '%s%s': attention biases are not supported for %s models", blk, bias, arch_));
  }
  if (options.output_bias && HasTensor(blk + "attn_output.bias")) {
    absl::StatusOr<WeightRef> bias = LayerTensor(il, "attn_output.bias", {n_embd, 1, 1, 1});
    if (!bias.ok()) return bias.status();
    out.output_bias = *std::move(bias);
  }
  if (options.qkv_biases) {
    for (const LayerTensorSpec& b :
         {LayerTensorSpec{"attn_q.bias", {q_rows, 1, 1, 1}, &out.q_bias},
          LayerTensorSpec{"attn_k.bias", {n_kv, 1, 1, 1}, &out.k_bias},
          LayerTensorSpec{"attn_v.bias", {n_kv, 1, 1, 1}, &out.v_bias}}) {
      if (!HasTensor(blk + b.suffix)) continue;
      absl::StatusOr<WeightRef> bias = LayerTensor(il, b.suffix, b.ne);
      if (!bias.ok()) return bias.status();
      *b.out = *std::move(bias);
    }
  }
  if (!gated_q && !HasTensor(blk + "attn_q.weight") && HasTensor(blk + "attn_qkv.weight")) {
    absl::StatusOr<WeightRef> qkv = Tensor(blk + "attn_qkv.weight", {n_embd, n_q + 2 * n_kv, 1, 1});
    if (!qkv.ok()) return qkv.status();
    out.q = RowSlice(*qkv, 0, n_q);
    out.k = RowSlice(*qkv, n_q, n_kv);
    out.v = RowSlice(*qkv, n_q + n_kv, n_kv);
  } else {
    absl::StatusOr<WeightRef> r = Tensor(blk + "attn_q.weight", {n_embd, q_rows, 1, 1});
    if (!r.ok()) return r.status();
    out.q = *std::move(r);
    r = Tensor(blk + "attn_k.weight", {n_embd, n_kv, 1, 1});
    if (!r.ok()) return r.status();
    out.k = *std::move(r);
    r = Tensor(blk + "attn_v.weight", {n_embd, n_kv, 1, 1});
    if (!r.ok()) return r.status();
    out.v = *std::move(r);
  }
  absl::StatusOr<WeightRef> r = Tensor(blk + "attn_output.weight", {n_q, n_embd, 1, 1});
  if (!r.ok()) return r.status();
  out.output = *std::move(r);
  switch (hp.qk_norm) {
    case QkNorm::kNone:
      for (const char* norm : {"attn_q_norm.weight", "attn_k_norm.weight"}) {
        if (HasTensor(blk + norm)) {
          return Error(absl::StrFormat("tensor '%s%s' is not part of a %s model", blk, norm,
                                       arch_));
        }
      }
      return absl::OkStatus();
    case QkNorm::kPerHead:
      r = Tensor(blk + "attn_q_norm.weight", {head_dim, 1, 1, 1});
      if (!r.ok()) return r.status();
      out.q_norm = *std::move(r);
      r = Tensor(blk + "attn_k_norm.weight", {head_dim, 1, 1, 1});
      if (!r.ok()) return r.status();
      out.k_norm = *std::move(r);
      return absl::OkStatus();
    case QkNorm::kWhole:
      r = Tensor(blk + "attn_q_norm.weight", {n_q, 1, 1, 1});
      if (!r.ok()) return r.status();
      out.q_norm = *std::move(r);
      r = Tensor(blk + "attn_k_norm.weight", {n_kv, 1, 1, 1});
      if (!r.ok()) return r.status();
      out.k_norm = *std::move(r);
      return absl::OkStatus();
  }
  return absl::InternalError("unknown q/k norm");
}

absl::Status ModelLoader::ReadAttentionMoeLayers(const ModelHparams& hp, ModelWeights& w,
                                                 AttentionOptions attention) const {
  w.layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers[il];
    l.ffn = FfnKind::kMoe;
    if (absl::Status s = ReadAttentionLayer(il, hp, "ffn_norm.weight", attention, l); !s.ok()) {
      return s;
    }
    if (absl::Status s = ReadRoutedExperts(il, hp, l.moe); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ModelLoader::ReadAttentionLayer(int il, const ModelHparams& hp,
                                             absl::string_view ffn_norm, AttentionOptions attention,
                                             LayerWeights& l) const {
  const std::array<int64_t, 4> norm_shape = {hp.n_embd, 1, 1, 1};
  l.mixer = MixerKind::kAttention;
  absl::StatusOr<WeightRef> norm = LayerTensor(il, "attn_norm.weight", norm_shape);
  if (!norm.ok()) return norm.status();
  l.attn_norm = *std::move(norm);
  if (absl::Status s = ReadAttention(il, hp, l.attn, attention); !s.ok()) return s;
  norm = LayerTensor(il, ffn_norm, norm_shape);
  if (!norm.ok()) return norm.status();
  l.ffn_norm = *std::move(norm);
  return absl::OkStatus();
}

absl::Status ModelLoader::ReadRoutedExperts(int il, const ModelHparams& hp,
                                            MoeWeights& out) const {
  const int64_t n_embd = hp.n_embd;
  const int64_t n_expert = hp.n_expert;
  const int64_t n_ff = hp.n_ff_exp;
  const std::string blk = absl::StrCat("blk.", il, ".");
  if (HasTensor(blk + "ffn_gate.0.weight") && !HasTensor(blk + "ffn_gate_exps.weight")) {
    return Unsupported(absl::StrFormat(
        "tensor '%sffn_gate.0.weight': experts stored one tensor each (an old Mixtral GGUF "
        "layout) are not supported; convert the model again with a current llama.cpp",
        blk));
  }
  absl::StatusOr<WeightRef> r = Tensor(blk + "ffn_gate_inp.weight", {n_embd, n_expert, 1, 1});
  if (!r.ok()) return r.status();
  out.router = *std::move(r);
  if (!HasTensor(blk + "ffn_gate_exps.weight") && HasTensor(blk + "ffn_gate_up_exps.weight")) {
    absl::StatusOr<WeightRef> gate_up =
        Tensor(blk + "ffn_gate_up_exps.weight", {n_embd, 2 * n_ff, n_expert, 1});
    if (!gate_up.ok()) return gate_up.status();
    out.gate_exps = RowSlice(*gate_up, 0, n_ff);
    out.up_exps = RowSlice(*gate_up, n_ff, n_ff);
  } else {
    r = Tensor(blk + "ffn_gate_exps.weight", {n_embd, n_ff, n_expert, 1});
    if (!r.ok()) return r.status();
    out.gate_exps = *std::move(r);
    r = Tensor(blk + "ffn_up_exps.weight", {n_embd, n_ff, n_expert, 1});
    if (!r.ok()) return r.status();
    out.up_exps = *std::move(r);
  }
  r = Tensor(blk + "ffn_down_exps.weight", {n_ff, n_embd, n_expert, 1});
  if (!r.ok()) return r.status();
  out.down_exps = *std::move(r);
  return absl::OkStatus();
}

absl::Status ModelLoader::ReadSharedExpert(int il, const ModelHparams& hp, MoeWeights& out,
                                           bool gated) const {
  const int64_t n_embd = hp.n_embd;
  const int64_t n_ff = hp.n_ff_shared;
  if (gated) {
    if (absl::Status s = ReadLayerTensors(
            il, {{"ffn_gate_inp_shexp.weight", {n_embd, 1, 1, 1}, &out.shared_gate_inp}});
        !s.ok()) {
      return s;
    }
  }
  return ReadLayerTensors(il, {{"ffn_gate_shexp.weight", {n_embd, n_ff, 1, 1}, &out.shared_gate},
                               {"ffn_up_shexp.weight", {n_embd, n_ff, 1, 1}, &out.shared_up},
                               {"ffn_down_shexp.weight", {n_ff, n_embd, 1, 1}, &out.shared_down}});
}

absl::Status ModelLoader::ReadSelectionBiasedMoe(int il, const ModelHparams& hp, bool bias_required,
                                                 LayerWeights& l) const {
  l.ffn = hp.n_ff_shared > 0 ? FfnKind::kMoeWithSharedExpert : FfnKind::kMoe;
  if (absl::Status s = ReadRoutedExperts(il, hp, l.moe); !s.ok()) return s;
  const std::string bias = absl::StrCat("blk.", il, ".exp_probs_b.bias");
  if (bias_required || HasTensor(bias)) {
    absl::StatusOr<WeightRef> b = Tensor(bias, {hp.n_expert, 1, 1, 1});
    if (!b.ok()) return b.status();
    l.moe.selection_bias = *std::move(b);
  }
  if (hp.n_ff_shared == 0) return absl::OkStatus();
  return ReadSharedExpert(il, hp, l.moe, /*gated=*/false);
}

absl::StatusOr<int> ModelLoader::ReadLeadingDenseCount(const ModelHparams& hp) const {
  absl::StatusOr<uint64_t> n_dense = OptionalUint("leading_dense_block_count", kMaxModelLayers, 0);
  if (!n_dense.ok()) return n_dense.status();
  if (*n_dense > static_cast<uint64_t>(hp.n_layer)) {
    return Error(absl::StrFormat("%s = %d exceeds the %d layers of the main pass",
                                 Key("leading_dense_block_count"), *n_dense, hp.n_layer));
  }
  return static_cast<int>(*n_dense);
}

absl::Status ModelLoader::ReadDenseFfnWidth(ModelHparams& hp) const {
  absl::StatusOr<std::optional<int>> n_ff =
      UniformPerLayer("feed_forward_length", hp.n_layer, kMaxModelDim);
  if (!n_ff.ok()) return n_ff.status();
  if (!n_ff->has_value()) {
    return Error(
        absl::StrFormat("%s (the dense layers' width) is missing", Key("feed_forward_length")));
  }
  hp.n_ff_dense = **n_ff;
  return absl::OkStatus();
}

absl::Status ModelLoader::ReadDenseFfn(int il, const ModelHparams& hp, DenseFfnWeights& out) const {
  const int64_t n_embd = hp.n_embd;
  const int64_t n_ff = hp.n_ff_dense;
  return ReadLayerTensors(il, {{"ffn_gate.weight", {n_embd, n_ff, 1, 1}, &out.gate},
                               {"ffn_up.weight", {n_embd, n_ff, 1, 1}, &out.up},
                               {"ffn_down.weight", {n_ff, n_embd, 1, 1}, &out.down}});
}

absl::Status ModelLoader::ReadRouterWeightsScale(ModelHparams& hp) const {
  absl::StatusOr<double> scale = OptionalFloat("expert_weights_scale", 0.0);
  if (!scale.ok()) return scale.status();
  hp.router.weights_scale = *scale == 0.0 ? 1.0f : static_cast<float>(*scale);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ModelLoader::IntArray(absl::string_view suffix) const {
  const std::string key = Key(suffix);
  const GgufValue* value = meta_.Find(key);
  if (value == nullptr) return std::vector<int64_t>();
  if (value->type != GgufValueType::kArray) {
    absl::StatusOr<int64_t> v = meta_.GetInt(key);
    if (!v.ok()) return Error(v.status().message());
    return std::vector<int64_t>{*v};
  }
  absl::StatusOr<std::vector<int64_t>> values = meta_.GetIntArray(key);
  if (!values.ok()) return Error(values.status().message());
  return *std::move(values);
}

}  // namespace moetier
