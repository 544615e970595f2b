// Tests of the architectures beyond qwen3moe (olmoe, llama with experts,
// qwen35moe, qwen3next): presets, the tensor tables and type rules restated here
// independently of the tool, the metadata real files carry, files read back
// with the project's GGUF reader, deterministic bytes, the weight
// distributions through every encoding, the tokenizers, the command line,
// and (where node is set up) the independent GGUF parser.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gguf/gguf_reader.h"
#include "gguf/tensor/quant_codec.h"
#include "gguf/tensor/tensor_type.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "synth/bpe_trainer.h"
#include "synth/synth_model.h"
#include "synth/synth_tokenizer.h"
#include "synth/synth_writer.h"
#include "synth_test_util.h"

namespace moetier {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace synth_test;  // NOLINT: the helpers of this directory's tests

constexpr SynthArch kNewArchs[] = {SynthArch::kOlmoe, SynthArch::kLlama, SynthArch::kQwen35Moe,
                                   SynthArch::kQwen3Next};

std::string ArchName(SynthArch arch) { return std::string(SynthArchName(arch)); }
std::string QuantName(SynthQuant quant) { return std::string(SynthQuantName(quant)); }

std::vector<SynthQuant> QuantsOf(SynthArch arch) {
  std::vector<SynthQuant> quants = {SynthQuant::kF32, SynthQuant::kQ8_0, SynthQuant::kQ4_K_M};
  if (IsSynthDeltaNetHybrid(arch)) quants.push_back(SynthQuant::kQ8_0F32);
  return quants;
}

bool IsFullAttention(const SynthShape& s, int64_t layer) {
  return (layer + 1) % s.full_attention_interval == 0;
}

// ---------------------------------------------------------------- the tensor tables, restated

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> ne;
  int64_t layer;
};

std::vector<ExpectedTensor> ExpectedTensors(const SynthShape& s) {
  std::vector<ExpectedTensor> t;
  t.push_back({"token_embd.weight", {s.n_embd, s.n_vocab}, -1});
  t.push_back({"output_norm.weight", {s.n_embd}, -1});
  if (!s.tied_output) t.push_back({"output.weight", {s.n_embd, s.n_vocab}, -1});
  const int64_t q = s.n_head * s.head_dim;
  const int64_t kv = s.n_head_kv * s.head_dim;
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    auto add = [&](const std::string& n, std::vector<int64_t> ne) { t.push_back({b + n, std::move(ne), l}); };
    switch (s.arch) {
      case SynthArch::kQwen3Moe:
        ADD_FAILURE() << "qwen3moe is covered by synth_test.cc";
        return t;
      case SynthArch::kOlmoe:
      case SynthArch::kLlama:
        add("attn_norm.weight", {s.n_embd});
        add("attn_q.weight", {s.n_embd, q});
        add("attn_k.weight", {s.n_embd, kv});
        add("attn_v.weight", {s.n_embd, kv});
        add("attn_output.weight", {q, s.n_embd});
        if (s.arch == SynthArch::kOlmoe) {
          add("attn_q_norm.weight", {q});
          add("attn_k_norm.weight", {kv});
        }
        add("ffn_norm.weight", {s.n_embd});
        break;
      case SynthArch::kQwen35Moe:
      case SynthArch::kQwen3Next: {
        add("attn_norm.weight", {s.n_embd});
        add("post_attention_norm.weight", {s.n_embd});
        const int64_t h_v = s.ssm_time_step_rank;
        const int64_t conv = 2 * s.ssm_group_count * s.ssm_state_size + s.ssm_inner_size;
        if (IsFullAttention(s, l)) {
          add("attn_q.weight", {s.n_embd, 2 * q});
          add("attn_k.weight", {s.n_embd, kv});
          add("attn_v.weight", {s.n_embd, kv});
          add("attn_output.weight", {q, s.n_embd});
          add("attn_q_norm.weight", {s.head_dim});
          add("attn_k_norm.weight", {s.head_dim});
        } else {
          if (s.legacy_ssm_in) {
            add("ssm_in.weight", {s.n_embd, conv + s.ssm_inner_size});
          } else {
            add("attn_qkv.weight", {s.n_embd, conv});
            add("attn_gate.weight", {s.n_embd, s.ssm_inner_size});
          }
          add("ssm_conv1d.weight", {s.ssm_conv_kernel, conv});
          add("ssm_dt.bias", {h_v});
          add("ssm_a", {h_v});
          if (s.arch == SynthArch::kQwen35Moe) {
            add("ssm_beta.weight", {s.n_embd, h_v});
            add("ssm_alpha.weight", {s.n_embd, h_v});
          } else {
            add("ssm_ba.weight", {s.n_embd, 2 * h_v});
          }
          add("ssm_norm.weight", {s.ssm_inner_size / h_v});
          add("ssm_out.weight", {s.ssm_inner_size, s.n_embd});
        }
        break;
      }
    }
    add("ffn_gate_inp.weight", {s.n_embd, s.n_expert});
    add("ffn_gate_exps.weight", {s.n_embd, s.n_ff_exp, s.n_expert});
    add("ffn_up_exps.weight", {s.n_embd, s.n_ff_exp, s.n_expert});
    add("ffn_down_exps.weight", {s.n_ff_exp, s.n_embd, s.n_expert});
    if (IsSynthDeltaNetHybrid(s.arch)) {
      add("ffn_gate_inp_shexp.weight", {s.n_embd});
      add("ffn_gate_shexp.weight", {s.n_embd, s.n_ff_shexp});
      add("ffn_up_shexp.weight", {s.n_embd, s.n_ff_shexp});
      add("ffn_down_shexp.weight", {s.n_ff_shexp, s.n_embd});
    }
  }
  return t;
}

bool UseMoreBits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

TensorType Fit(TensorType t, int64_t ne0) {
  if (ne0 % GetTensorTypeInfo(t).block_elems == 0) return t;
  if (t == TensorType::kQ4_K) t = TensorType::kQ4_0;
  if (t == TensorType::kQ5_K || t == TensorType::kQ6_K) t = TensorType::kQ8_0;
  if (ne0 % 32 != 0) t = TensorType::kF16;
  return t;
}

// llama-quantize's rules by tensor name (llama-quant.cpp): what it leaves
// alone, then the Q4_K_M choice; plus the q8_0-f32 mix of the hybrids.
// `attn_v_index` counts attn_v / attn_qkv / ssm_in tensors in file order.
// llama-quantize's "attention-v-like" tensors.
bool IsAttentionVLike(const std::string& name) {
  return absl::StrContains(name, "attn_v.weight") || absl::StrContains(name, "attn_qkv.weight") ||
         absl::StrContains(name, "ssm_in.weight");
}

TensorType ExpectedType(const SynthShape& s, SynthQuant quant, const ExpectedTensor& t, int64_t attn_v_index,
                        int64_t n_attn_v) {
  const std::string& n = t.name;
  const bool unquantized = t.ne.size() < 2 || !absl::EndsWith(n, ".weight") ||
                           absl::StrContains(n, "_norm.weight") || absl::StrContains(n, "ffn_gate_inp.weight") ||
                           absl::StrContains(n, "ssm_conv1d");
  const int64_t ne0 = t.ne[0];
  if (unquantized || quant == SynthQuant::kF32) return TensorType::kF32;
  if (quant == SynthQuant::kQ8_0) return Fit(TensorType::kQ8_0, ne0);
  if (quant == SynthQuant::kQ8_0F32) {
    if (absl::StrContains(n, "ssm_alpha") || absl::StrContains(n, "ssm_beta") ||
        absl::StrContains(n, "ssm_ba")) {
      return TensorType::kF32;
    }
    if (absl::StrContains(n, "ffn_gate_exps") || absl::StrContains(n, "ffn_up_exps")) {
      return Fit(t.layer == 0 ? TensorType::kQ6_K : TensorType::kQ4_K, ne0);
    }
    if (absl::StrContains(n, "ffn_down_exps")) {
      return Fit(t.layer == 0 || t.layer == s.n_layer - 1 ? TensorType::kQ6_K : TensorType::kQ5_K, ne0);
    }
    return Fit(TensorType::kQ8_0, ne0);
  }
  const bool eight = s.n_expert == 8;
  if (n == "output.weight" || (n == "token_embd.weight" && s.tied_output)) {
    return ne0 % 256 == 0 ? TensorType::kQ6_K : Fit(TensorType::kQ8_0, ne0);
  }
  TensorType want = TensorType::kQ4_K;
  if (IsAttentionVLike(n)) {
    want = eight ? TensorType::kQ8_0 : UseMoreBits(attn_v_index, n_attn_v) ? TensorType::kQ6_K : TensorType::kQ4_K;
  } else if (absl::StrContains(n, "attn_k.weight")) {
    want = eight ? TensorType::kQ8_0 : TensorType::kQ4_K;
  } else if (absl::StrContains(n, "attn_output.weight")) {
    want = eight ? TensorType::kQ5_K : TensorType::kQ4_K;
  } else if (absl::StrContains(n, "ffn_down")) {
    want = UseMoreBits(t.layer, s.n_layer) ? TensorType::kQ6_K : TensorType::kQ4_K;
  }
  return Fit(want, ne0);
}

