// moetier-synth: writes a GGUF of one of the MoE architectures moetier serves
// (qwen3moe, olmoe, llama with experts, qwen35moe, qwen3next, qwen2moe, qwen3vlmoe,
// glm4moe, ernie4_5-moe, gpt-oss) with deterministic random
// weights, real tensor names and encodings and a real tokenizer, for tests
// and benchmarks.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/flags/flag_set.h"
#include "gguf/gguf_value.h"
#include "gguf/tensor/tensor_type.h"
#include "synth/synth_model.h"
#include "synth/synth_writer.h"

namespace moetier {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

constexpr std::string_view kUsage = R"(moetier-synth: write a synthetic MoE GGUF model

usage: moetier-synth [--arch qwen3moe|olmoe|llama|qwen35moe|qwen3next|qwen2moe|qwen3vlmoe|
                             glm4moe|ernie4_5-moe|gpt-oss]
                     [--preset tiny|small|full|full-120b]
                     [--quant f32|q8_0|q4_k_m|q8_0-f32|mxfp4] [--seed N] --out FILE
                     [shape flags] [split flags] [--dry-run]

The tool checks free disk space first and refuses to start a write that cannot
fit. Exit status: 0 success, 1 failure, 2 bad command line.)";

constexpr std::string_view kArchitectures =
    R"(    qwen3moe : Qwen3-30B-A3B: attention with per-head q/k norm, routed experts;
               gpt2/qwen2 tokenizer
    olmoe    : OLMoE-1B-7B: q/k norm over the whole projection, routed experts,
               output.weight always present; gpt2/olmo tokenizer
    llama    : Mixtral-8x7B: plain GQA attention, routed experts;
               SentencePiece ("llama") tokenizer
    qwen35moe: Qwen3.6-35B-A3B: Gated DeltaNet layers and, every
               --full-attention-interval-th layer, gated attention; routed +
               shared expert; gpt2/qwen35 tokenizer
    qwen3next: Qwen3-Next-80B-A3B: the same hybrid with beta and alpha in one
               ssm_ba (and with --legacy-ssm-in, q, k, v, z in one ssm_in),
               value heads grouped by key head, plain NEOX rope; gpt2/qwen2
               tokenizer
    qwen2moe : Qwen2-57B-A14B: attention with q/k/v biases and no q/k norm,
               routed + shared expert in every layer, output.weight always
               present; gpt2/qwen2 tokenizer
    qwen3vlmoe: Qwen3-VL-30B-A3B's language model: qwen3moe's tensors with
               multi-section rope (rope.dimension_sections, --rope-sections)
               and n_deepstack_layers; gpt2/qwen2 tokenizer
    glm4moe  : GLM-4.5-Air, GLM-4.5, GLM-4.6/4.7: attention with q/k/v biases and
               optional per-head q/k norm, rope over part of each head; dense
               leading layers, then a sigmoid router with a selection bias
               (exp_probs_b) and an ungated shared expert; nextn (MTP) blocks
               after the layers that run (block_count counts them, --layers
               does not); gpt2/qwen2 tokenizer
    ernie4_5-moe: ERNIE-4.5-21B-A3B, ERNIE-4.5-300B-A47B: plain GQA attention
               with optional q/k/v biases, NORM rope over the whole head; dense
               leading layers, then a softmax router with an optional selection
               bias (exp_probs_b) and an optional ungated shared expert; expert
               tensors in every layer from --leading-dense-layers on, as
               llama.cpp's loader wants them, though its graph runs them only
               every --moe-layer-step-th layer; SentencePiece ("llama")
               tokenizer
    gpt-oss  : gpt-oss-20b, gpt-oss-120b: attention with q/k/v and output biases,
               NEOX rope with YaRN, a learned sink per head, a window of
               --sliding-window positions on layers 0, 2, 4, ...; a router with a
               bias, softmax over its top-k logits; experts with biases and the
               clamped SwiGLU (swiglu_oai); gpt2/gpt-4o tokenizer)";

