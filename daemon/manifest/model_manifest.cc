#include "manifest/model_manifest.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "gguf/model_fingerprint.h"

namespace moetier {
namespace {

struct ExpertTensors {
  const GgufTensorInfo* gate = nullptr;
  const GgufTensorInfo* up = nullptr;
  const GgufTensorInfo* gate_up = nullptr;
  const GgufTensorInfo* down = nullptr;
};

std::string ShapeString(const GgufTensorInfo& t) {
  std::string s = "{";
  for (uint32_t i = 0; i < t.n_dims; ++i) {
    absl::StrAppendFormat(&s, "%s%d", i ? ", " : "", t.ne[i]);
  }
  return s + "}";
}

// A 3-D expert tensor {K, rows_per_expert, n_expert} with exact size.
absl::Status CheckExpertTensor(const GgufTensorInfo& t, uint32_t n_expert) {
  if (t.n_dims != 3 || t.ne[2] != static_cast<int64_t>(n_expert) || t.ne[0] <= 0 ||
      t.ne[1] <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s has shape %s; an expert tensor must be {K, N, n_expert=%d}", t.name,
        ShapeString(t), n_expert));
  }
  // One expert's matrix is read in one request; reads stop at 1 GiB.
  constexpr uint64_t kMaxExpertMatrixBytes = uint64_t{1} << 29;
  if (t.row_bytes() * static_cast<uint64_t>(t.ne[1]) > kMaxExpertMatrixBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s holds %d bytes per expert; at most %d are supported", t.name,
        t.row_bytes() * static_cast<uint64_t>(t.ne[1]), kMaxExpertMatrixBytes));
  }
  const uint64_t expected = t.row_bytes() * static_cast<uint64_t>(t.ne[1]) * n_expert;
  if (t.size_bytes != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s has %d bytes, its shape %s of %s needs %d", t.name, t.size_bytes,
        ShapeString(t), TensorTypeName(t.type), expected));
  }
  return absl::OkStatus();
}

// N for a tensor named "blk.N.<...>"; empty for others.
std::optional<uint32_t> BlockOf(absl::string_view name) {
  constexpr absl::string_view kPrefix = "blk.";
  if (!absl::StartsWith(name, kPrefix)) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.find('.');
  if (dot == absl::string_view::npos) return std::nullopt;
  uint32_t layer = 0;
  if (!absl::SimpleAtoi(name.substr(0, dot), &layer)) {
    return std::nullopt;
  }
  return layer;
}

store::ExpertSliceDesc SliceOf(const GgufTensorInfo& t, int64_t rows) {
  store::ExpertSliceDesc s{};
  s.tensor_type = static_cast<uint32_t>(t.type);
  s.cols = t.ne[0];
  s.rows = rows;
  s.row_bytes = t.row_bytes();
  s.size_bytes = static_cast<uint64_t>(rows) * s.row_bytes;
  return s;
}

ExpertSource SourceOf(const GgufTensorInfo& t) {
  ExpertSource s;
  s.shard = t.shard;
  s.expert0_offset = t.file_offset;
  s.expert_stride = t.row_bytes() * static_cast<uint64_t>(t.ne[1]);
  s.size = s.expert_stride;
  return s;
}

absl::StatusOr<ManifestLayer> BuildLayer(uint32_t layer, const ExpertTensors& t,
                                         uint32_t n_expert) {
  ManifestLayer out;
  const bool any = t.gate || t.up || t.gate_up || t.down;
  if (!any) return out;  // a layer without routed experts
  if (t.gate_up != nullptr && (t.gate != nullptr || t.up != nullptr)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %d has both blk.%d.ffn_gate_up_exps.weight and separate gate/up expert tensors",
        layer, layer));
  }
  if (t.down == nullptr || (t.gate_up == nullptr && (t.gate == nullptr || t.up == nullptr))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %d has only some of its expert tensors: it needs blk.%d.ffn_down_exps.weight and "
        "either ffn_gate_exps + ffn_up_exps or ffn_gate_up_exps",
        layer, layer));
  }
  for (const GgufTensorInfo* x : {t.gate, t.up, t.gate_up, t.down}) {
    if (x == nullptr) continue;
    if (absl::Status s = CheckExpertTensor(*x, n_expert); !s.ok()) return s;
  }
  int64_t n_ff = 0;
  int64_t n_embd = 0;
  if (t.gate_up != nullptr) {
    if (t.gate_up->ne[1] % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensor %s has an odd row count %d; gate and up need equal halves", t.gate_up->name,
          t.gate_up->ne[1]));
    }
    n_ff = t.gate_up->ne[1] / 2;
    n_embd = t.gate_up->ne[0];
  } else {
    if (t.gate->ne[0] != t.up->ne[0] || t.gate->ne[1] != t.up->ne[1]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "layer %d: gate %s and up %s expert tensors differ in shape", layer,
          ShapeString(*t.gate), ShapeString(*t.up)));
    }
    n_ff = t.gate->ne[1];
    n_embd = t.gate->ne[0];
  }
  if (t.down->ne[0] != n_ff || t.down->ne[1] != n_embd) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s has shape %s; with gate/up {%d, %d, %d} it must be {%d, %d, %d}",
        t.down->name, ShapeString(*t.down), n_embd, n_ff, n_expert, n_ff, n_embd, n_expert));
  }

  const GgufTensorInfo& gate_tensor = t.gate_up ? *t.gate_up : *t.gate;
  const GgufTensorInfo& up_tensor = t.gate_up ? *t.gate_up : *t.up;
  store::LayerDesc& d = out.desc;
  d.gate = SliceOf(gate_tensor, n_ff);
  d.up = SliceOf(up_tensor, n_ff);
  d.down = SliceOf(*t.down, n_embd);
  d.expert_bytes = d.gate.size_bytes + d.up.size_bytes + d.down.size_bytes;
  d.fused_gate_up = t.gate_up != nullptr ? 1 : 0;

  if (t.gate_up != nullptr) {
    out.sources = {SourceOf(*t.gate_up), SourceOf(*t.down)};
    out.slice_source = {0, 0, 1};
    out.slice_offset_in_source = {0, d.gate.size_bytes, 0};
  } else {
    out.sources = {SourceOf(*t.gate), SourceOf(*t.up), SourceOf(*t.down)};
    out.slice_source = {0, 1, 2};
    out.slice_offset_in_source = {0, 0, 0};
  }
  return out;
}