// The expected table with types, in file order.
std::vector<std::pair<ExpectedTensor, TensorType>> ExpectedTable(const SynthShape& s, SynthQuant quant) {
  const std::vector<ExpectedTensor> tensors = ExpectedTensors(s);
  int64_t n_attn_v = 0;
  for (const ExpectedTensor& t : tensors) {
    n_attn_v += IsAttentionVLike(t.name);
  }
  std::vector<std::pair<ExpectedTensor, TensorType>> out;
  int64_t attn_v_index = 0;
  for (const ExpectedTensor& t : tensors) {
    out.emplace_back(t, ExpectedType(s, quant, t, attn_v_index, n_attn_v));
    attn_v_index += IsAttentionVLike(t.name);
  }
  return out;
}

// ---------------------------------------------------------------- the metadata, restated

struct ExpectedKey {
  std::string key;
  GgufValue value;
};

std::vector<ExpectedKey> ExpectedKeys(const SynthShape& s, SynthQuant quant) {
  const std::string a = ArchName(s.arch);
  auto u32 = [](int64_t v) { return GgufValue::Uint32(static_cast<uint32_t>(v)); };
  std::vector<ExpectedKey> k = {
      {"general.architecture", GgufValue::String(a)},
      {"general.type", GgufValue::String("model")},
      {"general.file_type", u32(quant == SynthQuant::kF32 ? 0 : quant == SynthQuant::kQ8_0 ? 7 : 15)},
      {"general.quantization_version", u32(2)},
      {a + ".block_count", u32(s.n_layer)},
      {a + ".context_length", u32(s.n_ctx)},
      {a + ".embedding_length", u32(s.n_embd)},
      {a + ".feed_forward_length", u32(s.n_ff_exp)},
      {a + ".attention.head_count", u32(s.n_head)},
      {a + ".attention.head_count_kv", u32(s.n_head_kv)},
      {a + ".rope.freq_base", GgufValue::Float32(s.rope_base)},
      {a + ".attention.layer_norm_rms_epsilon", GgufValue::Float32(s.rms_eps)},
      {a + ".expert_count", u32(s.n_expert)},
      {a + ".expert_used_count", u32(s.n_expert_used)},
      {"tokenizer.ggml.add_bos_token", GgufValue::Bool(s.arch == SynthArch::kLlama)},
  };
  const bool head_dim_implied = s.head_dim * s.n_head == s.n_embd;
  switch (s.arch) {
    case SynthArch::kQwen3Moe:
      break;
    case SynthArch::kOlmoe:
      k.push_back({"tokenizer.ggml.model", GgufValue::String("gpt2")});
      k.push_back({"tokenizer.ggml.pre", GgufValue::String("olmo")});
      k.push_back({"tokenizer.ggml.add_eos_token", GgufValue::Bool(false)});
      break;
    case SynthArch::kLlama:
      k.push_back({a + ".vocab_size", u32(s.n_vocab)});
      k.push_back({a + ".rope.dimension_count", u32(s.head_dim)});
      k.push_back({"tokenizer.ggml.model", GgufValue::String("llama")});
      k.push_back({"tokenizer.ggml.pre", GgufValue::String("default")});
      k.push_back({"tokenizer.ggml.bos_token_id", u32(1)});
      k.push_back({"tokenizer.ggml.eos_token_id", u32(2)});
      k.push_back({"tokenizer.ggml.unknown_token_id", u32(0)});
      k.push_back({"tokenizer.ggml.add_eos_token", GgufValue::Bool(false)});
      break;
    case SynthArch::kQwen35Moe:
    case SynthArch::kQwen3Next:
      k.push_back({a + ".attention.key_length", u32(s.head_dim)});
      k.push_back({a + ".attention.value_length", u32(s.head_dim)});
      k.push_back({a + ".rope.dimension_count", u32(s.n_rot)});
      if (s.arch == SynthArch::kQwen35Moe) {
        k.push_back({a + ".rope.dimension_sections",
                     GgufValue::Int32Array({s.rope_sections[0], s.rope_sections[1],
                                            s.rope_sections[2], s.rope_sections[3]})});
      }
      k.push_back({a + ".expert_feed_forward_length", u32(s.n_ff_exp)});
      k.push_back({a + ".expert_shared_feed_forward_length", u32(s.n_ff_shexp)});
      k.push_back({a + ".ssm.conv_kernel", u32(s.ssm_conv_kernel)});
      k.push_back({a + ".ssm.state_size", u32(s.ssm_state_size)});
      k.push_back({a + ".ssm.group_count", u32(s.ssm_group_count)});
      k.push_back({a + ".ssm.time_step_rank", u32(s.ssm_time_step_rank)});
      k.push_back({a + ".ssm.inner_size", u32(s.ssm_inner_size)});
      k.push_back({a + ".full_attention_interval", u32(s.full_attention_interval)});
      k.push_back({"tokenizer.ggml.model", GgufValue::String("gpt2")});
      k.push_back({"tokenizer.ggml.pre",
                   GgufValue::String(s.arch == SynthArch::kQwen35Moe ? "qwen35" : "qwen2")});
      break;
  }
  if (!head_dim_implied && !IsSynthDeltaNetHybrid(s.arch)) {
    k.push_back({a + ".attention.key_length", u32(s.head_dim)});
    k.push_back({a + ".attention.value_length", u32(s.head_dim)});
  }
  return k;
}

// Keys whose values the tests check separately (text, ids, arrays).
const std::set<std::string>& OtherKeys() {
  static const std::set<std::string> keys = {
      "general.name",
      "tokenizer.ggml.tokens",
      "tokenizer.ggml.token_type",
      "tokenizer.ggml.merges",
      "tokenizer.ggml.scores",
      "tokenizer.ggml.eos_token_id",
      "tokenizer.ggml.padding_token_id",
      "tokenizer.ggml.bos_token_id",
      "tokenizer.chat_template",
  };
  return keys;
}

