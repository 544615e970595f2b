// What moetier-synth writes for gpt-oss beyond the shared architecture
// checks (synth_arch_test.cc): the presets are the released models, the
// mxfp4 mix has the released files' tensor types and size, the vocabulary
// puts harmony's special tokens at their real ids and loads in the
// project's tokenizer, and the command line knows the architecture's flag.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gguf/gguf_reader.h"
#include "gguf/tensor/tensor_type.h"
#include "gguf/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "synth/synth_model.h"
#include "synth/synth_tokenizer.h"
#include "synth/synth_writer.h"
#include "synth_arch_expected.h"
#include "synth_test_util.h"

namespace moetier {
namespace {

using ::testing::HasSubstr;
using namespace synth_test;           // NOLINT: the helpers of this directory's tests
using namespace synth_arch_expected;  // NOLINT: the restated expectations

TEST(SynthGptOssTest, PresetsAreTheReleasedModels) {
  for (const char* name : {"full", "full-120b"}) {
    const SynthShape s = *SynthPreset(SynthArch::kGptOss, name);
    const bool large = std::string(name) == "full-120b";
    EXPECT_EQ(std::make_tuple(s.n_layer, s.n_embd, s.n_head, s.n_head_kv, s.head_dim),
              std::make_tuple(large ? 36 : 24, 2880, 64, 8, 64))
        << name;
    EXPECT_EQ(std::make_tuple(s.n_expert, s.n_expert_used, s.n_ff_exp, s.n_vocab, s.n_ctx),
              std::make_tuple(large ? 128 : 32, 4, 2880, 201088, 131072))
        << name;
    EXPECT_EQ(s.sliding_window, 128) << name;
    EXPECT_FLOAT_EQ(s.rope_base, 150000.0f) << name;
    EXPECT_FLOAT_EQ(s.rms_eps, 1e-5f) << name;
    EXPECT_EQ(s.rope_scaling_type, "yarn") << name;
    EXPECT_FLOAT_EQ(s.rope_scaling_factor, 32.0f) << name;
    EXPECT_EQ(s.rope_scaling_original_ctx, 4096) << name;
    EXPECT_TRUE(ValidateSynthShape(s).ok()) << name;
  }
  // The test presets: heads wider in total than embd, as in the real model,
  // and windows and original contexts that a few hundred positions pass.
  const SynthShape t = *SynthPreset(SynthArch::kGptOss, "tiny");
  EXPECT_EQ(std::make_tuple(t.n_layer, t.n_embd, t.n_expert, t.n_expert_used, t.n_ff_exp, t.n_head,
                            t.n_head_kv, t.head_dim, t.n_vocab),
            std::make_tuple(4, 64, 8, 2, 32, 4, 2, 32, 512));
  EXPECT_EQ(std::make_tuple(t.sliding_window, t.rope_scaling_original_ctx), std::make_tuple(8, 64));
  EXPECT_FLOAT_EQ(t.rope_scaling_factor, 4.0f);
  const SynthShape s = *SynthPreset(SynthArch::kGptOss, "small");
  EXPECT_EQ(std::make_tuple(s.n_layer, s.n_embd, s.n_expert, s.n_expert_used, s.n_ff_exp, s.n_head,
                            s.n_head_kv, s.head_dim, s.n_vocab),
            std::make_tuple(4, 256, 16, 4, 256, 8, 2, 64, 4096));
  EXPECT_EQ(std::make_tuple(s.sliding_window, s.rope_scaling_original_ctx),
            std::make_tuple(16, 64));
  EXPECT_FALSE(SynthPreset(SynthArch::kGptOss, "huge").ok());
  EXPECT_FALSE(SynthPreset(SynthArch::kQwen3Moe, "full-120b").ok());
}

TEST(SynthGptOssTest, ValidationNamesTheFlag) {
  SynthShape s = *SynthPreset(SynthArch::kGptOss, "tiny");
  s.sliding_window = 0;
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--sliding-window"));
  s = *SynthPreset(SynthArch::kGptOss, "tiny");
  s.tied_output = true;  // llama.cpp's gpt-oss loader requires output.weight
  EXPECT_THAT(std::string(ValidateSynthShape(s).message()), HasSubstr("--tied-output"));
  EXPECT_FALSE(ValidateSynthQuant(SynthArch::kGptOss, SynthQuant::kQ4_K_M).ok());
  EXPECT_FALSE(ValidateSynthQuant(SynthArch::kQwen3Moe, SynthQuant::kMxfp4).ok());
  EXPECT_EQ(ParseSynthQuant("mxfp4").value(), SynthQuant::kMxfp4);
  EXPECT_EQ(SynthFileType(SynthQuant::kMxfp4), 38u);
  EXPECT_EQ(ParseSynthArch("gpt-oss").value(), SynthArch::kGptOss);
}

// ggml-org's gpt-oss-20b-GGUF, converted from OpenAI's MXFP4 release:
// 289 F32, 98 Q8_0 and 72 MXFP4 tensors in 11.27 GiB; llama.cpp counts
// 20.91B parameters in it and 116.83B in gpt-oss-120b.
TEST(SynthGptOssTest, FullMxfp4PlanIsTheReleasedFile) {
  const fs::path out = "/nonexistent/gpt-oss.gguf";
  const absl::StatusOr<SynthPlan> plan =
      PlanSynthModel(Options(SynthArch::kGptOss, "full", SynthQuant::kMxfp4, 0, out));
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::map<TensorType, int> counts;
  for (const SynthTensor& t : plan->tensors) ++counts[t.type];
  EXPECT_EQ(counts,
            (std::map<TensorType, int>{
                {TensorType::kF32, 289}, {TensorType::kQ8_0, 98}, {TensorType::kMXFP4, 72}}));
  const double gib = static_cast<double>(plan->total_file_bytes) / (1024.0 * 1024.0 * 1024.0);
  EXPECT_NEAR(gib, 11.27, 0.01);

  for (const auto& [preset, params] :
       {std::make_pair("full", 20.91e9), std::make_pair("full-120b", 116.83e9)}) {
    uint64_t elements = 0;
    for (const SynthTensor& t :
         PlanSynthTensors(*SynthPreset(SynthArch::kGptOss, preset), SynthQuant::kF32)) {
      elements += static_cast<uint64_t>(t.element_count());
    }
    EXPECT_NEAR(static_cast<double>(elements), params, 0.01e9) << preset;
  }
}

TEST(SynthGptOssTest, VocabularyHasHarmonysTokensAtTheirIds) {
  for (const int64_t n : {int64_t{512}, kGptOssVocab}) {
    const absl::StatusOr<SynthVocabulary> v = BuildSynthBpeVocabulary(GptOssBpeLayout(), n);
    ASSERT_TRUE(v.ok()) << v.status();
    ASSERT_EQ(static_cast<int64_t>(v->tokens.size()), n);
    const int64_t first = n == kGptOssVocab ? kGptOssStartOfTextId : n - 21;
    for (int64_t id = first; id < first + 21; ++id) {
      EXPECT_EQ(v->token_types[static_cast<size_t>(id)], 3) << id;  // CONTROL
    }
  }
  const SynthVocabulary v = *BuildSynthBpeVocabulary(GptOssBpeLayout(), kGptOssVocab);
  const std::pair<int64_t, const char*> named[] = {{kGptOssStartOfTextId, "<|startoftext|>"},
                                                   {kGptOssEndOfTextId, "<|endoftext|>"},
                                                   {kGptOssReturnId, "<|return|>"},
                                                   {kGptOssConstrainId, "<|constrain|>"},
                                                   {kGptOssChannelId, "<|channel|>"},
                                                   {kGptOssStartId, "<|start|>"},
                                                   {kGptOssEndId, "<|end|>"},
                                                   {kGptOssMessageId, "<|message|>"},
                                                   {kGptOssCallId, "<|call|>"},
                                                   {kGptOssEndOfPromptId, "<|endofprompt|>"},
                                                   {200000, "<|reserved_200000|>"},
                                                   {200017, "<|reserved_200017|>"}};
  for (const auto& [id, text] : named) EXPECT_EQ(v.tokens[static_cast<size_t>(id)], text) << id;
  // The released tokenizer lists no token past <|endofprompt|>: the
  // converter pads the embedding's remaining rows.
  for (int64_t id = kGptOssEndOfPromptId + 1; id < kGptOssVocab; ++id) {
    ASSERT_EQ(v.token_types[static_cast<size_t>(id)], 5) << id;
  }
  EXPECT_EQ(v.token_types[kGptOssStartOfTextId - 1], 5);  // past the learned merges
}

// The project's tokenizer reads the vocabulary under "gpt-4o": harmony's
// markers are single tokens, <|return|> ends generation, and text round-trips.
TEST(SynthGptOssTest, TokenizerLoadsInTheProject) {
  for (const int64_t n_vocab : {int64_t{512}, kGptOssVocab}) {
    SynthShape s = *SynthPreset(SynthArch::kGptOss, "tiny");
    s.n_vocab = n_vocab;
    absl::StatusOr<GgufMetadata> md = MetadataOf(s);
    ASSERT_TRUE(md.ok()) << md.status();
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromGgufMetadata(*md);
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ(tok->token_text(tok->eos_id()), "<|return|>");
    EXPECT_EQ(tok->token_text(tok->bos_id()), "<|startoftext|>");
    EXPECT_TRUE(tok->IsEndOfGeneration(tok->TokenId("<|return|>")));
    const std::string text =
        "<|start|>user<|message|>What's 12345 + HelloWorld?<|end|><|start|>assistant";
    absl::StatusOr<std::vector<int32_t>> ids = tok->Encode(text, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(ids->front(), tok->TokenId("<|start|>"));
    EXPECT_EQ(std::count(ids->begin(), ids->end(), tok->TokenId("<|message|>")), 1);
    EXPECT_EQ(*tok->Detokenize(*ids, /*render_special=*/true), text);
    if (n_vocab == kGptOssVocab) {
      EXPECT_EQ(ids->front(), kGptOssStartId);
      EXPECT_EQ(tok->eos_id(), kGptOssReturnId);
    }
  }
}

TEST(SynthGptOssTest, CommandLine) {
  const RunResult help = RunTool("--help");
  for (const char* word : {"gpt-oss", "gpt-oss-20b", "gpt-oss-120b", "full-120b",
                           "--sliding-window", "mxfp4", "swiglu_oai"}) {
    EXPECT_THAT(help.output, HasSubstr(word));
  }
  for (const char* args :
       {"--arch qwen3moe --sliding-window 8 --out x.gguf",
        "--arch gpt-oss --sliding-window 0 --out x.gguf",
        "--arch gpt-oss --tied-output --out x.gguf", "--arch gpt-oss --quant q4_k_m --out x.gguf",
        "--arch glm4moe --quant mxfp4 --out x.gguf"}) {
    const RunResult r = RunTool(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << ": " << r.output;
  }
  // Per layer attn_norm, q/k/v/output and their four biases, sinks,
  // post_attention_norm, the router and its bias, three experts and their
  // three biases (19); token_embd, output_norm and output.
  const RunResult full = RunTool("--arch gpt-oss --preset full --quant mxfp4 --dry-run");
  EXPECT_EQ(full.exit_code, 0) << full.output;
  EXPECT_THAT(full.output, HasSubstr("tensors: 459"));
  EXPECT_THAT(full.output, HasSubstr("rope scaling yarn, factor 32, original context 4096"));
  EXPECT_THAT(full.output, HasSubstr("sliding window 128"));
  const RunResult large = RunTool("--arch gpt-oss --preset full-120b --quant mxfp4 --dry-run");
  EXPECT_EQ(large.exit_code, 0) << large.output;
  EXPECT_THAT(large.output, HasSubstr("tensors: 687"));
  EXPECT_THAT(large.output, HasSubstr("experts 128 (top 4)"));
  // The preset's YaRN stays unless the command line names another scaling.
  const RunResult window =
      RunTool("--arch gpt-oss --sliding-window 3 --rope-scaling-factor 8 --dry-run");
  EXPECT_EQ(window.exit_code, 0) << window.output;
  EXPECT_THAT(window.output, HasSubstr("rope scaling yarn, factor 8, original context 64"));
  EXPECT_THAT(window.output, HasSubstr("sliding window 3"));
}

}  // namespace
}  // namespace moetier
