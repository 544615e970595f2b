#include "standalone/options.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "base/flags/flag_set.h"
#include "generation/generation_batch.h"
#include "store/store_layout.h"
#include "store/worker_channel.h"

namespace moetier {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kMaxParallel = 256;
constexpr int kMaxPrefixCacheMib = 1 << 20;

absl::StatusOr<int> ParseInt(std::string_view flag, std::string_view value, int min, int max) {
  int64_t v = 0;
  if (absl::Status s = ParseIntFlag(flag, value, min, max, &v); !s.ok()) return s;
  return static_cast<int>(v);
}

absl::StatusOr<float> ParseFloat(std::string_view flag, std::string_view value) {
  float v = 0.0f;
  if (absl::Status s = ParseFloatFlag(flag, value, &v); !s.ok()) return s;
  return v;
}

absl::StatusOr<std::vector<int32_t>> ParseTokenList(std::string_view flag, std::string_view value) {
  std::vector<int32_t> ids;
  if (absl::Status s = ParseTokenIds(flag, value, &ids); !s.ok()) return s;
  return ids;
}

// "cpu" or "cuda:N".
bool IsDeviceName(std::string_view v) {
  if (v == "cpu") return true;
  constexpr std::string_view kCuda = "cuda:";
  if (v.substr(0, kCuda.size()) != kCuda || v.size() == kCuda.size()) return false;
  int ordinal = 0;
  return absl::SimpleAtoi(absl::string_view(v.data() + kCuda.size(), v.size() - kCuda.size()),
                          &ordinal) &&
         ordinal >= 0 && ordinal < 1024;
}

// The flags daemon mode accepts; every other one belongs to --standalone.
constexpr std::string_view kDaemonFlags[] = {store::kWorkerFlagDaemonMode,
                                             store::kWorkerFlagControlSocket,
                                             store::kWorkerFlagWorkerIndex,
                                             store::kWorkerFlagDevice,
                                             store::kWorkerFlagModel,
                                             "--threads",
                                             "--ctx",
                                             "--ubatch-size",
                                             "--parallel",
                                             "--prefix-cache-mib",
                                             "--cache-type-k",
                                             "--cache-type-v",
                                             "--rope-scaling",
                                             "--rope-scale",
                                             "--yarn-orig-ctx",
                                             "--activations",
                                             "--huge-pages",
                                             "--routing-trace-out",
                                             "--routing-from-trace",
                                             "--prefetch-accuracy",
                                             "--expert-cache-mib",
                                             "--miss-policy",
                                             "--prefetch",
                                             "--cache-policy",
                                             "--n-cpu-moe",
                                             "--help",
                                             "-h"};
constexpr std::string_view kCacheFlags[] = {"--expert-cache-mib", "--miss-policy", "--prefetch",
                                            "--cache-policy", "--n-cpu-moe"};

// "N" MiB, "P%" of all experts' bytes, or "auto".
absl::StatusOr<ExpertCacheSize> ParseCacheSize(std::string_view flag, std::string_view v) {
  ExpertCacheSize size;
  if (v == "auto") return size;
  double number = 0;
  const bool percent = !v.empty() && v.back() == '%';
  const std::string_view digits = percent ? v.substr(0, v.size() - 1) : v;
  if (!absl::SimpleAtod(absl::string_view(digits.data(), digits.size()), &number) ||
      !std::isfinite(number) || number < 0) {
    return FlagError(flag, absl::StrFormat("'%s' is not a size: give MiB (e.g. 8192), a "
                                           "percentage of the experts' bytes (e.g. 25%%) or auto",
                                           v));
  }
  if (percent && number > 100) return FlagError(flag, "a percentage above 100%");
  size.kind = percent ? ExpertCacheSize::Kind::kPercent : ExpertCacheSize::Kind::kMib;
  size.value = number;
  return size;
}

// The flags only daemon mode accepts.
constexpr std::string_view kDaemonOnlyFlags[] = {
    store::kWorkerFlagDaemonMode, store::kWorkerFlagControlSocket, store::kWorkerFlagWorkerIndex,
    "--prefix-cache-mib"};

struct Flag {
  std::string_view name;  // as typed, with its dashes
  bool takes_value;
  std::function<absl::Status(std::string_view flag, std::string_view value)> apply;
};

// Assigns the parsed value on success.
template <typename T>
absl::Status Assign(absl::StatusOr<T> parsed, T& out) {
  if (!parsed.ok()) return parsed.status();
  out = *std::move(parsed);
  return absl::OkStatus();
}

absl::Status AssignKvCacheType(std::string_view flag, std::string_view value, TensorType& out) {
  absl::StatusOr<TensorType> type = ParseKvCacheType(value);
  if (!type.ok()) return FlagError(flag, std::string(type.status().message()));
  out = *type;
  return absl::OkStatus();
}

std::vector<Flag> MakeFlags(WorkerOptions& o) {
  const auto set_mode = [&o](std::string_view flag, StandaloneMode mode) -> absl::Status {
    if (o.mode != StandaloneMode::kNone) {
      return FlagError(flag, "only one of --tokens, --tokenize and --prompt may be given");
    }
    o.mode = mode;
    return absl::OkStatus();
  };
  const int int_max = std::numeric_limits<int>::max();
  // The sampling flags' ranges are checked once all are parsed (CheckStandalone).
  const int int_min = std::numeric_limits<int>::min();
  return {
      {"--help", false,
       [&o](auto, auto) {
         o.help = true;
         return absl::OkStatus();
       }},
      {"-h", false,
       [&o](auto, auto) {
         o.help = true;
         return absl::OkStatus();
       }},
      {"--standalone", false,
       [&o](auto, auto) {
         o.standalone = true;
         return absl::OkStatus();
       }},
      {store::kWorkerFlagDaemonMode, false,
       [&o](auto, auto) {
         o.daemon = true;
         return absl::OkStatus();
       }},
      {store::kWorkerFlagControlSocket, true,
       [&o](std::string_view f, std::string_view v) {
         if (v.empty()) return FlagError(f, "the path is empty");
         o.control_socket = std::string(v);
         return absl::OkStatus();
       }},
      {store::kWorkerFlagWorkerIndex, true,
       [&o](std::string_view f, std::string_view v) {
         return Assign(ParseInt(f, v, 0, static_cast<int>(store::kMaxWorkers) - 1), o.worker_index);
       }},
      {store::kWorkerFlagDevice, true,
       [&o](std::string_view f, std::string_view v) {
         if (!IsDeviceName(v)) {
           return FlagError(f, absl::StrFormat("'%s' is not a device (use cpu or cuda:N)", v));
         }
         o.device = std::string(v);
         return absl::OkStatus();
       }},
      {store::kWorkerFlagCheckModel, true,
       [&o](std::string_view f, std::string_view v) {
         if (v.empty()) return FlagError(f, "the path is empty");
         o.check_model_path = std::string(v);
         return absl::OkStatus();
       }},
      {"--model", true,
       [&o](std::string_view f, std::string_view v) {
         if (v.empty()) return FlagError(f, "the path is empty");
         o.model_path = std::string(v);
         return absl::OkStatus();
       }},
      {"--tokens", true,
       [&o, set_mode](std::string_view f, std::string_view v) {
         if (absl::Status s = set_mode(f, StandaloneMode::kLogits); !s.ok()) return s;
         return Assign(ParseTokenList(f, v), o.tokens);
       }},
      {"--logits-out", true,
       [&o](std::string_view f, std::string_view v) {
         if (v.empty()) return FlagError(f, "the path is empty");
         o.logits_out = std::string(v);
         return absl::OkStatus();
       }},
      {"--tokenize", true,
       [&o, set_mode](std::string_view f, std::string_view v) {
         if (absl::Status s = set_mode(f, StandaloneMode::kTokenize); !s.ok()) return s;
         o.text = std::string(v);
         return absl::OkStatus();
       }},
      {"--prompt", true,
       [&o, set_mode](std::string_view f, std::string_view v) {
         if (absl::Status s = set_mode(f, StandaloneMode::kGenerate); !s.ok()) return s;
         o.text = std::string(v);
         return absl::OkStatus();
       }},
      {"--chat", false,
       [&o](auto, auto) {
         o.chat = true;
         return absl::OkStatus();
       }},
      {"-n", true,
       [&o, int_max](std::string_view f, std::string_view v) {
         return Assign(ParseInt(f, v, -1, int_max), o.n_predict);
       }},
      {"--n-predict", true,
       [&o, int_max](std::string_view f, std::string_view v) {
         return Assign(ParseInt(f, v, -1, int_max), o.n_predict);
       }},
      {"--temp", true,
       [&o](std::string_view f, std::string_view v) {
         return Assign(ParseFloat(f, v), o.sampling.temperature);
       }},
      {"--top-k", true,
       [&o, int_min, int_max](std::string_view f, std::string_view v) {
         return Assign(ParseInt(f, v, int_min, int_max), o.sampling.top_k);
       }},
      {"--top-p", true,
       [&o](std::string_view f, std::string_view v) {
         return Assign(ParseFloat(f, v), o.sampling.top_p);
       }},
      {"--min-p", true,
       [&o](std::string_view f, std::string_view v) {
         return Assign(ParseFloat(f, v), o.sampling.min_p);
       }},
      {"--repeat-penalty", true,
       [&o](std::string_view f, std::string_view v) {
         return Assign(ParseFloat(f, v), o.sampling.repeat_penalty);
       }},
      {"--repeat-last-n", true,
       [&o, int_min, int_max](std::string_view f, std::string_view v) {
         return Assign(ParseInt(f, v, int_min, int_max), o.sampling.repeat_last_n);
       }},
      {"--seed", true,
       [&o](std::string_view f, std::string_view v) {
         uint64_t seed = 0;
         if (absl::Status s = ParseUint64Flag(f, v, &seed); !s.ok()) return s;
         o.sampling.seed = seed;
         o.seed_given = true;
         return absl::OkStatus();
       }},
      {"--backend", true,
       [&o](std::string_view f, std::string_view v) {
         if (v == "cpu") {
           o.backend = BackendKind::kCpu;
         } else if (v == "reference") {
           o.backend = BackendKind::kReference;
         } else {
           return FlagError(f, absl::StrFormat("unknown backend '%s' (use cpu or reference)", v));
         }
         return absl::OkStatus();
       }},
      {"--threads", true,
       [&o](std::string_view f, std::string_view v) {
         return Assign(ParseInt(f, v, 1, kMaxThreads), o.n_threads);
       }},
      {"--huge-pages", true,
       [&o](std::string_view f, std::string_view v) {
         if (v == "auto") {
           o.weight_pages = WeightPages::kAuto;
         } else if (v == "on") {
           o.weight_pages = WeightPages::kHuge;
         } else if (v == "off") {
           o.weight_pages = WeightPages::kMapped;
         } else {
           return FlagError(f, absl::StrFormat("'%s' is not auto, on or off", v));
         }
         return absl::OkStatus();
       }},
      {"--ctx", true,
       [&o](std::string_view f, std::string_view v) {
         return Assign(ParseInt(f, v, 1, kMaxCtx), o.ctx);
       }},
      {"--activations", true,
       [&o](std::string_view f, std::string_view v) {
         if (v != "q8" && v != "q8x2") {
           return FlagError(f, absl::StrFormat("'%s' is not q8 or q8x2", v));
         }
         o.residual_activations = v == "q8x2";
         o.activations_given = true;
         return absl::OkStatus();
       }},
      {"--ubatch-size", true,
       [&o](std::string_view f, std::string_view v) {
         return Assign(ParseInt(f, v, 1, kMaxCtx), o.ubatch_size);
       }},
      {"--parallel", true,
       [&o](std::string_view f, std::string_view v) {
         return Assign(ParseInt(f, v, 1, kMaxParallel), o.parallel);
       }},
      {"--prefix-cache-mib", true,
       [&o](std::string_view f, std::string_view v) {
         return Assign(ParseInt(f, v, 0, kMaxPrefixCacheMib), o.prefix_cache_mib);
       }},
      {"--rope-scaling", true,
       [&o](std::string_view f, std::string_view v) {
         if (v != "none" && v != "linear" && v != "yarn") {
           return FlagError(f, absl::StrFormat("'%s' is not none, linear or yarn", v));
         }
         o.rope_scaling.type = std::string(v);
         return absl::OkStatus();
       }},
      {"--rope-scale", true,
       [&o](std::string_view f, std::string_view v) {
         double factor = 0;
         if (absl::Status s = ParseDoubleFlag(f, v, 1e-3, 1e6, &factor); !s.ok()) return s;
         o.rope_scaling.factor = factor;
         return absl::OkStatus();
       }},
      {"--yarn-orig-ctx", true,
       [&o](std::string_view f, std::string_view v) {
         int n = 0;
         if (absl::Status s = Assign(ParseInt(f, v, 1, kMaxCtx), n); !s.ok()) return s;
         o.rope_scaling.original_context = n;
         return absl::OkStatus();
       }},
      {"--cache-type-k", true,
       [&o](std::string_view f, std::string_view v) {
         return AssignKvCacheType(f, v, o.kv_types.k);
       }},
      {"--cache-type-v", true,
       [&o](std::string_view f, std::string_view v) {
         return AssignKvCacheType(f, v, o.kv_types.v);
       }},
      {"--routing-trace-out", true,
       [&o](std::string_view f, std::string_view v) {
         if (v.empty()) return FlagError(f, "the path is empty");
         o.routing_trace_out = std::string(v);
         return absl::OkStatus();
       }},
      {"--routing-from-trace", true,
       [&o](std::string_view f, std::string_view v) {
         if (v.empty()) return FlagError(f, "the path is empty");
         o.routing_from_trace = std::string(v);
         return absl::OkStatus();
       }},
      {"--prefetch-accuracy", true,
       [&o](std::string_view f, std::string_view v) {
         absl::StatusOr<float> a = ParseFloat(f, v);
         if (!a.ok()) return a.status();
         if (!(*a >= 0 && *a <= 1)) {
           return FlagError(f, absl::StrFormat("'%s' is not in [0, 1]", v));
         }
         o.prefetch_accuracy = *a;
         return absl::OkStatus();
       }},
      {"--expert-cache-mib", true,
       [&o](std::string_view f, std::string_view v) {
         return Assign(ParseCacheSize(f, v), o.expert_cache);
       }},
      {"--miss-policy", true,
       [&o](std::string_view f, std::string_view v) {
         absl::StatusOr<MissPolicy> p = ParseMissPolicy(v);
         if (!p.ok()) return FlagError(f, std::string(p.status().message()));
         o.miss_policy = *p;
         return absl::OkStatus();
       }},
      {"--prefetch", true,
       [&o](std::string_view f, std::string_view v) {
         if (v != "on" && v != "off")
           return FlagError(f, absl::StrFormat("'%s' is not on or off", v));
         o.prefetch = v == "on";
         return absl::OkStatus();
       }},
      {"--cache-policy", true,
       [&o](std::string_view f, std::string_view v) {
         absl::StatusOr<ExpertPolicyKind> p = ParseExpertPolicyKind(v);
         if (!p.ok()) return FlagError(f, std::string(p.status().message()));
         o.cache_policy = *p;
         return absl::OkStatus();
       }},
      {"--n-cpu-moe", true,
       [&o](std::string_view f, std::string_view v) {
         return Assign(ParseInt(f, v, 0, static_cast<int>(store::kMaxLayers)), o.n_cpu_moe);
       }},
  };
}

// What the sampling flags are called in errors.
constexpr SamplingFieldNames kSamplingFlagNames{
    .temperature = "flag --temp",
    .top_k = "flag --top-k",
    .top_p = "flag --top-p",
    .min_p = "flag --min-p",
    .repeat_penalty = "flag --repeat-penalty",
    .repeat_last_n = "flag --repeat-last-n",
};

// The routing trace flags among themselves, in either mode.
absl::Status CheckTraceFlagsAgree(const WorkerOptions& o) {
  if (!o.routing_trace_out.empty() && o.routing_trace_out == o.routing_from_trace) {
    return absl::InvalidArgumentError(
        "--routing-trace-out and --routing-from-trace name the same file; give two files");
  }
  if (o.prefetch_accuracy >= 0 && o.routing_from_trace.empty()) {
    return absl::InvalidArgumentError(
        "--prefetch-accuracy goes with --routing-from-trace (it degrades the trace's own next "
        "layer; without a trace the next layer's router predicts)");
  }
  return absl::OkStatus();
}

// Checks that the flags make one complete standalone command.
absl::Status CheckStandalone(const WorkerOptions& o) {
  if (o.model_path.empty()) return absl::InvalidArgumentError("--model FILE is required");
  if (absl::Status s = ValidateSamplingParams(o.sampling, kSamplingFlagNames); !s.ok()) return s;
  switch (o.mode) {
    case StandaloneMode::kNone:
      return absl::InvalidArgumentError(
          "give one of --tokens LIST (with --logits-out FILE), --tokenize TEXT or --prompt TEXT");
    case StandaloneMode::kLogits:
      if (o.tokens.empty()) return absl::InvalidArgumentError("--tokens is empty");
      if (o.logits_out.empty()) {
        return absl::InvalidArgumentError("--tokens needs --logits-out FILE");
      }
      break;
    case StandaloneMode::kTokenize:
    case StandaloneMode::kGenerate:
      if (!o.logits_out.empty()) {
        return absl::InvalidArgumentError("--logits-out goes only with --tokens");
      }
      break;
  }
  if (o.chat && o.mode != StandaloneMode::kGenerate) {
    return absl::InvalidArgumentError("--chat goes only with --prompt");
  }
  const struct {
    std::string_view flag;
    const std::string* path;
  } trace_flags[] = {{"--routing-trace-out", &o.routing_trace_out},
                     {"--routing-from-trace", &o.routing_from_trace}};
  for (const auto& [flag, path] : trace_flags) {
    if (path->empty()) continue;
    if (o.mode == StandaloneMode::kTokenize) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s goes only with --tokens or --prompt (tokenizing routes nothing)",
                          flag));
    }
    if (o.backend == BackendKind::kReference) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s needs the cpu or cuda backend (the reference has no routing hook)", flag));
    }
  }
  if (absl::Status s = CheckTraceFlagsAgree(o); !s.ok()) return s;
  if (o.cache_flags_given && o.backend == BackendKind::kReference) {
    return absl::InvalidArgumentError(
        "the expert cache flags need the cpu or cuda backend (the reference reads every weight "
        "itself)");
  }
  return absl::OkStatus();
}