// Every key the file has is expected, with its type and value; the
// tokenizer's arrays and ids are consistent with the architecture's
// vocabulary.
void CheckMetadata(const GgufMetadata& md, const SynthShape& s, SynthQuant quant) {
  std::set<std::string> expected_names;
  for (const ExpectedKey& e : ExpectedKeys(s, quant)) {
    expected_names.insert(e.key);
    const GgufValue* v = md.Find(e.key);
    ASSERT_NE(v, nullptr) << "missing key " << e.key;
    EXPECT_TRUE(*v == e.value) << e.key << " has type " << static_cast<int>(v->type);
  }
  for (const GgufKeyValue& kv : md.entries()) {
    EXPECT_TRUE(expected_names.count(kv.key) || OtherKeys().count(kv.key)) << "unexpected key " << kv.key;
  }
  EXPECT_EQ(md.Has("tokenizer.ggml.bos_token_id"),
            s.arch == SynthArch::kLlama || s.arch == SynthArch::kQwen3Next)
      << "olmoe and qwen35moe files have no bos key";

  const absl::StatusOr<std::vector<std::string>> tokens = md.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(static_cast<int64_t>(tokens->size()), s.n_vocab);
  const absl::StatusOr<const GgufArray*> types = md.GetArray("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ((*types)->element_type, GgufValueType::kInt32);
  EXPECT_EQ((*types)->size(), tokens->size());
  ASSERT_TRUE(md.GetString("tokenizer.chat_template").ok());

  switch (s.arch) {
    case SynthArch::kQwen3Moe:
      break;
    case SynthArch::kOlmoe:
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.eos_token_id", 0)], "<|endoftext|>");
      EXPECT_EQ(md.GetUintOr("tokenizer.ggml.padding_token_id", 0), 1u);
      EXPECT_EQ((*tokens)[1], "<|padding|>");
      EXPECT_TRUE(md.Has("tokenizer.ggml.merges"));
      EXPECT_FALSE(md.Has("tokenizer.ggml.scores"));
      break;
    case SynthArch::kLlama: {
      EXPECT_EQ((*tokens)[0], "<unk>");
      EXPECT_EQ((*tokens)[1], "<s>");
      EXPECT_EQ((*tokens)[2], "</s>");
      const absl::StatusOr<const GgufArray*> scores = md.GetArray("tokenizer.ggml.scores");
      ASSERT_TRUE(scores.ok()) << scores.status();
      EXPECT_EQ((*scores)->element_type, GgufValueType::kFloat32);
      EXPECT_EQ((*scores)->size(), tokens->size());
      EXPECT_FALSE(md.Has("tokenizer.ggml.merges"));
      EXPECT_FALSE(md.Has("tokenizer.ggml.padding_token_id"));
      break;
    }
    case SynthArch::kQwen35Moe:
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.eos_token_id", 0)], "<|im_end|>");
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.padding_token_id", 0)], "<|endoftext|>");
      EXPECT_TRUE(md.Has("tokenizer.ggml.merges"));
      EXPECT_THAT(md.GetStringOr("tokenizer.chat_template", ""),
                  HasSubstr("{{- '<|im_start|>assistant\\n' }}"));
      break;
    case SynthArch::kQwen3Next:
      // The Qwen3 vocabulary, as qwen3moe's: bos = pad = <|endoftext|>.
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.eos_token_id", 0)], "<|im_end|>");
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.padding_token_id", 0)], "<|endoftext|>");
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.bos_token_id", 0)], "<|endoftext|>");
      EXPECT_TRUE(md.Has("tokenizer.ggml.merges"));
      EXPECT_THAT(md.GetStringOr("tokenizer.chat_template", ""), HasSubstr("<|im_start|>"));
      break;
  }
}

void CheckTensors(const GgufModel& model, const SynthShape& s, SynthQuant quant) {
  const std::vector<std::pair<ExpectedTensor, TensorType>> expected = ExpectedTable(s, quant);
  ASSERT_EQ(model.tensors().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [e, type] = expected[i];
    const GgufTensorInfo& info = model.tensors()[i];
    EXPECT_EQ(info.name, e.name) << "tensor " << i;
    ASSERT_EQ(info.n_dims, e.ne.size()) << e.name;
    for (size_t d = 0; d < e.ne.size(); ++d) EXPECT_EQ(info.ne[d], e.ne[d]) << e.name << " dim " << d;
    EXPECT_EQ(info.type, type) << e.name << " is " << TensorTypeName(info.type) << ", expected "
                               << TensorTypeName(type);
  }
}

// ---------------------------------------------------------------- presets

TEST(SynthArchPresetTest, FullShapesAreTheRealModels) {
  const SynthShape olmoe = *SynthPreset(SynthArch::kOlmoe, "full");
  EXPECT_EQ(olmoe.arch, SynthArch::kOlmoe);
  EXPECT_EQ(std::make_tuple(olmoe.n_layer, olmoe.n_embd, olmoe.n_head, olmoe.n_head_kv, olmoe.head_dim),
            std::make_tuple(16, 2048, 16, 16, 128));
  EXPECT_EQ(std::make_tuple(olmoe.n_expert, olmoe.n_expert_used, olmoe.n_ff_exp, olmoe.n_vocab, olmoe.n_ctx),
            std::make_tuple(64, 8, 1024, 50304, 4096));
  EXPECT_FLOAT_EQ(olmoe.rope_base, 1e4f);
  EXPECT_FLOAT_EQ(olmoe.rms_eps, 1e-5f);
  EXPECT_FALSE(olmoe.tied_output);

  const SynthShape mixtral = *SynthPreset(SynthArch::kLlama, "full");
  EXPECT_EQ(std::make_tuple(mixtral.n_layer, mixtral.n_embd, mixtral.n_head, mixtral.n_head_kv, mixtral.head_dim),
            std::make_tuple(32, 4096, 32, 8, 128));
  EXPECT_EQ(std::make_tuple(mixtral.n_expert, mixtral.n_expert_used, mixtral.n_ff_exp, mixtral.n_vocab,
                            mixtral.n_ctx),
            std::make_tuple(8, 2, 14336, 32000, 32768));
  EXPECT_FLOAT_EQ(mixtral.rope_base, 1e6f);
  EXPECT_FLOAT_EQ(mixtral.rms_eps, 1e-5f);

  const SynthShape q = *SynthPreset(SynthArch::kQwen35Moe, "full");
  EXPECT_EQ(std::make_tuple(q.n_layer, q.n_embd, q.n_head, q.n_head_kv, q.head_dim, q.n_rot),
            std::make_tuple(40, 2048, 16, 2, 256, 64));
  EXPECT_EQ(q.rope_sections, (std::array<int32_t, 4>{11, 11, 10, 0}));
  EXPECT_EQ(std::make_tuple(q.n_expert, q.n_expert_used, q.n_ff_exp, q.n_ff_shexp),
            std::make_tuple(256, 8, 512, 512));
  EXPECT_EQ(std::make_tuple(q.ssm_conv_kernel, q.ssm_state_size, q.ssm_group_count, q.ssm_time_step_rank,
                            q.ssm_inner_size, q.full_attention_interval),
            std::make_tuple(4, 128, 16, 32, 4096, 4));
  EXPECT_EQ(std::make_tuple(q.n_vocab, q.n_ctx), std::make_tuple(248320, 262144));
  EXPECT_FLOAT_EQ(q.rope_base, 1e7f);
  EXPECT_FLOAT_EQ(q.rms_eps, 1e-6f);
  EXPECT_FALSE(q.tied_output);
  int attention_layers = 0;
  for (int64_t l = 0; l < q.n_layer; ++l) attention_layers += IsFullAttention(q, l);
  EXPECT_EQ(attention_layers, 10);

  // Qwen3-Next-80B-A3B (SPEC.md §3.9); llama.cpp needs d_v = d_k (inner =
  // value heads x state size).
  const SynthShape n = *SynthPreset(SynthArch::kQwen3Next, "full");
  EXPECT_EQ(std::make_tuple(n.n_layer, n.n_embd, n.n_head, n.n_head_kv, n.head_dim, n.n_rot),
            std::make_tuple(48, 2048, 16, 2, 256, 64));
  EXPECT_EQ(std::make_tuple(n.n_expert, n.n_expert_used, n.n_ff_exp, n.n_ff_shexp),
            std::make_tuple(512, 10, 512, 512));
  EXPECT_EQ(std::make_tuple(n.ssm_conv_kernel, n.ssm_state_size, n.ssm_group_count,
                            n.ssm_time_step_rank, n.ssm_inner_size, n.full_attention_interval),
            std::make_tuple(4, 128, 16, 32, 4096, 4));
  EXPECT_EQ(std::make_tuple(n.n_vocab, n.n_ctx), std::make_tuple(151936, 262144));
  EXPECT_FALSE(n.legacy_ssm_in);
  for (const char* name : {"tiny", "small", "full"}) {
    const SynthShape p = *SynthPreset(SynthArch::kQwen3Next, name);
    EXPECT_EQ(p.ssm_inner_size, p.ssm_time_step_rank * p.ssm_state_size) << name;
  }

  for (const SynthArch arch : kAllSynthArchs) {
    for (const char* name : {"tiny", "small", "full"}) {
      const absl::StatusOr<SynthShape> s = SynthPreset(arch, name);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_TRUE(ValidateSynthShape(*s).ok()) << ArchName(arch) << " " << name;
    }
    EXPECT_FALSE(SynthPreset(arch, "huge").ok());
  }
  // The default architecture is qwen3moe, as before there were others.
  EXPECT_EQ(*SynthPreset("tiny"), *SynthPreset(SynthArch::kQwen3Moe, "tiny"));
}

TEST(SynthArchPresetTest, TinyAndSmallMirrorTheTestVectors) {
  const SynthShape t = *SynthPreset(SynthArch::kQwen35Moe, "tiny");
  EXPECT_EQ(std::make_tuple(t.n_layer, t.n_embd, t.n_expert, t.n_expert_used, t.n_ff_exp, t.n_ff_shexp),
            std::make_tuple(4, 64, 8, 2, 32, 32));
  EXPECT_EQ(std::make_tuple(t.n_head, t.n_head_kv, t.head_dim, t.n_rot), std::make_tuple(4, 2, 32, 8));
  EXPECT_EQ(t.rope_sections, (std::array<int32_t, 4>{2, 1, 1, 0}));
  EXPECT_EQ(std::make_tuple(t.ssm_group_count, t.ssm_time_step_rank, t.ssm_state_size, t.ssm_conv_kernel,
                            t.n_vocab),
            std::make_tuple(2, 4, 16, 4, 512));
  const SynthShape s = *SynthPreset(SynthArch::kQwen35Moe, "small");
  EXPECT_EQ(std::make_tuple(s.n_embd, s.n_expert, s.n_expert_used, s.n_ff_shexp, s.n_head, s.n_head_kv,
                            s.head_dim, s.n_rot),
            std::make_tuple(256, 16, 4, 256, 4, 2, 64, 16));
  EXPECT_EQ(std::make_tuple(s.ssm_group_count, s.ssm_time_step_rank, s.ssm_state_size),
            std::make_tuple(2, 4, 64));
}

TEST(SynthArchPresetTest, ValidationNamesTheFlag) {
  SynthShape s = *SynthPreset(SynthArch::kQwen35Moe, "tiny");
  s.rope_sections = {2, 2, 1, 0};
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--rope-sections"));
  s = *SynthPreset(SynthArch::kQwen35Moe, "tiny");
  s.n_rot = 64;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--rope-dims"));
  s = *SynthPreset(SynthArch::kQwen35Moe, "tiny");
  s.ssm_time_step_rank = 3;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--ssm-time-step-rank"));
  s = *SynthPreset(SynthArch::kQwen35Moe, "tiny");
  s.ssm_inner_size = 66;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--ssm-inner-size"));
  s = *SynthPreset(SynthArch::kQwen35Moe, "tiny");
  s.full_attention_interval = 0;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--full-attention-interval"));
  s = *SynthPreset(SynthArch::kOlmoe, "tiny");
  s.tied_output = true;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--tied-output"));

  for (const SynthArch arch : kAllSynthArchs) {
    for (const SynthQuant quant :
         {SynthQuant::kF32, SynthQuant::kQ8_0, SynthQuant::kQ4_K_M, SynthQuant::kQ8_0F32}) {
      const bool supported = quant != SynthQuant::kQ8_0F32 || IsSynthDeltaNetHybrid(arch);
      EXPECT_EQ(ValidateSynthQuant(arch, quant).ok(), supported) << ArchName(arch) << " " << QuantName(quant);
    }
  }
  EXPECT_EQ(ParseSynthArch("olmoe").value(), SynthArch::kOlmoe);
  EXPECT_FALSE(ParseSynthArch("mixtral").ok());
  EXPECT_EQ(ParseSynthQuant("q8_0-f32").value(), SynthQuant::kQ8_0F32);
}

// ---------------------------------------------------------------- plans at the full shapes

TEST(SynthArchPlanTest, FullPlansFollowTheRules) {
  for (const SynthArch arch : kNewArchs) {
    const SynthShape s = *SynthPreset(arch, "full");
    for (const SynthQuant quant : QuantsOf(arch)) {
      const std::vector<SynthTensor> plan = PlanSynthTensors(s, quant);
      const std::vector<std::pair<ExpectedTensor, TensorType>> expected = ExpectedTable(s, quant);
      ASSERT_EQ(plan.size(), expected.size()) << ArchName(arch);
      for (size_t i = 0; i < plan.size(); ++i) {
        EXPECT_EQ(plan[i].name, expected[i].first.name);
        EXPECT_EQ(plan[i].ne, expected[i].first.ne) << plan[i].name;
        EXPECT_EQ(plan[i].type, expected[i].second)
            << ArchName(arch) << " " << QuantName(quant) << " " << plan[i].name << " is "
            << TensorTypeName(plan[i].type);
      }
    }
  }
  // Mixtral has 8 experts: llama-quantize's 8-expert bumps apply.
  const std::vector<SynthTensor> mixtral = PlanSynthTensors(*SynthPreset(SynthArch::kLlama, "full"),
                                                            SynthQuant::kQ4_K_M);
  std::map<std::string, TensorType> by_name;
  for (const SynthTensor& t : mixtral) by_name[t.name] = t.type;
  EXPECT_EQ(by_name["blk.5.attn_k.weight"], TensorType::kQ8_0);
  EXPECT_EQ(by_name["blk.5.attn_v.weight"], TensorType::kQ8_0);
  EXPECT_EQ(by_name["blk.5.attn_output.weight"], TensorType::kQ5_K);
  EXPECT_EQ(by_name["blk.0.ffn_down_exps.weight"], TensorType::kQ6_K);
  EXPECT_EQ(by_name["blk.5.ffn_down_exps.weight"], TensorType::kQ4_K);
  EXPECT_EQ(by_name["output.weight"], TensorType::kQ6_K);
}

TEST(SynthArchPlanTest, FullSizesArePlausible) {
  struct Case {
    SynthArch arch;
    double params_lo, params_hi;  // the real model's parameter count, roughly
  };
  for (const Case c :
       {Case{SynthArch::kOlmoe, 6.8e9, 7.0e9}, Case{SynthArch::kLlama, 46.5e9, 46.9e9},
        Case{SynthArch::kQwen35Moe, 34.0e9, 35.5e9}, Case{SynthArch::kQwen3Next, 79.0e9, 81.0e9}}) {
    uint64_t elements = 0;
    for (const SynthTensor& t : PlanSynthTensors(*SynthPreset(c.arch, "full"), SynthQuant::kF32)) {
      elements += static_cast<uint64_t>(t.element_count());
    }
    EXPECT_GT(static_cast<double>(elements), c.params_lo) << ArchName(c.arch);
    EXPECT_LT(static_cast<double>(elements), c.params_hi) << ArchName(c.arch);
  }
}

// The q8_0-f32 mix reproduces the tensor-type shares of the 20.8 GiB dynamic
// 4-bit Qwen3.6-35B-A3B file: Q4_K 10.6 %, Q5_K 5.2 %, Q6_K 0.5 %, Q8_0
// 34.4 %, F32 49.2 % of the tensors.
TEST(SynthArchPlanTest, Q8_0F32MatchesTheDynamicFilesShares) {
  SynthOptions o = Options(SynthArch::kQwen35Moe, "full", SynthQuant::kQ8_0F32, 0, "/nonexistent/q.gguf");
  const absl::StatusOr<SynthPlan> plan = PlanSynthModel(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::map<TensorType, int> counts;
  for (const SynthTensor& t : plan->tensors) ++counts[t.type];
  ASSERT_EQ(plan->tensors.size(), 733u);
  EXPECT_EQ(counts, (std::map<TensorType, int>{{TensorType::kF32, 361},
                                               {TensorType::kQ8_0, 252},
                                               {TensorType::kQ4_K, 78},
                                               {TensorType::kQ5_K, 38},
                                               {TensorType::kQ6_K, 4}}));
  const std::map<TensorType, double> target = {{TensorType::kF32, 49.2},
                                               {TensorType::kQ8_0, 34.4},
                                               {TensorType::kQ4_K, 10.6},
                                               {TensorType::kQ5_K, 5.2},
                                               {TensorType::kQ6_K, 0.5}};
  for (const auto& [type, percent] : target) {
    EXPECT_NEAR(100.0 * counts[type] / 733.0, percent, 1.0) << TensorTypeName(type);
  }
  const double gib = static_cast<double>(plan->total_file_bytes) / (1024.0 * 1024.0 * 1024.0);
  EXPECT_NEAR(gib, 20.8, 0.1);
}

// ---------------------------------------------------------------- written files

class SynthArchFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new fs::path(MakeTempDir("arch")); }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path Path(const std::string& name) { return *dir_ / name; }
  static fs::path* dir_;
};
fs::path* SynthArchFilesTest::dir_ = nullptr;

