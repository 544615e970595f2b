// Tests of the synthetic model tool: presets, quant mix rule,
// files read back with the project's GGUF reader, determinism, splits, a
// single-token forward pass through a deep model, and the command line.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gguf/gguf_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "synth/synth_model.h"
#include "synth/synth_random.h"
#include "synth/synth_writer.h"
#include "gguf/tensor/quant_codec.h"
#include "gguf/tensor/tensor_type.h"
#include "synth_test_util.h"

namespace moetier {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace synth_test;  // NOLINT: the helpers of this directory's tests

// The quant mix rule, restated independently of the tool's code.
TensorType ExpectedType(SynthQuant quant, const std::string& name, int64_t layer, int64_t n_layer,
                        int64_t ne0, bool tied) {
  const bool unquantized = absl::StrContains(name, "_norm") || absl::StrContains(name, "ffn_gate_inp");
  if (unquantized || quant == SynthQuant::kF32) return TensorType::kF32;
  TensorType t = TensorType::kQ8_0;
  if (quant == SynthQuant::kQ4_K_M) {
    const bool more_bits =
        layer >= 0 && (layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2);
    if (name == "output.weight" || absl::StrContains(name, "attn_v") ||
        (name == "token_embd.weight" && tied) ||
        (absl::StrContains(name, "ffn_down_exps") && more_bits)) {
      t = TensorType::kQ6_K;
    } else {
      t = TensorType::kQ4_K;
    }
  }
  if (t == TensorType::kQ4_K && ne0 % 256 != 0) t = TensorType::kQ4_0;
  if (t == TensorType::kQ6_K && ne0 % 256 != 0) t = TensorType::kQ8_0;
  if (ne0 % 32 != 0) t = TensorType::kF16;
  return t;
}

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
    t.push_back({b + "attn_norm.weight", {s.n_embd}, l});
    t.push_back({b + "attn_q.weight", {s.n_embd, q}, l});
    t.push_back({b + "attn_k.weight", {s.n_embd, kv}, l});
    t.push_back({b + "attn_v.weight", {s.n_embd, kv}, l});
    t.push_back({b + "attn_output.weight", {q, s.n_embd}, l});
    t.push_back({b + "attn_q_norm.weight", {s.head_dim}, l});
    t.push_back({b + "attn_k_norm.weight", {s.head_dim}, l});
    t.push_back({b + "ffn_norm.weight", {s.n_embd}, l});
    t.push_back({b + "ffn_gate_inp.weight", {s.n_embd, s.n_expert}, l});
    t.push_back({b + "ffn_gate_exps.weight", {s.n_embd, s.n_ff_exp, s.n_expert}, l});
    t.push_back({b + "ffn_up_exps.weight", {s.n_embd, s.n_ff_exp, s.n_expert}, l});
    t.push_back({b + "ffn_down_exps.weight", {s.n_ff_exp, s.n_embd, s.n_expert}, l});
  }
  return t;
}

void ExpectKey(const GgufMetadata& md, std::string_view key, GgufValueType type) {
  const GgufValue* v = md.Find(key);
  ASSERT_NE(v, nullptr) << "missing key " << key;
  EXPECT_EQ(v->type, type) << key;
}

void ExpectUintKey(const GgufMetadata& md, std::string_view key, uint64_t value) {
  ExpectKey(md, key, GgufValueType::kUint32);
  EXPECT_EQ(md.GetUintOr(key, ~uint64_t{0}), value) << key;
}

