#include "model/qwen3moe_model.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace moetier {
namespace {

constexpr char kArch[] = "qwen3moe";

// Upper bounds that keep every derived size (rows × cols, cache lengths) far
// from integer overflow; real models are orders of magnitude below them.
constexpr uint64_t kMaxDim = 1u << 24;
constexpr uint64_t kMaxLayers = 4096;
constexpr uint64_t kMaxExperts = 1u << 16;

std::string Key(absl::string_view suffix) { return absl::StrCat(kArch, ".", suffix); }

std::string ShapeString(const std::array<int64_t, 4>& ne) {
  int n = 4;
  while (n > 1 && ne[n - 1] == 1) --n;
  return absl::StrCat("{", absl::StrJoin(ne.begin(), ne.begin() + n, ", "), "}");
}

std::string SupportedTypeNames() {
  std::vector<std::string> names;
  for (uint32_t id = 0; id < 64; ++id) {
    const std::optional<TensorTypeInfo> info = LookupTensorType(id);
    if (info.has_value() && info->has_codec) names.emplace_back(info->name);
  }
  return absl::StrJoin(names, ", ");
}

class Loader {
 public:
  explicit Loader(const GgufModel& gguf)
      : gguf_(gguf), path_(gguf.shards().front()->path()), meta_(gguf.metadata()) {}