using FileParam = std::tuple<SynthArch, std::string, SynthQuant>;

class SynthArchPresetFilesTest : public SynthArchFilesTest, public ::testing::WithParamInterface<FileParam> {};

TEST_P(SynthArchPresetFilesTest, ReadsBackWithTheRealKeysAndTensors) {
  const auto& [arch, preset, quant] = GetParam();
  const fs::path path = Path(absl::StrCat(ArchName(arch), "_", preset, "_", QuantName(quant), ".gguf"));
  const SynthOptions options = Options(arch, preset, quant, 42, path);
  const SynthPlan plan = WriteOrDie(options);
  ASSERT_EQ(plan.shards.size(), 1u);
  EXPECT_EQ(fs::file_size(path), plan.total_file_bytes);

  std::unique_ptr<GgufModel> model = OpenOrDie(path.string());
  ASSERT_NE(model, nullptr);
  CheckMetadata(model->metadata(), options.shape, quant);
  CheckTensors(*model, options.shape, quant);

  // The stored bytes are what the generator makes: first and last rows of
  // every tensor.
  std::vector<float> scratch;
  for (const SynthTensor& t : plan.tensors) {
    const GgufTensorInfo* info = model->FindTensor(t.name);
    ASSERT_NE(info, nullptr);
    const std::span<const uint8_t> data = model->TensorData(*info);
    ASSERT_EQ(data.size(), t.size_bytes());
    const int64_t rows = std::min<int64_t>(2, t.rows());
    const size_t row_bytes = static_cast<size_t>(TensorRowBytes(t.type, t.ne[0]));
    std::vector<uint8_t> expect(row_bytes * static_cast<size_t>(rows));
    EncodeSynthRows(t, options.seed, 0, rows, expect.data(), scratch);
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), data.begin())) << t.name;
    EncodeSynthRows(t, options.seed, t.rows() - rows, rows, expect.data(), scratch);
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), data.end() - static_cast<ptrdiff_t>(expect.size())))
        << t.name;
  }
}