// Everything a reader needs, checked against the shape and mix that made it.
void CheckModel(const GgufModel& model, const SynthShape& s, SynthQuant quant) {
  const GgufMetadata& md = model.metadata();
  ExpectKey(md, "general.architecture", GgufValueType::kString);
  EXPECT_EQ(md.GetStringOr("general.architecture", ""), "qwen3moe");
  ExpectKey(md, "general.name", GgufValueType::kString);
  ExpectUintKey(md, "general.file_type", quant == SynthQuant::kF32    ? 0
                                         : quant == SynthQuant::kQ8_0 ? 7
                                                                      : 15);
  ExpectUintKey(md, "general.quantization_version", 2);
  ExpectUintKey(md, "qwen3moe.block_count", static_cast<uint64_t>(s.n_layer));
  ExpectUintKey(md, "qwen3moe.context_length", static_cast<uint64_t>(s.n_ctx));
  ExpectUintKey(md, "qwen3moe.embedding_length", static_cast<uint64_t>(s.n_embd));
  ExpectUintKey(md, "qwen3moe.feed_forward_length",
                static_cast<uint64_t>(s.n_ff_exp * s.n_expert_used));
  ExpectUintKey(md, "qwen3moe.attention.head_count", static_cast<uint64_t>(s.n_head));
  ExpectUintKey(md, "qwen3moe.attention.head_count_kv", static_cast<uint64_t>(s.n_head_kv));
  ExpectUintKey(md, "qwen3moe.attention.key_length", static_cast<uint64_t>(s.head_dim));
  ExpectUintKey(md, "qwen3moe.attention.value_length", static_cast<uint64_t>(s.head_dim));
  ExpectUintKey(md, "qwen3moe.expert_count", static_cast<uint64_t>(s.n_expert));
  ExpectUintKey(md, "qwen3moe.expert_used_count", static_cast<uint64_t>(s.n_expert_used));
  ExpectUintKey(md, "qwen3moe.expert_feed_forward_length", static_cast<uint64_t>(s.n_ff_exp));
  ExpectKey(md, "qwen3moe.rope.freq_base", GgufValueType::kFloat32);
  EXPECT_FLOAT_EQ(static_cast<float>(md.GetFloatOr("qwen3moe.rope.freq_base", 0)), s.rope_base);
  ExpectKey(md, "qwen3moe.attention.layer_norm_rms_epsilon", GgufValueType::kFloat32);
  EXPECT_FLOAT_EQ(static_cast<float>(md.GetFloatOr("qwen3moe.attention.layer_norm_rms_epsilon", 0)),
                  s.rms_eps);

  ExpectKey(md, "tokenizer.ggml.model", GgufValueType::kString);
  EXPECT_EQ(md.GetStringOr("tokenizer.ggml.model", ""), "gpt2");
  EXPECT_EQ(md.GetStringOr("tokenizer.ggml.pre", ""), "qwen2");
  ExpectKey(md, "tokenizer.ggml.tokens", GgufValueType::kArray);
  ExpectKey(md, "tokenizer.ggml.token_type", GgufValueType::kArray);
  ExpectKey(md, "tokenizer.ggml.merges", GgufValueType::kArray);
  ExpectKey(md, "tokenizer.ggml.add_bos_token", GgufValueType::kBool);
  EXPECT_EQ(md.GetBool("tokenizer.ggml.add_bos_token").value_or(true), false);
  ExpectKey(md, "tokenizer.chat_template", GgufValueType::kString);
  const absl::StatusOr<const GgufArray*> types = md.GetArray("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ((*types)->element_type, GgufValueType::kInt32);
  const absl::StatusOr<std::vector<std::string>> tokens = md.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(static_cast<int64_t>(tokens->size()), s.n_vocab);
  EXPECT_EQ((*types)->size(), tokens->size());
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
                          "tokenizer.ggml.bos_token_id"}) {
    ExpectKey(md, key, GgufValueType::kUint32);
  }
  EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.eos_token_id", 0)], "<|im_end|>");
  EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.bos_token_id", 0)], "<|endoftext|>");
  EXPECT_EQ((*tokens)[md.GetUintOr("tokenizer.ggml.padding_token_id", 0)], "<|endoftext|>");

  const std::vector<ExpectedTensor> expected = ExpectedTensors(s);
  ASSERT_EQ(model.tensors().size(), expected.size());
  for (const ExpectedTensor& e : expected) {
    const GgufTensorInfo* info = model.FindTensor(e.name);
    ASSERT_NE(info, nullptr) << "missing tensor " << e.name;
    ASSERT_EQ(info->n_dims, e.ne.size()) << e.name;
    for (size_t d = 0; d < e.ne.size(); ++d) EXPECT_EQ(info->ne[d], e.ne[d]) << e.name << " dim " << d;
    EXPECT_EQ(info->type, ExpectedType(quant, e.name, e.layer, s.n_layer, e.ne[0], s.tied_output))
        << e.name << " is " << TensorTypeName(info->type);
  }
}

// ---------------------------------------------------------------- presets and rules

TEST(SynthPresetTest, FullIsQwen3_30B_A3B) {
  const SynthShape s = *SynthPreset("full");
  EXPECT_EQ(s.n_layer, 48);
  EXPECT_EQ(s.n_embd, 2048);
  EXPECT_EQ(s.n_expert, 128);
  EXPECT_EQ(s.n_expert_used, 8);
  EXPECT_EQ(s.n_ff_exp, 768);
  EXPECT_EQ(s.n_head, 32);
  EXPECT_EQ(s.n_head_kv, 4);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.n_vocab, 151936);
  EXPECT_EQ(s.n_ctx, 40960);
  EXPECT_FLOAT_EQ(s.rope_base, 1e6f);
  EXPECT_FLOAT_EQ(s.rms_eps, 1e-6f);
  EXPECT_FALSE(s.tied_output);
  const SynthShape tiny = *SynthPreset("tiny");
  EXPECT_EQ(tiny.n_layer, 2);
  EXPECT_EQ(tiny.n_embd, 64);
  EXPECT_EQ(tiny.n_expert, 8);
  EXPECT_EQ(tiny.n_expert_used, 2);
  for (const char* name : {"tiny", "small", "full"}) {
    EXPECT_TRUE(ValidateSynthShape(*SynthPreset(name)).ok()) << name;
  }
  EXPECT_FALSE(SynthPreset("huge").ok());
}

TEST(SynthPresetTest, ValidationNamesTheFlag) {
  SynthShape s = *SynthPreset("tiny");
  s.n_expert_used = 9;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--experts-used"));
  s = *SynthPreset("tiny");
  s.n_head_kv = 3;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--heads"));
  s = *SynthPreset("tiny");
  s.n_vocab = 260;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--vocab"));
  s = *SynthPreset("tiny");
  s.rms_eps = 0.0f;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--rms-eps"));
  s = *SynthPreset("tiny");
  s.rope_scaling_type = "longrope";
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--rope-scaling"));
  s = *SynthPreset("tiny");
  s.rope_scaling_factor = 4.0f;  // without a type
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--rope-scaling"));
  s.rope_scaling_type = "yarn";
  s.rope_scaling_factor = -1.0f;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--rope-scaling-factor"));
}

