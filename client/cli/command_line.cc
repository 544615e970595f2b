#include "cli/command_line.h"

#include <functional>
#include <limits>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/flags/flag_set.h"
#include "request/sampling_params.h"

namespace moetier::client {
namespace {

constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxTimeoutMs = int64_t{7} * 24 * 3600 * 1000;

struct CommandInfo {
  Command command;
  const char* name;
  const char* synopsis;  // after "moetier NAME"
  const char* summary;   // one line for the overview
  const char* details;   // paragraph under the usage line
};

constexpr CommandInfo kCommands[] = {
    {Command::kGenerate, "generate", "[flags] [PROMPT...]",
     "continue a prompt, streaming the text as it arrives",
     "Continues PROMPT (the words given, --prompt, or stdin when neither is given\n"
     "or PROMPT is '-') and prints the text as the daemon streams it. Ctrl-C\n"
     "cancels the request; the daemon frees its sequence."},
    {Command::kChat, "chat", "[flags] [MESSAGE...]",
     "chat through the model's chat template, interactive or one-shot",
     "With a MESSAGE (or --message) sends one user message and prints the reply.\n"
     "Otherwise reads one user message per line from stdin (a terminal or a pipe),\n"
     "keeps the conversation and streams each reply. /help lists the commands\n"
     "(/bye, /clear, /set temp 0.2, /think on, ...). Ctrl-C stops the reply being\n"
     "written (the part written stays in the conversation); at the prompt it ends\n"
     "the chat."},
    {Command::kScore, "score", "--tokens LIST --logits-out FILE",
     "logits for token ids, written as raw float32",
     "Runs the token ids at positions 0..n-1 and writes their logits to FILE as\n"
     "raw little-endian float32, one row of n_vocab values per position, row-major,\n"
     "nothing else in the file (the layout of moetier-worker --logits-out)."},
    {Command::kTokenize, "tokenize", "[flags] [TEXT...]", "text -> token ids",
     "Prints the token ids of TEXT (or of stdin), comma-separated, on one line."},
    {Command::kDetokenize, "detokenize", "[flags] [IDS...]", "token ids -> text",
     "Prints the text of the token ids (comma- or space-separated), then a newline."},
    {Command::kStatus, "status", "[--watch [--interval-ms N]] [--json]",
     "where each expert is and how hot, hit rates, bytes moved",
     "Prints one row per layer and one cell per expert: the fastest tier holding\n"
     "it (VRAM, RAM, disk) and how hot it is (colour on a terminal, letters\n"
     "otherwise; the legend under the map explains them), then totals, hit rates,\n"
     "bytes moved, the request queue and the workers."},
    {Command::kBench, "bench", "[flags]",
     "prefill and decode tokens/s, hit rates and bytes moved, as JSON",
     "Sends a prefill-heavy request (a long prompt, one new token) and a\n"
     "decode-heavy one (a short prompt, exactly --decode-tokens new tokens)\n"
     "--runs times each, greedy, through the running daemon, and prints JSON:\n"
     "median prefill and decode tokens/s, and the hit rates and bytes moved per\n"
     "phase (from the daemon's status before and after). Other clients' traffic\n"
     "counts too."},
    {Command::kBudget, "budget", "--device DEV --expert-cache-mib MIB",
     "resize a worker's expert cache while it runs",
     "Sets the expert cache of the worker on DEV (cuda:0, ..., or cpu) to MIB MiB\n"
     "without restarting anything, and prints the size in effect (whole slots,\n"
     "at most every expert). The resize waits behind the requests already\n"
     "running or queued; the cache then starts empty and refills on demand.\n"
     "The worker must have been started with a cache (--expert-cache-mib in\n"
     "worker_extra_args) and without --n-cpu-moe; the smallest size holds\n"
     "top_k experts per layer (the error names it). A restarted worker starts\n"
     "again at its configured size. A GPU worker grows its VRAM pool only when\n"
     "the device has room for the new pool next to the old one.\n"
     "The RAM budget (ram_budget_bytes) needs a restart of moetierd instead."},
    {Command::kRun, "run", "[flags] [MODEL.gguf] [PROMPT...]",
     "a private daemon on a model: chat with it, or generate once",
     "Starts a private moetierd (with --devices=cpu) on sockets in a new temporary\n"
     "directory and waits until it serves. The first word is the model (or\n"
     "--model); without one, a small synthetic model is written once with\n"
     "moetier-synth to $XDG_CACHE_HOME/moetier (or ~/.cache/moetier) and reused.\n"
     "\n"
     "Without a prompt it is a chat through the model's chat template: one user\n"
     "message per line, at a terminal (prompt \">>> \") or from a pipe. /help lists\n"
     "the commands (/bye, /clear, /set temp 0.2, /think on, ...). Ctrl-C stops an\n"
     "answer (the part written stays in the conversation); Ctrl-C at the prompt,\n"
     "Ctrl-D or /bye ends the chat. Each answer's tokens and tok/s go to stderr.\n"
     "\n"
     "With a prompt (the words after the model, --prompt, or '-' for stdin) it\n"
     "generates once as `moetier generate` does (32 tokens unless -n), then\n"
     "prints the status map. Either way it then stops the daemon and removes the\n"
     "directory. The flags of `moetier generate` may also follow a '--'.\n"
     "With --serve it is `moetier serve`."},
    {Command::kServe, "serve", "[flags] [MODEL.gguf]",
     "a private daemon on a model, serving the OpenAI/Anthropic HTTP API",
     "Starts a private moetierd as `moetier run` does (the same model, --ctx and\n"
     "--threads), with its HTTP API on --host:--port (default 127.0.0.1:8080;\n"
     "--port 0 picks a free port). Once it serves, prints where to point clients:\n"
     "the OpenAI-compatible base URL http://HOST:PORT/v1 (Anthropic's messages at\n"
     "/v1/messages), the status page and the metrics, then serves until Ctrl-C or\n"
     "SIGTERM, stops the daemon and removes its directory. With --api-keys-file\n"
     "(one key a line, not readable by others) requests must carry a key\n"
     "(Authorization: Bearer KEY or x-api-key: KEY). Try it with\n"
     "  curl http://127.0.0.1:8080/v1/chat/completions \\\n"
     "    -H 'Content-Type: application/json' \\\n"
     "    -d '{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}'"},
};

const CommandInfo* FindCommand(std::string_view name) {
  for (const CommandInfo& info : kCommands) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

const CommandInfo* InfoOf(Command command) {
  for (const CommandInfo& info : kCommands) {
    if (info.command == command) return &info;
  }
  return nullptr;
}

std::string CommandNames() {
  std::vector<std::string> names;
  for (const CommandInfo& info : kCommands) names.push_back(info.name);
  names.push_back("help");
  return absl::StrJoin(names, ", ");
}

// Setters for common value types.
FlagSet::Setter SetInt(int64_t* out, int64_t min, int64_t max) {
  return [out, min, max](std::string_view f, std::string_view v) {
    return ParseIntFlag(f, v, min, max, out);
  };
}

FlagSet::Setter SetString(std::string* out, bool allow_empty = false) {
  return [out, allow_empty](std::string_view f, std::string_view v) {
    if (v.empty() && !allow_empty) return FlagError(f, "the value is empty");
    *out = std::string(v);
    return absl::OkStatus();
  };
}

void AddGlobalFlags(FlagSet& fs, CommandLine& cl) {
  GlobalOptions& g = cl.global;
  fs.Add({"--socket"}, "PATH",
         absl::StrFormat("the daemon's unix socket (default: $MOETIER_SOCKET, else\n%s)",
                         kDefaultSocketPath),
         SetString(&g.socket_path));
  fs.Add({"--address"}, "HOST:PORT",
         "reach the daemon over TCP instead (moetierd --listen_address)",
         [&g](std::string_view f, std::string_view v) {
           const size_t colon = v.rfind(':');
           if (colon == std::string_view::npos || colon == 0 || colon + 1 == v.size()) {
             return FlagError(f, absl::StrFormat("'%s' is not HOST:PORT", v));
           }
           int64_t port = 0;
           if (absl::Status s = ParseIntFlag(f, v.substr(colon + 1), 1, 65535, &port); !s.ok()) {
             return FlagError(f, absl::StrFormat("'%s' has no port number 1..65535", v));
           }
           g.address = std::string(v);
           return absl::OkStatus();
         });
  fs.Add({"--timeout-ms"}, "MS", "deadline of each call to the daemon (default 0: none)",
         SetInt(&g.timeout_ms, 0, kMaxTimeoutMs));
  fs.Add({"--color"}, "WHEN",
         "auto (default: on a terminal, unless $NO_COLOR is set), always or\nnever",
         [&g](std::string_view f, std::string_view v) {
           if (v == "auto") {
             g.color = ColorMode::kAuto;
           } else if (v == "always") {
             g.color = ColorMode::kAlways;
           } else if (v == "never") {
             g.color = ColorMode::kNever;
           } else {
             return FlagError(f, absl::StrFormat("'%s' is not auto, always or never", v));
           }
           return absl::OkStatus();
         });
  fs.AddSwitch({"--no-color"}, "same as --color=never", [&g] { g.color = ColorMode::kNever; });
  fs.Add({"--width"}, "N",
         "columns of the status map before a layer wraps (default: the\nterminal's; 0: never "
         "wrap)",
         [&g](std::string_view f, std::string_view v) {
           int64_t w = 0;
           if (absl::Status s = ParseIntFlag(f, v, 0, 100000, &w); !s.ok()) return s;
           g.width = static_cast<int>(w);
           return absl::OkStatus();
         });
  fs.AddSwitch({"-h", "--help"}, "this text", [&cl] { cl.help = true; });
}

// The sampling flags only parse their numbers: the daemon's front door is
// where the values are checked (INVALID_ARGUMENT naming the field and its
// range), for this client and every other.
void AddSamplingFlags(FlagSet& fs, v1::SamplingParams* s,
                      std::function<void(int32_t)> set_max_new_tokens) {
  fs.Add({"-n", "--max-new-tokens"}, "N",
         "tokens to generate at most (default 0: the daemon's default,\nmoetierd "
         "--default_max_new_tokens)",
         [set_max_new_tokens](std::string_view f, std::string_view v) {
           int64_t n = 0;
           if (absl::Status st = ParseIntFlag(f, v, 0, kInt32Max, &n); !st.ok()) return st;
           set_max_new_tokens(static_cast<int32_t>(n));
           return absl::OkStatus();
         });
  fs.Add({"--temp"}, "T", "temperature (default 0.8; 0: greedy)",
         [s](std::string_view f, std::string_view v) {
           float t = 0;
           if (absl::Status st = ParseFloatFlag(f, v, &t); !st.ok()) return st;
           s->set_temperature(t);
           return absl::OkStatus();
         });
  fs.Add({"--top-k"}, "K", "keep the K most likely tokens (default 40; 0: off)",
         [s](std::string_view f, std::string_view v) {
           int64_t k = 0;
           if (absl::Status st = ParseIntFlag(f, v, kInt32Min, kInt32Max, &k); !st.ok()) return st;
           s->set_top_k(static_cast<int32_t>(k));
           return absl::OkStatus();
         });
  fs.Add({"--top-p"}, "P",
         "keep the smallest set of tokens with probability >= P\n(default 0.95; 1: off)",
         [s](std::string_view f, std::string_view v) {
           float p = 0;
           if (absl::Status st = ParseFloatFlag(f, v, &p); !st.ok()) return st;
           s->set_top_p(p);
           return absl::OkStatus();
         });
  fs.Add({"--min-p"}, "M",
         "drop tokens less likely than M x the most likely one\n(default 0.05; 0: off)",
         [s](std::string_view f, std::string_view v) {
           float m = 0;
           if (absl::Status st = ParseFloatFlag(f, v, &m); !st.ok()) return st;
           s->set_min_p(m);
           return absl::OkStatus();
         });
  fs.Add({"--repeat-penalty"}, "R",
         "penalise tokens seen in the last --repeat-last-n tokens\n(default 1: off)",
         [s](std::string_view f, std::string_view v) {
           float r = 0;
           if (absl::Status st = ParseFloatFlag(f, v, &r); !st.ok()) return st;
           s->set_repetition_penalty(r);
           return absl::OkStatus();
         });
  fs.Add({"--repeat-last-n"}, "N", "tokens the repeat penalty looks back over (default 64)",
         [s](std::string_view f, std::string_view v) {
           int64_t n = 0;
           if (absl::Status st = ParseIntFlag(f, v, kInt32Min, kInt32Max, &n); !st.ok()) {
             return st;
           }
           s->set_repeat_last_n(static_cast<int32_t>(n));
           return absl::OkStatus();
         });
  fs.Add({"--seed"}, "S",
         "random seed; the same seed gives the same text (default:\ndrawn by the daemon, shown "
         "by --stats)",
         [s](std::string_view f, std::string_view v) {
           uint64_t seed = 0;
           if (!absl::SimpleAtoi(absl::string_view(v.data(), v.size()), &seed)) {
             return FlagError(f, absl::StrFormat("'%s' is not a non-negative integer", v));
           }
           s->set_seed(seed);
           return absl::OkStatus();
         });
}

// The same defaults as moetier-worker --standalone, so both give the same
// kind of text.
void SetSamplingDefaults(v1::SamplingParams* s) {
  const SamplingParams& d = kCommandLineSamplingDefaults;
  s->set_temperature(d.temperature);
  s->set_top_k(d.top_k);
  s->set_top_p(d.top_p);
  s->set_min_p(d.min_p);
  s->set_repetition_penalty(d.repeat_penalty);
  s->set_repeat_last_n(d.repeat_last_n);
}

void AddStatsFlag(FlagSet& fs, bool* stats) {
  fs.AddSwitch({"--stats"},
               "print token counts, prefill and decode tokens/s, the seed and\nthe worker on "
               "stderr at the end",
               [stats] { *stats = true; });
}

void AddGenerateFlags(FlagSet& fs, GenerateOptions& o) {
  fs.Add({"--prompt"}, "TEXT", "the prompt ('-': read stdin)",
         [&o](std::string_view, std::string_view v) {
           o.request.set_prompt(std::string(v));
           o.prompt_given = v != "-";
           return absl::OkStatus();
         });
  fs.Add({"--prompt-tokens"}, "LIST", "the prompt as token ids (comma-separated) instead of text",
         [&o](std::string_view f, std::string_view v) {
           std::vector<int32_t> ids;
           if (absl::Status s = ParseTokenIds(f, v, &ids); !s.ok()) return s;
           o.request.mutable_prompt_token_ids()->Assign(ids.begin(), ids.end());
           o.prompt_given = true;
           return absl::OkStatus();
         });
  fs.AddSwitch({"--special"}, "parse special tokens such as <|im_start|> in the prompt",
               [&o] { o.request.set_parse_special_tokens(true); });
  fs.AddSwitch({"--ignore-eos"},
               "keep generating past end-of-generation tokens until -n tokens (fixed-length "
               "runs)",
               [&o] { o.request.set_ignore_end_of_generation(true); });
  AddSamplingFlags(fs, o.request.mutable_sampling(),
                   [&o](int32_t n) { o.request.set_max_new_tokens(n); });
  AddStatsFlag(fs, &o.stats);
}

void AddChatFlags(FlagSet& fs, ChatOptions& o) {
  fs.Add({"--message"}, "TEXT", "send this one user message, print the reply and exit",
         [&o](std::string_view, std::string_view v) {
           o.message = std::string(v);
           return absl::OkStatus();
         });
  fs.Add({"--system"}, "TEXT", "a system message ahead of the conversation", SetString(&o.system));
  fs.AddSwitch({"--think"},
               "let the model think first (Qwen3's enable_thinking; default:\nan empty think "
               "block)",
               [&o] { o.request.set_enable_thinking(true); });
  AddSamplingFlags(fs, o.request.mutable_sampling(),
                   [&o](int32_t n) { o.request.set_max_new_tokens(n); });
  AddStatsFlag(fs, &o.stats);
}

void AddScoreFlags(FlagSet& fs, ScoreOptions& o) {
  fs.Add(
      {"--tokens"}, "LIST", "the token ids, comma-separated (also as arguments)",
      [&o](std::string_view f, std::string_view v) { return ParseTokenIds(f, v, &o.token_ids); });
  fs.Add({"--logits-out"}, "FILE", "where the logits go (required)", SetString(&o.logits_out));
}

void AddTokenizeFlags(FlagSet& fs, TokenizeOptions& o) {
  fs.Add({"--text"}, "TEXT", "the text (also as arguments; default: stdin)",
         [&o](std::string_view, std::string_view v) {
           o.text = std::string(v);
           o.text_given = true;
           return absl::OkStatus();
         });
  fs.AddSwitch({"--special"}, "parse special tokens such as <|im_start|>",
               [&o] { o.special = true; });
}

void AddDetokenizeFlags(FlagSet& fs, DetokenizeOptions& o) {
  fs.Add(
      {"--tokens"}, "LIST", "the token ids (also as arguments)",
      [&o](std::string_view f, std::string_view v) { return ParseTokenIds(f, v, &o.token_ids); });
  fs.AddSwitch({"--special"}, "render special tokens such as <|im_end|> (default: drop them)",
               [&o] { o.special = true; });
}

void AddStatusFlags(FlagSet& fs, StatusOptions& o) {
  fs.AddSwitch({"--watch"}, "refresh until Ctrl-C", [&o] { o.watch = true; });
  fs.Add({"--interval-ms"}, "MS", "time between refreshes with --watch (default 1000)",
         [&o](std::string_view f, std::string_view v) {
           int64_t ms = 0;
           if (absl::Status s = ParseIntFlag(f, v, 50, 3'600'000, &ms); !s.ok()) return s;
           o.interval_ms = static_cast<uint32_t>(ms);
           return absl::OkStatus();
         });
  fs.Add({"--count"}, "N", "with --watch: stop after N refreshes (default 0: never)",
         SetInt(&o.count, 0, kInt32Max));
  fs.AddSwitch({"--json"}, "the Status message as JSON (with --watch: one object per line)",
               [&o] { o.json = true; });
}

void AddBenchFlags(FlagSet& fs, BenchOptions& o) {
  fs.Add({"--runs"}, "N", "measured requests of each kind (default 3)", SetInt(&o.runs, 1, 1000));
  fs.Add({"--warmup"}, "N", "unmeasured decode requests first (default 1)",
         SetInt(&o.warmup, 0, 100));
  fs.Add({"--prefill-tokens"}, "N", "prompt tokens of the prefill-heavy request (default 512)",
         SetInt(&o.prefill_tokens, 1, 1 << 20));
  fs.Add({"--decode-tokens"}, "N", "new tokens of the decode-heavy request (default 128)",
         SetInt(&o.decode_tokens, 1, 1 << 20));
  fs.Add({"--decode-prompt-tokens"}, "N", "prompt tokens of the decode-heavy request (default 16)",
         SetInt(&o.decode_prompt_tokens, 1, 1 << 20));
}

void AddBudgetFlags(FlagSet& fs, BudgetOptions& o) {
  fs.Add({"--device"}, "DEV", "the worker's device: cpu, cuda:0, ...",
         SetString(&o.device));
  fs.Add({"--expert-cache-mib"}, "MIB", "the new size of its expert cache, in MiB",
         SetInt(&o.expert_cache_mib, 0, int64_t{1} << 24));
}

void AddServeFlags(FlagSet& fs, ServeOptions& o) {
  fs.Add({"--host"}, "HOST",
         "serve: the address the HTTP API listens on (default 127.0.0.1;\n0.0.0.0 for every "
         "interface)",
         SetString(&o.host));
  fs.Add({"--port"}, "PORT", "serve: its port (default 8080; 0: a free one)",
         SetInt(&o.port, 0, 65535));
  fs.Add({"--api-keys-file"}, "PATH",
         "serve: require one of the keys in PATH (one a line) on every\nrequest",
         SetString(&o.api_keys_file));
}

// The private daemon's flags, shared by run and serve. llama.cpp's
// spellings (-m, -c, --ctx-size, -t; -n and --temp are the same there) are
// aliases of moetier's, which the help documents.
void AddPrivateDaemonFlags(FlagSet& fs, RunOptions& o) {
  fs.Add({"--model"}, "FILE",
         "the GGUF model, also as the first word (default: a small\nsynthetic model made once "
         "with moetier-synth)",
         SetString(&o.model_path));
  fs.Add({"--ctx"}, "N",
         "the worker's context in tokens (default: the worker's, at most\nthe model's training "
         "context)",
         SetInt(&o.ctx_tokens, 1, kInt32Max));
  fs.Add({"--threads"}, "N", "the CPU worker's threads (default: the worker's)",
         SetInt(&o.threads, 1, 4096));
  fs.Add({"--rope-scaling"}, "T",
         "none, linear or yarn: stretch the model's rope past its training\ncontext (default: as "
         "the file says)",
         [&o](std::string_view f, std::string_view v) {
           if (v != "none" && v != "linear" && v != "yarn") {
             return FlagError(f, absl::StrFormat("'%s' is not none, linear or yarn", v));
           }
           o.rope_scaling = std::string(v);
           return absl::OkStatus();
         });
  fs.Add(
      {"--rope-scale"}, "X",
      "the stretch factor; --ctx may then reach the original context x X\n(Qwen3 at 128K: "
      "--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768 -c 131072)",
      [&o](std::string_view f, std::string_view v) {
        double x = 0;
        if (!absl::SimpleAtod(absl::string_view(v.data(), v.size()), &x) || !(x > 0) || x > 1e6) {
          return FlagError(f, absl::StrFormat("'%s' is not a factor in (0, 1e6]", v));
        }
        o.rope_scale = std::string(v);
        return absl::OkStatus();
      });
  fs.Add({"--yarn-orig-ctx"}, "N",
         "the context the model was trained on before the stretch\n(default: the file's)",
         SetInt(&o.yarn_orig_ctx, 1, kInt32Max));
  fs.Add({"--moetierd"}, "PATH",
         "the daemon program (default: next to moetier, the build tree's\ndaemon/, or PATH)",
         SetString(&o.moetierd_path));
  fs.Add({"--worker"}, "PATH",
         "the worker program (default: next to moetierd, the build\ntree's worker/, or PATH)",
         SetString(&o.worker_path));
  fs.Add({"--synth"}, "PATH",
         "moetier-synth (default: next to moetier, the build tree's\ntools/synth/, or PATH)",
         SetString(&o.synth_path));
  fs.Add({"--daemon-arg"}, "ARG",
         "one more argument for moetierd, e.g. --daemon-arg=--ram_budget_bytes=1GiB;\nrepeat for "
         "more",
         [&o](std::string_view f, std::string_view v) {
           if (v.empty()) return FlagError(f, "the value is empty");
           o.daemon_args.emplace_back(v);
           return absl::OkStatus();
         });
  fs.Add({"--start-timeout-s"}, "S", "how long to wait for the daemon to serve (default 600)",
         SetInt(&o.start_timeout_s, 1, 24 * 3600));
  AddServeFlags(fs, o.serve);
  fs.Alias("--model", {"-m"});
  fs.Alias("--ctx", {"-c", "--ctx-size"});
  fs.Alias("--threads", {"-t"});
}

void AddRunFlags(FlagSet& fs, RunOptions& o) {
  AddPrivateDaemonFlags(fs, o);
  fs.AddSwitch({"--serve"}, "serve the HTTP API instead of chatting: `moetier serve`",
               [&o] { o.serve.enabled = true; });
  AddGenerateFlags(fs, o.generate);
  fs.Add({"--system"}, "TEXT", "chat: a system message ahead of the conversation",
         SetString(&o.system));
  fs.AddSwitch({"--think"},
               "chat: let the model think first (Qwen3's enable_thinking;\n/think on|off in the "
               "chat)",
               [&o] { o.think = true; });
  fs.Alias("--prompt", {"-p"});
}

// Fills the flag set of one command (its own flags, then the global ones).
void AddCommandFlags(Command command, FlagSet& fs, CommandLine& cl) {
  switch (command) {
    case Command::kGenerate:
      AddGenerateFlags(fs, cl.generate);
      break;
    case Command::kChat:
      AddChatFlags(fs, cl.chat);
      break;
    case Command::kScore:
      AddScoreFlags(fs, cl.score);
      break;
    case Command::kTokenize:
      AddTokenizeFlags(fs, cl.tokenize);
      break;
    case Command::kDetokenize:
      AddDetokenizeFlags(fs, cl.detokenize);
      break;
    case Command::kStatus:
      AddStatusFlags(fs, cl.status);
      break;
    case Command::kBench:
      AddBenchFlags(fs, cl.bench);
      break;
    case Command::kBudget:
      AddBudgetFlags(fs, cl.budget);
      break;
    case Command::kRun:
      AddRunFlags(fs, cl.run);
      break;
    case Command::kServe:
      AddPrivateDaemonFlags(fs, cl.run);
      break;
    case Command::kNone:
    case Command::kHelp:
      break;
  }
}

std::string JoinWords(const std::vector<std::string>& words) { return absl::StrJoin(words, " "); }

absl::Status TooManyArguments(const char* command, const std::vector<std::string>& positionals) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s takes no arguments, got '%s' (see moetier %s --help)", command,
                      positionals.front(), command));
}