std::vector<FileParam> AllFileParams() {
  std::vector<FileParam> params;
  for (const SynthArch arch : kNewArchs) {
    for (const char* preset : {"tiny", "small"}) {
      for (const SynthQuant quant : QuantsOf(arch)) params.emplace_back(arch, preset, quant);
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(AllArchsPresetsAndMixes, SynthArchPresetFilesTest, ::testing::ValuesIn(AllFileParams()),
                         [](const auto& param_info) {
                           std::string quant = QuantName(std::get<2>(param_info.param));
                           std::replace(quant.begin(), quant.end(), '-', '_');
                           return absl::StrCat(ArchName(std::get<0>(param_info.param)), "_",
                                               std::get<1>(param_info.param), "_", quant);
                         });

// Early qwen3next files: one ssm_in per DeltaNet layer instead of attn_qkv
// and attn_gate, attention-v-like for llama-quantize.
TEST_F(SynthArchFilesTest, Qwen3NextLegacySsmInReadsBack) {
  for (const SynthQuant quant : {SynthQuant::kF32, SynthQuant::kQ4_K_M}) {
    const fs::path path = Path(absl::StrCat("qwen3next_legacy_", QuantName(quant), ".gguf"));
    SynthOptions options = Options(SynthArch::kQwen3Next, "tiny", quant, 5, path);
    options.shape.legacy_ssm_in = true;
    WriteOrDie(options);
    std::unique_ptr<GgufModel> model = OpenOrDie(path.string());
    ASSERT_NE(model, nullptr);
    CheckMetadata(model->metadata(), options.shape, quant);
    CheckTensors(*model, options.shape, quant);
    EXPECT_NE(model->FindTensor("blk.0.ssm_in.weight"), nullptr);
    EXPECT_EQ(model->FindTensor("blk.0.attn_qkv.weight"), nullptr);
  }
}

TEST_F(SynthArchFilesTest, SameOptionsSameBytesRegardlessOfThreadsAndChunks) {
  for (const SynthArch arch : kNewArchs) {
    const std::string a = ArchName(arch);
    SynthOptions one = Options(arch, "tiny", SynthQuant::kQ4_K_M, 7, Path(a + "_det1.gguf"));
    one.threads = 1;
    SynthOptions three = Options(arch, "tiny", SynthQuant::kQ4_K_M, 7, Path(a + "_det3.gguf"));
    three.threads = 3;
    three.chunk_elems = 1000;
    SynthOptions other_seed = Options(arch, "tiny", SynthQuant::kQ4_K_M, 8, Path(a + "_det_seed.gguf"));
    WriteOrDie(one);
    WriteOrDie(three);
    WriteOrDie(other_seed);
    const std::vector<uint8_t> bytes = ReadFileBytes(one.out_path);
    ASSERT_FALSE(bytes.empty());
    EXPECT_TRUE(bytes == ReadFileBytes(three.out_path)) << a;
    EXPECT_FALSE(bytes == ReadFileBytes(other_seed.out_path)) << a;
  }
}

// Every tensor of the f32 file has the distribution the plan gives it; the
// quantized files hold the same weights within each encoding's error.
TEST_F(SynthArchFilesTest, WeightsHaveThePlannedDistributions) {
  for (const SynthArch arch : kNewArchs) {
    const std::string a = ArchName(arch);
    const SynthOptions f32 = Options(arch, "small", SynthQuant::kF32, 3, Path(a + "_dist_f32.gguf"));
    const SynthPlan plan = WriteOrDie(f32);
    std::unique_ptr<GgufModel> mf = OpenOrDie(f32.out_path);
    ASSERT_NE(mf, nullptr);
    for (const SynthTensor& t : plan.tensors) {
      const std::vector<float> v = Dequantize(*mf, *mf->FindTensor(t.name));
      if (t.distribution == SynthDistribution::kNegativeExpUniform) {
        // ssm_a = -exp(A_log): negative, within [-e^hi, -e^lo].
        for (float x : v) {
          ASSERT_LT(x, 0.0f) << t.name;
          ASSERT_LE(x, -std::exp(t.mean) * 0.999f) << t.name;
          ASSERT_GE(x, -std::exp(t.stddev) * 1.001f) << t.name;
        }
        continue;
      }
      const double n = static_cast<double>(v.size());
      const double tolerance = std::max(4.0 * t.stddev / std::sqrt(n), 1e-6);
      EXPECT_NEAR(Mean(v), t.mean, tolerance) << a << " " << t.name;
      // The sample standard deviation is within 4.5 of its standard errors
      // (some 150 tensors are checked; each is a fixed draw).
      const double std_tolerance = std::max(0.03, 4.5 / std::sqrt(2.0 * n));
      if (v.size() >= 256) {
        EXPECT_NEAR(StdDev(v), t.stddev, std_tolerance * t.stddev) << a << " " << t.name;
      }
    }
    // Norm weights are near 1, as real files store them (1 + w for qwen35moe).
    const std::vector<float> norm = Dequantize(*mf, *mf->FindTensor("blk.0.attn_norm.weight"));
    EXPECT_GT(*std::min_element(norm.begin(), norm.end()), 0.8f);
    EXPECT_LT(*std::max_element(norm.begin(), norm.end()), 1.2f);

    for (const SynthQuant quant : QuantsOf(arch)) {
      if (quant == SynthQuant::kF32) continue;
      const SynthOptions qo =
          Options(arch, "small", quant, 3, Path(absl::StrCat(a, "_dist_", QuantName(quant), ".gguf")));
      WriteOrDie(qo);
      std::unique_ptr<GgufModel> mq = OpenOrDie(qo.out_path);
      ASSERT_NE(mq, nullptr);
      for (const SynthTensor& t : plan.tensors) {
        const GgufTensorInfo* info = mq->FindTensor(t.name);
        ASSERT_NE(info, nullptr);
        const std::vector<float> exact = Dequantize(*mf, *mf->FindTensor(t.name));
        const std::vector<float> got = Dequantize(*mq, *info);
        ASSERT_EQ(exact.size(), got.size());
        if (info->type == TensorType::kF32) {
          EXPECT_TRUE(exact == got) << t.name << ": unquantized tensors are bit-identical across mixes";
          continue;
        }
        double err = 0;
        for (size_t i = 0; i < exact.size(); ++i) err += (got[i] - exact[i]) * (got[i] - exact[i]);
        const double rms_err = std::sqrt(err / static_cast<double>(exact.size()));
        // Relative RMS error bounds of the encodings on Gaussian data.
        double bound = 0.02;  // Q8_0
        if (info->type == TensorType::kQ6_K) bound = 0.05;
        if (info->type == TensorType::kQ5_K) bound = 0.08;
        if (info->type == TensorType::kQ4_K || info->type == TensorType::kQ4_0) bound = 0.15;
        EXPECT_LT(rms_err, bound * t.stddev)
            << a << " " << QuantName(quant) << " " << t.name << " (" << TensorTypeName(info->type) << ")";
        EXPECT_NEAR(StdDev(got), t.stddev, 0.1 * t.stddev) << t.name;
      }
    }
  }
}

// Where the test vectors written by an independent writer (gguf-py) are
// present, the tiny presets have their exact tensor tables and architecture
// keys. Differences by design: the vectors use a qwen2 tokenizer for every
// architecture; olmoe's carries rope.dimension_count, which llama.cpp's
// converter does not write; llama's lacks vocab_size, which it writes.
TEST_F(SynthArchFilesTest, TinyPresetsMatchTheIndependentTestVectors) {
  struct Case {
    SynthArch arch;
    const char* vector;
    std::set<std::string> only_in_vector;
    std::set<std::string> only_in_ours;
  };
  const Case cases[] = {
      {SynthArch::kOlmoe, "olmoe-tiny-f32.gguf", {"olmoe.rope.dimension_count"}, {}},
      {SynthArch::kLlama, "mixtral-tiny-f32.gguf", {}, {"llama.vocab_size"}},
      {SynthArch::kQwen35Moe, "qwen35moe-tiny-f32.gguf", {}, {}},
  };
  int compared = 0;
  for (const Case& c : cases) {
    const fs::path vector_path = fs::path(MOETIER_TEST_DATA_DIR) / "vectors" / c.vector;
    if (!fs::exists(vector_path)) continue;
    ++compared;
    const std::string a = ArchName(c.arch);
    const SynthOptions o = Options(c.arch, "tiny", SynthQuant::kF32, 1, Path(a + "_vs_vector.gguf"));
    WriteOrDie(o);
    std::unique_ptr<GgufModel> ours = OpenOrDie(o.out_path);
    std::unique_ptr<GgufModel> theirs = OpenOrDie(vector_path.string());
    ASSERT_NE(ours, nullptr);
    ASSERT_NE(theirs, nullptr);
    ASSERT_EQ(ours->tensors().size(), theirs->tensors().size()) << c.vector;
    for (size_t i = 0; i < ours->tensors().size(); ++i) {
      const GgufTensorInfo& x = ours->tensors()[i];
      const GgufTensorInfo& y = theirs->tensors()[i];
      EXPECT_EQ(x.name, y.name) << c.vector << " tensor " << i;
      EXPECT_EQ(x.n_dims, y.n_dims) << x.name;
      EXPECT_EQ(x.ne, y.ne) << x.name;
      EXPECT_EQ(x.type, y.type) << x.name;
    }
    const std::string prefix = a + ".";
    for (const GgufKeyValue& kv : theirs->metadata().entries()) {
      if (!absl::StartsWith(kv.key, prefix) && !absl::StartsWith(kv.key, "general.")) continue;
      if (kv.key == "general.name" || c.only_in_vector.count(kv.key)) continue;
      const GgufValue* v = ours->metadata().Find(kv.key);
      ASSERT_NE(v, nullptr) << c.vector << ": we lack " << kv.key;
      EXPECT_TRUE(*v == kv.value) << c.vector << ": " << kv.key << " differs";
    }
    for (const GgufKeyValue& kv : ours->metadata().entries()) {
      if (!absl::StartsWith(kv.key, prefix) || c.only_in_ours.count(kv.key)) continue;
      EXPECT_NE(theirs->metadata().Find(kv.key), nullptr) << c.vector << " lacks " << kv.key;
    }
  }
  if (compared == 0) GTEST_SKIP() << "no olmoe/mixtral/qwen35moe test vectors under " << MOETIER_TEST_DATA_DIR;
}

// ---------------------------------------------------------------- tokenizers

void CheckBpeVocabulary(const SynthVocabulary& v, const SynthBpeLayout& layout, int64_t n_vocab) {
  ASSERT_EQ(static_cast<int64_t>(v.tokens.size()), n_vocab);
  ASSERT_EQ(v.token_types.size(), v.tokens.size());
  EXPECT_TRUE(v.scores.empty());
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    EXPECT_TRUE(index.emplace(v.tokens[i], i).second) << "duplicate token '" << v.tokens[i] << "'";
  }
  const bool real = n_vocab >= layout.real_min_vocab();
  for (size_t s = 0; s < layout.leading.size(); ++s) {
    EXPECT_EQ(v.tokens[s], layout.leading[s].text);
    EXPECT_EQ(v.token_types[s], static_cast<int32_t>(layout.leading[s].type));
  }
  for (size_t s = 0; s < layout.trailing.size(); ++s) {
    const int64_t id = real ? layout.trailing[s].real_id
                            : n_vocab - static_cast<int64_t>(layout.trailing.size()) + static_cast<int64_t>(s);
    EXPECT_EQ(v.tokens[static_cast<size_t>(id)], layout.trailing[s].text);
    EXPECT_EQ(SynthTokenId(v, layout.trailing[s].text), id);
  }
  EXPECT_EQ(v.first_merge_id, static_cast<int64_t>(layout.leading.size()) + 256);
  ASSERT_GT(v.merges.size(), 100u);
  for (size_t m = 0; m < v.merges.size(); ++m) {
    const std::vector<std::string> parts = absl::StrSplit(v.merges[m], absl::MaxSplits(' ', 1));
    ASSERT_EQ(parts.size(), 2u);
    const size_t id = static_cast<size_t>(v.first_merge_id) + m;
    EXPECT_EQ(v.tokens[id], parts[0] + parts[1]) << "merge " << m;
    EXPECT_LT(index[parts[0]], id);
    EXPECT_LT(index[parts[1]], id);
  }
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.token_types[i] == 5) {
      EXPECT_EQ(v.tokens[i], absl::StrCat("[PAD", i, "]"));
    }
  }
}

