// moetier-synth: writes a qwen3moe GGUF with deterministic random weights
// and a real byte-level BPE tokenizer, for tests and benchmarks.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gguf/gguf_value.h"
#include "synth/synth_model.h"
#include "synth/synth_writer.h"
#include "gguf/tensor/tensor_type.h"

namespace moetier {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

constexpr std::string_view kHelp = R"(moetier-synth: write a synthetic qwen3moe GGUF model

usage: moetier-synth [--preset tiny|small|full] [--quant f32|q8_0|q4_k_m]
                     [--seed N] --out FILE [shape flags] [split flags] [--dry-run]

Model:
  --preset NAME          shape to start from (default tiny); shape flags override it
                           tiny : 2 layers, embd 64, 8 experts (top 2), expert ffn 256,
                                  4/2 heads x 32, vocab 512, ctx 4096
                           small: 4 layers, embd 256, 32 experts (top 4), expert ffn 256,
                                  8/2 heads x 64, vocab 4096, ctx 8192
                           full : Qwen3-30B-A3B: 48 layers, embd 2048, 128 experts (top 8),
                                  expert ffn 768, 32/4 heads x 128, vocab 151936, ctx 40960
                           all  : rope base 1e6, rms eps 1e-6, separate output matrix
  --quant MIX            tensor types (default f32); norms and ffn_gate_inp stay F32 always
                           f32   : everything F32 (general.file_type 0)
                           q8_0  : every other matrix Q8_0 (general.file_type 7)
                           q4_k_m: Q4_K_M-like (general.file_type 15): token_embd Q4_K
                                   (Q6_K if tied), output Q6_K, attn_q/attn_k/attn_output
                                   Q4_K, attn_v Q6_K, ffn_gate_exps/ffn_up_exps Q4_K,
                                   ffn_down_exps Q6_K in layers i with i < n/8 or
                                   i >= 7n/8 or (i - n/8) % 3 == 2 (llama.cpp's
                                   use_more_bits), Q4_K in the others
                         if a row length is not a multiple of the block size:
                         Q4_K -> Q4_0, Q6_K -> Q8_0, and F16 if not a multiple of 32
  --seed N               weight seed, unsigned 64-bit (default 0); same seed and shape
                         give a byte-identical file
  --name TEXT            general.name (default describes shape and seed)

Shape (override the preset):
  --layers N             block_count
  --embd N               embedding_length
  --experts N            expert_count
  --experts-used N       expert_used_count (top-k), 1..experts
  --expert-ffn N         expert_feed_forward_length
  --heads N              attention.head_count
  --heads-kv N           attention.head_count_kv; must divide heads
  --head-dim N           attention.key_length = value_length; even
  --vocab N              token count, at least 261; vocabularies of at least 151669
                         put the special tokens at Qwen3's ids
  --ctx N                context_length
  --rope-base X          rope.freq_base
  --rms-eps X            attention.layer_norm_rms_epsilon
  --tied-output          no output.weight: token_embd is also the output matrix

Output:
  --out FILE             file to write; with a split, FILE minus ".gguf" is the prefix
                         of FILE-00001-of-0000N.gguf ...
  --split-max-tensors N  split into files of at most N tensors each
  --split-count N        split into exactly N files of about equal size
                         (the first file holds all metadata; each carries split.*)
  --threads N            threads that generate and quantize (default: all cores)
  --dry-run              write nothing; print tensor count, bytes per type and
                         file sizes
  --quiet                no progress on stderr
  --help                 this text

Weights: element = mean + stddev * z, z ~ N(0,1) approximated by an Irwin-Hall sum
(|z| <= 3.47), from a counter-based stream per (seed, tensor name), so output does
not depend on chunking or threads. stddev: 1/sqrt(fan_in) for attn_q/k/v and
ffn_gate/up_exps; 1/sqrt(fan_in * 2 * layers) for attn_output and ffn_down_exps (the
residual stream stays O(1) at any depth); 2/sqrt(embd) for token_embd, output and
ffn_gate_inp (logit and router-logit spread about 2); norm weights 1 +- 0.05.

Tokenizer: gpt2/qwen2 byte-level BPE: 256 byte tokens, merges learned from the
built-in corpus, [PAD<id>] (UNUSED) where the corpus runs out, then <|endoftext|>,
<|im_start|>, <|im_end|> (CONTROL) and <think>, </think> (USER_DEFINED);
eos = <|im_end|>, bos = pad = <|endoftext|>, add_bos_token false, Qwen3 ChatML
chat template.

The tool checks free disk space first and refuses to start a write that cannot
fit. Exit status: 0 success, 1 failure, 2 bad command line.
)";