  absl::StatusOr<Qwen3MoeModel> Load() {
    absl::StatusOr<std::string> arch = meta_.GetString("general.architecture");
    if (!arch.ok()) return Error(arch.status().message());
    if (*arch != kArch) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: unsupported model architecture '%s' (general.architecture); this build "
          "runs '%s' models",
          path_, *arch, kArch));
    }
    Qwen3MoeModel model;
    if (absl::Status s = LoadHparams(model.hparams); !s.ok()) return s;
    if (absl::Status s = LoadWeights(model); !s.ok()) return s;
    return model;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what));
  }
  absl::Status Unsupported(absl::string_view what) const {
    return absl::UnimplementedError(absl::StrCat(path_, ": ", what));
  }

  // A positive integer key no larger than `max`.
  absl::StatusOr<int> RequiredDim(absl::string_view suffix, uint64_t max) const {
    const std::string key = Key(suffix);
    absl::StatusOr<uint64_t> v = meta_.GetUint(key);
    if (!v.ok()) return Error(v.status().message());
    if (*v == 0 || *v > max) {
      return Error(absl::StrFormat("%s = %d is out of range (1..%d)", key, *v, max));
    }
    return static_cast<int>(*v);
  }

  absl::StatusOr<int> OptionalDim(absl::string_view suffix, uint64_t max, int fallback) const {
    if (!meta_.Has(Key(suffix))) return fallback;
    return RequiredDim(suffix, max);
  }

  // A key that may be a scalar or one value per layer; moetier needs the
  // same value on every layer.
  absl::StatusOr<std::optional<int>> UniformPerLayer(absl::string_view suffix, int n_layer,
                                                     uint64_t max) const {
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

  absl::Status LoadHparams(Qwen3MoeHparams& hp) const {
    absl::StatusOr<int> block_count = RequiredDim("block_count", kMaxLayers);
    if (!block_count.ok()) return block_count.status();
    const uint64_t nextn = meta_.GetUintOr(Key("nextn_predict_layers"), 0);
    if (nextn >= static_cast<uint64_t>(*block_count)) {
      return Error(absl::StrFormat("%s = %d leaves no layers of %s = %d",
                                   Key("nextn_predict_layers"), nextn, Key("block_count"),
                                   *block_count));
    }
    hp.n_layer = *block_count - static_cast<int>(nextn);

    absl::StatusOr<int> n_ctx = RequiredDim("context_length", uint64_t{1} << 31);
    if (!n_ctx.ok()) return n_ctx.status();
    hp.n_ctx_train = *n_ctx;
    absl::StatusOr<int> n_embd = RequiredDim("embedding_length", kMaxDim);
    if (!n_embd.ok()) return n_embd.status();
    hp.n_embd = *n_embd;

    absl::StatusOr<std::optional<int>> n_head =
        UniformPerLayer("attention.head_count", hp.n_layer, kMaxDim);
    if (!n_head.ok()) return n_head.status();
    if (!n_head->has_value()) {
      return Error(absl::StrCat("required key ", Key("attention.head_count"), " is missing"));
    }
    hp.n_head = **n_head;
    absl::StatusOr<std::optional<int>> n_head_kv =
        UniformPerLayer("attention.head_count_kv", hp.n_layer, kMaxDim);
    if (!n_head_kv.ok()) return n_head_kv.status();
    hp.n_head_kv = n_head_kv->value_or(hp.n_head);
    if (hp.n_head % hp.n_head_kv != 0) {
      return Error(absl::StrFormat("%s = %d is not a multiple of %s = %d",
                                   Key("attention.head_count"), hp.n_head,
                                   Key("attention.head_count_kv"), hp.n_head_kv));
    }

    absl::StatusOr<int> key_length =
        OptionalDim("attention.key_length", kMaxDim, hp.n_embd / hp.n_head);
    if (!key_length.ok()) return key_length.status();
    hp.head_dim = *key_length;
    absl::StatusOr<int> value_length = OptionalDim("attention.value_length", kMaxDim, hp.head_dim);
    if (!value_length.ok()) return value_length.status();
    if (*value_length != hp.head_dim) {
      return Unsupported(absl::StrFormat("%s = %d differs from %s = %d",
                                         Key("attention.value_length"), *value_length,
                                         Key("attention.key_length"), hp.head_dim));
    }
    if (hp.head_dim % 2 != 0) {
      return Error(absl::StrFormat("head size %d is odd; rope needs pairs", hp.head_dim));
    }
    absl::StatusOr<int> n_rot = OptionalDim("rope.dimension_count", kMaxDim, hp.head_dim);
    if (!n_rot.ok()) return n_rot.status();
    if (*n_rot != hp.head_dim) {
      return Unsupported(absl::StrFormat("%s = %d differs from the head size %d",
                                         Key("rope.dimension_count"), *n_rot, hp.head_dim));
    }

    // Only unscaled rope is implemented; a scaled model would silently give
    // wrong logits, so refuse it.
    if (meta_.Has(Key("rope.scaling.type"))) {
      const std::string type = meta_.GetStringOr(Key("rope.scaling.type"), "");
      const double factor = meta_.GetFloatOr(Key("rope.scaling.factor"), 1.0);
      if (type != "none" && !(type == "linear" && factor == 1.0)) {
        return Unsupported(absl::StrFormat("%s = '%s' (factor %g) is not supported",
                                           Key("rope.scaling.type"), type, factor));
      }
    }
    if (meta_.Has(Key("rope.scale_linear")) &&
        meta_.GetFloatOr(Key("rope.scale_linear"), 1.0) != 1.0) {
      return Unsupported(absl::StrCat(Key("rope.scale_linear"), " != 1 is not supported"));
    }

    hp.rope_freq_base = static_cast<float>(meta_.GetFloatOr(Key("rope.freq_base"), 10000.0));
    if (!(hp.rope_freq_base > 0.0f)) {
      return Error(
          absl::StrFormat("%s = %g must be positive", Key("rope.freq_base"), hp.rope_freq_base));
    }
    absl::StatusOr<double> eps = meta_.GetFloat(Key("attention.layer_norm_rms_epsilon"));
    if (!eps.ok()) return Error(eps.status().message());
    if (!(*eps > 0.0 && *eps < 1.0)) {
      return Error(absl::StrFormat("%s = %g is out of range (0, 1)",
                                   Key("attention.layer_norm_rms_epsilon"), *eps));
    }
    hp.rms_eps = static_cast<float>(*eps);

    absl::StatusOr<int> n_expert = RequiredDim("expert_count", kMaxExperts);
    if (!n_expert.ok()) return n_expert.status();
    hp.n_expert = *n_expert;
    absl::StatusOr<int> n_expert_used = RequiredDim("expert_used_count", kMaxExperts);
    if (!n_expert_used.ok()) return n_expert_used.status();
    hp.n_expert_used = *n_expert_used;
    if (hp.n_expert_used > hp.n_expert) {
      return Error(absl::StrFormat("%s = %d exceeds %s = %d", Key("expert_used_count"),
                                   hp.n_expert_used, Key("expert_count"), hp.n_expert));
    }

    if (meta_.Has(Key("expert_feed_forward_length"))) {
      absl::StatusOr<int> n_ff_exp = RequiredDim("expert_feed_forward_length", kMaxDim);
      if (!n_ff_exp.ok()) return n_ff_exp.status();
      hp.n_ff_exp = *n_ff_exp;
    } else {
      absl::StatusOr<std::optional<int>> n_ff =
          UniformPerLayer("feed_forward_length", hp.n_layer, kMaxDim);
      if (!n_ff.ok()) return n_ff.status();
      if (!n_ff->has_value() || **n_ff / hp.n_expert_used == 0) {
        return Error(absl::StrFormat("neither %s nor a usable %s is present",
                                     Key("expert_feed_forward_length"),
                                     Key("feed_forward_length")));
      }
      hp.n_ff_exp = **n_ff / hp.n_expert_used;
    }
    return absl::OkStatus();
  }

  // Resolves `name`, checks its shape and type, and fills a WeightRef.
  absl::StatusOr<WeightRef> Tensor(const std::string& name, std::array<int64_t, 4> ne) const {
    const GgufTensorInfo* info = gguf_.FindTensor(name);
    if (info == nullptr) return Error(absl::StrCat("tensor '", name, "' is missing"));
    return Check(*info, ne);
  }

  absl::StatusOr<WeightRef> Check(const GgufTensorInfo& info, std::array<int64_t, 4> ne) const {
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
      return Error(
          absl::StrFormat("tensor '%s': row length %d is not a multiple of the %s "
                          "block size %d",
                          info.name, info.ne[0], type.name, type.block_elems));
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

  // Rows [first, first+count) of a checked tensor, as a tensor of their own.
  static WeightRef RowSlice(const WeightRef& whole, int64_t first, int64_t count) {
    WeightRef part = whole;
    part.data = whole.data + first * whole.row_bytes;
    part.ne[1] = count;
    // expert_stride_bytes stays that of the whole tensor: experts are still
    // that far apart.
    return part;
  }

  absl::Status LoadWeights(Qwen3MoeModel& model) const {
    Qwen3MoeHparams& hp = model.hparams;
    Qwen3MoeWeights& w = model.weights;

    const GgufTensorInfo* embd = gguf_.FindTensor("token_embd.weight");
    if (embd == nullptr) return Error("tensor 'token_embd.weight' is missing");
    if (embd->ne[1] <= 0 || static_cast<uint64_t>(embd->ne[1]) > kMaxDim * 64) {
      return Error(
          absl::StrFormat("tensor 'token_embd.weight' has %d rows (vocabulary size)", embd->ne[1]));
    }
    hp.n_vocab = static_cast<int>(embd->ne[1]);
    const int64_t n_embd = hp.n_embd;
    const int64_t n_vocab = hp.n_vocab;

    absl::StatusOr<WeightRef> ref = Check(*embd, {n_embd, n_vocab, 1, 1});
    if (!ref.ok()) return ref.status();
    w.token_embd = *std::move(ref);
    ref = Tensor("output_norm.weight", {n_embd, 1, 1, 1});
    if (!ref.ok()) return ref.status();
    w.output_norm = *std::move(ref);
    if (gguf_.FindTensor("output.weight") != nullptr) {
      ref = Tensor("output.weight", {n_embd, n_vocab, 1, 1});
      if (!ref.ok()) return ref.status();
      w.output = *std::move(ref);
      w.output_tied = false;
    } else {
      w.output = w.token_embd;
      w.output_tied = true;
    }

    const int64_t head_dim = hp.head_dim;
    const int64_t n_q = hp.n_head * head_dim;
    const int64_t n_kv = hp.n_head_kv * head_dim;
    const int64_t n_expert = hp.n_expert;
    const int64_t n_ff = hp.n_ff_exp;
    w.layers.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
      Qwen3MoeLayerWeights& l = w.layers[il];
      const std::string blk = absl::StrCat("blk.", il, ".");
      const auto get = [&](absl::string_view suffix, std::array<int64_t, 4> ne,
                           WeightRef& out) -> absl::Status {
        absl::StatusOr<WeightRef> r = Tensor(absl::StrCat(blk, suffix), ne);
        if (!r.ok()) return r.status();
        out = *std::move(r);
        return absl::OkStatus();
      };
      absl::Status s = get("attn_norm.weight", {n_embd, 1, 1, 1}, l.attn_norm);
      if (s.ok()) {
        const std::string qkv_name = absl::StrCat(blk, "attn_qkv.weight");
        if (gguf_.FindTensor(absl::StrCat(blk, "attn_q.weight")) == nullptr &&
            gguf_.FindTensor(qkv_name) != nullptr) {
          absl::StatusOr<WeightRef> qkv = Tensor(qkv_name, {n_embd, n_q + 2 * n_kv, 1, 1});
          s = qkv.status();
          if (s.ok()) {
            l.attn_q = RowSlice(*qkv, 0, n_q);
            l.attn_k = RowSlice(*qkv, n_q, n_kv);
            l.attn_v = RowSlice(*qkv, n_q + n_kv, n_kv);
          }
        } else {
          s = get("attn_q.weight", {n_embd, n_q, 1, 1}, l.attn_q);
          if (s.ok()) s = get("attn_k.weight", {n_embd, n_kv, 1, 1}, l.attn_k);
          if (s.ok()) s = get("attn_v.weight", {n_embd, n_kv, 1, 1}, l.attn_v);
        }
      }
      if (s.ok()) s = get("attn_output.weight", {n_q, n_embd, 1, 1}, l.attn_output);
      if (s.ok()) s = get("attn_q_norm.weight", {head_dim, 1, 1, 1}, l.attn_q_norm);
      if (s.ok()) s = get("attn_k_norm.weight", {head_dim, 1, 1, 1}, l.attn_k_norm);
      if (s.ok()) s = get("ffn_norm.weight", {n_embd, 1, 1, 1}, l.ffn_norm);
      if (s.ok()) s = get("ffn_gate_inp.weight", {n_embd, n_expert, 1, 1}, l.ffn_gate_inp);
      if (s.ok()) {
        const std::string gate_up_name = absl::StrCat(blk, "ffn_gate_up_exps.weight");
        if (gguf_.FindTensor(absl::StrCat(blk, "ffn_gate_exps.weight")) == nullptr &&
            gguf_.FindTensor(gate_up_name) != nullptr) {
          absl::StatusOr<WeightRef> gate_up = Tensor(gate_up_name, {n_embd, 2 * n_ff, n_expert, 1});
          s = gate_up.status();
          if (s.ok()) {
            l.ffn_gate_exps = RowSlice(*gate_up, 0, n_ff);
            l.ffn_up_exps = RowSlice(*gate_up, n_ff, n_ff);
          }
        } else {
          s = get("ffn_gate_exps.weight", {n_embd, n_ff, n_expert, 1}, l.ffn_gate_exps);
          if (s.ok()) s = get("ffn_up_exps.weight", {n_embd, n_ff, n_expert, 1}, l.ffn_up_exps);
        }
      }
      if (s.ok()) s = get("ffn_down_exps.weight", {n_ff, n_embd, n_expert, 1}, l.ffn_down_exps);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  const GgufModel& gguf_;
  const std::string& path_;
  const GgufMetadata& meta_;
};

}  // namespace

absl::StatusOr<Qwen3MoeModel> LoadQwen3Moe(const GgufModel& gguf) { return Loader(gguf).Load(); }

}  // namespace moetier