TEST(SynthArchTokenizerTest, BpeLayoutsPutTheSpecialsWhereRealFilesHaveThem) {
  for (const int64_t n : {int64_t{512}, kQwen35Vocab}) {
    const absl::StatusOr<SynthVocabulary> v = BuildSynthBpeVocabulary(Qwen35BpeLayout(), n);
    ASSERT_TRUE(v.ok()) << v.status();
    CheckBpeVocabulary(*v, Qwen35BpeLayout(), n);
  }
  const SynthVocabulary q35 = *BuildSynthBpeVocabulary(Qwen35BpeLayout(), kQwen35Vocab);
  EXPECT_EQ(q35.tokens[248044], "<|endoftext|>");
  EXPECT_EQ(q35.tokens[248045], "<|im_start|>");
  EXPECT_EQ(q35.tokens[248046], "<|im_end|>");
  EXPECT_EQ(q35.tokens[248068], "<think>");
  EXPECT_EQ(q35.token_types[248068], 4);
  EXPECT_EQ(q35.tokens[248069], "</think>");
  EXPECT_EQ(q35.token_types[248319], 5);

  for (const int64_t n : {int64_t{512}, kOlmoeVocab}) {
    const absl::StatusOr<SynthVocabulary> v = BuildSynthBpeVocabulary(OlmoeBpeLayout(), n);
    ASSERT_TRUE(v.ok()) << v.status();
    CheckBpeVocabulary(*v, OlmoeBpeLayout(), n);
  }
  const SynthVocabulary olmoe = *BuildSynthBpeVocabulary(OlmoeBpeLayout(), kOlmoeVocab);
  EXPECT_EQ(olmoe.tokens[1], "<|padding|>");
  EXPECT_EQ(olmoe.tokens[50279], "<|endoftext|>");
  EXPECT_EQ(olmoe.token_types[50279], 3);
  // 50280 tokens in a 50304-row embedding: the converter's [PAD<id>] rows.
  for (int64_t id = 50280; id < kOlmoeVocab; ++id) {
    EXPECT_EQ(olmoe.tokens[static_cast<size_t>(id)], absl::StrCat("[PAD", id, "]"));
    EXPECT_EQ(olmoe.token_types[static_cast<size_t>(id)], 5);
  }
  EXPECT_EQ(olmoe.tokens[2], "\xC4\x80");  // byte 0x00 maps to U+0100
  EXPECT_FALSE(BuildSynthBpeVocabulary(OlmoeBpeLayout(), 260).ok());
}