// The rope.scaling.* keys are written under the architecture's prefix only
// when a type is set, each value as given.
TEST(SynthPresetTest, RopeScalingKeysAreWrittenWhenAsked) {
  for (SynthArch arch : kAllSynthArchs) {
    SynthShape s = *SynthPreset(arch, "tiny");
    // gpt-oss's presets scale by YaRN, as the real models do.
    s.rope_scaling_type.clear();
    s.rope_scaling_factor = 0.0f;
    s.rope_scaling_original_ctx = 0;
    const std::string prefix = std::string(SynthArchName(arch)) + ".rope.scaling.";
    absl::StatusOr<GgufMetadata> plain = MetadataOf(s);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_FALSE(plain->Has(prefix + "type"));
    s.rope_scaling_type = "yarn";
    s.rope_scaling_factor = 4.0f;
    s.rope_scaling_original_ctx = 32768;
    ASSERT_TRUE(ValidateSynthShape(s).ok());
    absl::StatusOr<GgufMetadata> scaled = MetadataOf(s);
    ASSERT_TRUE(scaled.ok()) << scaled.status();
    const GgufMetadata& md = *scaled;
    EXPECT_EQ(*md.GetString(prefix + "type"), "yarn");
    EXPECT_EQ(*md.GetFloat(prefix + "factor"), 4.0);
    EXPECT_EQ(*md.GetUint(prefix + "original_context_length"), 32768u);
  }
}

TEST(SynthQuantMixTest, FullQ4KMFollowsTheRule) {
  const SynthShape s = *SynthPreset("full");
  const std::vector<SynthTensor> tensors = PlanSynthTensors(s, SynthQuant::kQ4_K_M);
  ASSERT_EQ(tensors.size(), 3u + 12u * 48u);
  int down_q6 = 0;
  for (const SynthTensor& t : tensors) {
    EXPECT_EQ(t.type, ExpectedType(SynthQuant::kQ4_K_M, t.name, t.layer, 48, t.ne[0], false)) << t.name;
    if (absl::StrContains(t.name, "ffn_down_exps") && t.type == TensorType::kQ6_K) ++down_q6;
  }
  // Layers 0-5, 42-47 and 8, 11, ..., 41: half of them.
  EXPECT_EQ(down_q6, 24);
  EXPECT_TRUE(SynthUseMoreBits(0, 48));
  EXPECT_TRUE(SynthUseMoreBits(8, 48));
  EXPECT_FALSE(SynthUseMoreBits(6, 48));
  EXPECT_FALSE(SynthUseMoreBits(41 - 1, 48));
  EXPECT_TRUE(SynthUseMoreBits(47, 48));
  // Tied output: token_embd takes the output's type.
  SynthShape tied = s;
  tied.tied_output = true;
  EXPECT_EQ(PlanSynthTensors(tied, SynthQuant::kQ4_K_M)[0].type, TensorType::kQ6_K);
  EXPECT_EQ(PlanSynthTensors(tied, SynthQuant::kQ4_K_M).size(), 2u + 12u * 48u);
}

TEST(SynthQuantMixTest, FallbacksForShortRows) {
  EXPECT_EQ(SynthTensorType(SynthQuant::kQ4_K_M, SynthTensorKind::kAttnQ, 0, 2, 64, false),
            TensorType::kQ4_0);
  EXPECT_EQ(SynthTensorType(SynthQuant::kQ4_K_M, SynthTensorKind::kAttnV, 0, 2, 64, false),
            TensorType::kQ8_0);
  EXPECT_EQ(SynthTensorType(SynthQuant::kQ4_K_M, SynthTensorKind::kAttnQ, 0, 2, 48, false),
            TensorType::kF16);
  EXPECT_EQ(SynthTensorType(SynthQuant::kQ8_0, SynthTensorKind::kFfnUpExps, 0, 2, 48, false),
            TensorType::kF16);
  EXPECT_EQ(SynthTensorType(SynthQuant::kQ8_0, SynthTensorKind::kFfnGateInp, 0, 2, 256, false),
            TensorType::kF32);
  EXPECT_EQ(SynthTensorType(SynthQuant::kQ4_K_M, SynthTensorKind::kFfnDownExps, 1, 2, 256, false),
            TensorType::kQ6_K);
  EXPECT_EQ(SynthTensorType(SynthQuant::kQ4_K_M, SynthTensorKind::kFfnDownExps, 0, 2, 256, false),
            TensorType::kQ4_K);
}

TEST(SynthQuantMixTest, FullSizesArePlausible) {
  // Qwen3-30B-A3B has about 30.5e9 parameters.
  const SynthShape s = *SynthPreset("full");
  uint64_t elements = 0;
  uint64_t q4km_bytes = 0;
  for (const SynthTensor& t : PlanSynthTensors(s, SynthQuant::kQ4_K_M)) {
    elements += static_cast<uint64_t>(t.element_count());
    q4km_bytes += t.size_bytes();
  }
  EXPECT_GT(elements, 30'000'000'000ull);
  EXPECT_LT(elements, 31'000'000'000ull);
  EXPECT_GT(q4km_bytes, 16'000'000'000ull);
  EXPECT_LT(q4km_bytes, 20'000'000'000ull);
}

// ---------------------------------------------------------------- random stream

TEST(SynthRandomTest, NormalHasUnitVarianceAndBoundedTails) {
  const uint64_t key = SynthStreamKey(1, "x");
  std::vector<float> v(200000);
  SynthFill(key, 0, static_cast<int64_t>(v.size()), 0.0f, 1.0f, v.data());
  EXPECT_NEAR(Mean(v), 0.0, 0.01);
  EXPECT_NEAR(StdDev(v), 1.0, 0.01);
  for (float x : v) ASSERT_LE(std::fabs(x), 3.47f);
  // Offsets address the same stream.
  std::vector<float> tail(100);
  SynthFill(key, 1000, 100, 0.0f, 1.0f, tail.data());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), v.begin() + 1000));
  EXPECT_NE(SynthStreamKey(1, "x"), SynthStreamKey(2, "x"));
  EXPECT_NE(SynthStreamKey(1, "x"), SynthStreamKey(1, "y"));
}

// ---------------------------------------------------------------- written files

class SynthFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new fs::path(MakeTempDir("files")); }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path Path(const std::string& name) { return *dir_ / name; }
  static fs::path* dir_;
};
fs::path* SynthFilesTest::dir_ = nullptr;