constexpr std::string_view kPresets =
    R"(    qwen3moe  tiny : 2 layers, embd 64, E 8 (top 2), expert ffn 256, H/Hkv 4/2 x D 32,
                     vocab 512, ctx 4096
              small: 4 layers, embd 256, E 32 (top 4), expert ffn 256, 8/2 x 64, vocab 4096,
                     ctx 8192
              full : Qwen3-30B-A3B: 48 layers, embd 2048, E 128 (top 8), expert ffn 768,
                     32/4 x 128, vocab 151936, ctx 40960; rope base 1e6, rms eps 1e-6
    olmoe     tiny : 3 layers, embd 64, E 8 (top 2), expert ffn 32, 4/4 x 16, vocab 512
              small: 3 layers, embd 256, E 16 (top 4), expert ffn 256, 4/4 x 64, vocab 1024
              full : OLMoE-1B-7B-0924: 16 layers, embd 2048, E 64 (top 8), expert ffn 1024,
                     16/16 x 128, vocab 50304; all: ctx 4096, rope base 1e4, rms eps 1e-5
    llama     tiny : 3 layers, embd 64, E 8 (top 2), expert ffn 32, 4/2 x 16, vocab 512,
                     ctx 4096
              small: 3 layers, embd 256, E 16 (top 4), expert ffn 256, 4/4 x 64, vocab 1024,
                     ctx 4096
              full : Mixtral-8x7B: 32 layers, embd 4096, E 8 (top 2), expert ffn 14336,
                     32/8 x 128, vocab 32000, ctx 32768; all: rope base 1e6, rms eps 1e-5
    qwen35moe tiny : 4 layers, embd 64, E 8 (top 2), expert and shared ffn 32, 4/2 x 32,
                     rope 8 dims [2,1,1,0], DeltaNet state 16, groups 2, value heads 4,
                     inner 64, vocab 512, ctx 4096
              small: 4 layers, embd 256, E 16 (top 4), ffn 256 + 256, 4/2 x 64, rope 16
                     dims [3,3,2,0], state 64, groups 2, value heads 4, inner 256,
                     vocab 1024, ctx 4096
              full : Qwen3.6-35B-A3B: 40 layers, embd 2048, E 256 (top 8), ffn 512 + 512,
                     16/2 x 256, rope 64 dims [11,11,10,0], state 128, groups 16, value
                     heads 32, inner 4096, vocab 248320, ctx 262144; all: conv kernel 4,
                     full attention every 4th layer, rope base 1e7, rms eps 1e-6
    qwen3next tiny : as qwen35moe tiny, rope 8 dims without sections
              small: as qwen35moe small, rope 16 dims without sections
              full : Qwen3-Next-80B-A3B: 48 layers, embd 2048, E 512 (top 10), ffn 512 +
                     512, 16/2 x 256, rope 64 dims, state 128, groups 16, value heads 32,
                     inner 4096, vocab 151936, ctx 262144; all as qwen35moe's
    qwen2moe  tiny : 2 layers, embd 128, E 8 (top 2), expert and shared ffn 256, 4/2 x 32,
                     vocab 512, ctx 4096
              small: 4 layers, embd 256, E 16 (top 4), ffn 256 + 512, 4/2 x 64, vocab 4096,
                     ctx 8192
              full : Qwen2-57B-A14B: 28 layers, embd 3584, E 64 (top 8), ffn 2560 + 20480,
                     28/4 x 128, vocab 151936, ctx 32768; all: rope base 1e6, rms eps 1e-6;
                     heads x head dim must equal embd (llama.cpp's square attn_q)
    qwen3vlmoe      : as qwen3moe's, rope sections 3/8, 5/16, 5/16 of the head's pairs
                     ([6,5,5,0] tiny, [12,10,10,0] small); full: Qwen3-VL-30B-A3B, as
                     Qwen3-30B-A3B with sections [24,20,20,0], rope base 5e6, ctx 262144)
    glm4moe   tiny : 3 layers (1 dense) + 1 nextn, embd 128, dense ffn 384, E 8 (top 2),
                     expert ffn 128, 1 shared, 4/2 x 32, rope 16 dims, routing scale 1.8,
                     no q/k norm, vocab 512, ctx 4096
              small: 4 layers (1 dense) + 1 nextn, embd 256, dense ffn 512, E 16 (top 4),
                     expert ffn 256, 1 shared, 4/2 x 64, rope 32 dims, routing scale 2.5,
                     q/k norm, vocab 4096, ctx 8192
              full : GLM-4.5-Air: 46 layers (1 dense) + 1 nextn, embd 4096, dense ffn
                     10944, E 128 (top 8), expert ffn 1408, 1 shared, 96/8 x 128, rope 64
                     dims, routing scale 1, no q/k norm, vocab 151552, ctx 131072; all:
                     sigmoid router, weights renormalized, rope base 1e6, rms eps 1e-5
    ernie4_5-moe tiny: 4 layers (1 dense, FFN 256), embd 128, E 8 (top 2), expert ffn
                     128, shared ffn 256, 4/2 x 32, q/k/v biases, vocab 512, ctx 4096
              small: 4 layers (1 dense, FFN 512), embd 256, E 16 (top 4), expert ffn
                     256, shared ffn 512, 4/2 x 64, no biases, tied output, vocab
                     4096, ctx 8192
              full : ERNIE-4.5-21B-A3B: 28 layers (1 dense, FFN 12288), embd 2560, E
                     64 (top 6), expert ffn 1536, shared ffn 3072, 20/4 x 128, no
                     biases, tied output, vocab 103424, ctx 131072; all: MoE layer
                     step 1, selection bias, rope base 5e5, rms eps 1e-5
    gpt-oss   tiny : 4 layers, embd 64, E 8 (top 2), expert ffn 32, 4/2 x 32, window 8,
                     YaRN x4 from 64, vocab 512, ctx 4096
              small: 4 layers, embd 256, E 16 (top 4), expert ffn 256, 8/2 x 64, window 16,
                     YaRN x32 from 64, vocab 4096, ctx 8192
              full : gpt-oss-20b: 24 layers, embd 2880, E 32 (top 4), expert ffn 2880,
                     64/8 x 64, window 128, YaRN x32 from 4096, vocab 201088, ctx 131072
              full-120b: gpt-oss-120b: as full with 36 layers and E 128; all: rope base
                     150000, rms eps 1e-5)";

constexpr std::string_view kMixes = R"(    f32     : everything F32 (general.file_type 0)
    q8_0    : every other matrix Q8_0 (general.file_type 7)
    q4_k_m  : Q4_K_M-like (general.file_type 15). qwen3moe: token_embd Q4_K (Q6_K
              if tied), output Q6_K, attn_q/attn_k/attn_output Q4_K, attn_v Q6_K,
              ffn_gate_exps/ffn_up_exps Q4_K, ffn_down_exps Q6_K in layers i with
              i < n/8 or i >= 7n/8 or (i - n/8) % 3 == 2 (llama.cpp's
              use_more_bits), Q4_K in the others. olmoe, llama, qwen35moe, qwen3next, qwen2moe,
              glm4moe (whose nextn blocks count as layers), ernie4_5-moe:
              llama-quantize's rule: Q4_K, output Q6_K, attn_v (and attn_qkv, ssm_in) and
              every ffn_down Q6_K in use_more_bits layers, and with exactly 8
              experts attn_k/attn_v Q8_0 and attn_output Q5_K; ssm_conv1d, ssm_a,
              ssm_dt, ffn_gate_inp_shexp, exp_probs_b and the attention biases stay F32
    q8_0-f32: qwen35moe and qwen3next, the tensor-type shares of a dynamic ("UD")
              4-bit file: F32 for small tensors and ssm_alpha/ssm_beta/ssm_ba, Q8_0 for every
              non-expert matrix, experts Q4_K (gate/up) and Q5_K (down), layer 0's
              experts and the last ffn_down_exps Q6_K (general.file_type 15)
    mxfp4   : gpt-oss, as OpenAI released it: experts MXFP4, every other matrix
              Q8_0, router, biases, sinks and norms F32 (general.file_type 38))";

constexpr std::string_view kWeightsAndTokenizers =
    R"(Weights: element = mean + stddev * z, z ~ N(0,1) approximated by an Irwin-Hall sum