// `moetier run [MODEL] [PROMPT...] [-- GENERATE-FLAGS [PROMPT...]]`: the
// first word is the model unless --model names it.
absl::Status FinishRun(RunOptions& o, const FlagSet::Parsed& parsed) {
  std::vector<std::string> words = parsed.positionals;
  if (o.model_path.empty() && !words.empty()) {
    o.model_path = words.front();
    o.model_from_word = true;
    words.erase(words.begin());
  }
  if (!parsed.after_dashes.empty()) {
    FlagSet fs;
    AddGenerateFlags(fs, o.generate);
    FlagSet::Parsed gen;
    if (absl::Status s = fs.Parse(parsed.after_dashes, &gen); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("after '--' (generate flags): ", s.message()));
    }
    words.insert(words.end(), gen.positionals.begin(), gen.positionals.end());
    words.insert(words.end(), gen.after_dashes.begin(), gen.after_dashes.end());
  }
  v1::GenerateRequest& r = o.generate.request;
  if (!words.empty()) {
    if (o.generate.prompt_given || !r.prompt().empty()) {
      return absl::InvalidArgumentError("give the prompt once: as words or with --prompt");
    }
    r.set_prompt(JoinWords(words));
    o.generate.prompt_given = r.prompt() != "-";
  }
  if (!r.prompt().empty() && r.prompt_token_ids_size() > 0) {
    return absl::InvalidArgumentError("give a text prompt or --prompt-tokens, not both");
  }
  o.one_shot = o.generate.prompt_given || r.prompt() == "-";
  if (r.prompt() == "-") r.clear_prompt();
  if (o.one_shot && (!o.system.empty() || o.think)) {
    return absl::InvalidArgumentError(
        "--system and --think are for the chat, which starts when no prompt is given");
  }
  if (!o.one_shot && (r.ignore_end_of_generation() || r.parse_special_tokens())) {
    return absl::InvalidArgumentError(
        "--ignore-eos and --special go with a prompt (one generation), not with the chat");
  }
  return absl::OkStatus();
}