class SynthPresetFilesTest
    : public SynthFilesTest,
      public ::testing::WithParamInterface<std::tuple<std::string, SynthQuant>> {};

TEST_P(SynthPresetFilesTest, ReadsBackWithEveryKeyAndTensor) {
  const auto& [preset, quant] = GetParam();
  const fs::path path = Path(absl::StrCat(preset, "_", std::string(SynthQuantName(quant)), ".gguf"));
  const SynthOptions options = Options(preset, quant, 42, path);
  const SynthPlan plan = WriteOrDie(options);
  ASSERT_EQ(plan.shards.size(), 1u);
  EXPECT_EQ(fs::file_size(path), plan.total_file_bytes);

  std::unique_ptr<GgufModel> model = OpenOrDie(path.string());
  ASSERT_NE(model, nullptr);
  CheckModel(*model, options.shape, quant);

  // The stored bytes of a few tensors are exactly what the generator makes
  // for them: first and last rows of the first and last tensors.
  std::vector<float> scratch;
  for (const SynthTensor* t : {&plan.tensors.front(), &plan.tensors[plan.tensors.size() - 2],
                               &plan.tensors.back()}) {
    const GgufTensorInfo* info = model->FindTensor(t->name);
    ASSERT_NE(info, nullptr);
    const std::span<const uint8_t> data = model->TensorData(*info);
    ASSERT_EQ(data.size(), t->size_bytes());
    const int64_t rows = std::min<int64_t>(4, t->rows());
    const size_t row_bytes = static_cast<size_t>(TensorRowBytes(t->type, t->ne[0]));
    std::vector<uint8_t> expect(row_bytes * static_cast<size_t>(rows));
    EncodeSynthRows(*t, options.seed, t->rows() - rows, rows, expect.data(), scratch);
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), data.end() - static_cast<ptrdiff_t>(expect.size())))
        << t->name;
    EncodeSynthRows(*t, options.seed, 0, rows, expect.data(), scratch);
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), data.begin())) << t->name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllPresetsAndMixes, SynthPresetFilesTest,
    ::testing::Combine(::testing::Values("tiny", "small"),
                       ::testing::Values(SynthQuant::kF32, SynthQuant::kQ8_0, SynthQuant::kQ4_K_M)),
    [](const auto& param_info) {
      return absl::StrCat(std::get<0>(param_info.param), "_",
                          std::string(SynthQuantName(std::get<1>(param_info.param))));
    });

TEST_F(SynthFilesTest, SmallQ4KMHasOnlyKQuantMatrices) {
  // small's rows are multiples of 256: the real mix with no fallback type.
  const std::vector<SynthTensor> tensors = PlanSynthTensors(*SynthPreset("small"), SynthQuant::kQ4_K_M);
  std::set<TensorType> types;
  for (const SynthTensor& t : tensors) types.insert(t.type);
  EXPECT_EQ(types, (std::set<TensorType>{TensorType::kF32, TensorType::kQ4_K, TensorType::kQ6_K}));
  // tiny still has K-quant expert down projections.
  std::set<TensorType> tiny_types;
  for (const SynthTensor& t : PlanSynthTensors(*SynthPreset("tiny"), SynthQuant::kQ4_K_M)) {
    if (absl::StrContains(t.name, "ffn_down_exps")) tiny_types.insert(t.type);
  }
  EXPECT_EQ(tiny_types, (std::set<TensorType>{TensorType::kQ4_K, TensorType::kQ6_K}));
}

TEST_F(SynthFilesTest, MatrixTypeReplacesEveryBlockTypeWhoseRowsFit) {
  SynthOptions o = Options("tiny", SynthQuant::kQ4_K_M, 1, Path("retyped.gguf"));
  o.matrix_type = TensorType::kQ3_K;
  absl::StatusOr<SynthPlan> plan = PlanSynthModel(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<SynthTensor> mix = PlanSynthTensors(o.shape, o.quant);
  ASSERT_EQ(plan->tensors.size(), mix.size());
  int retyped = 0;
  for (size_t i = 0; i < mix.size(); ++i) {
    const SynthTensor& before = mix[i];
    const SynthTensor& after = plan->tensors[i];
    const bool block_type = GetTensorTypeInfo(before.type).block_elems > 1;
    if (block_type && before.ne[0] % 256 == 0) {
      EXPECT_EQ(after.type, TensorType::kQ3_K) << after.name;
      ++retyped;
    } else {
      EXPECT_EQ(after.type, before.type) << after.name;  // F32 norms and routers, short rows
    }
  }
  EXPECT_GT(retyped, 0);
  // A mix without block types (f32) leaves nothing to replace.
  SynthOptions f32 = Options("tiny", SynthQuant::kF32, 1, Path("retyped_f32.gguf"));
  f32.matrix_type = TensorType::kQ4_1;
  absl::StatusOr<SynthPlan> none = PlanSynthModel(f32);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("changed no tensor"));
  for (TensorType refused : {TensorType::kF16, TensorType::kTQ1_0, TensorType::kQ8_K}) {
    o.matrix_type = refused;
    absl::StatusOr<SynthPlan> bad = PlanSynthModel(o);
    ASSERT_FALSE(bad.ok());
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--matrix-type"));
  }
}