absl::Status CopyName(std::string_view name, char* out, size_t capacity, std::string_view what) {
  if (name.size() >= capacity) {
    return absl::InvalidArgumentError(absl::StrFormat("%s '%s' is longer than %d bytes", what,
                                                      name, capacity - 1));
  }
  std::memset(out, 0, capacity);
  std::memcpy(out, name.data(), name.size());
  return absl::OkStatus();
}

uint32_t Clamp32(uint64_t v) { return static_cast<uint32_t>(std::min<uint64_t>(v, UINT32_MAX)); }

}  // namespace

ExpertReadPlan ModelManifest::PlanExpertReads(uint32_t layer, uint32_t expert) const {
  MOETIER_CHECK(layer < n_layer && expert < n_expert && HasExperts(layer));
  const ManifestLayer& l = layers[layer];
  ExpertReadPlan plan;
  plan.n_reads = static_cast<uint32_t>(l.sources.size());
  for (uint32_t i = 0; i < plan.n_reads; ++i) {
    const ExpertSource& s = l.sources[i];
    plan.reads[i] = {s.shard, s.expert0_offset + uint64_t{expert} * s.expert_stride, s.size};
  }
  const store::ExpertSliceDesc* slices[3] = {&l.desc.gate, &l.desc.up, &l.desc.down};
  for (int i = 0; i < 3; ++i) {
    plan.slices[i] = {l.slice_source[i], l.slice_offset_in_source[i], slices[i]->size_bytes};
  }
  return plan;
}