TEST(SynthArchTokenizerTest, Gpt2PreTokenizerSplitsLikeTheRegex) {
  auto split = [](std::string_view text) {
    std::vector<std::string> out;
    for (const std::string_view p : PreTokenizeGpt2(text)) out.emplace_back(p);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("I'm here  now"), (V{"I", "'m", " here", " ", " now"}));
  EXPECT_EQ(split("x = 123 + 4"), (V{"x", " =", " 123", " +", " 4"}));
  EXPECT_EQ(split("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split("abc!!! def  "), (V{"abc", "!!!", " def", "  "}));
  EXPECT_EQ(split("don'T"), (V{"don", "'", "T"}));  // contractions are lower case only
  EXPECT_EQ(split("你好，世界"), (V{"你好", "，", "世界"}));
}

// The olmoe vocabulary under llama.cpp's BPE merge loop. The project's
// tokenizer has no "olmo" pre-tokenizer, so this encodes under "qwen2",
// which splits the test text the same way (letter runs with one leading
// space); the merges are what is being checked.
TEST(SynthArchTokenizerTest, OlmoeMergesEncodeWordsCompactly) {
  for (const int64_t n_vocab : {int64_t{4096}, kOlmoeVocab}) {
    SynthShape s = *SynthPreset(SynthArch::kOlmoe, "tiny");
    s.n_vocab = n_vocab;
    absl::StatusOr<std::vector<GgufKeyValue>> kvs = BuildSynthMetadata(s, SynthQuant::kF32, "t");
    ASSERT_TRUE(kvs.ok()) << kvs.status();
    GgufMetadata md;
    for (GgufKeyValue& kv : *kvs) {
      if (kv.key == "tokenizer.ggml.pre") kv.value = GgufValue::String("qwen2");
      md.Add(std::move(kv));
    }
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromGgufMetadata(md);
    ASSERT_TRUE(tok.ok()) << tok.status();
    const std::string text = "The harbour empties a little before it fills again<|endoftext|>";
    absl::StatusOr<std::vector<int32_t>> ids = tok->Encode(text, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(ids->back(), tok->eos_id());
    EXPECT_LT(ids->size(), 16u) << n_vocab;
    EXPECT_EQ(*tok->Detokenize(*ids, /*render_special=*/true), text);
    if (n_vocab == kOlmoeVocab) {
      EXPECT_EQ(ids->back(), 50279);
    }
    EXPECT_FALSE(tok->add_bos());
  }
}

TEST(SynthArchTokenizerTest, Qwen35TokenizerAndTemplateLoadInTheProject) {
  for (const int64_t n_vocab : {int64_t{512}, kQwen35Vocab}) {
    SynthShape s = *SynthPreset(SynthArch::kQwen35Moe, "tiny");
    s.n_vocab = n_vocab;
    absl::StatusOr<GgufMetadata> md = MetadataOf(s);
    ASSERT_TRUE(md.ok()) << md.status();
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromGgufMetadata(*md);
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ(tok->token_text(tok->eos_id()), "<|im_end|>");
    EXPECT_EQ(tok->bos_id(), kNoToken);
    EXPECT_FALSE(tok->add_bos());
    EXPECT_TRUE(tok->IsEndOfGeneration(tok->TokenId("<|im_end|>")));

    absl::StatusOr<ChatTemplate> chat = ChatTemplate::ForTokenizer(*tok);
    ASSERT_TRUE(chat.ok()) << chat.status();
    EXPECT_EQ(chat->style(), ChatTemplateStyle::kQwen35);
    const ChatMessage hello[] = {{"user", "Hello"}};
    const absl::StatusOr<std::string> prompt = chat->Render(hello, ChatRenderOptions{});
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    EXPECT_EQ(*prompt, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n");
    absl::StatusOr<std::vector<int32_t>> ids = tok->Encode(*prompt, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(ids->front(), tok->TokenId("<|im_start|>"));
    EXPECT_EQ((*ids)[ids->size() - 2], tok->TokenId("<think>"));
    EXPECT_EQ(*tok->Detokenize(*ids, /*render_special=*/true), *prompt);
    if (n_vocab == kQwen35Vocab) {
      EXPECT_EQ(ids->front(), 248045);
      EXPECT_EQ((*ids)[ids->size() - 2], 248068);
      EXPECT_EQ(tok->eos_id(), 248046);
    }
  }
  // The generation prompt of the real template opens a think block.
  EXPECT_THAT(std::string(SynthQwen35ChatTemplate()), HasSubstr("{{- '<think>\\n' }}"));
  EXPECT_THAT(std::string(SynthQwen35ChatTemplate()), HasSubstr("<tool_call>"));
}

// llama.cpp's SentencePiece tokenization (llm_tokenizer_spm): spaces become
// U+2581 with one prepended, then the adjacent pair whose concatenation is a
// token with the highest score is merged (leftmost on ties) until none is;
// symbols that are no token become their <0xXX> byte tokens.
std::vector<int32_t> SpmEncode(const SynthVocabulary& v, std::string_view text) {
  std::map<std::string, int32_t> ids;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.token_types[i] == 1) ids.emplace(v.tokens[i], static_cast<int32_t>(i));
  }
  std::string escaped(kSentencePieceSpace);
  for (const char c : text) {
    if (c == ' ') {
      escaped += kSentencePieceSpace;
    } else {
      escaped += c;
    }
  }
  std::vector<std::string> symbols;
  for (size_t i = 0; i < escaped.size();) {
    const unsigned char c = static_cast<unsigned char>(escaped[i]);
    const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    symbols.push_back(escaped.substr(i, len));
    i += len;
  }
  while (true) {
    int best = -1;
    float best_score = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = ids.find(symbols[i] + symbols[i + 1]);
      if (it == ids.end()) continue;
      const float score = v.scores[static_cast<size_t>(it->second)];
      if (best < 0 || score > best_score) {
        best = static_cast<int>(i);
        best_score = score;
      }
    }
    if (best < 0) break;
    symbols[static_cast<size_t>(best)] += symbols[static_cast<size_t>(best) + 1];
    symbols.erase(symbols.begin() + best + 1);
  }
  std::vector<int32_t> out;
  for (const std::string& s : symbols) {
    const auto it = ids.find(s);
    if (it != ids.end()) {
      out.push_back(it->second);
      continue;
    }
    for (const char c : s) out.push_back(static_cast<int32_t>(kSpmFirstByteId) + static_cast<uint8_t>(c));
  }
  return out;
}

std::string SpmDecode(const SynthVocabulary& v, const std::vector<int32_t>& ids) {
  std::string out;
  for (const int32_t id : ids) {
    if (v.token_types[static_cast<size_t>(id)] == 6) {
      out += static_cast<char>(id - kSpmFirstByteId);
      continue;
    }
    std::string piece = v.tokens[static_cast<size_t>(id)];
    for (size_t p; (p = piece.find(kSentencePieceSpace)) != std::string::npos;) {
      piece.replace(p, kSentencePieceSpace.size(), " ");
    }
    out += piece;
  }
  return out.substr(1);  // the prepended space
}

TEST(SynthArchTokenizerTest, SentencePieceVocabularyIsLikeMixtrals) {
  for (const int64_t n_vocab : {int64_t{512}, kMixtralVocab}) {
    const absl::StatusOr<SynthVocabulary> vocab = BuildSynthSpmVocabulary(n_vocab);
    ASSERT_TRUE(vocab.ok()) << vocab.status();
    const SynthVocabulary& v = *vocab;
    ASSERT_EQ(static_cast<int64_t>(v.tokens.size()), n_vocab);
    ASSERT_EQ(v.scores.size(), v.tokens.size());
    ASSERT_EQ(v.token_types.size(), v.tokens.size());
    EXPECT_TRUE(v.merges.empty());
    EXPECT_EQ(v.tokens[0], "<unk>");
    EXPECT_EQ(v.token_types[0], 2);
    EXPECT_EQ(v.tokens[1], "<s>");
    EXPECT_EQ(v.token_types[1], 3);
    EXPECT_EQ(v.tokens[2], "</s>");
    EXPECT_EQ(v.token_types[2], 3);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      EXPECT_EQ(v.tokens[static_cast<size_t>(3 + b)], name);
      EXPECT_EQ(v.token_types[static_cast<size_t>(3 + b)], 6);
    }
    for (size_t i = 0; i < kSpmFixedTokens; ++i) EXPECT_EQ(v.scores[i], 0.0f);
    // Normal pieces: scores fall with the rank; U+2581 only as the first
    // character; every multi-character piece is the concatenation of two
    // better-scored pieces, so the merge loop can reach it.
    std::map<std::string, size_t> index;
    size_t normal = 0;
    for (size_t i = kSpmFixedTokens; i < v.tokens.size(); ++i) {
      EXPECT_TRUE(index.emplace(v.tokens[i], i).second) << "duplicate " << v.tokens[i];
      if (v.token_types[i] == 5) {
        EXPECT_EQ(v.tokens[i], absl::StrCat("[PAD", i, "]"));
        EXPECT_EQ(v.scores[i], kSpmPadScore);
        continue;
      }
      ASSERT_EQ(v.token_types[i], 1) << i;
      ++normal;
      EXPECT_EQ(v.scores[i], -static_cast<float>(i - kSpmFixedTokens)) << i;
      const size_t space = v.tokens[i].find(kSentencePieceSpace, 1);
      EXPECT_EQ(space, std::string::npos) << v.tokens[i];
    }
    EXPECT_EQ(static_cast<int64_t>(normal + kSpmFixedTokens) + std::count(v.token_types.begin(), v.token_types.end(), 5),
              n_vocab);

    const std::string text = "The harbour empties a little before it fills again.";
    const std::vector<int32_t> ids = SpmEncode(v, text);
    EXPECT_EQ(SpmDecode(v, ids), text);
    EXPECT_LT(ids.size(), n_vocab == kMixtralVocab ? 16u : 40u) << n_vocab;
    // Text outside the vocabulary falls back to byte tokens and still round-trips.
    const std::string rare = "\xE2\x9C\x93 tab\there";
    EXPECT_EQ(SpmDecode(v, SpmEncode(v, rare)), rare);
  }
  EXPECT_FALSE(BuildSynthSpmVocabulary(259).ok());
  EXPECT_THAT(std::string(SynthMixtralChatTemplate()), HasSubstr("'[INST] ' + message['content'] + ' [/INST]'"));
  EXPECT_THAT(std::string(SynthMixtralChatTemplate()), HasSubstr("message['content'] + eos_token"));
  EXPECT_THAT(std::string(SynthOlmoeChatTemplate()), HasSubstr("'<|assistant|>\\n'"));
}

// ---------------------------------------------------------------- command line

TEST(SynthArchCommandLineTest, HelpDocumentsEveryArchitectureAndFlag) {
  const RunResult r = RunTool("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* word : {"--arch",
                           "qwen3moe",
                           "olmoe",
                           "llama",
                           "qwen35moe",
                           "qwen3next",
                           "Qwen3-Next-80B-A3B",
                           "--legacy-ssm-in",
                           "q8_0-f32",
                           "--rope-dims",
                           "--rope-sections",
                           "--shared-ffn",
                           "--full-attention-interval",
                           "--ssm-conv-kernel",
                           "--ssm-state-size",
                           "--ssm-group-count",
                           "--ssm-time-step-rank",
                           "--ssm-inner-size",
                           "Mixtral-8x7B",
                           "OLMoE-1B-7B",
                           "Qwen3.6-35B-A3B"}) {
    EXPECT_THAT(r.output, HasSubstr(word));
  }
}