// `moetier serve [MODEL]`, `moetier run --serve [MODEL]`: a model, no prompt.
absl::Status FinishServe(RunOptions& o, const FlagSet::Parsed& parsed) {
  std::vector<std::string> words = parsed.positionals;
  words.insert(words.end(), parsed.after_dashes.begin(), parsed.after_dashes.end());
  if (o.model_path.empty() && !words.empty()) {
    o.model_path = words.front();
    words.erase(words.begin());
  }
  if (!words.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "serve takes the model only, got '%s' too (clients send the prompts)", words.front()));
  }
  if (o.serve.host.find_first_of("[]/ ") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--host '%s' is not a host name or address", o.serve.host));
  }
  const v1::GenerateRequest& r = o.generate.request;
  if (o.generate.prompt_given || !r.prompt().empty() || r.prompt_token_ids_size() > 0 ||
      !o.system.empty() || o.think) {
    return absl::InvalidArgumentError(
        "a prompt, --system and --think are for the chat; serve takes them from the requests");
  }
  o.serve.enabled = true;
  return absl::OkStatus();
}

// Positional arguments and cross-flag checks of each command.
absl::Status Finish(CommandLine& cl, const FlagSet::Parsed& parsed) {
  if (cl.command == Command::kServe || (cl.command == Command::kRun && cl.run.serve.enabled)) {
    return FinishServe(cl.run, parsed);
  }
  if (cl.command == Command::kRun) return FinishRun(cl.run, parsed);
  std::vector<std::string> words = parsed.positionals;
  words.insert(words.end(), parsed.after_dashes.begin(), parsed.after_dashes.end());
  switch (cl.command) {
    case Command::kGenerate: {
      GenerateOptions& o = cl.generate;
      if (!words.empty()) {
        if (o.prompt_given || !o.request.prompt().empty()) {
          return absl::InvalidArgumentError("give the prompt once: as words or with --prompt");
        }
        const bool from_stdin = words.size() == 1 && words[0] == "-";
        if (!from_stdin) o.request.set_prompt(JoinWords(words));
        o.prompt_given = !from_stdin;
      }
      if (!o.request.prompt().empty() && o.request.prompt_token_ids_size() > 0) {
        return absl::InvalidArgumentError("give a text prompt or --prompt-tokens, not both");
      }
      if (o.request.prompt() == "-") o.request.clear_prompt();
      return absl::OkStatus();
    }
    case Command::kChat:
      if (!words.empty()) {
        if (cl.chat.message.has_value()) {
          return absl::InvalidArgumentError("give the message once: as words or with --message");
        }
        cl.chat.message = JoinWords(words);
      }
      return absl::OkStatus();
    case Command::kScore:
      if (!words.empty()) {
        if (!cl.score.token_ids.empty()) {
          return absl::InvalidArgumentError("give the token ids once: as arguments or --tokens");
        }
        if (absl::Status s = ParseTokenIds("(arguments)", JoinWords(words), &cl.score.token_ids);
            !s.ok()) {
          return s;
        }
      }
      if (cl.score.token_ids.empty()) {
        return absl::InvalidArgumentError("score needs --tokens LIST");
      }
      if (cl.score.logits_out.empty()) {
        return absl::InvalidArgumentError("score needs --logits-out FILE");
      }
      return absl::OkStatus();
    case Command::kTokenize:
      if (!words.empty()) {
        if (cl.tokenize.text_given) {
          return absl::InvalidArgumentError("give the text once: as words or with --text");
        }
        const bool from_stdin = words.size() == 1 && words[0] == "-";
        if (!from_stdin) cl.tokenize.text = JoinWords(words);
        cl.tokenize.text_given = !from_stdin;
      }
      return absl::OkStatus();
    case Command::kDetokenize:
      if (!words.empty()) {
        if (!cl.detokenize.token_ids.empty()) {
          return absl::InvalidArgumentError("give the token ids once: as arguments or --tokens");
        }
        if (absl::Status s =
                ParseTokenIds("(arguments)", JoinWords(words), &cl.detokenize.token_ids);
            !s.ok()) {
          return s;
        }
      }
      if (cl.detokenize.token_ids.empty()) {
        return absl::InvalidArgumentError("detokenize needs token ids (--tokens LIST)");
      }
      return absl::OkStatus();
    case Command::kStatus:
      if (!words.empty()) return TooManyArguments("status", words);
      if (cl.status.count > 0 && !cl.status.watch) {
        return absl::InvalidArgumentError("--count goes only with --watch");
      }
      return absl::OkStatus();
    case Command::kBench:
      if (!words.empty()) return TooManyArguments("bench", words);
      return absl::OkStatus();
    case Command::kBudget:
      if (!words.empty()) return TooManyArguments("budget", words);
      if (cl.budget.device.empty()) return absl::InvalidArgumentError("budget needs --device DEV");
      if (cl.budget.expert_cache_mib < 0) {
        return absl::InvalidArgumentError("budget needs --expert-cache-mib MIB");
      }
      return absl::OkStatus();
    case Command::kRun:
    case Command::kServe:
    case Command::kNone:
    case Command::kHelp:
      break;
  }
  return absl::OkStatus();
}

}  // namespace