absl::StatusOr<ModelManifest> BuildModelManifest(const GgufModel& model) {
  const GgufMetadata& meta = model.metadata();
  ModelManifest m;
  absl::StatusOr<std::string> arch = meta.GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  store::ModelHparams& hp = m.hparams;
  if (absl::Status s = CopyName(*arch, hp.architecture, sizeof(hp.architecture),
                                "general.architecture");
      !s.ok()) {
    return s;
  }
  const std::string a = *arch + ".";
  absl::StatusOr<uint64_t> block_count = meta.GetUint(a + "block_count");
  if (!block_count.ok()) return block_count.status();
  absl::StatusOr<uint64_t> expert_count = meta.GetUint(a + "expert_count");
  if (!expert_count.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the model has no %sexpert_count; moetierd serves Mixture-of-Experts models only",
        model.shards().front()->path(), a));
  }
  absl::StatusOr<uint64_t> expert_used = meta.GetUint(a + "expert_used_count");
  if (!expert_used.ok()) return expert_used.status();
  if (*block_count == 0 || *block_count > store::kMaxLayers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sblock_count is %d; the store supports 1 to %d layers", a, *block_count,
        store::kMaxLayers));
  }
  if (*expert_count == 0 || *expert_count > store::kMaxExpertsPerLayer) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sexpert_count is %d; the store supports 1 to %d experts per layer", a, *expert_count,
        store::kMaxExpertsPerLayer));
  }
  if (*expert_used == 0 || *expert_used > *expert_count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sexpert_used_count is %d; it must be in [1, expert_count=%d]", a, *expert_used,
        *expert_count));
  }
  // The last nextn_predict_layers blocks predict further tokens (MTP) and
  // never run in the main pass: the worker reads the layers before them
  // (ModelLoader::ReadCommonHparams), so only those experts are stored.
  const uint64_t nextn = meta.GetUintOr(a + "nextn_predict_layers", 0);
  if (nextn >= *block_count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%snextn_predict_layers = %d leaves no layers of %sblock_count = %d", a,
                        nextn, a, *block_count));
  }
  m.n_layer = static_cast<uint32_t>(*block_count - nextn);
  m.n_expert = static_cast<uint32_t>(*expert_count);
  hp.n_layer = m.n_layer;
  hp.n_expert = m.n_expert;
  hp.n_expert_used = static_cast<uint32_t>(*expert_used);
  hp.n_embd = Clamp32(meta.GetUintOr(a + "embedding_length", 0));
  hp.n_ctx_train = Clamp32(meta.GetUintOr(a + "context_length", 0));
  if (absl::StatusOr<std::vector<uint64_t>> heads =
          meta.GetUintOrArray(a + "attention.head_count", m.n_layer);
      heads.ok() && !heads->empty()) {
    hp.n_head = Clamp32(*std::max_element(heads->begin(), heads->end()));
  }
  hp.n_head_kv = hp.n_head;
  if (absl::StatusOr<std::vector<uint64_t>> heads =
          meta.GetUintOrArray(a + "attention.head_count_kv", m.n_layer);
      heads.ok() && !heads->empty()) {
    hp.n_head_kv = Clamp32(*std::max_element(heads->begin(), heads->end()));
  }
  hp.head_dim = Clamp32(meta.GetUintOr(a + "attention.key_length",
                                       hp.n_head != 0 ? hp.n_embd / hp.n_head : 0));
  hp.rope_freq_base = static_cast<float>(meta.GetFloatOr(a + "rope.freq_base", 10000.0));
  hp.rms_eps = static_cast<float>(meta.GetFloatOr(a + "attention.layer_norm_rms_epsilon", 1e-6));
  if (const GgufTensorInfo* embd = model.FindTensor("token_embd.weight")) {
    hp.n_vocab = Clamp32(static_cast<uint64_t>(embd->ne[1]));
  }

  for (const auto& shard : model.shards()) {
    m.shard_paths.push_back(shard->path());
    m.shard_sizes.push_back(shard->file_size());
  }
  m.fingerprint = store::ModelFingerprint(model);

  absl::flat_hash_set<const GgufTensorInfo*> expert_tensors;
  m.layers.reserve(m.n_layer);
  for (uint32_t l = 0; l < m.n_layer; ++l) {
    const std::string prefix = absl::StrFormat("blk.%d.", l);
    ExpertTensors t;
    t.gate = model.FindTensor(prefix + "ffn_gate_exps.weight");
    t.up = model.FindTensor(prefix + "ffn_up_exps.weight");
    t.gate_up = model.FindTensor(prefix + "ffn_gate_up_exps.weight");
    t.down = model.FindTensor(prefix + "ffn_down_exps.weight");
    absl::StatusOr<ManifestLayer> layer = BuildLayer(l, t, m.n_expert);
    if (!layer.ok()) return layer.status();
    for (const GgufTensorInfo* x : {t.gate, t.up, t.gate_up, t.down}) {
      if (x != nullptr) expert_tensors.insert(x);
    }
    if (layer->desc.expert_bytes != 0) {
      if (hp.n_ff_exp == 0) hp.n_ff_exp = Clamp32(static_cast<uint64_t>(layer->desc.gate.rows));
      m.total_expert_bytes += layer->desc.expert_bytes * m.n_expert;
      m.max_expert_bytes = std::max(m.max_expert_bytes, layer->desc.expert_bytes);
      m.expert_count += m.n_expert;
    }
    m.layers.push_back(std::move(*layer));
  }
  if (m.expert_count == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: no layer has expert tensors (blk.N.ffn_{gate,up,down}_exps.weight)",
        model.shards().front()->path()));
  }

  for (const GgufTensorInfo& t : model.tensors()) {
    const GgufTensorInfo* found = model.FindTensor(t.name);
    if (found != nullptr && expert_tensors.contains(found)) continue;
    if (std::optional<uint32_t> layer = BlockOf(t.name); layer.has_value() && *layer >= m.n_layer) {
      continue;  // a prediction (MTP) layer's tensor
    }
    if (t.name.size() >= store::kTensorNameBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensor name '%s' is longer than %d bytes", t.name, store::kTensorNameBytes - 1));
    }
    DenseTensor d;
    d.name = t.name;
    d.type = t.type;
    d.n_dims = t.n_dims;
    d.ne = t.ne;
    d.shard = t.shard;
    d.file_offset = t.file_offset;
    d.size_bytes = t.size_bytes;
    m.dense_bytes += t.size_bytes;
    m.dense.push_back(std::move(d));
  }
  if (m.dense.size() > store::kMaxDenseTensors) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the model has %d dense tensors; the store holds at most %d", m.dense.size(),
        store::kMaxDenseTensors));
  }
  return m;
}

}  // namespace moetier
