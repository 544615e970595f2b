// Tests of the architectures beyond qwen3moe (olmoe, llama with experts,
// qwen35moe, qwen3next, qwen2moe, glm4moe, ernie4_5-moe): presets, the tensor tables and type rules
// restated here independently of the tool, the metadata real files carry, files read back with the
// project's GGUF reader, deterministic bytes, the weight distributions through every encoding, the
// tokenizers, the command line, and (where node is set up) the independent GGUF parser.
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
#include "synth_arch_expected.h"
#include "synth_test_util.h"

namespace moetier {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace synth_test;  // NOLINT: the helpers of this directory's tests
using namespace synth_arch_expected;  // NOLINT: the restated expectations

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

  // Qwen2-57B-A14B; every qwen2moe preset has llama.cpp's square attn_q.
  const SynthShape q2 = *SynthPreset(SynthArch::kQwen2Moe, "full");
  EXPECT_EQ(std::make_tuple(q2.n_layer, q2.n_embd, q2.n_head, q2.n_head_kv, q2.head_dim),
            std::make_tuple(28, 3584, 28, 4, 128));
  EXPECT_EQ(std::make_tuple(q2.n_expert, q2.n_expert_used, q2.n_ff_exp, q2.n_ff_shexp),
            std::make_tuple(64, 8, 2560, 20480));
  EXPECT_EQ(std::make_tuple(q2.n_vocab, q2.n_ctx), std::make_tuple(151936, 32768));
  EXPECT_FLOAT_EQ(q2.rope_base, 1e6f);
  for (const char* name : {"tiny", "small", "full"}) {
    const SynthShape p = *SynthPreset(SynthArch::kQwen2Moe, name);
    EXPECT_EQ(p.n_head * p.head_dim, p.n_embd) << name;
  }