(|z| <= 3.47), from a counter-based stream per (seed, tensor name), so output does
not depend on chunking or threads. stddev: 1/sqrt(fan_in) for the projections that
read the residual stream; 1/sqrt(fan_in * 2 * layers) for those that write it
(attn_output, ffn_down*, ssm_out), so the residual stream stays O(1) at any depth;
2/sqrt(embd) for token_embd, output and ffn_gate_inp (logit and router-logit spread
about 2); norm weights 1 +- 0.05 (qwen35moe and qwen3next store their norms as 1 + w,
so they are near 1 there too). Both: ssm_a = -exp(u), u uniform in [0, ln 16];
ssm_dt.bias 1 +- 0.25; ssm_conv1d 1/sqrt(kernel). qwen2moe's, glm4moe's and ernie4_5-moe's
q/k/v biases: 0 +- 0.5; glm4moe's exp_probs_b 0 +- 0.25 (router probabilities are
sigmoids, so this reorders many expert choices), ernie4_5-moe's 0 +- 0.5/experts (its
softmax probabilities are some 1/experts each), nextn.eh_proj 1/sqrt(2 embd).
gpt-oss: q/k/v biases 0 +- 0.5, attn_sinks 0 +- 1, router bias 0 +- 0.5; expert gate
and up 3/sqrt(embd) with biases 0 +- 1 (about 1-3% of them past swiglu_oai's clamp at
7), ffn_down 1/(7 sqrt(fan_in * 2 * layers)) (7: the RMS of swiglu_oai's output there);
attn_output.bias and ffn_down_exps.bias 0.25/sqrt(2 layers) (the same vector for every
token, so larger ones would send most tokens to the same experts).

Tokenizers (merges and pieces learned from a built-in corpus; ids past what the
corpus supports are [PAD<id>], type UNUSED, as llama.cpp's converter pads):
  qwen3moe : gpt2/qwen2 byte-level BPE: 256 byte tokens, merges, then <|endoftext|>,
             <|im_start|>, <|im_end|> (CONTROL) and <think>, </think> (USER_DEFINED);
             eos = <|im_end|>, bos = pad = <|endoftext|>, add_bos_token false, Qwen3
             ChatML chat template
  qwen35moe: gpt2/qwen35, the same specials at Qwen3.5's ids (248044..248046, 248068,
             248069 in a 248320 vocabulary); eos <|im_end|>, pad <|endoftext|>, no
             bos, add_bos_token false, the Qwen3.5 chat template (opens <think>)
  qwen3next: as qwen3moe
  qwen2moe : as qwen3moe (the Qwen2 vocabulary is Qwen3's)
  qwen3vlmoe: as qwen3moe
  glm4moe  : as qwen3moe (GLM's own vocabulary is not built; 151552 rows in full)
  ernie4_5-moe: as llama (ERNIE's own pieces are not built; 103424 rows in full)
  olmoe    : gpt2/olmo (GPT-2 splitting): |||IP_ADDRESS||| 0, <|padding|> 1, byte
             tokens, merges, |||EMAIL_ADDRESS|||, |||PHONE_NUMBER|||, <|endoftext|>
             (50277..50279 in a 50304 vocabulary); eos <|endoftext|>, pad <|padding|>,
             no bos, add_bos/add_eos false, the Tulu chat template
  llama    : SentencePiece: <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then
             pieces with U+2581 for spaces scored -rank, then single characters;
             bos 1, eos 2, unknown 0, add_bos_token true, add_eos_token false,
             Mixtral-Instruct's [INST] ... [/INST] chat template
  gpt-oss  : gpt2/gpt-4o (o200k splitting): byte tokens, merges, then the 21 special
             tokens of gpt-oss's tokenizer, all CONTROL: <|startoftext|>, <|endoftext|>,
             <|return|>, <|constrain|>, <|channel|>, <|start|>, <|end|>, <|message|>,
             <|call|>, the <|reserved_N|> between them and <|endofprompt|> (199998..200018
             in a 201088 vocabulary); bos <|startoftext|>, eos <|return|>, pad
             <|endoftext|>, no add_bos_token key, no chat template (harmony's is not
             written))";

struct CommandLine {
  std::string arch = "qwen3moe";
  std::string preset = "tiny";
  std::string quant = "f32";
  std::string matrix_type;
  std::vector<SynthOptions::TensorTypeRule> tensor_types;
  uint64_t seed = 0;
  std::string out;
  std::string name;
  bool dry_run = false;
  bool quiet = false;
  int64_t split_max_tensors = 0;
  int64_t split_count = 0;
  int threads = 0;
  std::optional<int64_t> layers, embd, experts, experts_used, expert_ffn, heads, heads_kv,
      head_dim, vocab, ctx;
  std::optional<float> rope_base, rms_eps, rope_scaling_factor;
  std::optional<int64_t> rope_original_ctx;
  std::string rope_scaling;
  bool rope_freq_factors = false;
  bool tied_output = false;
  // qwen35moe and qwen3next (shared_ffn: qwen2moe too).
  std::optional<int64_t> rope_dims, shared_ffn, full_attention_interval, ssm_conv_kernel,
      ssm_state_size, ssm_group_count, ssm_time_step_rank, ssm_inner_size;
  std::optional<std::array<int32_t, 4>> rope_sections;
  bool legacy_ssm_in = false;
  // glm4moe.
  std::optional<int64_t> dense_ffn, leading_dense_layers, shared_experts, nextn_layers;
  std::optional<float> expert_weights_scale;
  std::optional<bool> expert_weights_norm, qk_norm;
  // ernie4_5-moe (dense_ffn, leading_dense_layers and shared_ffn too).
  std::optional<int64_t> moe_layer_step;
  std::optional<bool> qkv_bias, selection_bias;
  // gpt-oss.
  std::optional<int64_t> sliding_window;
};

// "A,B,C,D" of non-negative integers.
absl::Status ParseSections(std::string_view flag, std::string_view text,
                           std::array<int32_t, 4>& out) {
  const std::vector<absl::string_view> items =
      absl::StrSplit(absl::string_view(text.data(), text.size()), ',');
  if (items.size() != out.size()) {
    return FlagError(flag,
                     absl::StrFormat("expects four comma-separated integers, got '%s'", text));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (!absl::SimpleAtoi(items[i], &out[i]) || out[i] < 0) {
      return FlagError(flag, absl::StrFormat("expects four non-negative integers, got '%s'", text));
    }
  }
  return absl::OkStatus();
}

// A shape flag: set only when given, so the preset's value stands otherwise.
// The shape's own checks (PlanSynthModel) judge the value.
template <typename T>
void AddShapeFlag(FlagSet& f, std::string name, std::string value_name, std::string help,
                  std::optional<T>* out) {
  f.Add({std::move(name)}, std::move(value_name), std::move(help),
        [out](std::string_view flag, std::string_view value) -> absl::Status {
          if constexpr (std::is_floating_point_v<T>) {
            double v = 0;
            if (absl::Status s = ParseDoubleFlag(flag, value, -1e30, 1e30, &v); !s.ok()) return s;
            *out = static_cast<T>(v);
          } else {
            int64_t v = 0;
            if (absl::Status s = ParseIntFlag(flag, value, INT64_MIN, INT64_MAX, &v); !s.ok()) {
              return s;
            }
            *out = v;
          }
          return absl::OkStatus();
        });
}

FlagSet MakeFlags(CommandLine& cl) {
  FlagSet f;
  f.AddText("Model:");
  f.AddString({"--arch"}, "NAME",
              "architecture (default qwen3moe), with real tensor names, keys and tokenizer as "
              "llama.cpp's converter writes them:",
              &cl.arch);
  f.AddText(std::string(kArchitectures));
  f.AddString({"--preset"}, "NAME",
              "shape to start from (default tiny); shape flags override it (H = heads, Hkv = kv "
              "heads, D = head dim, E = experts):",
              &cl.preset);
  f.AddText(std::string(kPresets));
  f.AddString({"--quant"}, "MIX",
              "tensor types (default f32); norms, routers and other 1-D tensors stay F32 always. "
              "Where a row length is not a multiple of the block size: Q4_K -> Q4_0, Q5_K and "
              "Q6_K -> Q8_0, F16 if not a multiple of 32. The mixes:",
              &cl.quant);
  f.AddText(std::string(kMixes));
  f.AddString({"--matrix-type"}, "TYPE",
              "write every tensor the mix quantizes in TYPE instead, where its rows are whole "
              "blocks of it (e.g. --quant q8_0 --matrix-type q3_k: all matrices Q3_K, router "
              "and norms F32): q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, mxfp4, q2_k, q3_k, q4_k, "
              "q5_k, q6_k, iq4_xs, or the i-quant grid types iq1_s, iq1_m, iq2_xxs, iq2_xs, "
              "iq2_s, iq3_xxs and iq3_s (a plain encoder: each group's largest value on the "
              "top level, no importance matrix). general.file_type stays the mix's",
              &cl.matrix_type);
  f.Add({"--tensor-type"}, "PART=TYPE",
        "then write every tensor whose name contains PART in TYPE (any type moetier encodes, "
        "e.g. --tensor-type attn_v=q6_k --tensor-type blk.1.ffn_down=iq4_xs); repeatable, the "
        "first matching rule wins, like llama-quantize's flag. A rule no tensor matches, or a "
        "tensor whose rows are not whole blocks of TYPE, is an error",
        [&cl](std::string_view flag, std::string_view value) -> absl::Status {
          const size_t eq = value.find('=');
          const std::optional<TensorType> type = eq == std::string_view::npos
                                                     ? std::nullopt
                                                     : ParseTensorTypeName(value.substr(eq + 1));
          if (eq == 0 || !type.has_value()) {
            return absl::InvalidArgumentError(
                absl::StrCat(std::string(flag), ": '", std::string(value),
                             "' is not PART=TYPE with a known tensor type"));
          }
          cl.tensor_types.push_back({std::string(value.substr(0, eq)), *type});
          return absl::OkStatus();
        });
  f.AddInt({"--seed"}, "N",
           "weight seed, unsigned 64-bit (default 0); same arch, shape, mix and seed give a "
           "byte-identical file",
           &cl.seed);
  f.AddString({"--name"}, "TEXT", "general.name (default describes arch, shape and seed)",
              &cl.name);

  f.AddText("Shape (override the preset; all architectures unless noted):");
  AddShapeFlag(f, "--layers", "N",
               "block_count (glm4moe: the layers that run; block_count adds --nextn-layers)",
               &cl.layers);
  AddShapeFlag(f, "--embd", "N", "embedding_length", &cl.embd);
  AddShapeFlag(f, "--experts", "N", "expert_count", &cl.experts);
  AddShapeFlag(f, "--experts-used", "N", "expert_used_count (top-k), 1..experts", &cl.experts_used);
  AddShapeFlag(f, "--expert-ffn", "N",
               "expert FFN width: expert_feed_forward_length (qwen3moe, qwen35moe, glm4moe, "
               "ernie4_5-moe) or feed_forward_length (olmoe, llama)",
               &cl.expert_ffn);
  AddShapeFlag(f, "--heads", "N", "attention.head_count", &cl.heads);
  AddShapeFlag(f, "--heads-kv", "N", "attention.head_count_kv; must divide heads", &cl.heads_kv);
  AddShapeFlag(f, "--head-dim", "N",
               "attention.key_length = value_length; even (olmoe and llama write it only when it "
               "differs from embd / heads)",
               &cl.head_dim);
  AddShapeFlag(f, "--vocab", "N",
               "token count, at least 261; the real vocabulary sizes put the special tokens at "
               "the real ids",
               &cl.vocab);
  AddShapeFlag(f, "--ctx", "N", "context_length", &cl.ctx);
  AddShapeFlag(f, "--rope-base", "X", "rope.freq_base", &cl.rope_base);
  AddShapeFlag(f, "--rms-eps", "X", "attention.layer_norm_rms_epsilon", &cl.rms_eps);
  f.AddString({"--rope-scaling"}, "TYPE",
              "rope.scaling.type: none, linear or yarn (default: the preset's; gpt-oss yarn, "
              "the others no rope.scaling keys)",
              &cl.rope_scaling);
  AddShapeFlag(f, "--rope-scaling-factor", "X",
               "rope.scaling.factor (needs a rope scaling type, given or the preset's)",
               &cl.rope_scaling_factor);
  AddShapeFlag(f, "--rope-original-context", "N",
               "rope.scaling.original_context_length (needs a rope scaling type)",
               &cl.rope_original_ctx);
  f.AddSwitch({"--rope-freq-factors"},
              "llama: a rope_freqs.weight tensor, head-dim / 2 divisors of the rope angles in "
              "[1, 8] (as a converted Llama 3 carries)",
              &cl.rope_freq_factors);
  f.AddSwitch({"--tied-output"},
              "no output.weight: token_embd is also the output matrix (qwen3moe, llama, "
              "qwen35moe, qwen3next, glm4moe, ernie4_5-moe)",
              &cl.tied_output);
  AddShapeFlag(f, "--rope-dims", "N",
               "qwen35moe, qwen3next, glm4moe: rope.dimension_count, even, at most head-dim",
               &cl.rope_dims);
  f.Add({"--rope-sections"}, "A,B,C,D",
        "qwen35moe: rope.dimension_sections, summing to rope-dims / 2; qwen3vlmoe: "
        "non-negative sections summing to between 1 and head-dim",
        [&cl](std::string_view flag, std::string_view value) -> absl::Status {
          std::array<int32_t, 4> sections{};
          if (absl::Status s = ParseSections(flag, value, sections); !s.ok()) return s;
          cl.rope_sections = sections;
          return absl::OkStatus();
        });
  AddShapeFlag(f, "--shared-ffn", "N",
               "qwen35moe, qwen3next, qwen2moe, ernie4_5-moe: expert_shared_feed_forward_length "
               "(ernie4_5-moe: 0 is no shared expert)",
               &cl.shared_ffn);
  AddShapeFlag(f, "--full-attention-interval", "N",
               "qwen35moe, qwen3next: layer i is full attention when (i+1) % N == 0",
               &cl.full_attention_interval);
  AddShapeFlag(f, "--ssm-conv-kernel", "N",
               "qwen35moe, qwen3next: ssm.conv_kernel (DeltaNet conv taps)", &cl.ssm_conv_kernel);
  AddShapeFlag(f, "--ssm-state-size", "N", "qwen35moe, qwen3next: ssm.state_size (key head dim)",
               &cl.ssm_state_size);
  AddShapeFlag(f, "--ssm-group-count", "N", "qwen35moe, qwen3next: ssm.group_count (key heads)",
               &cl.ssm_group_count);
  AddShapeFlag(
      f, "--ssm-time-step-rank", "N",
      "qwen35moe, qwen3next: ssm.time_step_rank (value heads, a multiple of the key heads)",
      &cl.ssm_time_step_rank);
  AddShapeFlag(f, "--ssm-inner-size", "N",
               "qwen35moe, qwen3next: ssm.inner_size (value heads x value head dim; llama.cpp "
               "reads qwen3next files only with value head dim = state size)",
               &cl.ssm_inner_size);
  AddShapeFlag(f, "--dense-ffn", "N",
               "glm4moe, ernie4_5-moe: feed_forward_length, the FFN width of the leading dense "
               "layers",
               &cl.dense_ffn);
  AddShapeFlag(f, "--leading-dense-layers", "N",
               "glm4moe, ernie4_5-moe: leading_dense_block_count, 0..layers (glm4moe's nextn "
               "blocks stay MoE)",
               &cl.leading_dense_layers);
  AddShapeFlag(f, "--shared-experts", "N",
               "glm4moe: expert_shared_count; the shared expert is expert-ffn x N wide; 0: none "
               "(llama.cpp then adds silu of the FFN input in its place)",
               &cl.shared_experts);
  AddShapeFlag(f, "--expert-weights-scale", "X",
               "glm4moe: expert_weights_scale, the routing weights' factor (0 and 1: none)",
               &cl.expert_weights_scale);
  f.AddSwitch({"--expert-weights-norm"}, "glm4moe: expert_weights_norm true (the presets')",
              [&cl] { cl.expert_weights_norm = true; });
  f.AddSwitch({"--no-expert-weights-norm"},
              "glm4moe: expert_weights_norm false: the top-k sigmoid probabilities unnormalized",
              [&cl] { cl.expert_weights_norm = false; });
  f.AddSwitch({"--qk-norm"}, "glm4moe: per-head attn_q_norm and attn_k_norm (as GLM-4.5)",
              [&cl] { cl.qk_norm = true; });
  f.AddSwitch({"--no-qk-norm"}, "glm4moe: no q/k norm (as GLM-4.5-Air)",
              [&cl] { cl.qk_norm = false; });
  AddShapeFlag(f, "--nextn-layers", "N",
               "glm4moe: nextn_predict_layers, multi-token-prediction blocks after the --layers "
               "that run (0..8)",
               &cl.nextn_layers);
  AddShapeFlag(f, "--moe-layer-step", "N",
               "ernie4_5-moe: interleave_moe_layer_step, 1 or more; llama.cpp runs the experts "
               "of layer i >= leading-dense-layers when (i+1) % N == 0 and, in the other layers "
               "past the dense ones (which carry expert tensors all the same), silu of the FFN "
               "input instead of an FFN",
               &cl.moe_layer_step);
  f.AddSwitch({"--qkv-bias"}, "ernie4_5-moe: attn_q/k/v.bias (the tiny preset's)",
              [&cl] { cl.qkv_bias = true; });
  f.AddSwitch({"--no-qkv-bias"}, "ernie4_5-moe: no attention biases (as ERNIE-4.5's checkpoints)",
              [&cl] { cl.qkv_bias = false; });
  f.AddSwitch({"--selection-bias"},
              "ernie4_5-moe: exp_probs_b.bias in every MoE layer (the presets')",
              [&cl] { cl.selection_bias = true; });
  f.AddSwitch({"--no-selection-bias"},
              "ernie4_5-moe: no exp_probs_b: the top-k of the plain softmax probabilities",
              [&cl] { cl.selection_bias = false; });
  AddShapeFlag(f, "--sliding-window", "N",
               "gpt-oss: attention.sliding_window; on layers 0, 2, 4, ... a query sees the keys "
               "of its last N positions, itself included",
               &cl.sliding_window);
  f.AddSwitch({"--legacy-ssm-in"},
              "qwen3next: one ssm_in per DeltaNet layer (q, k, v and z rows per key head) "
              "instead of attn_qkv and attn_gate, as files converted before those existed",
              &cl.legacy_ssm_in);

  f.AddText("Output:");
  f.AddString({"--out"}, "FILE",
              "file to write; with a split, FILE minus \".gguf\" is the prefix of "
              "FILE-00001-of-0000N.gguf ...",
              &cl.out);
  f.AddInt({"--split-max-tensors"}, "N", "split into files of at most N tensors each",
           &cl.split_max_tensors, int64_t{1}, INT64_MAX);
  f.AddInt({"--split-count"}, "N",
           "split into exactly N files of about equal size (the first file holds all metadata; "
           "each carries split.*)",
           &cl.split_count, int64_t{1}, INT64_MAX);
  f.AddInt({"--threads"}, "N", "threads that generate and quantize (default: all cores)",
           &cl.threads, 1, kSynthMaxThreads);
  f.AddSwitch({"--dry-run"},
              "write nothing; print tensor count, tensors and bytes per type and file sizes",
              &cl.dry_run);
  f.AddSwitch({"--quiet"}, "no progress on stderr", &cl.quiet);
  f.AddText(std::string(kWeightsAndTokenizers));
  return f;
}

absl::StatusOr<SynthOptions> BuildOptions(const CommandLine& cl) {
  absl::StatusOr<SynthArch> arch = ParseSynthArch(cl.arch);
  if (!arch.ok()) return arch.status();
  absl::StatusOr<SynthShape> shape = SynthPreset(*arch, cl.preset);
  if (!shape.ok()) return shape.status();
  absl::StatusOr<SynthQuant> quant = ParseSynthQuant(cl.quant);
  if (!quant.ok()) return quant.status();

  SynthShape& s = *shape;
  if (cl.layers) s.n_layer = *cl.layers;
  if (cl.embd) s.n_embd = *cl.embd;
  if (cl.experts) s.n_expert = *cl.experts;
  if (cl.experts_used) s.n_expert_used = *cl.experts_used;
  if (cl.expert_ffn) s.n_ff_exp = *cl.expert_ffn;
  if (cl.heads) s.n_head = *cl.heads;
  if (cl.heads_kv) s.n_head_kv = *cl.heads_kv;
  if (cl.head_dim) s.head_dim = *cl.head_dim;
  if (cl.vocab) s.n_vocab = *cl.vocab;
  if (cl.ctx) s.n_ctx = *cl.ctx;
  if (cl.rope_base) s.rope_base = *cl.rope_base;
  if (cl.rms_eps) s.rms_eps = *cl.rms_eps;
  if (cl.tied_output) s.tied_output = true;
  // gpt-oss's presets have YaRN; the others none.
  if (!cl.rope_scaling.empty()) s.rope_scaling_type = cl.rope_scaling;
  if (cl.rope_scaling_factor) s.rope_scaling_factor = *cl.rope_scaling_factor;
  if (cl.rope_original_ctx) s.rope_scaling_original_ctx = *cl.rope_original_ctx;
  if (cl.rope_freq_factors && *arch != SynthArch::kLlama) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rope-freq-factors is used by llama only, not by ", cl.arch));
  }
  s.rope_freq_factors = cl.rope_freq_factors;

  // The flags of one architecture are refused by the others.
  if (cl.rope_sections.has_value() && *arch != SynthArch::kQwen35Moe &&
      *arch != SynthArch::kQwen3VlMoe) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rope-sections is used by qwen35moe and qwen3vlmoe only, not by ", cl.arch));
  }
  if (cl.legacy_ssm_in && *arch != SynthArch::kQwen3Next) {
    return absl::InvalidArgumentError(
        absl::StrCat("--legacy-ssm-in is used by qwen3next only, not by ", cl.arch));
  }
  const bool hybrid = IsSynthDeltaNetHybrid(*arch);
  const bool glm = *arch == SynthArch::kGlm4Moe;
  const bool ernie = *arch == SynthArch::kErnie45Moe;
  if (cl.rope_dims && !hybrid && !glm) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rope-dims is used by qwen35moe, qwen3next and glm4moe only, not by ", cl.arch));
  }
  struct ArchFlag {
    const char* flag;
    bool given;
    bool used;
    const char* users;
  };
  const ArchFlag arch_flags[] = {
      {"--dense-ffn", cl.dense_ffn.has_value(), glm || ernie, "glm4moe and ernie4_5-moe"},
      {"--leading-dense-layers", cl.leading_dense_layers.has_value(), glm || ernie,
       "glm4moe and ernie4_5-moe"},
      {"--shared-experts", cl.shared_experts.has_value(), glm, "glm4moe"},
      {"--expert-weights-scale", cl.expert_weights_scale.has_value(), glm, "glm4moe"},
      {"--expert-weights-norm or --no-expert-weights-norm", cl.expert_weights_norm.has_value(), glm,
       "glm4moe"},
      {"--qk-norm or --no-qk-norm", cl.qk_norm.has_value(), glm, "glm4moe"},
      {"--nextn-layers", cl.nextn_layers.has_value(), glm, "glm4moe"},
      {"--moe-layer-step", cl.moe_layer_step.has_value(), ernie, "ernie4_5-moe"},
      {"--qkv-bias or --no-qkv-bias", cl.qkv_bias.has_value(), ernie, "ernie4_5-moe"},
      {"--selection-bias or --no-selection-bias", cl.selection_bias.has_value(), ernie,
       "ernie4_5-moe"},
      {"--sliding-window", cl.sliding_window.has_value(), *arch == SynthArch::kGptOss, "gpt-oss"},
  };
  for (const ArchFlag& f : arch_flags) {
    if (f.given && !f.used) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.flag, " is used by ", f.users, " only, not by ", cl.arch));
    }
  }
  const std::pair<const char*, bool> hybrid_flags[] = {
      {"--full-attention-interval", cl.full_attention_interval.has_value()},
      {"--ssm-conv-kernel", cl.ssm_conv_kernel.has_value()},
      {"--ssm-state-size", cl.ssm_state_size.has_value()},
      {"--ssm-group-count", cl.ssm_group_count.has_value()},
      {"--ssm-time-step-rank", cl.ssm_time_step_rank.has_value()},
      {"--ssm-inner-size", cl.ssm_inner_size.has_value()},
  };
  for (const auto& [flag, given] : hybrid_flags) {
    if (given && !hybrid) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " is used by qwen35moe and qwen3next only, not by ", cl.arch));
    }
  }
  if (cl.shared_ffn && !hybrid && *arch != SynthArch::kQwen2Moe && !ernie) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shared-ffn is used by qwen35moe, qwen3next, qwen2moe and ernie4_5-moe only, not by ",
        cl.arch));
  }
  if (cl.rope_dims) s.n_rot = *cl.rope_dims;
  if (cl.rope_sections) s.rope_sections = *cl.rope_sections;
  if (cl.shared_ffn) s.n_ff_shexp = *cl.shared_ffn;
  if (cl.full_attention_interval) s.full_attention_interval = *cl.full_attention_interval;
  if (cl.ssm_conv_kernel) s.ssm_conv_kernel = *cl.ssm_conv_kernel;
  if (cl.ssm_state_size) s.ssm_state_size = *cl.ssm_state_size;
  if (cl.ssm_group_count) s.ssm_group_count = *cl.ssm_group_count;
  if (cl.ssm_time_step_rank) s.ssm_time_step_rank = *cl.ssm_time_step_rank;
  if (cl.ssm_inner_size) s.ssm_inner_size = *cl.ssm_inner_size;
  s.legacy_ssm_in = cl.legacy_ssm_in;
  if (cl.dense_ffn) s.n_ff = *cl.dense_ffn;
  if (cl.leading_dense_layers) s.n_layer_dense_lead = *cl.leading_dense_layers;
  if (cl.shared_experts) s.n_expert_shared = *cl.shared_experts;
  if (cl.expert_weights_scale) s.expert_weights_scale = *cl.expert_weights_scale;
  if (cl.expert_weights_norm) s.expert_weights_norm = *cl.expert_weights_norm;
  if (cl.qk_norm) s.qk_norm = *cl.qk_norm;
  if (cl.nextn_layers) s.n_nextn_layer = *cl.nextn_layers;
  if (cl.moe_layer_step) s.moe_layer_step = *cl.moe_layer_step;
  if (cl.qkv_bias) s.qkv_bias = *cl.qkv_bias;
  if (cl.selection_bias) s.selection_bias = *cl.selection_bias;
  if (cl.sliding_window) s.sliding_window = *cl.sliding_window;

  SynthOptions options;
  options.shape = s;
  options.quant = *quant;
  if (!cl.matrix_type.empty()) {
    const std::optional<TensorType> type = ParseTensorTypeName(cl.matrix_type);
    if (!type.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--matrix-type: unknown tensor type '", cl.matrix_type, "'"));
    }
    options.matrix_type = *type;
  }
  options.tensor_types = cl.tensor_types;
  options.seed = cl.seed;
  options.name = cl.name.empty() ? absl::StrCat("moetier synthetic ", cl.arch, " ", cl.preset, " ",
                                                cl.quant, cl.matrix_type.empty() ? "" : " as ",
                                                cl.matrix_type, " seed ", cl.seed)
                                 : cl.name;
  if (cl.out.empty() && !cl.dry_run) return absl::InvalidArgumentError("--out FILE is required");
  options.out_path = cl.out.empty() ? "moetier-synth.gguf" : cl.out;
  options.split_max_tensors = cl.split_max_tensors;
  options.split_count = cl.split_count;
  options.threads = cl.threads > 0
                        ? cl.threads
                        : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1,
                                     kSynthMaxThreads);
  return options;
}

