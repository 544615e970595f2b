// Command line of moetier-worker. The worker normally runs under moetierd,
// which starts it in daemon mode (--daemon plus the flags of
// proto/store/worker_channel.h and any configured extra flags); --standalone
// lets it load a GGUF file itself to score tokens, tokenize or generate text,
// which is how outside checks and people exercise one engine.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/expert_cache_policy.h"
#include "cache/miss_cost_model.h"
#include "engine/forward_engine.h"
#include "model/kv_cache_types.h"
#include "model/rope_scaling.h"
#include "request/sampling_params.h"

namespace moetier {

enum class StandaloneMode {
  kNone,      // no mode flag given
  kLogits,    // --tokens ... --logits-out FILE
  kTokenize,  // --tokenize TEXT
  kGenerate,  // --prompt TEXT
};

enum class BackendKind { kCpu, kReference, kCuda };

// --expert-cache-mib: how big the worker's expert cache is.
struct ExpertCacheSize {
  enum class Kind {
    kAuto,     // the device's choice: none on the cpu
    kMib,      // `value` MiB (0: no cache)
    kPercent,  // `value` percent of all experts' bytes
  };
  Kind kind = Kind::kAuto;
  double value = 0;
};

// The default --prefix-cache-mib.
inline constexpr int kDefaultPrefixCacheMib = 1024;

struct WorkerOptions {
  bool help = false;
  bool standalone = false;
  // --check-model FILE: only say whether this build can serve FILE.
  std::string check_model_path;
  // Daemon mode (serve/daemon_mode.h).
  bool daemon = false;
  std::string control_socket;  // --control-socket
  int worker_index = -1;       // --worker-index
  std::string device;          // --device: "cpu" or "cuda:N"
  std::string model_path;
  StandaloneMode mode = StandaloneMode::kNone;
  std::vector<int32_t> tokens;  // --tokens
  std::string logits_out;       // --logits-out
  std::string text;             // --tokenize or --prompt
  bool chat = false;
  int n_predict = 64;  // -n; -1: until end of generation or a full context
  // The sampling flags over the command-line defaults; checked by
  // ParseWorkerArgs, so the generation uses them as they are.
  SamplingParams sampling = kCommandLineSamplingDefaults;
  bool seed_given = false;  // without --seed the seed is drawn at random
  BackendKind backend = BackendKind::kCpu;
  int n_threads = 0;  // 0: one per hardware thread
  WeightPages weight_pages = WeightPages::kAuto;  // --huge-pages
  int ctx = 0;        // 0: min(kDefaultCtx, the model's training context)
  int ubatch_size = 0;  // --ubatch-size: positions per forward call; 0: no limit
  // --parallel: sequences computed together in daemon mode (each holds its
  // own --ctx of KV cache and recurrent state).
  int parallel = 1;
  // --prefix-cache-mib: the budget of generation/prefix_pool.h (daemon mode).
  int prefix_cache_mib = kDefaultPrefixCacheMib;
  KvCacheTypes kv_types;  // --cache-type-k, --cache-type-v
  // --rope-scaling, --rope-scale, --yarn-orig-ctx over the file's keys.
  RopeScalingOverride rope_scaling;
  // --activations: q8 (false, the default) or q8x2 (true) for the CPU kernels.
  bool residual_activations = false;
  bool activations_given = false;
  // Routing traces (engine/routing_trace_hooks.h), cpu backend only: record
  // the router's choices to a file, or replay a file's in place of the
  // router (a benchmark mode; every output says so).
  std::string routing_trace_out;   // --routing-trace-out
  std::string routing_from_trace;  // --routing-from-trace
  // --prefetch-accuracy: how well the prefetch's prediction of the next
  // layer matches the replayed trace; negative = not given (the default).
  double prefetch_accuracy = -1;
  // The expert cache (cache/expert_slot_cache.h); cpu backend only.
  ExpertCacheSize expert_cache;                           // --expert-cache-mib
  MissPolicy miss_policy = MissPolicy::kAuto;             // --miss-policy
  bool prefetch = true;                                   // --prefetch
  ExpertPolicyKind cache_policy = kDefaultExpertPolicy;   // --cache-policy
  int n_cpu_moe = -1;                                     // --n-cpu-moe; -1: dynamic cache
  // Whether any of the cache flags above was given.
  bool cache_flags_given = false;
};

inline constexpr int kDefaultCtx = 4096;
// The largest --ctx (and rope-stretched context) a worker accepts.
inline constexpr int kMaxCtx = 1 << 24;

// Parses argv. Errors are one line naming the flag and the problem. Unless
// --help is given, checks that the flags form one complete standalone
// command (with --standalone; the sampling flags' values are checked here,
// with proto/request/sampling_params.h's ValidateSamplingParams) or daemon
// command (with --daemon, which takes only --model, --control-socket,
// --worker-index, --device, --threads, --ctx, --ubatch-size, the KV cache
// types, --activations, --huge-pages, the routing
// trace flags and the expert cache flags) or model check (--check-model
// FILE, alone).
absl::StatusOr<WorkerOptions> ParseWorkerArgs(int argc, const char* const* argv);

// The --help text.
std::string WorkerUsage();

}  // namespace moetier
