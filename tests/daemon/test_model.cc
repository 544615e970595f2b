#include "test_model.h"

#include <stdlib.h>

#include <filesystem>

#include "absl/strings/str_format.h"
#include "gguf/gguf_reader.h"
#include "gguf/writer/gguf_writer.h"

namespace moetier::daemon_test {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> out(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
  for (size_t i = 0; i < n; ++i) {
    // splitmix64
    x += 0x9E3779B97F4A7C15ULL;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    out[i] = static_cast<uint8_t>(z ^ (z >> 31));
  }
  return out;
}

struct PlannedTensor {
  std::string name;
  TensorType type;
  std::vector<int64_t> ne;
  std::vector<uint8_t> bytes;
};

uint64_t Bytes(TensorType type, const std::vector<int64_t>& ne) {
  uint64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= static_cast<uint64_t>(ne[i]);
  return static_cast<uint64_t>(TensorRowBytes(type, ne[0])) * rows;
}

}  // namespace

ScratchDir::ScratchDir() {
  std::string pattern = std::filesystem::temp_directory_path().string() + "/moetier_daemon_XXXXXX";
  if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

absl::StatusOr<TestModel> WriteTestModel(const std::string& dir, const std::string& name,
                                         const TestModelOptions& o) {
  TestModel model;
  model.options = o;
  const int64_t n_head = 4;
  const int64_t n_head_kv = 2;
  const int64_t head_dim = 16;
  const int64_t n_vocab = 96;
  uint64_t seed = uint64_t{o.seed} << 32;

  std::vector<PlannedTensor> tensors;
  auto dense = [&](std::string tensor_name, std::vector<int64_t> ne) {
    PlannedTensor t{std::move(tensor_name), TensorType::kF32, std::move(ne), {}};
    t.bytes = RandomBytes(Bytes(t.type, t.ne), ++seed);
    model.dense[t.name] = t.bytes;
    tensors.push_back(std::move(t));
  };
  dense("token_embd.weight", {o.n_embd, n_vocab});
  dense("output_norm.weight", {o.n_embd});
  model.experts.resize(o.n_layer);
  for (uint32_t l = 0; l < o.n_layer; ++l) {
    const std::string b = absl::StrFormat("blk.%d.", l);
    dense(b + "attn_norm.weight", {o.n_embd});
    dense(b + "attn_q.weight", {o.n_embd, n_head * head_dim});
    dense(b + "attn_k.weight", {o.n_embd, n_head_kv * head_dim});
    dense(b + "attn_v.weight", {o.n_embd, n_head_kv * head_dim});
    dense(b + "attn_output.weight", {n_head * head_dim, o.n_embd});
    dense(b + "attn_q_norm.weight", {head_dim});
    dense(b + "attn_k_norm.weight", {head_dim});
    dense(b + "ffn_norm.weight", {o.n_embd});
    dense(b + "ffn_gate_inp.weight", {o.n_embd, o.n_expert});

    const TensorType down_type = (l % 2 == 1) ? o.odd_layer_down_type : o.expert_type;
    const uint64_t gate_bytes = Bytes(o.expert_type, {o.n_embd, o.n_ff});
    const uint64_t down_bytes = Bytes(down_type, {o.n_ff, o.n_embd});
    std::vector<TestExpert>& experts = model.experts[l];
    experts.resize(o.n_expert);
    for (TestExpert& e : experts) {
      e.gate = RandomBytes(gate_bytes, ++seed);
      e.up = RandomBytes(gate_bytes, ++seed);
      e.down = RandomBytes(down_bytes, ++seed);
    }
    auto concat = [&](auto member) {
      std::vector<uint8_t> all;
      for (const TestExpert& e : experts) {
        const std::vector<uint8_t>& part = e.*member;
        all.insert(all.end(), part.begin(), part.end());
      }
      return all;
    };
    const int64_t n_expert = o.n_expert;
    if (o.fused_gate_up) {
      std::vector<uint8_t> fused;
      for (const TestExpert& e : experts) {
        fused.insert(fused.end(), e.gate.begin(), e.gate.end());
        fused.insert(fused.end(), e.up.begin(), e.up.end());
      }
      tensors.push_back({b + "ffn_gate_up_exps.weight", o.expert_type,
                         {o.n_embd, 2 * o.n_ff, n_expert}, std::move(fused)});
    } else {
      tensors.push_back({b + "ffn_gate_exps.weight", o.expert_type, {o.n_embd, o.n_ff, n_expert},
                         concat(&TestExpert::gate)});
      tensors.push_back({b + "ffn_up_exps.weight", o.expert_type, {o.n_embd, o.n_ff, n_expert},
                         concat(&TestExpert::up)});
    }
    tensors.push_back({b + "ffn_down_exps.weight", down_type, {o.n_ff, o.n_embd, n_expert},
                       concat(&TestExpert::down)});
  }
  dense("output.weight", {o.n_embd, n_vocab});

  const uint32_t n_shards = std::max<uint32_t>(1, o.n_shards);
  for (uint32_t shard = 0; shard < n_shards; ++shard) {
    GgufWriter w;
    absl::Status s;
    auto kv = [&](std::string key, GgufValue value) {
      if (s.ok()) s = w.AddKeyValue(std::move(key), std::move(value));
    };
    if (shard == 0) {
      kv("general.architecture", GgufValue::String("qwen3moe"));
      kv("qwen3moe.block_count", GgufValue::Uint32(o.n_layer));
      kv("qwen3moe.context_length", GgufValue::Uint32(4096));
      kv("qwen3moe.embedding_length", GgufValue::Uint32(static_cast<uint32_t>(o.n_embd)));
      kv("qwen3moe.feed_forward_length", GgufValue::Uint32(static_cast<uint32_t>(o.n_ff * 3)));
      kv("qwen3moe.attention.head_count", GgufValue::Uint32(n_head));
      kv("qwen3moe.attention.head_count_kv", GgufValue::Uint32(n_head_kv));
      kv("qwen3moe.attention.key_length", GgufValue::Uint32(head_dim));
      kv("qwen3moe.attention.value_length", GgufValue::Uint32(head_dim));
      kv("qwen3moe.rope.freq_base", GgufValue::Float32(1000000.0f));
      kv("qwen3moe.attention.layer_norm_rms_epsilon", GgufValue::Float32(1e-6f));
      kv("qwen3moe.expert_count", GgufValue::Uint32(o.n_expert));
      kv("qwen3moe.expert_used_count", GgufValue::Uint32(o.n_expert_used));
      kv("qwen3moe.expert_feed_forward_length",
         GgufValue::Uint32(static_cast<uint32_t>(o.n_ff)));
    }
    if (n_shards > 1) {
      kv("split.no", GgufValue::Uint16(static_cast<uint16_t>(shard)));
      kv("split.count", GgufValue::Uint16(static_cast<uint16_t>(n_shards)));
      kv("split.tensors.count", GgufValue::Int32(static_cast<int32_t>(tensors.size())));
    }
    std::vector<const PlannedTensor*> mine;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (i % n_shards == shard) mine.push_back(&tensors[i]);
    }
    for (const PlannedTensor* t : mine) {
      if (s.ok()) s = w.AddTensor(t->name, t->type, t->ne);
    }
    const std::string path = n_shards > 1 ? GgufSplitPath(dir + "/" + name, shard, n_shards)
                                          : dir + "/" + name + ".gguf";
    if (s.ok()) s = w.Open(path);
    for (const PlannedTensor* t : mine) {
      if (s.ok()) s = w.AppendTensorData(t->bytes);
    }
    if (s.ok()) s = w.Finish();
    if (!s.ok()) return s;
    model.shard_paths.push_back(path);
  }
  model.path = model.shard_paths.front();
  return model;
}

}  // namespace moetier::daemon_test