  // GLM-4.5-Air: 46 layers that run and one nextn block, rope over half of
  // each head; every glm4moe preset has one leading dense layer, one shared
  // expert, renormalized routing weights and a nextn block.
  const SynthShape g = *SynthPreset(SynthArch::kGlm4Moe, "full");
  EXPECT_EQ(std::make_tuple(g.n_layer, g.n_nextn_layer, g.n_embd, g.n_head, g.n_head_kv, g.head_dim,
                            g.n_rot),
            std::make_tuple(46, 1, 4096, 96, 8, 128, 64));
  EXPECT_EQ(std::make_tuple(g.n_ff, g.n_expert, g.n_expert_used, g.n_ff_exp, g.n_expert_shared),
            std::make_tuple(10944, 128, 8, 1408, 1));
  EXPECT_EQ(std::make_tuple(g.n_vocab, g.n_ctx), std::make_tuple(151552, 131072));
  EXPECT_FLOAT_EQ(g.rope_base, 1e6f);
  EXPECT_FLOAT_EQ(g.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(g.expert_weights_scale, 1.0f);
  EXPECT_FALSE(g.qk_norm);
  EXPECT_FALSE(g.tied_output);
  for (const char* name : {"tiny", "small", "full"}) {
    const SynthShape p = *SynthPreset(SynthArch::kGlm4Moe, name);
    EXPECT_EQ(std::make_tuple(p.n_layer_dense_lead, p.n_expert_shared, p.n_nextn_layer),
              std::make_tuple(1, 1, 1))
        << name;
    EXPECT_TRUE(p.expert_weights_norm) << name;
    EXPECT_EQ(p.n_rot * 2, p.head_dim) << name;
  }

  // ERNIE-4.5-21B-A3B: one dense layer, then experts in every layer, two
  // shared experts' width, a tied output and no attention biases; every
  // ernie4_5-moe preset has the dense first layer, step 1 and the selection
  // bias.
  const SynthShape e = *SynthPreset(SynthArch::kErnie45Moe, "full");
  EXPECT_EQ(std::make_tuple(e.n_layer, e.n_embd, e.n_head, e.n_head_kv, e.head_dim, e.n_ff),
            std::make_tuple(28, 2560, 20, 4, 128, 12288));
  EXPECT_EQ(std::make_tuple(e.n_expert, e.n_expert_used, e.n_ff_exp, e.n_ff_shexp),
            std::make_tuple(64, 6, 1536, 3072));
  EXPECT_EQ(std::make_tuple(e.n_vocab, e.n_ctx), std::make_tuple(103424, 131072));
  EXPECT_FLOAT_EQ(e.rope_base, 5e5f);
  EXPECT_FLOAT_EQ(e.rms_eps, 1e-5f);
  EXPECT_TRUE(e.tied_output);
  EXPECT_FALSE(e.qkv_bias);
  for (const char* name : {"tiny", "small", "full"}) {
    const SynthShape p = *SynthPreset(SynthArch::kErnie45Moe, name);
    EXPECT_EQ(std::make_tuple(p.n_layer_dense_lead, p.moe_layer_step), std::make_tuple(1, 1))
        << name;
    EXPECT_TRUE(p.selection_bias) << name;
    EXPECT_EQ(p.n_ff_shexp, 2 * p.n_ff_exp) << name;
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

  // The glm4moe vectors: routing scales neither 0 nor 1, q/k norm only in
  // the small one.
  const SynthShape gt = *SynthPreset(SynthArch::kGlm4Moe, "tiny");
  EXPECT_EQ(
      std::make_tuple(gt.n_layer, gt.n_embd, gt.n_ff, gt.n_expert, gt.n_expert_used, gt.n_ff_exp,
                      gt.n_head, gt.n_head_kv, gt.head_dim, gt.n_rot, gt.n_vocab),
      std::make_tuple(3, 128, 384, 8, 2, 128, 4, 2, 32, 16, 512));
  EXPECT_FLOAT_EQ(gt.expert_weights_scale, 1.8f);
  EXPECT_FALSE(gt.qk_norm);
  const SynthShape gs = *SynthPreset(SynthArch::kGlm4Moe, "small");
  EXPECT_EQ(
      std::make_tuple(gs.n_layer, gs.n_embd, gs.n_ff, gs.n_expert, gs.n_expert_used, gs.n_ff_exp,
                      gs.n_head, gs.n_head_kv, gs.head_dim, gs.n_rot, gs.n_vocab),
      std::make_tuple(4, 256, 512, 16, 4, 256, 4, 2, 64, 32, 4096));
  EXPECT_FLOAT_EQ(gs.expert_weights_scale, 2.5f);
  EXPECT_TRUE(gs.qk_norm);

  // The ernie4_5-moe vectors: every optional tensor in the tiny one; the
  // small one, like ERNIE-4.5-21B-A3B, without biases and tied.
  const SynthShape et = *SynthPreset(SynthArch::kErnie45Moe, "tiny");
  EXPECT_EQ(
      std::make_tuple(et.n_layer, et.n_embd, et.n_ff, et.n_expert, et.n_expert_used, et.n_ff_exp,
                      et.n_ff_shexp, et.n_head, et.n_head_kv, et.head_dim, et.n_vocab),
      std::make_tuple(4, 128, 256, 8, 2, 128, 256, 4, 2, 32, 512));
  EXPECT_TRUE(et.qkv_bias);
  EXPECT_FALSE(et.tied_output);
  const SynthShape es = *SynthPreset(SynthArch::kErnie45Moe, "small");
  EXPECT_EQ(
      std::make_tuple(es.n_layer, es.n_embd, es.n_ff, es.n_expert, es.n_expert_used, es.n_ff_exp,
                      es.n_ff_shexp, es.n_head, es.n_head_kv, es.head_dim, es.n_vocab),
      std::make_tuple(4, 256, 512, 16, 4, 256, 512, 4, 2, 64, 4096));
  EXPECT_FALSE(es.qkv_bias);
  EXPECT_TRUE(es.tied_output);
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
  s = *SynthPreset(SynthArch::kQwen2Moe, "tiny");
  s.head_dim = 16;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--head-dim"));
  s = *SynthPreset(SynthArch::kGlm4Moe, "tiny");
  s.n_layer_dense_lead = s.n_layer + 1;  // a nextn block would be dense
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--leading-dense-layers"));
  s = *SynthPreset(SynthArch::kGlm4Moe, "tiny");
  s.n_rot = 15;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--rope-dims"));
  s.n_rot = s.head_dim + 2;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--rope-dims"));
  s = *SynthPreset(SynthArch::kGlm4Moe, "tiny");
  s.expert_weights_scale = -1.0f;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--expert-weights-scale"));
  s.expert_weights_scale = std::nanf("");
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--expert-weights-scale"));
  s = *SynthPreset(SynthArch::kGlm4Moe, "tiny");
  s.n_nextn_layer = 9;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--nextn-layers"));
  s = *SynthPreset(SynthArch::kGlm4Moe, "tiny");
  s.n_ff = 0;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--dense-ffn"));
  s = *SynthPreset(SynthArch::kGlm4Moe, "tiny");
  s.n_expert_shared = -1;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--shared-experts"));
  s = *SynthPreset(SynthArch::kErnie45Moe, "tiny");
  s.moe_layer_step = 0;  // llama.cpp asserts a step above 0
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--moe-layer-step"));
  s = *SynthPreset(SynthArch::kErnie45Moe, "tiny");
  s.n_layer_dense_lead = s.n_layer + 1;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--leading-dense-layers"));
  s = *SynthPreset(SynthArch::kErnie45Moe, "tiny");
  s.n_ff = 0;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--dense-ffn"));
  s = *SynthPreset(SynthArch::kErnie45Moe, "tiny");
  s.n_ff_shexp = -1;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--shared-ffn"));
  s.n_ff_shexp = 0;  // no shared expert
  EXPECT_TRUE(ValidateSynthShape(s).ok());
  s.n_vocab = kSpmFixedTokens;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--vocab"));

  for (const SynthArch arch : kAllSynthArchs) {
    const std::vector<SynthQuant> supported = QuantsOf(arch);
    for (const SynthQuant quant : {SynthQuant::kF32, SynthQuant::kQ8_0, SynthQuant::kQ4_K_M,
                                   SynthQuant::kQ8_0F32, SynthQuant::kMxfp4}) {
      EXPECT_EQ(ValidateSynthQuant(arch, quant).ok(),
                std::find(supported.begin(), supported.end(), quant) != supported.end())
          << ArchName(arch) << " " << QuantName(quant);
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
        Case{SynthArch::kQwen35Moe, 34.0e9, 35.5e9}, Case{SynthArch::kQwen3Next, 79.0e9, 81.0e9},
        Case{SynthArch::kQwen2Moe, 57.0e9, 57.8e9},
        // GLM-4.5-Air: 106B in the layers that run, 110B with the nextn block.
        Case{SynthArch::kGlm4Moe, 109.0e9, 110.0e9},
        // ERNIE-4.5-21B-A3B: 21.8B, the tied embedding counted once.
        Case{SynthArch::kErnie45Moe, 21.7e9, 21.9e9}}) {
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

INSTANTIATE_TEST_SUITE_P(AllArchsPresetsAndMixes, SynthArchPresetFilesTest,
                         ::testing::ValuesIn(AllFileParams()), [](const auto& param_info) {
                           // Test names are identifiers: ernie4_5-moe, q8_0-f32.
                           std::string name =
                               absl::StrCat(ArchName(std::get<0>(param_info.param)), "_",
                                            std::get<1>(param_info.param), "_",
                                            QuantName(std::get<2>(param_info.param)));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
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

// Qwen3-VL's language model: qwen3moe's tensors, byte for byte for the same
// seed, and qwen3moe's keys under its own prefix plus the rope sections and
// n_deepstack_layers.
TEST_F(SynthArchFilesTest, Qwen3VlMoeIsQwen3MoeWithRopeSections) {
  for (const SynthQuant quant : {SynthQuant::kF32, SynthQuant::kQ4_K_M}) {
    const std::string q = QuantName(quant);
    const SynthOptions vl = Options(SynthArch::kQwen3VlMoe, "tiny", quant, 9,
                                    Path(absl::StrCat("qwen3vlmoe_", q, ".gguf")));
    const SynthOptions text = Options(SynthArch::kQwen3Moe, "tiny", quant, 9,
                                      Path(absl::StrCat("qwen3moe_for_vl_", q, ".gguf")));
    WriteOrDie(vl);
    WriteOrDie(text);
    std::unique_ptr<GgufModel> a = OpenOrDie(vl.out_path);
    std::unique_ptr<GgufModel> b = OpenOrDie(text.out_path);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(a->tensors().size(), b->tensors().size());
    for (size_t i = 0; i < a->tensors().size(); ++i) {
      const GgufTensorInfo& x = a->tensors()[i];
      const GgufTensorInfo& y = b->tensors()[i];
      EXPECT_EQ(x.name, y.name);
      EXPECT_EQ(x.type, y.type) << x.name;
      const std::span<const uint8_t> bx = a->TensorData(x);
      const std::span<const uint8_t> by = b->TensorData(y);
      EXPECT_TRUE(std::equal(bx.begin(), bx.end(), by.begin(), by.end())) << x.name;
    }
    const GgufMetadata& m = a->metadata();
    for (const GgufKeyValue& kv : b->metadata().entries()) {
      std::string key = kv.key;
      if (absl::StartsWith(key, "qwen3moe.")) key = "qwen3vl" + key.substr(5);
      if (key == "general.architecture" || key == "general.name") {
        EXPECT_THAT(m.GetStringOr(key, ""), HasSubstr("qwen3vlmoe")) << key;
        continue;
      }
      const GgufValue* value = m.Find(key);
      ASSERT_NE(value, nullptr) << key;
      EXPECT_TRUE(*value == kv.value) << key;
    }
    EXPECT_EQ(m.entries().size(), b->metadata().entries().size() + 2);
    // Qwen3-VL-30B-A3B's proportions: 3/8, 5/16, 5/16 of the 16 pairs.
    EXPECT_EQ(m.GetIntArray("qwen3vlmoe.rope.dimension_sections").value(),
              (std::vector<int64_t>{6, 5, 5, 0}));
    EXPECT_EQ(m.GetUintOr("qwen3vlmoe.n_deepstack_layers", 0), 2u);  // capped at the 2 layers
  }
  const SynthShape full = *SynthPreset(SynthArch::kQwen3VlMoe, "full");
  EXPECT_EQ(full.rope_sections, (std::array<int32_t, 4>{24, 20, 20, 0}));
  EXPECT_FLOAT_EQ(full.rope_base, 5e6f);
  EXPECT_EQ(full.n_ctx, 262144);
}

TEST_F(SynthArchFilesTest, SameOptionsSameBytesRegardlessOfThreadsAndChunks) {
  for (const SynthArch arch : kNewArchs) {
    const std::string a = ArchName(arch);
    const SynthQuant quant = LowBitQuantOf(arch);
    SynthOptions one = Options(arch, "tiny", quant, 7, Path(a + "_det1.gguf"));
    one.threads = 1;
    SynthOptions three = Options(arch, "tiny", quant, 7, Path(a + "_det3.gguf"));
    three.threads = 3;
    three.chunk_elems = 1000;
    SynthOptions other_seed = Options(arch, "tiny", quant, 8, Path(a + "_det_seed.gguf"));
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
        if (info->type == TensorType::kMXFP4) bound = 0.25;  // a power-of-two scale per 32
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
                           "qwen2moe",
                           "Qwen2-57B-A14B",
                           "qwen3vlmoe",
                           "Qwen3-VL-30B-A3B",
                           "glm4moe",
                           "GLM-4.5-Air",
                           "--dense-ffn",
                           "--leading-dense-layers",
                           "--shared-experts",
                           "--expert-weights-scale",
                           "--no-expert-weights-norm",
                           "--qk-norm",
                           "--no-qk-norm",
                           "--nextn-layers",
                           "ernie4_5-moe",
                           "ERNIE-4.5-21B-A3B",
                           "--moe-layer-step",
                           "--qkv-bias",
                           "--no-qkv-bias",
                           "--selection-bias",
                           "--no-selection-bias",
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
  for (const char* args : {"--arch mixtral --out x.gguf",
                           "--arch llama --shared-ffn 64 --out x.gguf",
                           "--arch olmoe --ssm-state-size 8 --out x.gguf",
                           "--arch llama --quant q8_0-f32 --out x.gguf",
                           "--arch qwen35moe --rope-sections 1,2 --out x.gguf",
                           "--arch qwen35moe --rope-dims 10 --out x.gguf",
                           "--arch olmoe --tied-output --out x.gguf",
                           "--arch qwen3next --rope-sections 2,1,1,0 --out x.gguf",
                           "--arch qwen35moe --legacy-ssm-in --out x.gguf",
                           "--arch llama --ssm-group-count 2 --out x.gguf",
                           "--arch qwen2moe --ssm-state-size 8 --out x.gguf",
                           "--arch qwen2moe --tied-output --out x.gguf",
                           "--arch qwen3moe --shared-ffn 64 --out x.gguf",
                           "--arch qwen3moe --rope-sections 6,5,5,0 --out x.gguf",
                           "--arch qwen3vlmoe --rope-sections 0,0,0,0 --out x.gguf",
                           "--arch qwen3vlmoe --rope-sections 11,11,11,0 --out x.gguf",
                           "--arch qwen3moe --nextn-layers 1 --out x.gguf",
                           "--arch qwen2moe --qk-norm --out x.gguf",
                           "--arch qwen3moe --rope-dims 16 --out x.gguf",
                           "--arch olmoe --expert-weights-scale 2 --out x.gguf",
                           "--arch glm4moe --shared-ffn 64 --out x.gguf",
                           "--arch glm4moe --rope-sections 4,2,2,0 --out x.gguf",
                           "--arch glm4moe --leading-dense-layers 4 --out x.gguf",
                           "--arch glm4moe --rope-dims 64 --out x.gguf",
                           "--arch glm4moe --nextn-layers 9 --out x.gguf",
                           "--arch glm4moe --moe-layer-step 2 --out x.gguf",
                           "--arch qwen2moe --no-selection-bias --out x.gguf",
                           "--arch llama --qkv-bias --out x.gguf",
                           "--arch ernie4_5-moe --shared-experts 2 --out x.gguf",
                           "--arch ernie4_5-moe --rope-dims 16 --out x.gguf",
                           "--arch ernie4_5-moe --nextn-layers 1 --out x.gguf",
                           "--arch ernie4_5-moe --expert-weights-scale 2 --out x.gguf",
                           "--arch ernie4_5-moe --moe-layer-step 0 --out x.gguf",
                           "--arch ernie4_5-moe --leading-dense-layers 5 --out x.gguf",
                           "--arch ernie4_5-moe --vocab 259 --out x.gguf"}) {
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
  // Per layer: attn_norm, q/k/v/output, three biases, ffn_norm, router,
  // three expert tensors and the shared expert's four.
  const RunResult qwen2 = RunTool("--arch qwen2moe --preset full --quant q4_k_m --dry-run");
  EXPECT_EQ(qwen2.exit_code, 0) << qwen2.output;
  EXPECT_THAT(qwen2.output, HasSubstr("tensors: 479"));
  EXPECT_THAT(qwen2.output, HasSubstr("experts 64 (top 8)"));
  // GLM-4.5-Air: output and the vocabulary ends (3); per block attn_norm,
  // q/k/v/output, three biases and post_attention_norm (9), then a dense
  // FFN (3) in layer 0, router, selection bias, three expert tensors and
  // three shared in the 45 others (8), and in the nextn block the MoE
  // tensors and its own four: 3 + 12 + 45 x 17 + 21.
  const RunResult glm = RunTool("--arch glm4moe --preset full --quant q4_k_m --dry-run");
  EXPECT_EQ(glm.exit_code, 0) << glm.output;
  EXPECT_THAT(glm.output, HasSubstr("tensors: 801"));
  EXPECT_THAT(glm.output, HasSubstr("layers 46,"));
  EXPECT_THAT(glm.output, HasSubstr("nextn layers 1, leading dense 1 (ffn 10944)"));
  // ERNIE-4.5-21B-A3B: token_embd (tied) and output_norm (2); per layer
  // attn_norm, q/k/v/output and ffn_norm (6), then a dense FFN (3) in
  // layer 0, router, three expert tensors, selection bias and three shared
  // in the 27 others (8): 2 + 9 + 27 x 14.
  const RunResult ernie = RunTool("--arch ernie4_5-moe --preset full --quant q4_k_m --dry-run");
  EXPECT_EQ(ernie.exit_code, 0) << ernie.output;
  EXPECT_THAT(ernie.output, HasSubstr("tensors: 389"));
  EXPECT_THAT(ernie.output, HasSubstr("experts run in 27 of 28 layers"));
  EXPECT_THAT(ernie.output, HasSubstr("tied output"));
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

// --layers counts the glm4moe layers that run; the nextn blocks come after
// them, and every glm4moe flag reaches the file.
TEST(SynthArchCommandLineTest, WritesGlm4MoeWithShapeFlags) {
  const fs::path dir = MakeTempDir("arch_cli_glm");
  const fs::path out = dir / "g.gguf";
  const RunResult r = RunTool(absl::StrCat(
      "--arch glm4moe --preset tiny --quant q4_k_m --layers 4 --leading-dense-layers 2 "
      "--dense-ffn 96 --shared-experts 2 --expert-weights-scale 0.5 --no-expert-weights-norm "
      "--qk-norm --nextn-layers 2 --rope-dims 8 --tied-output --quiet --out ",
      out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::unique_ptr<GgufModel> model = OpenOrDie(out.string());
  ASSERT_NE(model, nullptr);
  SynthShape s = *SynthPreset(SynthArch::kGlm4Moe, "tiny");
  s.n_layer = 4;
  s.n_layer_dense_lead = 2;
  s.n_ff = 96;
  s.n_expert_shared = 2;
  s.expert_weights_scale = 0.5f;
  s.expert_weights_norm = false;
  s.qk_norm = true;
  s.n_nextn_layer = 2;
  s.n_rot = 8;
  s.tied_output = true;
  CheckMetadata(model->metadata(), s, SynthQuant::kQ4_K_M);
  CheckTensors(*model, s, SynthQuant::kQ4_K_M);
  EXPECT_EQ(model->metadata().GetUintOr("glm4moe.block_count", 0), 6u);
  EXPECT_NE(model->FindTensor("blk.1.ffn_down.weight"), nullptr);
  EXPECT_NE(model->FindTensor("blk.2.exp_probs_b.bias"), nullptr);
  EXPECT_NE(model->FindTensor("blk.5.nextn.eh_proj.weight"), nullptr);
  EXPECT_EQ(model->FindTensor("blk.3.nextn.eh_proj.weight"), nullptr);
  EXPECT_EQ(model->FindTensor("blk.2.ffn_gate_inp_shexp.weight"), nullptr);
  EXPECT_EQ(model->FindTensor("output.weight"), nullptr);

  // Without shared experts, no shexp tensors at all.
  const fs::path plain = dir / "plain.gguf";
  ASSERT_EQ(
      RunTool(absl::StrCat("--arch glm4moe --shared-experts 0 --nextn-layers 0 --quiet --out ",
                           plain.string()))
          .exit_code,
      0);
  std::unique_ptr<GgufModel> p = OpenOrDie(plain.string());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->FindTensor("blk.1.ffn_gate_shexp.weight"), nullptr);
  EXPECT_EQ(p->FindTensor("blk.3.attn_norm.weight"), nullptr);
  EXPECT_EQ(p->metadata().GetUintOr("glm4moe.block_count", 0), 3u);
  fs::remove_all(dir);
}

// Every ernie4_5-moe flag reaches the file. With a step of 2 the layers past
// the dense ones all carry expert tensors (llama.cpp's loader wants them
// there) and none a dense FFN; no shared expert means neither its tensors
// nor its width key.
TEST(SynthArchCommandLineTest, WritesErnie45MoeWithShapeFlags) {
  const fs::path dir = MakeTempDir("arch_cli_ernie");
  const fs::path out = dir / "e.gguf";
  const RunResult r = RunTool(absl::StrCat(
      "--arch ernie4_5-moe --preset tiny --quant q4_k_m --layers 5 --leading-dense-layers 2 "
      "--moe-layer-step 2 --dense-ffn 96 --shared-ffn 0 --no-qkv-bias --no-selection-bias "
      "--tied-output --quiet --out ",
      out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::unique_ptr<GgufModel> model = OpenOrDie(out.string());
  ASSERT_NE(model, nullptr);
  SynthShape s = *SynthPreset(SynthArch::kErnie45Moe, "tiny");
  s.n_layer = 5;
  s.n_layer_dense_lead = 2;
  s.moe_layer_step = 2;
  s.n_ff = 96;
  s.n_ff_shexp = 0;
  s.qkv_bias = false;
  s.selection_bias = false;
  s.tied_output = true;
  CheckMetadata(model->metadata(), s, SynthQuant::kQ4_K_M);
  CheckTensors(*model, s, SynthQuant::kQ4_K_M);
  const GgufMetadata& md = model->metadata();
  EXPECT_EQ(md.GetUintOr("ernie4_5-moe.interleave_moe_layer_step", 0), 2u);
  EXPECT_EQ(md.GetUintOr("ernie4_5-moe.expert_shared_count", 9), 0u);
  EXPECT_FALSE(md.Has("ernie4_5-moe.expert_shared_feed_forward_length"));
  EXPECT_FALSE(md.Has("ernie4_5-moe.rope.dimension_count"));
  EXPECT_NE(model->FindTensor("blk.1.ffn_down.weight"), nullptr);
  EXPECT_NE(model->FindTensor("blk.2.ffn_gate_inp.weight"), nullptr);  // (2 + 1) % 2 != 0
  EXPECT_EQ(model->FindTensor("blk.2.ffn_gate.weight"), nullptr);
  EXPECT_EQ(model->FindTensor("blk.3.exp_probs_b.bias"), nullptr);
  EXPECT_EQ(model->FindTensor("blk.3.ffn_gate_shexp.weight"), nullptr);
  EXPECT_EQ(model->FindTensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(model->FindTensor("output.weight"), nullptr);

  // A shared width that is no whole number of experts has no count key;
  // heads x head dim short of embd brings the head size keys.
  const fs::path odd = dir / "odd.gguf";
  ASSERT_EQ(
      RunTool(absl::StrCat("--arch ernie4_5-moe --shared-ffn 200 --head-dim 16 --quiet --out ",
                           odd.string()))
          .exit_code,
      0);
  std::unique_ptr<GgufModel> o = OpenOrDie(odd.string());
  ASSERT_NE(o, nullptr);
  s = *SynthPreset(SynthArch::kErnie45Moe, "tiny");
  s.n_ff_shexp = 200;
  s.head_dim = 16;
  CheckMetadata(o->metadata(), s, SynthQuant::kF32);
  CheckTensors(*o, s, SynthQuant::kF32);
  EXPECT_FALSE(o->metadata().Has("ernie4_5-moe.expert_shared_count"));
  EXPECT_EQ(o->metadata().GetUintOr("ernie4_5-moe.expert_shared_feed_forward_length", 0), 200u);
  EXPECT_EQ(o->metadata().GetUintOr("ernie4_5-moe.attention.key_length", 0), 16u);
  EXPECT_NE(o->FindTensor("blk.1.attn_q.bias"), nullptr);
  EXPECT_NE(o->FindTensor("blk.1.exp_probs_b.bias"), nullptr);
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
  for (const SynthArch arch : kNewArchs) cases.emplace_back(arch, LowBitQuantOf(arch));
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