// Checks that the flags make one complete daemon-mode command.
absl::Status CheckDaemon(const WorkerOptions& o, const std::vector<std::string_view>& given) {
  for (std::string_view flag : given) {
    if (std::find(std::begin(kDaemonFlags), std::end(kDaemonFlags), flag) ==
        std::end(kDaemonFlags)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "flag %s goes only with --standalone; daemon mode takes --model, --control-socket, "
          "--worker-index, --device, --threads, --ctx, --ubatch-size, --parallel, "
          "--prefix-cache-mib, --cache-type-k, "
          "--cache-type-v, --activations, --huge-pages, "
          "the routing trace flags and the expert cache flags",
          flag));
    }
  }
  if (o.control_socket.empty()) {
    return absl::InvalidArgumentError("--daemon needs --control-socket=PATH");
  }
  if (o.worker_index < 0) return absl::InvalidArgumentError("--daemon needs --worker-index=N");
  if (o.device.empty()) return absl::InvalidArgumentError("--daemon needs --device=cpu|cuda:N");
  if (o.model_path.empty()) return absl::InvalidArgumentError("--daemon needs --model=PATH");
  if (absl::Status s = CheckTraceFlagsAgree(o); !s.ok()) return s;
  if (o.parallel > 1 && (!o.routing_trace_out.empty() || !o.routing_from_trace.empty())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--parallel %d with a routing trace flag: a trace follows one sequence at a time; "
        "record or replay it with --parallel 1",
        o.parallel));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkerOptions> ParseWorkerArgs(int argc, const char* const* argv) {
  WorkerOptions options;
  const std::vector<Flag> flags = MakeFlags(options);
  std::vector<std::string_view> given;  // flag names as typed
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-') {
      return absl::InvalidArgumentError(
          absl::StrFormat("unexpected argument '%s' (flags start with --; see --help)", arg));
    }
    std::string_view name = arg;
    std::string_view value;
    bool has_inline_value = false;
    if (const size_t eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_inline_value = true;
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("unknown flag '%s' (see --help)", name));
    }
    if (flag->takes_value && !has_inline_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrFormat("flag %s needs a value", name));
      }
      value = argv[++i];
    } else if (!flag->takes_value && has_inline_value) {
      return absl::InvalidArgumentError(absl::StrFormat("flag %s takes no value", name));
    }
    if (absl::Status s = flag->apply(name, value); !s.ok()) return s;
    given.push_back(flag->name);
  }
  if (options.help) return options;
  if (!options.check_model_path.empty()) {
    for (std::string_view flag : given) {
      if (flag != store::kWorkerFlagCheckModel && flag != store::kWorkerFlagDevice) {
        return absl::InvalidArgumentError("--check-model FILE takes no other flag than --device");
      }
    }
    return options;
  }
  for (std::string_view flag : given) {
    if (std::find(std::begin(kCacheFlags), std::end(kCacheFlags), flag) != std::end(kCacheFlags)) {
      options.cache_flags_given = true;
    }
  }
  if (options.standalone && options.daemon) {
    return absl::InvalidArgumentError("--standalone and --daemon exclude each other");
  }
  if (options.standalone) {
    for (std::string_view flag : given) {
      if (std::find(std::begin(kDaemonOnlyFlags), std::end(kDaemonOnlyFlags), flag) !=
          std::end(kDaemonOnlyFlags)) {
        return absl::InvalidArgumentError(absl::StrFormat("flag %s goes only with --daemon", flag));
      }
    }
    if (!options.device.empty() && options.device != "cpu") {
      if (options.backend == BackendKind::kReference) {
        return absl::InvalidArgumentError(
            "--backend reference runs on the cpu; drop --device or the backend");
      }
      options.backend = BackendKind::kCuda;
    }
    if (absl::Status s = CheckStandalone(options); !s.ok()) return s;
  }
  if (options.daemon) {
    if (absl::Status s = CheckDaemon(options, given); !s.ok()) return s;
    if (options.device != "cpu") options.backend = BackendKind::kCuda;
  }
  return options;
}

