#include "synth_arch_expected.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier::synth_arch_expected {

using ::testing::HasSubstr;

std::string ArchName(SynthArch arch) { return std::string(SynthArchName(arch)); }
std::string QuantName(SynthQuant quant) { return std::string(SynthQuantName(quant)); }

std::vector<SynthQuant> QuantsOf(SynthArch arch) {
  std::vector<SynthQuant> quants = {SynthQuant::kF32, SynthQuant::kQ8_0, LowBitQuantOf(arch)};
  if (IsSynthDeltaNetHybrid(arch)) quants.push_back(SynthQuant::kQ8_0F32);
  return quants;
}

SynthQuant LowBitQuantOf(SynthArch arch) {
  return arch == SynthArch::kGptOss ? SynthQuant::kMxfp4 : SynthQuant::kQ4_K_M;
}

bool IsFullAttention(const SynthShape& s, int64_t layer) {
  return (layer + 1) % s.full_attention_interval == 0;
}

// ---------------------------------------------------------------- the tensor tables, restated

std::vector<ExpectedTensor> ExpectedTensors(const SynthShape& s) {
  std::vector<ExpectedTensor> t;
  t.push_back({"token_embd.weight", {s.n_embd, s.n_vocab}, -1});
  t.push_back({"output_norm.weight", {s.n_embd}, -1});
  if (!s.tied_output) t.push_back({"output.weight", {s.n_embd, s.n_vocab}, -1});
  const int64_t q = s.n_head * s.head_dim;
  const int64_t kv = s.n_head_kv * s.head_dim;
  // glm4moe's nextn blocks follow the layers that run.
  for (int64_t l = 0; l < s.n_layer + s.n_nextn_layer; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    auto add = [&](const std::string& n, std::vector<int64_t> ne) {
      t.push_back({b + n, std::move(ne), l});
    };
    switch (s.arch) {
      case SynthArch::kQwen3Moe:
      case SynthArch::kQwen3VlMoe:
        ADD_FAILURE() << "qwen3moe and qwen3vlmoe are covered by synth_test.cc and "
                         "SynthArchFilesTest.Qwen3VlMoeIsQwen3MoeWithRopeSections";
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
      case SynthArch::kQwen2Moe:
        add("attn_norm.weight", {s.n_embd});
        add("attn_q.weight", {s.n_embd, q});
        add("attn_k.weight", {s.n_embd, kv});
        add("attn_v.weight", {s.n_embd, kv});
        add("attn_output.weight", {q, s.n_embd});
        add("attn_q.bias", {q});
        add("attn_k.bias", {kv});
        add("attn_v.bias", {kv});
        add("ffn_norm.weight", {s.n_embd});
        break;
      case SynthArch::kGlm4Moe:
        add("attn_norm.weight", {s.n_embd});
        add("attn_q.weight", {s.n_embd, q});
        add("attn_k.weight", {s.n_embd, kv});
        add("attn_v.weight", {s.n_embd, kv});
        add("attn_output.weight", {q, s.n_embd});
        add("attn_q.bias", {q});
        add("attn_k.bias", {kv});
        add("attn_v.bias", {kv});
        if (s.qk_norm) {
          add("attn_q_norm.weight", {s.head_dim});
          add("attn_k_norm.weight", {s.head_dim});
        }
        add("post_attention_norm.weight", {s.n_embd});
        if (l < s.n_layer_dense_lead) {
          add("ffn_gate.weight", {s.n_embd, s.n_ff});
          add("ffn_up.weight", {s.n_embd, s.n_ff});
          add("ffn_down.weight", {s.n_ff, s.n_embd});
        } else {
          add("ffn_gate_inp.weight", {s.n_embd, s.n_expert});
          add("ffn_gate_exps.weight", {s.n_embd, s.n_ff_exp, s.n_expert});
          add("ffn_up_exps.weight", {s.n_embd, s.n_ff_exp, s.n_expert});
          add("ffn_down_exps.weight", {s.n_ff_exp, s.n_embd, s.n_expert});
          add("exp_probs_b.bias", {s.n_expert});
          if (s.n_expert_shared > 0) {
            // No ffn_gate_inp_shexp: GLM's shared expert is not gated.
            const int64_t shared = s.n_ff_exp * s.n_expert_shared;
            add("ffn_gate_shexp.weight", {s.n_embd, shared});
            add("ffn_up_shexp.weight", {s.n_embd, shared});
            add("ffn_down_shexp.weight", {shared, s.n_embd});
          }
        }
        if (l >= s.n_layer) {
          add("nextn.eh_proj.weight", {2 * s.n_embd, s.n_embd});
          add("nextn.enorm.weight", {s.n_embd});
          add("nextn.hnorm.weight", {s.n_embd});
          add("nextn.shared_head_norm.weight", {s.n_embd});
        }
        continue;
      case SynthArch::kErnie45Moe:
        add("attn_norm.weight", {s.n_embd});
        add("attn_q.weight", {s.n_embd, q});
        add("attn_k.weight", {s.n_embd, kv});
        add("attn_v.weight", {s.n_embd, kv});
        add("attn_output.weight", {q, s.n_embd});
        if (s.qkv_bias) {
          add("attn_q.bias", {q});
          add("attn_k.bias", {kv});
          add("attn_v.bias", {kv});
        }
        add("ffn_norm.weight", {s.n_embd});
        if (l < s.n_layer_dense_lead) {
          add("ffn_gate.weight", {s.n_embd, s.n_ff});
          add("ffn_up.weight", {s.n_embd, s.n_ff});
          add("ffn_down.weight", {s.n_ff, s.n_embd});
          continue;
        }
        // Expert tensors in every layer past the dense ones, whatever the
        // step: llama.cpp's loader asks for them there.
        add("ffn_gate_inp.weight", {s.n_embd, s.n_expert});
        add("ffn_gate_exps.weight", {s.n_embd, s.n_ff_exp, s.n_expert});
        add("ffn_up_exps.weight", {s.n_embd, s.n_ff_exp, s.n_expert});
        add("ffn_down_exps.weight", {s.n_ff_exp, s.n_embd, s.n_expert});
        if (s.selection_bias) add("exp_probs_b.bias", {s.n_expert});
        if (s.n_ff_shexp > 0) {
          add("ffn_gate_shexp.weight", {s.n_embd, s.n_ff_shexp});
          add("ffn_up_shexp.weight", {s.n_embd, s.n_ff_shexp});
          add("ffn_down_shexp.weight", {s.n_ff_shexp, s.n_embd});
        }
        continue;
      case SynthArch::kGptOss:
        add("attn_norm.weight", {s.n_embd});
        add("attn_q.weight", {s.n_embd, q});
        add("attn_k.weight", {s.n_embd, kv});
        add("attn_v.weight", {s.n_embd, kv});
        add("attn_output.weight", {q, s.n_embd});
        add("attn_q.bias", {q});
        add("attn_k.bias", {kv});
        add("attn_v.bias", {kv});
        add("attn_output.bias", {s.n_embd});
        add("attn_sinks.weight", {s.n_head});
        add("post_attention_norm.weight", {s.n_embd});
        add("ffn_gate_inp.weight", {s.n_embd, s.n_expert});
        add("ffn_gate_inp.bias", {s.n_expert});
        add("ffn_gate_exps.weight", {s.n_embd, s.n_ff_exp, s.n_expert});
        add("ffn_gate_exps.bias", {s.n_ff_exp, s.n_expert});
        add("ffn_up_exps.weight", {s.n_embd, s.n_ff_exp, s.n_expert});
        add("ffn_up_exps.bias", {s.n_ff_exp, s.n_expert});
        add("ffn_down_exps.weight", {s.n_ff_exp, s.n_embd, s.n_expert});
        add("ffn_down_exps.bias", {s.n_embd, s.n_expert});
        continue;
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
    if (IsSynthDeltaNetHybrid(s.arch) || s.arch == SynthArch::kQwen2Moe) {
      add("ffn_gate_inp_shexp.weight", {s.n_embd});
      add("ffn_gate_shexp.weight", {s.n_embd, s.n_ff_shexp});
      add("ffn_up_shexp.weight", {s.n_embd, s.n_ff_shexp});
      add("ffn_down_shexp.weight", {s.n_ff_shexp, s.n_embd});
    }
  }
  return t;
}

namespace {

bool UseMoreBits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

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

TensorType ExpectedType(const SynthShape& s, SynthQuant quant, const ExpectedTensor& t,
                        int64_t attn_v_index, int64_t n_attn_v) {
  const std::string& n = t.name;
  const bool unquantized =
      t.ne.size() < 2 || !absl::EndsWith(n, ".weight") || absl::StrContains(n, "_norm.weight") ||
      absl::StrContains(n, "ffn_gate_inp.weight") || absl::StrContains(n, "ssm_conv1d");
  const int64_t ne0 = t.ne[0];
  if (unquantized || quant == SynthQuant::kF32) return TensorType::kF32;
  if (quant == SynthQuant::kQ8_0) return Fit(TensorType::kQ8_0, ne0);
  if (quant == SynthQuant::kMxfp4) {
    // OpenAI's release: the experts MXFP4, every other matrix Q8_0.
    return Fit(absl::StrContains(n, "_exps.weight") ? TensorType::kMXFP4 : TensorType::kQ8_0, ne0);
  }
  if (quant == SynthQuant::kQ8_0F32) {
    if (absl::StrContains(n, "ssm_alpha") || absl::StrContains(n, "ssm_beta") ||
        absl::StrContains(n, "ssm_ba")) {
      return TensorType::kF32;
    }
    if (absl::StrContains(n, "ffn_gate_exps") || absl::StrContains(n, "ffn_up_exps")) {
      return Fit(t.layer == 0 ? TensorType::kQ6_K : TensorType::kQ4_K, ne0);
    }
    if (absl::StrContains(n, "ffn_down_exps")) {
      return Fit(t.layer == 0 || t.layer == s.n_layer - 1 ? TensorType::kQ6_K : TensorType::kQ5_K,
                 ne0);
    }
    return Fit(TensorType::kQ8_0, ne0);
  }
  const bool eight = s.n_expert == 8;
  if (n == "output.weight" || (n == "token_embd.weight" && s.tied_output)) {
    return ne0 % 256 == 0 ? TensorType::kQ6_K : Fit(TensorType::kQ8_0, ne0);
  }
  TensorType want = TensorType::kQ4_K;
  if (IsAttentionVLike(n)) {
    want = eight                                 ? TensorType::kQ8_0
           : UseMoreBits(attn_v_index, n_attn_v) ? TensorType::kQ6_K
                                                 : TensorType::kQ4_K;
  } else if (absl::StrContains(n, "attn_k.weight")) {
    want = eight ? TensorType::kQ8_0 : TensorType::kQ4_K;
  } else if (absl::StrContains(n, "attn_output.weight")) {
    want = eight ? TensorType::kQ5_K : TensorType::kQ4_K;
  } else if (absl::StrContains(n, "ffn_down")) {
    // llama-quantize's layer count is block_count, glm4moe's nextn blocks
    // included.
    const int64_t n_block = s.n_layer + s.n_nextn_layer;
    want = UseMoreBits(t.layer, n_block) ? TensorType::kQ6_K : TensorType::kQ4_K;
  }
  return Fit(want, ne0);
}

}  // namespace

// The expected table with types, in file order.
std::vector<std::pair<ExpectedTensor, TensorType>> ExpectedTable(const SynthShape& s,
                                                                 SynthQuant quant) {
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

namespace {

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
      {"general.file_type", u32(quant == SynthQuant::kF32     ? 0
                                : quant == SynthQuant::kQ8_0  ? 7
                                : quant == SynthQuant::kMxfp4 ? 38
                                                              : 15)},
      {"general.quantization_version", u32(2)},
      {a + ".block_count", u32(s.n_layer + s.n_nextn_layer)},
      {a + ".context_length", u32(s.n_ctx)},
      {a + ".embedding_length", u32(s.n_embd)},
      // qwen2moe: HF's intermediate_size, written as what llama.cpp's
      // fallback would take the expert width from.
      // glm4moe and ernie4_5-moe: the dense layers' width.
      {a + ".feed_forward_length",
       u32(s.arch == SynthArch::kQwen2Moe ? s.n_ff_exp * s.n_expert_used
           : s.arch == SynthArch::kGlm4Moe || s.arch == SynthArch::kErnie45Moe ? s.n_ff
                                                                               : s.n_ff_exp)},
      {a + ".attention.head_count", u32(s.n_head)},
      {a + ".attention.head_count_kv", u32(s.n_head_kv)},
      {a + ".rope.freq_base", GgufValue::Float32(s.rope_base)},
      {a + ".attention.layer_norm_rms_epsilon", GgufValue::Float32(s.rms_eps)},
      {a + ".expert_count", u32(s.n_expert)},
      {a + ".expert_used_count", u32(s.n_expert_used)},
  };
  // gpt-oss's tokenizer config has no add_bos_token, so its files have no key.
  if (s.arch != SynthArch::kGptOss) {
    k.push_back({"tokenizer.ggml.add_bos_token",
                 GgufValue::Bool(s.arch == SynthArch::kLlama || s.arch == SynthArch::kErnie45Moe)});
  }
  const bool head_dim_implied = s.head_dim * s.n_head == s.n_embd;
  switch (s.arch) {
    case SynthArch::kQwen3Moe:
    case SynthArch::kQwen3VlMoe:
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
    case SynthArch::kQwen2Moe:
      k.push_back({a + ".expert_feed_forward_length", u32(s.n_ff_exp)});
      k.push_back({a + ".expert_shared_feed_forward_length", u32(s.n_ff_shexp)});
      k.push_back({"tokenizer.ggml.model", GgufValue::String("gpt2")});
      k.push_back({"tokenizer.ggml.pre", GgufValue::String("qwen2")});
      break;
    case SynthArch::kGlm4Moe:
      // The converter writes the head size from GLM's config, which has it.
      k.push_back({a + ".attention.key_length", u32(s.head_dim)});
      k.push_back({a + ".attention.value_length", u32(s.head_dim)});
      k.push_back({a + ".rope.dimension_count", u32(s.n_rot)});
      k.push_back({a + ".expert_feed_forward_length", u32(s.n_ff_exp)});
      k.push_back({a + ".expert_shared_count", u32(s.n_expert_shared)});
      k.push_back({a + ".leading_dense_block_count", u32(s.n_layer_dense_lead)});
      k.push_back({a + ".expert_gating_func", u32(2)});  // sigmoid
      k.push_back({a + ".expert_weights_scale", GgufValue::Float32(s.expert_weights_scale)});
      k.push_back({a + ".expert_weights_norm", GgufValue::Bool(s.expert_weights_norm)});
      k.push_back({a + ".nextn_predict_layers", u32(s.n_nextn_layer)});
      k.push_back({"tokenizer.ggml.model", GgufValue::String("gpt2")});
      k.push_back({"tokenizer.ggml.pre", GgufValue::String("qwen2")});
      break;
    case SynthArch::kErnie45Moe:
      // The converter's: the MoE keys, the shared expert's count (of whole
      // experts) and width (when there is one), and Mixtral's SentencePiece
      // keys; no rope.dimension_count.
      k.push_back({a + ".interleave_moe_layer_step", u32(s.moe_layer_step)});
      k.push_back({a + ".leading_dense_block_count", u32(s.n_layer_dense_lead)});
      k.push_back({a + ".expert_feed_forward_length", u32(s.n_ff_exp)});
      if (s.n_ff_shexp % s.n_ff_exp == 0) {
        k.push_back({a + ".expert_shared_count", u32(s.n_ff_shexp / s.n_ff_exp)});
      }
      if (s.n_ff_shexp > 0) {
        k.push_back({a + ".expert_shared_feed_forward_length", u32(s.n_ff_shexp)});
      }
      k.push_back({"tokenizer.ggml.model", GgufValue::String("llama")});
      k.push_back({"tokenizer.ggml.pre", GgufValue::String("default")});
      k.push_back({"tokenizer.ggml.bos_token_id", u32(1)});
      k.push_back({"tokenizer.ggml.eos_token_id", u32(2)});
      k.push_back({"tokenizer.ggml.unknown_token_id", u32(0)});
      k.push_back({"tokenizer.ggml.add_eos_token", GgufValue::Bool(false)});
      break;
    case SynthArch::kGptOss:
      // The converter's (GptOssModel): the head size always (heads are not
      // embd / heads wide), the window, the experts' width, and YaRN with
      // the betas of the HF config.
      k.push_back({a + ".attention.key_length", u32(s.head_dim)});
      k.push_back({a + ".attention.value_length", u32(s.head_dim)});
      k.push_back({a + ".attention.sliding_window", u32(s.sliding_window)});
      k.push_back({a + ".expert_feed_forward_length", u32(s.n_ff_exp)});
      k.push_back({a + ".rope.scaling.type", GgufValue::String(s.rope_scaling_type)});
      k.push_back({a + ".rope.scaling.factor", GgufValue::Float32(s.rope_scaling_factor)});
      k.push_back({a + ".rope.scaling.original_context_length", u32(s.rope_scaling_original_ctx)});
      k.push_back({a + ".rope.scaling.yarn_beta_fast", GgufValue::Float32(32.0f)});
      k.push_back({a + ".rope.scaling.yarn_beta_slow", GgufValue::Float32(1.0f)});
      k.push_back({"tokenizer.ggml.model", GgufValue::String("gpt2")});
      k.push_back({"tokenizer.ggml.pre", GgufValue::String("gpt-4o")});
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
  if (!head_dim_implied && !IsSynthDeltaNetHybrid(s.arch) && s.arch != SynthArch::kGlm4Moe &&
      s.arch != SynthArch::kGptOss) {
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

}  // namespace

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
    EXPECT_TRUE(expected_names.count(kv.key) || OtherKeys().count(kv.key))
        << "unexpected key " << kv.key;
  }
  EXPECT_EQ(md.Has("tokenizer.ggml.bos_token_id"),
            s.arch == SynthArch::kLlama || s.arch == SynthArch::kQwen3Next ||
                s.arch == SynthArch::kQwen2Moe || s.arch == SynthArch::kGlm4Moe ||
                s.arch == SynthArch::kErnie45Moe || s.arch == SynthArch::kGptOss)
      << "olmoe and qwen35moe files have no bos key";

  const absl::StatusOr<std::vector<std::string>> tokens =
      md.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(static_cast<int64_t>(tokens->size()), s.n_vocab);
  const absl::StatusOr<const GgufArray*> types = md.GetArray("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ((*types)->element_type, GgufValueType::kInt32);
  EXPECT_EQ((*types)->size(), tokens->size());
  // gpt-oss's harmony template is not written.
  EXPECT_EQ(md.GetString("tokenizer.chat_template").ok(), s.arch != SynthArch::kGptOss);

  switch (s.arch) {
    case SynthArch::kQwen3Moe:
    case SynthArch::kQwen3VlMoe:
      break;
    case SynthArch::kOlmoe:
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.eos_token_id", 0)], "<|endoftext|>");
      EXPECT_EQ(md.GetUintOr("tokenizer.ggml.padding_token_id", 0), 1u);
      EXPECT_EQ((*tokens)[1], "<|padding|>");
      EXPECT_TRUE(md.Has("tokenizer.ggml.merges"));
      EXPECT_FALSE(md.Has("tokenizer.ggml.scores"));
      break;
    case SynthArch::kLlama:
    case SynthArch::kErnie45Moe: {
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
    case SynthArch::kQwen2Moe:
    case SynthArch::kGlm4Moe:
      // The Qwen3 vocabulary, as qwen3moe's: bos = pad = <|endoftext|>.
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.eos_token_id", 0)], "<|im_end|>");
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.padding_token_id", 0)], "<|endoftext|>");
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.bos_token_id", 0)], "<|endoftext|>");
      EXPECT_TRUE(md.Has("tokenizer.ggml.merges"));
      EXPECT_THAT(md.GetStringOr("tokenizer.chat_template", ""), HasSubstr("<|im_start|>"));
      break;
    case SynthArch::kGptOss:
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.eos_token_id", 0)], "<|return|>");
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.padding_token_id", 0)], "<|endoftext|>");
      EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.bos_token_id", 0)], "<|startoftext|>");
      EXPECT_TRUE(md.Has("tokenizer.ggml.merges"));
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
    for (size_t d = 0; d < e.ne.size(); ++d)
      EXPECT_EQ(info.ne[d], e.ne[d]) << e.name << " dim " << d;
    EXPECT_EQ(info.type, type) << e.name << " is " << TensorTypeName(info.type) << ", expected "
                               << TensorTypeName(type);
  }
}

}  // namespace moetier::synth_arch_expected