std::string Mib(uint64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

void PrintPlan(const SynthOptions& o, const SynthPlan& plan) {
  const SynthShape& s = o.shape;
  std::printf("%s, quant %s, seed %llu\n", std::string(SynthArchName(s.arch)).c_str(),
              std::string(SynthQuantName(o.quant)).c_str(), static_cast<unsigned long long>(o.seed));
  std::printf(
      "  layers %lld, embd %lld, experts %lld (top %lld), expert ffn %lld, heads %lld/%lld x %lld, "
      "vocab %lld, ctx %lld%s\n",
      static_cast<long long>(s.n_layer), static_cast<long long>(s.n_embd),
      static_cast<long long>(s.n_expert), static_cast<long long>(s.n_expert_used),
      static_cast<long long>(s.n_ff_exp), static_cast<long long>(s.n_head),
      static_cast<long long>(s.n_head_kv), static_cast<long long>(s.head_dim),
      static_cast<long long>(s.n_vocab), static_cast<long long>(s.n_ctx),
      s.tied_output ? ", tied output" : "");
  if (!s.rope_scaling_type.empty()) {
    std::printf("  rope scaling %s, factor %g, original context %lld\n",
                s.rope_scaling_type.c_str(), static_cast<double>(s.rope_scaling_factor),
                static_cast<long long>(s.rope_scaling_original_ctx));
  }
  if (s.arch == SynthArch::kQwen2Moe) {
    std::printf("  shared ffn %lld\n", static_cast<long long>(s.n_ff_shexp));
  }
  if (s.arch == SynthArch::kGlm4Moe) {
    std::printf(
        "  nextn layers %lld, leading dense %lld (ffn %lld), shared experts %lld, rope %lld "
        "dims, routing scale %g, %s, %s\n",
        static_cast<long long>(s.n_nextn_layer), static_cast<long long>(s.n_layer_dense_lead),
        static_cast<long long>(s.n_ff), static_cast<long long>(s.n_expert_shared),
        static_cast<long long>(s.n_rot), static_cast<double>(s.expert_weights_scale),
        s.expert_weights_norm ? "weights renormalized" : "weights not renormalized",
        s.qk_norm ? "q/k norm" : "no q/k norm");
  }
  if (s.arch == SynthArch::kErnie45Moe) {
    int64_t expert_layers = 0;
    for (int64_t l = s.n_layer_dense_lead; l < s.n_layer; ++l) {
      expert_layers += (l + 1) % s.moe_layer_step == 0;
    }
    std::printf(
        "  leading dense %lld (ffn %lld), moe layer step %lld (experts run in %lld of %lld "
        "layers), shared ffn %lld, %s, %s\n",
        static_cast<long long>(s.n_layer_dense_lead), static_cast<long long>(s.n_ff),
        static_cast<long long>(s.moe_layer_step), static_cast<long long>(expert_layers),
        static_cast<long long>(s.n_layer), static_cast<long long>(s.n_ff_shexp),
        s.selection_bias ? "selection bias" : "no selection bias",
        s.qkv_bias ? "q/k/v biases" : "no q/k/v biases");
  }
  if (s.arch == SynthArch::kGptOss) {
    std::printf("  sliding window %lld on layers 0, 2, 4, ...\n",
                static_cast<long long>(s.sliding_window));
  }
  if (s.arch == SynthArch::kQwen3VlMoe) {
    std::printf("  rope sections [%d,%d,%d,%d]\n", s.rope_sections[0], s.rope_sections[1],
                s.rope_sections[2], s.rope_sections[3]);
  }
  if (IsSynthDeltaNetHybrid(s.arch)) {
    int64_t attention_layers = 0;
    for (int64_t l = 0; l < s.n_layer; ++l) attention_layers += (l + 1) % s.full_attention_interval == 0;
    const std::string rope_and_layout =
        s.arch == SynthArch::kQwen35Moe
            ? absl::StrFormat(" [%d,%d,%d,%d]", s.rope_sections[0], s.rope_sections[1],
                              s.rope_sections[2], s.rope_sections[3])
            : std::string(s.legacy_ssm_in ? ", legacy ssm_in" : "");
    std::printf(
        "  shared ffn %lld, rope %lld dims%s, full attention every %lld (%lld of %lld "
        "layers), DeltaNet conv %lld, state %lld, key heads %lld, value heads %lld, inner %lld\n",
        static_cast<long long>(s.n_ff_shexp), static_cast<long long>(s.n_rot),
        rope_and_layout.c_str(), static_cast<long long>(s.full_attention_interval),
        static_cast<long long>(attention_layers), static_cast<long long>(s.n_layer),
        static_cast<long long>(s.ssm_conv_kernel), static_cast<long long>(s.ssm_state_size),
        static_cast<long long>(s.ssm_group_count), static_cast<long long>(s.ssm_time_step_rank),
        static_cast<long long>(s.ssm_inner_size));
  }
  size_t merges = 0;
  size_t unused = 0;
  for (const GgufKeyValue& kv : plan.metadata) {
    if (kv.value.type != GgufValueType::kArray) continue;
    const GgufArray& array = std::get<GgufArray>(kv.value.data);
    if (kv.key == "tokenizer.ggml.merges") merges = array.size();
    if (kv.key == "tokenizer.ggml.token_type") {
      const auto& types = std::get<std::vector<int64_t>>(array.elements);
      unused = static_cast<size_t>(std::count(types.begin(), types.end(), 5));
    }
  }
  if (merges > 0) {
    std::printf("tokenizer: %lld tokens, %zu merges, %zu [PAD] tokens\n",
                static_cast<long long>(s.n_vocab), merges, unused);
  } else {
    std::printf("tokenizer: %lld tokens (SentencePiece), %zu [PAD] tokens\n",
                static_cast<long long>(s.n_vocab), unused);
  }
  std::printf("tensors: %zu\n", plan.tensors.size());
  std::map<TensorType, size_t> count_by_type;
  for (const SynthTensor& t : plan.tensors) ++count_by_type[t.type];
  for (const auto& [type, bytes] : plan.bytes_by_type) {
    const size_t count = count_by_type[type];
    std::printf("  %-6s %15llu bytes (%s), %zu tensors (%.1f%%)\n",
                std::string(TensorTypeName(type)).c_str(), static_cast<unsigned long long>(bytes),
                Mib(bytes).c_str(), count,
                100.0 * static_cast<double>(count) / static_cast<double>(plan.tensors.size()));
  }
  std::printf("total: %llu bytes (%s) in %zu file(s)\n",
              static_cast<unsigned long long>(plan.total_file_bytes),
              Mib(plan.total_file_bytes).c_str(), plan.shards.size());
  for (const SynthShardPlan& shard : plan.shards) {
    std::printf("  %s: %zu tensors, %llu bytes\n", shard.path.c_str(), shard.tensor_count,
                static_cast<unsigned long long>(shard.file_bytes));
  }
}

// Progress on stderr: a rewritten line on a terminal, else one line every
// ten seconds. Only for writes big enough to take a while.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool enabled)
      : enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1), start_(Clock::now()), last_(start_) {}

  void Update(uint64_t done, uint64_t total) {
    if (!enabled_) return;
    const Clock::time_point now = Clock::now();
    const double since_last = std::chrono::duration<double>(now - last_).count();
    if (done < total && since_last < (tty_ ? 0.5 : 10.0)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
    std::fprintf(stderr, "%s%s / %s (%.1f%%), %.1f MB/s, ETA %.0f s%s", tty_ ? "\r" : "",
                 Mib(done).c_str(), Mib(total).c_str(),
                 total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
                 rate / 1e6, eta, tty_ ? "   " : "\n");
    if (tty_ && done == total) std::fputc('\n', stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_;
  bool tty_;
  Clock::time_point start_;
  Clock::time_point last_;
};

int Run(int argc, char** argv) {
  CommandLine cl;
  ParseOnlyFlagsOrExit(MakeFlags(cl), "moetier-synth", kUsage, argc, argv);
  absl::StatusOr<SynthOptions> options = BuildOptions(cl);
  if (!options.ok()) {
    std::fprintf(stderr, "moetier-synth: %s (see --help)\n",
                 std::string(options.status().message()).c_str());
    return kExitUsage;
  }
  absl::StatusOr<SynthPlan> plan = PlanSynthModel(*options);
  if (!plan.ok()) {
    const bool usage = plan.status().code() == absl::StatusCode::kInvalidArgument;
    std::fprintf(stderr, "moetier-synth: %s%s\n", std::string(plan.status().message()).c_str(),
                 usage ? " (see --help)" : "");
    return usage ? kExitUsage : kExitFailure;
  }
  if (cl.dry_run) {
    PrintPlan(*options, *plan);
    return 0;
  }

  constexpr uint64_t kProgressMinBytes = uint64_t{256} << 20;
  ProgressPrinter printer(!cl.quiet && plan->tensor_bytes >= kProgressMinBytes);
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = WriteSynthModel(
      *plan, *options, [&printer](uint64_t done, uint64_t total) { printer.Update(done, total); });
  if (!status.ok()) {
    std::fprintf(stderr, "moetier-synth: %s\n", std::string(status.message()).c_str());
    return kExitFailure;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!cl.quiet) {
    std::fprintf(stderr, "moetier-synth: wrote %llu bytes in %zu file(s) (%s) in %.1f s, %.1f MB/s\n",
                 static_cast<unsigned long long>(plan->total_file_bytes), plan->shards.size(),
                 plan->shards.front().path.c_str(), seconds,
                 seconds > 0 ? static_cast<double>(plan->total_file_bytes) / seconds / 1e6 : 0.0);
  }
  return 0;
}

}  // namespace
}  // namespace moetier

int main(int argc, char** argv) { return moetier::Run(argc, argv); }