struct CommandLine {
  std::string preset = "tiny";
  std::string quant = "f32";
  uint64_t seed = 0;
  std::string out;
  std::string name;
  bool dry_run = false;
  bool quiet = false;
  bool help = false;
  int64_t split_max_tensors = 0;
  int64_t split_count = 0;
  int threads = 0;
  std::optional<int64_t> layers, embd, experts, experts_used, expert_ffn, heads, heads_kv,
      head_dim, vocab, ctx;
  std::optional<float> rope_base, rms_eps;
  bool tied_output = false;
};

absl::Status ParseInt(const std::string& flag, const std::string& text, int64_t& out) {
  if (!absl::SimpleAtoi(text, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " expects an integer, got '", text, "'"));
  }
  return absl::OkStatus();
}

absl::Status ParseCommandLine(int argc, char** argv, CommandLine& cl) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      cl.help = true;
      continue;
    }
    if (arg == "--dry-run") {
      cl.dry_run = true;
      continue;
    }
    if (arg == "--quiet") {
      cl.quiet = true;
      continue;
    }
    if (arg == "--tied-output") {
      cl.tied_output = true;
      continue;
    }
    if (arg.substr(0, 2) != "--") {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    std::string flag = arg;
    std::string value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto take_value = [&]() -> absl::Status {
      if (has_value) return absl::OkStatus();
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
      value = argv[++i];
      return absl::OkStatus();
    };
    auto int_flag = [&](std::optional<int64_t>& dst) -> absl::Status {
      if (absl::Status s = take_value(); !s.ok()) return s;
      int64_t v = 0;
      if (absl::Status s = ParseInt(flag, value, v); !s.ok()) return s;
      dst = v;
      return absl::OkStatus();
    };
    auto float_flag = [&](std::optional<float>& dst) -> absl::Status {
      if (absl::Status s = take_value(); !s.ok()) return s;
      float v = 0.0f;
      if (!absl::SimpleAtof(value, &v)) {
        return absl::InvalidArgumentError(absl::StrCat(flag, " expects a number, got '", value, "'"));
      }
      dst = v;
      return absl::OkStatus();
    };
    auto string_flag = [&](std::string& dst) -> absl::Status {
      if (absl::Status s = take_value(); !s.ok()) return s;
      dst = value;
      return absl::OkStatus();
    };
    auto plain_int_flag = [&](int64_t& dst) -> absl::Status {
      std::optional<int64_t> v;
      if (absl::Status s = int_flag(v); !s.ok()) return s;
      if (*v < 1) return absl::InvalidArgumentError(absl::StrCat(flag, " must be at least 1"));
      dst = *v;
      return absl::OkStatus();
    };

    absl::Status status;
    if (flag == "--preset") {
      status = string_flag(cl.preset);
    } else if (flag == "--quant") {
      status = string_flag(cl.quant);
    } else if (flag == "--out") {
      status = string_flag(cl.out);
    } else if (flag == "--name") {
      status = string_flag(cl.name);
    } else if (flag == "--seed") {
      status = take_value();
      if (status.ok() && !absl::SimpleAtoi(value, &cl.seed)) {
        status = absl::InvalidArgumentError(
            absl::StrCat("--seed expects an unsigned 64-bit integer, got '", value, "'"));
      }
    } else if (flag == "--layers") {
      status = int_flag(cl.layers);
    } else if (flag == "--embd") {
      status = int_flag(cl.embd);
    } else if (flag == "--experts") {
      status = int_flag(cl.experts);
    } else if (flag == "--experts-used") {
      status = int_flag(cl.experts_used);
    } else if (flag == "--expert-ffn") {
      status = int_flag(cl.expert_ffn);
    } else if (flag == "--heads") {
      status = int_flag(cl.heads);
    } else if (flag == "--heads-kv") {
      status = int_flag(cl.heads_kv);
    } else if (flag == "--head-dim") {
      status = int_flag(cl.head_dim);
    } else if (flag == "--vocab") {
      status = int_flag(cl.vocab);
    } else if (flag == "--ctx") {
      status = int_flag(cl.ctx);
    } else if (flag == "--rope-base") {
      status = float_flag(cl.rope_base);
    } else if (flag == "--rms-eps") {
      status = float_flag(cl.rms_eps);
    } else if (flag == "--split-max-tensors") {
      status = plain_int_flag(cl.split_max_tensors);
    } else if (flag == "--split-count") {
      status = plain_int_flag(cl.split_count);
    } else if (flag == "--threads") {
      int64_t threads = 0;
      status = plain_int_flag(threads);
      if (status.ok() && threads > kSynthMaxThreads) {
        status = absl::InvalidArgumentError(absl::StrCat("--threads must be at most ", kSynthMaxThreads));
      }
      cl.threads = static_cast<int>(threads);
    } else {
      status = absl::InvalidArgumentError(absl::StrCat("unknown flag '", flag, "'"));
    }
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<SynthOptions> BuildOptions(const CommandLine& cl) {
  absl::StatusOr<SynthShape> shape = SynthPreset(cl.preset);
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

  SynthOptions options;
  options.shape = s;
  options.quant = *quant;
  options.seed = cl.seed;
  options.name = cl.name.empty()
                     ? absl::StrCat("moetier synthetic qwen3moe ", cl.preset, " ", cl.quant, " seed ",
                                    cl.seed)
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
  std::printf("qwen3moe, quant %s, seed %llu\n", std::string(SynthQuantName(o.quant)).c_str(),
              static_cast<unsigned long long>(o.seed));
  std::printf(
      "  layers %lld, embd %lld, experts %lld (top %lld), expert ffn %lld, heads %lld/%lld x %lld, "
      "vocab %lld, ctx %lld%s\n",
      static_cast<long long>(s.n_layer), static_cast<long long>(s.n_embd),
      static_cast<long long>(s.n_expert), static_cast<long long>(s.n_expert_used),
      static_cast<long long>(s.n_ff_exp), static_cast<long long>(s.n_head),
      static_cast<long long>(s.n_head_kv), static_cast<long long>(s.head_dim),
      static_cast<long long>(s.n_vocab), static_cast<long long>(s.n_ctx),
      s.tied_output ? ", tied output" : "");
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
  std::printf("tokenizer: %lld tokens, %zu merges, %zu [PAD] tokens\n",
              static_cast<long long>(s.n_vocab), merges, unused);
  std::printf("tensors: %zu\n", plan.tensors.size());
  for (const auto& [type, bytes] : plan.bytes_by_type) {
    std::printf("  %-6s %15llu bytes (%s)\n", std::string(TensorTypeName(type)).c_str(),
                static_cast<unsigned long long>(bytes), Mib(bytes).c_str());
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
  if (absl::Status s = ParseCommandLine(argc, argv, cl); !s.ok()) {
    std::fprintf(stderr, "moetier-synth: %s (see --help)\n", std::string(s.message()).c_str());
    return kExitUsage;
  }
  if (cl.help) {
    std::fwrite(kHelp.data(), 1, kHelp.size(), stdout);
    return 0;
  }
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