TEST_F(SynthFilesTest, TensorTypeRulesApplyFirstMatchAndRefuseWhatCannotBe) {
  SynthOptions o = Options("tiny", SynthQuant::kQ8_0, 1, Path("rules.gguf"));
  o.shape.n_embd = 256;
  // The attn_output tensors also contain "output.weight": their own rules,
  // first, win (their rows of 128 could not be IQ4_XS).
  o.tensor_types = {{"blk.0.attn_output.weight", TensorType::kIQ4_NL},
                    {"blk.1.attn_output.weight", TensorType::kQ8_0},
                    {"output.weight", TensorType::kIQ4_XS},
                    {"ffn_down_exps", TensorType::kQ3_K}};
  absl::StatusOr<SynthPlan> plan = PlanSynthModel(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::map<std::string, TensorType> types;
  for (const SynthTensor& t : plan->tensors) types[t.name] = t.type;
  EXPECT_EQ(types["blk.0.attn_output.weight"], TensorType::kIQ4_NL);
  EXPECT_EQ(types["output.weight"], TensorType::kIQ4_XS);
  EXPECT_EQ(types["blk.0.ffn_down_exps.weight"], TensorType::kQ3_K);
  EXPECT_EQ(types["blk.1.ffn_down_exps.weight"], TensorType::kQ3_K);
  EXPECT_EQ(types["blk.1.attn_q.weight"], TensorType::kQ8_0);

  // blk.1.attn_output.weight has rows of 128: not whole Q3_K blocks.
  o.tensor_types = {{"attn_output", TensorType::kQ3_K}};
  absl::StatusOr<SynthPlan> bad = PlanSynthModel(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              AllOf(HasSubstr("--tensor-type attn_output=Q3_K"), HasSubstr("rows of 128")));
  o.tensor_types = {{"ffn", TensorType::kQ8_0}, {"ffn_down", TensorType::kQ6_K}};
  bad = PlanSynthModel(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("already set by an earlier rule"));
  o.tensor_types = {{"no_such_tensor", TensorType::kQ4_1}};
  bad = PlanSynthModel(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("no tensor name contains"));
  o.tensor_types = {{"attn_q.weight", TensorType::kTQ1_0}};
  bad = PlanSynthModel(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("cannot encode TQ1_0"));
}

TEST_F(SynthFilesTest, SameSeedSameBytesRegardlessOfThreadsAndChunks) {
  SynthOptions a = Options("tiny", SynthQuant::kQ4_K_M, 7, Path("det_a.gguf"));
  a.threads = 1;
  // Three threads split the largest tensors (2048 rows) into uneven parts.
  SynthOptions b = Options("tiny", SynthQuant::kQ4_K_M, 7, Path("det_b.gguf"));
  b.threads = 3;
  // Chunks of 15 rows cut every tensor at odd row counts.
  SynthOptions c = Options("tiny", SynthQuant::kQ4_K_M, 7, Path("det_c.gguf"));
  c.chunk_elems = 1000;
  WriteOrDie(a);
  WriteOrDie(b);
  WriteOrDie(c);
  const std::vector<uint8_t> bytes_a = ReadFileBytes(a.out_path);
  ASSERT_FALSE(bytes_a.empty());
  EXPECT_TRUE(bytes_a == ReadFileBytes(b.out_path));
  EXPECT_TRUE(bytes_a == ReadFileBytes(c.out_path));
}

TEST_F(SynthFilesTest, DifferentSeedDifferentWeights) {
  const SynthOptions a = Options("tiny", SynthQuant::kQ8_0, 1, Path("seed1.gguf"));
  const SynthOptions b = Options("tiny", SynthQuant::kQ8_0, 2, Path("seed2.gguf"));
  WriteOrDie(a);
  WriteOrDie(b);
  std::unique_ptr<GgufModel> ma = OpenOrDie(a.out_path);
  std::unique_ptr<GgufModel> mb = OpenOrDie(b.out_path);
  ASSERT_NE(ma, nullptr);
  ASSERT_NE(mb, nullptr);
  for (const GgufTensorInfo& ta : ma->tensors()) {
    const GgufTensorInfo* tb = mb->FindTensor(ta.name);
    ASSERT_NE(tb, nullptr);
    const std::span<const uint8_t> da = ma->TensorData(ta);
    const std::span<const uint8_t> db = mb->TensorData(*tb);
    ASSERT_EQ(da.size(), db.size());
    EXPECT_FALSE(std::equal(da.begin(), da.end(), db.begin())) << ta.name;
  }
}

TEST_F(SynthFilesTest, WeightsHaveTheDocumentedScales) {
  const SynthOptions f32 = Options("tiny", SynthQuant::kF32, 3, Path("scales_f32.gguf"));
  const SynthOptions q8_options = Options("tiny", SynthQuant::kQ8_0, 3, Path("scales_q8.gguf"));
  WriteOrDie(f32);
  WriteOrDie(q8_options);
  std::unique_ptr<GgufModel> mf = OpenOrDie(f32.out_path);
  std::unique_ptr<GgufModel> mq = OpenOrDie(q8_options.out_path);
  ASSERT_NE(mf, nullptr);
  ASSERT_NE(mq, nullptr);
  auto values = [&](const GgufModel& m, const std::string& name) {
    return Dequantize(m, *m.FindTensor(name));
  };
  const std::vector<float> q = values(*mf, "blk.0.attn_q.weight");
  EXPECT_NEAR(StdDev(q), 1.0 / std::sqrt(64.0), 0.01);
  const std::vector<float> down = values(*mf, "blk.1.ffn_down_exps.weight");
  EXPECT_NEAR(StdDev(down), 1.0 / std::sqrt(256.0 * 4.0), 0.002);
  const std::vector<float> norm = values(*mf, "blk.1.ffn_norm.weight");
  EXPECT_NEAR(Mean(norm), 1.0, 0.03);
  EXPECT_GT(*std::min_element(norm.begin(), norm.end()), 0.8f);
  const std::vector<float> router = values(*mf, "blk.0.ffn_gate_inp.weight");
  EXPECT_NEAR(StdDev(router), 2.0 / 8.0, 0.02);

  // The Q8_0 file holds the same weights, quantized: within half a step.
  const std::vector<float> q8 = values(*mq, "blk.0.attn_q.weight");
  ASSERT_EQ(q8.size(), q.size());
  for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(q8[i], q[i], 0.01) << i;
  // Unquantized tensors are bit-identical between mixes.
  EXPECT_EQ(values(*mq, "blk.0.ffn_gate_inp.weight"), router);
}

TEST_F(SynthFilesTest, SplitFilesReadBackAsOneModel) {
  const SynthOptions whole = Options("tiny", SynthQuant::kQ4_K_M, 5, Path("whole.gguf"));
  SynthOptions by_tensors = Options("tiny", SynthQuant::kQ4_K_M, 5, Path("split_a.gguf"));
  by_tensors.split_max_tensors = 7;
  SynthOptions by_count = Options("tiny", SynthQuant::kQ4_K_M, 5, Path("split_b.gguf"));
  by_count.split_count = 3;
  WriteOrDie(whole);
  const SynthPlan plan_a = WriteOrDie(by_tensors);
  const SynthPlan plan_b = WriteOrDie(by_count);
  const size_t n_tensors = 3 + 12 * 2;
  ASSERT_EQ(plan_a.shards.size(), (n_tensors + 6) / 7);
  ASSERT_EQ(plan_b.shards.size(), 3u);
  EXPECT_EQ(plan_a.shards[0].path, Path("split_a-00001-of-00004.gguf").string());
  EXPECT_EQ(plan_b.shards[2].path, Path("split_b-00003-of-00003.gguf").string());
  for (const SynthShardPlan& shard : plan_a.shards) EXPECT_LE(shard.tensor_count, 7u);

  std::unique_ptr<GgufModel> reference = OpenOrDie(whole.out_path);
  ASSERT_NE(reference, nullptr);
  for (const SynthPlan* plan : {&plan_a, &plan_b}) {
    for (const SynthShardPlan& shard : plan->shards) {
      EXPECT_EQ(fs::file_size(shard.path), shard.file_bytes) << shard.path;
    }
    std::unique_ptr<GgufModel> model = OpenOrDie(plan->shards[0].path);
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->shards().size(), plan->shards.size());
    CheckModel(*model, whole.shape, whole.quant);
    const GgufMetadata& md0 = model->shards()[0]->metadata();
    EXPECT_EQ(md0.GetUintOr("split.count", 0), plan->shards.size());
    EXPECT_EQ(md0.GetUintOr("split.tensors.count", 0), n_tensors);
    for (size_t s = 0; s < model->shards().size(); ++s) {
      EXPECT_EQ(model->shards()[s]->metadata().GetUintOr("split.no", 99), s);
    }
    for (const GgufTensorInfo& t : reference->tensors()) {
      const GgufTensorInfo* u = model->FindTensor(t.name);
      ASSERT_NE(u, nullptr) << t.name;
      const std::span<const uint8_t> a = reference->TensorData(t);
      const std::span<const uint8_t> b = model->TensorData(*u);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << t.name;
    }
  }
}