const char* CommandName(Command command) {
  if (command == Command::kHelp) return "help";
  const CommandInfo* info = InfoOf(command);
  return info == nullptr ? "" : info->name;
}

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  SetSamplingDefaults(cl.generate.request.mutable_sampling());
  SetSamplingDefaults(cl.chat.request.mutable_sampling());
  SetSamplingDefaults(cl.run.generate.request.mutable_sampling());

  // Global flags, up to the command's name.
  FlagSet global;
  AddGlobalFlags(global, cl);
  global.AddSwitch({"--version"}, "print the version and exit", [&cl] { cl.version = true; });
  FlagSet::Parsed head;
  const std::vector<std::string> rest(args.size() > 1 ? args.begin() + 1 : args.end(), args.end());
  if (absl::Status s = global.Parse(rest, &head, /*stop_at_positional=*/true); !s.ok()) return s;
  if (!head.after_dashes.empty()) {
    return absl::InvalidArgumentError("'--' before the command (see moetier --help)");
  }
  if (head.positionals.empty()) {
    if (!cl.help && !cl.version) {
      return absl::InvalidArgumentError(
          absl::StrFormat("no command given; one of %s (see moetier --help)", CommandNames()));
    }
    return cl;
  }

  const std::string& name = head.positionals.front();
  const std::vector<std::string> command_args(head.positionals.begin() + 1, head.positionals.end());
  if (name == "help") {
    cl.command = Command::kHelp;
    cl.help = true;
    if (command_args.size() > 1) {
      return absl::InvalidArgumentError("help takes at most one command name");
    }
    if (!command_args.empty()) {
      const CommandInfo* topic = FindCommand(command_args.front());
      if (topic == nullptr) {
        return absl::InvalidArgumentError(absl::StrFormat("unknown command '%s'; one of %s",
                                                          command_args.front(), CommandNames()));
      }
      cl.help_topic = topic->command;
    }
    return cl;
  }
  const CommandInfo* info = FindCommand(name);
  if (info == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown command '%s'; one of %s", name, CommandNames()));
  }
  cl.command = info->command;

  FlagSet fs;
  AddCommandFlags(cl.command, fs, cl);
  AddGlobalFlags(fs, cl);
  FlagSet::Parsed parsed;
  if (absl::Status s = fs.Parse(command_args, &parsed); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(info->name, ": ", s.message()));
  }
  if (cl.help) return cl;
  if (absl::Status s = Finish(cl, parsed); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(info->name, ": ", s.message()));
  }
  if (!cl.global.socket_path.empty() && !cl.global.address.empty()) {
    return absl::InvalidArgumentError("give --socket or --address, not both");
  }
  return cl;
}