TEST(SynthArchCommandLineTest, FlagsOfOtherArchitecturesAreRefused) {
  for (const char* args :
       {"--arch mixtral --out x.gguf", "--arch llama --shared-ffn 64 --out x.gguf",
        "--arch olmoe --ssm-state-size 8 --out x.gguf",
        "--arch llama --quant q8_0-f32 --out x.gguf",
        "--arch qwen35moe --rope-sections 1,2 --out x.gguf",
        "--arch qwen35moe --rope-dims 10 --out x.gguf", "--arch olmoe --tied-output --out x.gguf",
        "--arch qwen3next --rope-sections 2,1,1,0 --out x.gguf",
        "--arch qwen35moe --legacy-ssm-in --out x.gguf",
        "--arch llama --ssm-group-count 2 --out x.gguf"}) {
    const RunResult r = RunTool(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << ": " << r.output;
  }
}

TEST(SynthArchCommandLineTest, DryRunOfTheFullShapes) {
  const RunResult r = RunTool("--arch qwen35moe --preset full --quant q8_0-f32 --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("tensors: 733"));
  EXPECT_THAT(r.output, HasSubstr("361 tensors (49.2%)"));
  EXPECT_THAT(r.output, HasSubstr("10 of 40 layers"));
  const RunResult olmoe = RunTool("--arch olmoe --preset full --quant q4_k_m --dry-run");
  EXPECT_EQ(olmoe.exit_code, 0) << olmoe.output;
  EXPECT_THAT(olmoe.output, HasSubstr("tensors: 195"));
  const RunResult llama = RunTool("--arch llama --preset full --quant q4_k_m --dry-run");
  EXPECT_EQ(llama.exit_code, 0) << llama.output;
  EXPECT_THAT(llama.output, HasSubstr("tensors: 323"));
  EXPECT_THAT(llama.output, HasSubstr("SentencePiece"));
  const RunResult next = RunTool("--arch qwen3next --preset full --quant q4_k_m --dry-run");
  EXPECT_EQ(next.exit_code, 0) << next.output;
  EXPECT_THAT(next.output, HasSubstr("12 of 48 layers"));
  EXPECT_THAT(next.output, HasSubstr("experts 512 (top 10)"));
}

TEST(SynthArchCommandLineTest, WritesQwen35MoeWithShapeFlags) {
  const fs::path dir = MakeTempDir("arch_cli");
  const fs::path out = dir / "q.gguf";
  const RunResult r = RunTool(absl::StrCat(
      "--arch qwen35moe --preset tiny --quant q8_0 --layers 6 --full-attention-interval 3 --rope-dims 16 "
      "--rope-sections 4,2,2,0 --shared-ffn 64 --ssm-conv-kernel 3 --ssm-state-size 8 --ssm-group-count 1 "
      "--ssm-time-step-rank 2 --ssm-inner-size 32 --tied-output --quiet --out ",
      out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::unique_ptr<GgufModel> model = OpenOrDie(out.string());
  ASSERT_NE(model, nullptr);
  SynthShape s = *SynthPreset(SynthArch::kQwen35Moe, "tiny");
  s.n_layer = 6;
  s.full_attention_interval = 3;
  s.n_rot = 16;
  s.rope_sections = {4, 2, 2, 0};
  s.n_ff_shexp = 64;
  s.ssm_conv_kernel = 3;
  s.ssm_state_size = 8;
  s.ssm_group_count = 1;
  s.ssm_time_step_rank = 2;
  s.ssm_inner_size = 32;
  s.tied_output = true;
  CheckMetadata(model->metadata(), s, SynthQuant::kQ8_0);
  CheckTensors(*model, s, SynthQuant::kQ8_0);
  EXPECT_NE(model->FindTensor("blk.2.attn_q.weight"), nullptr);
  EXPECT_NE(model->FindTensor("blk.3.attn_qkv.weight"), nullptr);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------- independent parser

// tests/interop/check_model.py compares moetier-inspect's view of a file with
// @huggingface/gguf's (names, types, dims, offsets, sizes, SHA-256 of the
// bytes). Needs node, the npm packages of tests/interop and moetier-inspect.
TEST(SynthArchInteropTest, IndependentParserAgrees) {
  const fs::path interop = fs::path(MOETIER_TEST_DATA_DIR) / ".." / "interop";
  const fs::path inspect = fs::path(MOETIER_BINARY_DIR) / "tools" / "inspect" / "moetier-inspect";
  if (!fs::exists(interop / "node_modules" / "@huggingface" / "gguf")) {
    GTEST_SKIP() << "no npm packages in " << interop << " (run npm install there)";
  }
  if (!fs::exists(inspect)) GTEST_SKIP() << "moetier-inspect is not built";
  if (std::system("node --version > /dev/null 2>&1 && python3 --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "node or python3 missing";
  }
  const fs::path dir = MakeTempDir("arch_interop");
  std::vector<std::pair<SynthArch, SynthQuant>> cases;
  for (const SynthArch arch : kNewArchs) cases.emplace_back(arch, SynthQuant::kQ4_K_M);
  cases.emplace_back(SynthArch::kQwen35Moe, SynthQuant::kQ8_0F32);
  for (const auto& [arch, quant] : cases) {
    const fs::path path = dir / absl::StrCat(ArchName(arch), "_", QuantName(quant), ".gguf");
    WriteOrDie(Options(arch, "small", quant, 5, path));
    const testing::CommandResult r =
        testing::RunCommand(absl::StrCat("python3 ", (interop / "check_model.py").string(),
                                         " --inspect ", inspect.string(), " ", path.string()));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("tensors agree")) << path;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moetier