TEST_F(SynthFilesTest, SplitOptionsAreChecked) {
  SynthOptions o = Options("tiny", SynthQuant::kF32, 1, Path("bad.gguf"));
  o.split_count = 2;
  o.split_max_tensors = 3;
  EXPECT_FALSE(PlanSynthModel(o).ok());
  o.split_max_tensors = 0;
  o.split_count = 1000;
  EXPECT_FALSE(PlanSynthModel(o).ok());
  o.split_count = 0;
  o.out_path.clear();
  EXPECT_FALSE(PlanSynthModel(o).ok());
}

TEST_F(SynthFilesTest, RefusesWhenTheDiskIsTooSmall) {
  const absl::Status status = CheckFreeSpace(dir_->string(), uint64_t{1} << 62);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat(uint64_t{1} << 62, " bytes")));
  EXPECT_THAT(std::string(status.message()), HasSubstr("available"));
  EXPECT_TRUE(CheckFreeSpace(dir_->string(), 1).ok());
  EXPECT_FALSE(CheckFreeSpace("/nonexistent/dir", 1).ok());
}

TEST_F(SynthFilesTest, FullPlanMatchesTheRealModelSize) {
  SynthOptions o = Options("full", SynthQuant::kF32, 0, Path("full.gguf"));
  absl::StatusOr<SynthPlan> f32 = PlanSynthModel(o);
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_GT(f32->total_file_bytes, 120'000'000'000ull);
  EXPECT_LT(f32->total_file_bytes, 125'000'000'000ull);
  o.quant = SynthQuant::kQ4_K_M;
  absl::StatusOr<SynthPlan> q4 = PlanSynthModel(o);
  ASSERT_TRUE(q4.ok()) << q4.status();
  uint64_t sum = 0;
  for (const auto& [type, bytes] : q4->bytes_by_type) sum += bytes;
  EXPECT_EQ(sum, q4->tensor_bytes);
  EXPECT_GT(q4->total_file_bytes, q4->tensor_bytes);
  EXPECT_FALSE(fs::exists(o.out_path));
}

// ---------------------------------------------------------------- numerics through depth

// One token through a 48-layer model built from the synthetic distributions
// (narrow, so it is fast). At position 0 attention returns V, so the pass
// needs no KV cache; everything else is the qwen3moe block.
TEST(SynthNumericsTest, DeepModelGivesFiniteLogitsAndVariedRouting) {
  SynthShape s = *SynthPreset("tiny");
  s.n_layer = 48;
  s.n_expert = 16;
  s.n_expert_used = 4;
  s.n_ff_exp = 64;
  s.n_vocab = 300;
  const std::vector<SynthTensor> plan = PlanSynthTensors(s, SynthQuant::kF32);
  std::map<std::string, std::vector<float>> w;
  std::vector<float> scratch;
  for (const SynthTensor& t : plan) {
    std::vector<float> values(static_cast<size_t>(t.element_count()));
    EncodeSynthRows(t, 11, 0, t.rows(), reinterpret_cast<uint8_t*>(values.data()), scratch);
    w[t.name] = std::move(values);
  }
  const int64_t e = s.n_embd;
  auto matvec = [](const float* m, const std::vector<float>& x, int64_t n_out) {
    std::vector<float> y(static_cast<size_t>(n_out));
    for (int64_t n = 0; n < n_out; ++n) {
      double acc = 0;
      for (size_t k = 0; k < x.size(); ++k) acc += m[n * static_cast<int64_t>(x.size()) + static_cast<int64_t>(k)] * x[k];
      y[static_cast<size_t>(n)] = static_cast<float>(acc);
    }
    return y;
  };
  auto rmsnorm = [&](const std::vector<float>& x, const std::vector<float>& g) {
    double ss = 0;
    for (float v : x) ss += v * v;
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(x.size()) + s.rms_eps));
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * g[i];
    return y;
  };
  auto rms = [](const std::vector<float>& x) {
    double ss = 0;
    for (float v : x) ss += v * v;
    return std::sqrt(ss / static_cast<double>(x.size()));
  };

  std::set<std::vector<int>> routes;
  std::vector<int> expert_uses(static_cast<size_t>(s.n_expert));
  double top1_sum = 0;
  int top1_count = 0;
  for (int token : {5, 77, 150, 299}) {
    std::vector<float> h(w["token_embd.weight"].begin() + token * e,
                         w["token_embd.weight"].begin() + (token + 1) * e);
    double max_rms = 0;
    for (int64_t l = 0; l < s.n_layer; ++l) {
      const std::string b = absl::StrCat("blk.", l, ".");
      std::vector<float> x = rmsnorm(h, w[b + "attn_norm.weight"]);
      const std::vector<float> v = matvec(w[b + "attn_v.weight"].data(), x, s.n_head_kv * s.head_dim);
      std::vector<float> heads(static_cast<size_t>(s.n_head * s.head_dim));
      const int64_t group = s.n_head / s.n_head_kv;
      for (int64_t hq = 0; hq < s.n_head; ++hq) {
        std::copy_n(v.begin() + (hq / group) * s.head_dim, s.head_dim, heads.begin() + hq * s.head_dim);
      }
      const std::vector<float> o = matvec(w[b + "attn_output.weight"].data(), heads, e);
      for (int64_t i = 0; i < e; ++i) h[i] += o[i];

      x = rmsnorm(h, w[b + "ffn_norm.weight"]);
      std::vector<float> logits = matvec(w[b + "ffn_gate_inp.weight"].data(), x, s.n_expert);
      const float mx = *std::max_element(logits.begin(), logits.end());
      double z = 0;
      for (float& g : logits) z += (g = std::exp(g - mx));
      std::vector<int> order(static_cast<size_t>(s.n_expert));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + s.n_expert_used, order.end(),
                        [&](int a, int c) { return logits[a] > logits[c]; });
      order.resize(static_cast<size_t>(s.n_expert_used));
      if (l == 0) routes.insert(std::vector<int>(order.begin(), order.end()));
      double wsum = 0;
      for (int ex : order) {
        wsum += logits[ex] / z;
        ++expert_uses[static_cast<size_t>(ex)];
      }
      top1_sum += logits[order[0]] / z;
      ++top1_count;
      for (int ex : order) {
        const float weight = static_cast<float>(logits[ex] / z / wsum);
        const float* gate = w[b + "ffn_gate_exps.weight"].data() + ex * s.n_ff_exp * e;
        const float* up = w[b + "ffn_up_exps.weight"].data() + ex * s.n_ff_exp * e;
        const float* down = w[b + "ffn_down_exps.weight"].data() + ex * e * s.n_ff_exp;
        const std::vector<float> g = matvec(gate, x, s.n_ff_exp);
        const std::vector<float> u = matvec(up, x, s.n_ff_exp);
        std::vector<float> a(static_cast<size_t>(s.n_ff_exp));
        for (size_t i = 0; i < a.size(); ++i) a[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        const std::vector<float> y = matvec(down, a, e);
        for (int64_t i = 0; i < e; ++i) h[i] += weight * y[i];
      }
      max_rms = std::max(max_rms, rms(h));
    }
    EXPECT_LT(max_rms, 10.0) << "token " << token;
    const std::vector<float> out = matvec(w["output.weight"].data(), rmsnorm(h, w["output_norm.weight"]),
                                          s.n_vocab);
    for (float v : out) ASSERT_TRUE(std::isfinite(v));
    const double spread = StdDev(out);
    EXPECT_GT(spread, 0.8) << "token " << token;
    EXPECT_LT(spread, 5.0) << "token " << token;
  }
  // Routing is neither uniform nor collapsed: the top expert takes a clear
  // but partial share on average, different tokens pick different experts,
  // and every expert is picked somewhere.
  const double top1_mean = top1_sum / top1_count;
  EXPECT_GT(top1_mean, 0.2);
  EXPECT_LT(top1_mean, 0.8);
  EXPECT_GE(routes.size(), 3u);
  for (size_t ex = 0; ex < expert_uses.size(); ++ex) EXPECT_GT(expert_uses[ex], 0) << "expert " << ex;
  std::printf("mean top-1 router probability %.3f over %d token-layers\n", top1_mean, top1_count);
}