std::string Usage(Command command) {
  CommandLine scratch;
  FlagSet global;
  AddGlobalFlags(global, scratch);
  const CommandInfo* info = InfoOf(command);
  if (info == nullptr) {
    std::string out =
        "moetier: the command-line client of moetierd, the moetier daemon.\n"
        "\n"
        "usage: moetier [global flags] COMMAND [flags] [arguments]\n"
        "\n"
        "commands:\n";
    for (const CommandInfo& c : kCommands) {
      absl::StrAppendFormat(&out, "  %-12s%s\n", c.name, c.summary);
    }
    absl::StrAppendFormat(&out, "  %-12s%s\n", "help CMD", "the flags of one command");
    absl::StrAppend(&out, "\nglobal flags (before or after the command):\n", global.Help(),
                    "  --version               print the version and exit\n",
                    "\n"
                    "The daemon listens on a unix socket (mode 0660, group moetier); run\n"
                    "`systemctl start moetierd`, or `moetier run` for a private one\n"
                    "(`moetier serve` for a private one behind the HTTP API).\n"
                    "Exit status: 0 success, 1 error, 2 usage error, 130 interrupted.\n");
    return out;
  }
  FlagSet fs;
  AddCommandFlags(command, fs, scratch);
  return absl::StrCat("usage: moetier ", info->name, " ", info->synopsis, "\n\n", info->details,
                      "\n\nflags:\n", fs.Help(), "\nglobal flags:\n", global.Help());
}

}  // namespace moetier::client
