// What `moetier` was asked to do: the subcommand, its options and the
// global options (where the daemon is, colour, deadline). Parsing only: no
// I/O, so every subcommand's flags are unit-tested.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "moetier/v1/moetier.pb.h"

namespace moetier::client {

enum class Command {
  kNone,  // only global flags (e.g. --help)
  kHelp,
  kGenerate,
  kChat,
  kScore,
  kTokenize,
  kDetokenize,
  kStatus,
  kBench,
  kBudget,
  kRun,
  kServe,
};

enum class ColorMode { kAuto, kAlways, kNever };

inline constexpr const char* kDefaultSocketPath = "/run/moetier/moetier.sock";

struct GlobalOptions {
  std::string socket_path;  // --socket; empty: $MOETIER_SOCKET, else kDefaultSocketPath
  std::string address;      // --address HOST:PORT (TCP instead of the socket)
  int64_t timeout_ms = 0;   // --timeout-ms: deadline of each call; 0: none
  ColorMode color = ColorMode::kAuto;
  int width = -1;  // --width; -1: the terminal's, 0: no wrapping
};

// Sampling defaults match moetier-worker --standalone.
struct GenerateOptions {
  v1::GenerateRequest request;  // prompt or prompt_token_ids, max_new_tokens, sampling
  bool prompt_given = false;    // else the prompt is read from stdin
  bool stats = false;           // --stats: final statistics on stderr
};

struct ChatOptions {
  v1::ChatRequest request;             // max_new_tokens, sampling, enable_thinking; no messages
  std::string system;                  // --system
  std::optional<std::string> message;  // --message: one-shot
  bool stats = false;
};

struct ScoreOptions {
  std::vector<int32_t> token_ids;
  std::string logits_out;
};

struct TokenizeOptions {
  std::string text;
  bool text_given = false;  // else stdin
  bool special = false;     // parse special tokens such as <|im_start|>
};

struct DetokenizeOptions {
  std::vector<int32_t> token_ids;
  bool special = false;  // render special tokens
};

struct StatusOptions {
  bool watch = false;
  uint32_t interval_ms = 1000;
  bool json = false;
  int64_t count = 0;  // --count: updates to show with --watch; 0: until Ctrl-C
};

struct BenchOptions {
  int64_t runs = 3;
  int64_t warmup = 1;
  int64_t prefill_tokens = 512;       // prompt length of the prefill-heavy request
  int64_t decode_tokens = 128;        // max_new_tokens of the decode-heavy request
  int64_t decode_prompt_tokens = 16;  // its prompt length
};

struct BudgetOptions {
  std::string device;             // "cuda:0"
  int64_t expert_cache_mib = -1;  // required
};

// `moetier serve` (or `run --serve`): the private daemon's HTTP API.
struct ServeOptions {
  bool enabled = false;
  std::string host = "127.0.0.1";  // --host; loopback unless asked otherwise
  int64_t port = 8080;             // --port; 0: a free one, read back from the daemon's log
  std::string api_keys_file;       // --api-keys-file; empty: no keys asked for
};

// With a prompt, one generation as `moetier generate` makes it; without, an
// interactive chat (commands/chat_loop.h); with serve.enabled, the HTTP API
// until Ctrl-C (commands/serve_command.h).
struct RunOptions {
  std::string model_path;        // --model or the first word; empty: a cached synthetic model
  bool model_from_word = false;  // the model was the first positional word
  std::string moetierd_path;     // --moetierd; empty: search
  std::string worker_path;       // --worker; empty: search
  std::string synth_path;        // --synth; empty: search
  std::vector<std::string> daemon_args;  // --daemon-arg, repeated
  int64_t start_timeout_s = 600;
  int64_t ctx_tokens = 0;  // --ctx: the worker's context in tokens; 0: the worker's default
  int64_t threads = 0;     // --threads: the CPU worker's threads; 0: the worker's default
  // llama.cpp's rope flags, passed to the worker as they are; empty: the
  // file's rope.scaling keys.
  std::string rope_scaling;   // --rope-scaling none|linear|yarn
  std::string rope_scale;     // --rope-scale X
  int64_t yarn_orig_ctx = 0;  // --yarn-orig-ctx N
  // Prompt, sampling, -n and --stats, given directly or after "--". The
  // chat takes its sampling and max_new_tokens from here.
  GenerateOptions generate;
  bool one_shot = false;  // a prompt was given (text, token ids, or '-' for stdin)
  std::string system;     // --system: the chat's system message
  bool think = false;     // --think: the chat's enable_thinking
  ServeOptions serve;
};

struct CommandLine {
  Command command = Command::kNone;
  bool help = false;                    // --help: print usage of `command` (or the overview)
  Command help_topic = Command::kNone;  // `moetier help CMD`
  bool version = false;
  GlobalOptions global;
  GenerateOptions generate;
  ChatOptions chat;
  ScoreOptions score;
  TokenizeOptions tokenize;
  DetokenizeOptions detokenize;
  StatusOptions status;
  BenchOptions bench;
  BudgetOptions budget;
  RunOptions run;  // also `serve`'s
};

// args[0] is the program name. Errors are one line naming the flag or
// argument and what is wrong with it.
absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args);

// `moetier --help` (kNone or kHelp) or `moetier CMD --help`.
std::string Usage(Command command);

// The subcommand's name as typed ("generate"); "" for kNone.
const char* CommandName(Command command);

}  // namespace moetier::client