// ---------------------------------------------------------------- command line

TEST(SynthCommandLineTest, HelpExplainsEveryFlag) {
  const RunResult r = RunTool("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--preset",
                           "--quant",
                           "--seed",
                           "--out",
                           "--name",
                           "--layers",
                           "--embd",
                           "--experts",
                           "--experts-used",
                           "--expert-ffn",
                           "--heads",
                           "--heads-kv",
                           "--head-dim",
                           "--vocab",
                           "--ctx",
                           "--rope-base",
                           "--rms-eps",
                           "--tied-output",
                           "--split-max-tensors",
                           "--split-count",
                           "--threads",
                           "--dry-run",
                           "--quiet",
                           "--help",
                           "use_more_bits",
                           "--matrix-type"}) {
    EXPECT_THAT(r.output, HasSubstr(flag));
  }
}

TEST(SynthCommandLineTest, BadFlagsGiveOneLineAndNonZeroExit) {
  for (const char* args :
       {"--bogus", "--layers abc", "--layers", "--preset huge --out x.gguf",
        "--quant q5 --out x.gguf", "--experts 4 --experts-used 8 --out x.gguf",
        "--split-count 0 --out x.gguf", "--preset tiny", "stray", "--matrix-type q9_k --out x.gguf",
        "--matrix-type f16 --out x.gguf", "--tensor-type attn_q --out x.gguf",
        "--tensor-type =q4_1 --out x.gguf", "--tensor-type attn_q=q9 --out x.gguf",
        "--rope-scaling dynamic --out x.gguf", "--rope-scaling-factor 2 --out x.gguf",
        "--rope-freq-factors --out x.gguf"}) {
    const RunResult r = RunTool(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("moetier-synth: ")) << args;
  }
}