std::string WorkerUsage() {
  return absl::StrFormat(
      R"(moetier-worker: runs one compute device's forward pass for moetierd.

Under moetierd the daemon starts the workers itself, in daemon mode. --standalone
runs one engine directly on a GGUF file, for scoring, tokenizing and generating.

Usage:
  moetier-worker --daemon --control-socket=PATH --worker-index=N --device=DEV --model=FILE
                 [--threads N] [--ctx N] [--ubatch-size N] [--parallel N]
                 [--prefix-cache-mib N]
                 [--cache-type-k T] [--cache-type-v T] [--activations A]
                 [--huge-pages MODE] [rope scaling flags] [routing trace flags]
                 [expert cache flags]
  moetier-worker --check-model FILE [--device DEV]
  moetier-worker --standalone --model FILE --tokens 1,2,3 --logits-out OUT
  moetier-worker --standalone --model FILE --tokenize TEXT
  moetier-worker --standalone --model FILE --prompt TEXT [-n N] [--chat] [sampling flags]

Daemon mode (started by moetierd; the extra flags come from worker_extra_args):
  --daemon             join moetierd, compute with the experts of its shared
                       store, and serve its requests until it closes the
                       control channel (exit 0), or exit 1 on a failure
  --control-socket P   the daemon's unix socket to join on
  --worker-index N     this worker's slot in the store (0..%d)
  --device DEV         cpu, or cuda:N (the N-th CUDA device: dense weights
                       and the expert cache in its memory)
  --model FILE         the GGUF file moetierd serves (hyperparameters and
                       dense weights are read from it; the experts come from
                       the store, which must hold the same model)
  --parallel N         Generate requests computed together, one engine pass
                       per token for all of them (default 1, at most %d).
                       Each holds its own --ctx of KV cache and recurrent
                       state, allocated at start; a request joins at the next
                       token, its prompt run %d positions per step (or
                       --ubatch-size) between the others' tokens. moetierd
                       sends this worker up to N requests at once. Not with
                       the routing trace flags
  --prefix-cache-mib N keep up to N MiB (default %d; 0: none) of copied
                       sequence states, so that a prompt starting with the
                       same tokens as an earlier one (a system prompt, tool
                       definitions, another conversation's history) computes
                       only the rest, even while others run; the least
                       recently used go first. A model with recurrent layers
                       keeps a state where prompts fork and at each prompt's
                       checkpoint; attention-only models keep whole prompts.
                       The Done's cached_prompt_tokens counts what was reused
  --threads, --ctx, --ubatch-size, --cache-type-k, --cache-type-v,
  --activations and --huge-pages as below
  (huge pages hold the dense weights only; the experts stay in the store)
  --routing-trace-out and --routing-from-trace as below: every request's
  tokens go to the one trace file, in the order they are computed; a
  {worker} in the path becomes the worker index (give it when moetierd runs
  several workers, which all get the same extra flags)
  the expert cache flags as below

Modes (exactly one):
  --tokens LIST        comma-separated token ids, run at positions 0..n-1
  --logits-out FILE    with --tokens: write the logits as raw little-endian
                       float32, one row of n_vocab values per position,
                       row-major, nothing else in the file
  --tokenize TEXT      print TEXT's token ids, comma-separated, on one line
                       (special tokens such as <|im_start|> are parsed)
  --prompt TEXT        generate a continuation of TEXT and stream it to stdout

Generation:
  -n, --n-predict N    tokens to generate (default 64; -1: until an
                       end-of-generation token or a full context)
  --chat               render TEXT as one user message through the model's
                       chat template, with the assistant generation prompt
  --temp T             temperature (default 0.8; 0: greedy)
  --top-k K            keep the K most likely tokens (default 40; 0: off)
  --top-p P            keep the smallest set with probability >= P
                       (default 0.95; 1: off)
  --min-p M            drop tokens below M x the top probability
                       (default 0.05; 0: off)
  --repeat-penalty R   divide positive / multiply negative logits of recently
                       seen tokens by R (default 1: off)
  --repeat-last-n N    how many recent tokens (prompt included) the penalty
                       looks at (default 64; 0: off)
  --seed S             random seed; the same seed gives the same text
                       (default: drawn at random and printed to stderr)

Engine:
  --model FILE         the GGUF model (first shard of a split model)
  --backend NAME       cpu (default) or reference (the plain fp32 oracle:
                       exact but slow, and holds every weight as fp32)
  --device DEV         cpu (default) or cuda:N: the N-th CUDA device (needs a
                       worker built with CUDA). Without a cache flag every
                       expert is uploaded to the device
  --threads N          worker threads (default: one per hardware thread; on
                       cuda: threads for misses computed on the host)
  --ctx N              KV cache length in tokens (default: %d, at most the
                       model's training context, or the one --rope-scale
                       stretches it to)
  --ubatch-size N      at most N positions per forward call, for the prompt
                       and for --tokens (default: the whole prompt at once,
                       --tokens 32 at a time); 1 runs every position through
                       the decode path. Results agree within rounding at any
                       N; smaller N needs less scratch memory, larger N
                       prefills faster
  --rope-scaling T     none, linear or yarn: how the rotary angles are
                       stretched past the training context, in place of the
                       file's rope.scaling.type (llama.cpp's flag)
  --rope-scale X       the stretch factor, in place of rope.scaling.factor;
                       with linear or yarn and X above 1, --ctx may reach
                       the original context x X. Qwen3's 128K setting:
                       --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768
  --yarn-orig-ctx N    the context the model was trained on before the
                       stretch, in place of rope.scaling.original_context_length
                       (default: the file's, else its context_length)
  --cache-type-k T     how the KV cache stores keys: f32 (default, exact),
                       f16, q8_0 or q4_0 (llama.cpp's block formats: about
                       1/4 and 1/8 of f32's bytes). The cpu and cuda
                       backends have them all, the reference f32;
                       q8_0 and q4_0 need a head size that is a multiple of
                       32. Attention reads the stored rows directly
  --cache-type-v T     the same for values
  --activations A      how the CPU kernels quantize activations for quantized
                       weights: q8 (default) as llama.cpp does (Q8_K/Q8_0),
                       mean KL from exact logits about 1e-3..1e-2; q8x2 adds
                       a second int8 plane with the first one's rounding
                       error (about 15 bits), mean KL about 1e-8, at roughly
                       half the prompt speed and 80-90%% of the decode speed
                       on a 2-core machine (less cost with more cores)
  --huge-pages MODE    cpu backend: on copies the weights into 2 MiB
                       transparent huge pages at start (about twice the
                       decode speed of a large model; costs the copy time
                       and RAM not shared with the page cache); off reads
                       the file mapping; auto (default) copies when huge
                       pages are enabled, the weights exceed 1 GiB and fit
                       in available RAM with 2 GiB to spare

Routing traces (cpu or cuda; with --tokens, --prompt or --daemon):
  --routing-trace-out FILE
                       record which experts the router chose: one line per
                       computed token (prompt and generated, in order), per
                       layer the top-k expert ids with their mixing weights
                       (format: worker/cache/routing_trace.h; moetier-policy-lab
                       replays it). Results are unchanged.
  --routing-from-trace FILE
                       benchmark mode: each token takes its experts from the
                       trace's next token (layer by layer, starting again at
                       the trace's first token after its last) instead of from
                       the router; everything else is computed as usual, with
                       the router's probabilities of those experts as weights
                       (renormalized). The trace must have the model's layer
                       count and top-k and only ids of its experts. The
                       results are not the model's: every output says
                       "routing replayed from FILE".
  --prefetch-accuracy A
                       with --routing-from-trace: the prefetch predicts the
                       next layer's experts from the trace, each one right
                       with probability A in [0, 1] (default 0.8; otherwise a
                       wrong expert), instead of applying that layer's router,
                       which with the trace's choices would guess at random.
                       Real predictor accuracy needs real weights; figures
                       made so hold for the accuracy given.

Expert cache (cpu or cuda; with --tokens, --prompt or --daemon). The
worker keeps a pool of expert slots: VRAM on a GPU, huge-page RAM on the cpu,
where it runs the very cache logic of the GPU worker (results are identical
with and without it). A routed expert found in a slot is a hit; a miss is
copied into a slot or computed from the store, as --miss-policy says.
  --expert-cache-mib SIZE
                       the pool: N MiB, P%% of all experts' bytes (e.g. 25%%),
                       or auto (default: on a GPU in daemon mode, its free
                       memory after the dense weights, KV cache and scratch,
                       less a reserve; no cache on the cpu, nor standalone on
                       a GPU). It needs at least top-k slots per layer; the
                       error says how much
  --miss-policy P      copy: copy every miss into a slot (evicting by the
                       cache policy) and compute it there; cpu: compute
                       misses on host cores straight from the store (only
                       prefetch fills the cache); auto (default): per miss,
                       whichever a cost model of copy rate and compute time
                       says is cheaper (on the cpu worker that is always
                       the store: a copy only adds work)
  --prefetch on|off    predict the next layer's experts with its router on
                       the current hidden state and copy them ahead (default
                       on; decode batches of up to 4 tokens)
  --cache-policy NAME  replacement policy: lru, lfu, lrfu, reuse, adaptive or optgen
                       (default adaptive; see moetier-policy-lab)
  --n-cpu-moe N        static placement, like llama.cpp's --n-cpu-moe: the
                       experts of the first N layers are always computed on
                       the host, every expert of the other layers stays in a
                       slot (the pool defaults to exactly that size)

Other:
  --check-model FILE   whether this build can serve FILE: its architecture,
                       tensor types, names and shapes (reads the header and
                       tensor table only); with --device DEV, also whether
                       that device's engine computes every tensor (no GPU is
                       touched). Prints nothing and exits 0 when it can, else
                       prints why and exits 2; moetierd runs it, per kind of
                       device it is configured with, before it fills its store
  --standalone         run without moetierd (required for the modes above)
  -h, --help           this text

Flags take their value as the next argument or after '='.
Exit status: 0 success, 1 runtime error (file, model, engine, daemon), 2 usage
error or, with --check-model, a file this build cannot serve.
)",
      store::kMaxWorkers - 1, kMaxParallel, kBatchedPrefillChunk, kDefaultPrefixCacheMib,
      kDefaultCtx);
}

}  // namespace moetier