TEST(SynthCommandLineTest, DryRunPrintsThePlanAndWritesNothing) {
  const fs::path dir = MakeTempDir("dryrun");
  const fs::path out = dir / "full.gguf";
  const RunResult r = RunTool(absl::StrCat("--preset full --quant f32 --dry-run --out ", out.string()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("tensors: 579"));
  EXPECT_THAT(r.output, HasSubstr("F32"));
  EXPECT_THAT(r.output, HasSubstr("total: 12"));  // ~122 GB
  EXPECT_FALSE(fs::exists(out));
  const RunResult q4 = RunTool(absl::StrCat("--preset full --quant q4_k_m --dry-run --split-count 4 --out ",
                                            out.string()));
  EXPECT_EQ(q4.exit_code, 0) << q4.output;
  EXPECT_THAT(q4.output, HasSubstr("Q4_K"));
  EXPECT_THAT(q4.output, HasSubstr("Q6_K"));
  EXPECT_THAT(q4.output, HasSubstr("full-00004-of-00004.gguf"));
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(SynthCommandLineTest, WritesAModelWithShapeFlags) {
  const fs::path dir = MakeTempDir("cli");
  const fs::path out = dir / "m.gguf";
  const RunResult r = RunTool(absl::StrCat(
      "--preset tiny --quant q8_0 --seed 9 --layers 3 --experts 4 --experts-used 2 --expert-ffn 64 "
      "--heads 2 --heads-kv 1 --head-dim 16 --vocab 300 --ctx 128 --rope-base 10000 --rms-eps 1e-5 "
      "--tied-output --quiet --out=",
      out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::unique_ptr<GgufModel> model = OpenOrDie(out.string());
  ASSERT_NE(model, nullptr);
  SynthShape s = *SynthPreset("tiny");
  s.n_layer = 3;
  s.n_expert = 4;
  s.n_expert_used = 2;
  s.n_ff_exp = 64;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.head_dim = 16;
  s.n_vocab = 300;
  s.n_ctx = 128;
  s.rope_base = 10000.0f;
  s.rms_eps = 1e-5f;
  s.tied_output = true;
  CheckModel(*model, s, SynthQuant::kQ8_0);
  EXPECT_EQ(model->FindTensor("output.weight"), nullptr);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moetier
