// moetier-bench-cache: decode and prompt speed of a worker whose experts sit
// in an expert cache of several sizes, against every expert resident, in one
// run on one machine.
//
// The model is loaded once and its experts copied into host memory laid out
// like the daemon's store (the source every cache fill reads). Each
// configuration then gets a fresh engine: every expert resident, a dynamic
// cache of P% of all experts' bytes (miss policy and prefetch as given), or
// static placement with the experts of the first N layers on the host (like
// llama.cpp's --n-cpu-moe N). For each it prints the median decode and
// prompt rates, both also as a ratio to the resident configuration, the
// decode hit rate, how many misses ran on the host, prefetch accuracy and
// the copy rate against the pinned-copy rate measured in the same run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "bench_common.h"
#include "cache/slot_cached_expert_source.h"
#include "cuda_phase_report.h"
#include "engine/cuda_engine_factory.h"
#include "engine/forward_engine.h"
#include "engine/routing_trace_hooks.h"
#include "gguf/gguf_reader.h"
#include "host_expert_store.h"
#include "model/architectures.h"
#include "sampling/sampler.h"
#include "served_min.h"

namespace moetier {
namespace {

constexpr char kUsage[] =
    R"(moetier-bench-cache: a worker's speed with its expert cache at several sizes

usage: moetier-bench-cache --model FILE [--device cpu|cuda:N] [options]

Configurations (--configs), run in order:
  resident         every expert resident: uploaded to the device (cuda), read
                   from RAM (cpu)
  P%[:MISS[:PF]]   a cache of P% of all experts' bytes; MISS copy, cpu or auto
                   (default auto), PF prefetch on or off (default on)
  static:N         the experts of the first N layers on the host, every other
                   expert resident (llama.cpp's --n-cpu-moe N); N may be half
                   or all

With --routing-from-trace the bench knows every expert the decode runs will
use, so each cache row also shows Belady's MIN on the very sequence it
served (same slots per layer, no prefetch): MIN% its hit rate
and xMIN the row's hit rate over it. A row with prefetch may pass 1.

With --device cuda:N every row also decodes once more with the engine's
phase timers on (kernels launched one by one, no graph) and prints where
that run's device time went: attention, router, the host placing experts,
waits for expert copies, experts on the device and on the host, output.)";

struct Config {
  std::string label;
  enum class Kind { kResident, kCache, kStatic } kind = Kind::kResident;
  double percent = 0;
  MissPolicy miss = MissPolicy::kAuto;
  bool prefetch = true;
  int host_layers = 0;
};

struct Options {
  std::string model;
  std::string device = "cpu";
  std::vector<std::string> configs = {"resident", "100%",     "50%",         "25%",
                                      "12.5%",    "25%:cpu", "static:half", "static:all"};
  ExpertPolicyKind policy = kDefaultExpertPolicy;
  int decode_tokens = 128;
  int prompt_tokens = 512;
  int context = 16;
  int runs = 3;
  int threads = 0;
  int copy_probe_mib = 256;
  std::string routing_from_trace;
  double prefetch_accuracy = -1;  // not given: the replayer's default
  std::vector<double> prefetch_accuracies;  // a sweep; empty: prefetch_accuracy alone
  std::string json;
};

absl::StatusOr<Config> ParseConfig(const std::string& text, int n_layer) {
  Config c;
  c.label = text;
  if (text == "resident") return c;
  if (text.rfind("static:", 0) == 0) {
    c.kind = Config::Kind::kStatic;
    const std::string n = text.substr(7);
    if (n == "all") {
      c.host_layers = n_layer;
    } else if (n == "half") {
      c.host_layers = n_layer / 2;
    } else if (!absl::SimpleAtoi(n, &c.host_layers) || c.host_layers < 0 ||
               c.host_layers > n_layer) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "configuration '%s': N must be 0..%d, half or all", text, n_layer));
    }
    c.label = absl::StrFormat("static:%d", c.host_layers);
    return c;
  }
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts[0].empty() || parts[0].back() != '%' || parts.size() > 3 ||
      !absl::SimpleAtod(parts[0].substr(0, parts[0].size() - 1), &c.percent) || c.percent <= 0 ||
      c.percent > 100) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "configuration '%s' is not resident, P%%[:MISS[:PF]] with P in (0, 100] or static:N",
        text));
  }
  c.kind = Config::Kind::kCache;
  if (parts.size() >= 2) {
    absl::StatusOr<MissPolicy> miss = ParseMissPolicy(parts[1]);
    if (!miss.ok()) return miss.status();
    c.miss = *miss;
  }
  if (parts.size() == 3) {
    if (parts[2] != "on" && parts[2] != "off") {
      return absl::InvalidArgumentError(
          absl::StrFormat("configuration '%s': prefetch is on or off", text));
    }
    c.prefetch = parts[2] == "on";
  }
  return c;
}

absl::Status ParseAccuracy(std::string_view flag, std::string_view value, double* out) {
  return ParseDoubleFlag(flag, value, 0, 1, out);
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  FlagSet f;
  bench::AddModelFlag(f, &o.model);
  f.Add({"--device"}, "DEV",
        "cpu (default; the cache is slots in RAM) or cuda:N (slots in VRAM, misses copied over "
        "PCIe or computed on the CPU)",
        [&o](std::string_view flag, std::string_view value) -> absl::Status {
          if (value != "cpu" && CudaOrdinalOf(value) < 0) {
            return FlagError(flag, absl::StrFormat("'%s' is neither cpu nor cuda:N", value));
          }
          o.device = std::string(value);
          return absl::OkStatus();
        });
  f.Add({"--configs"}, "LIST",
        "comma-separated configurations, run in order (default: "
        "resident,100%,50%,25%,12.5%,25%:cpu,static:half,static:all; their syntax is above)",
        [&o](std::string_view, std::string_view value) {
          o.configs =
              absl::StrSplit(absl::string_view(value.data(), value.size()), ',', absl::SkipEmpty());
          return absl::OkStatus();
        });
  f.Add({"--cache-policy"}, "NAME",
        absl::StrFormat("replacement policy (default %s)", ExpertPolicyName(kDefaultExpertPolicy)),
        [&o](std::string_view flag, std::string_view value) -> absl::Status {
          absl::StatusOr<ExpertPolicyKind> p = ParseExpertPolicyKind(std::string(value));
          if (!p.ok()) return FlagError(flag, std::string(p.status().message()));
          o.policy = *p;
          return absl::OkStatus();
        });
  f.AddInt({"--decode-tokens"}, "N", "tokens generated greedily per decode run (default 128)",
           &o.decode_tokens, 1, 1 << 16);
  f.AddInt({"--prompt-tokens"}, "N", "tokens per prompt run (default 512)", &o.prompt_tokens, 1,
           1 << 16);
  f.AddInt({"--context"}, "N", "tokens in the KV cache before decoding (default 16)", &o.context, 1,
           1 << 16);
  bench::AddRunsFlag(f, &o.runs, 1, "One untimed warm-up run comes first");
  bench::AddThreadsFlag(f, &o.threads);
  f.AddInt({"--copy-probe-mib"}, "N", "size of the pinned-copy probe (default 256)",
           &o.copy_probe_mib, 1, 1 << 16);
  f.AddString({"--routing-from-trace"}, "FILE",
              "every configuration takes each token's experts from this routing trace (from its "
              "start, cycling) instead of from the router: realistic routing on random-weight "
              "models. Every output says \"routing replayed from FILE\"",
              &o.routing_from_trace);
  f.Add({"--prefetch-accuracy"}, "A",
        "with --routing-from-trace: the prefetch predicts each next layer from the trace, each "
        "expert right with probability A in [0, 1] (default 0.8), instead of applying that "
        "layer's router (which, with the trace's choices, guesses at random). Real predictor "
        "accuracy needs real weights; the figures hold for A",
        [&o](std::string_view flag, std::string_view value) {
          return ParseAccuracy(flag, value, &o.prefetch_accuracy);
        });
  f.Add(
      {"--prefetch-accuracies"}, "LIST",
      "with --routing-from-trace: run every configuration at each of these accuracies (e.g. "
      "0.5,0.8,1.0), one row each, instead of at --prefetch-accuracy alone",
      [&o](std::string_view flag, std::string_view value) -> absl::Status {
        o.prefetch_accuracies.clear();
        for (absl::string_view part : absl::StrSplit(absl::string_view(value.data(), value.size()),
                                                     ',', absl::SkipEmpty())) {
          double a = 0;
          if (absl::Status s = ParseAccuracy(flag, std::string_view(part.data(), part.size()), &a);
              !s.ok()) {
            return s;
          }
          o.prefetch_accuracies.push_back(a);
        }
        return o.prefetch_accuracies.empty() ? FlagError(flag, "no accuracy given")
                                             : absl::OkStatus();
      });
  f.AddString({"--json"}, "FILE", "also write every figure as JSON", &o.json);
  ParseOnlyFlagsOrExit(f, "moetier-bench-cache", kUsage, argc, argv);
  auto usage_error = [](std::string_view message) {
    ExitWithUsageError("moetier-bench-cache", absl::InvalidArgumentError(std::string(message)));
  };
  if (o.model.empty()) usage_error("--model is required (see --help)");
  if ((o.prefetch_accuracy >= 0 || !o.prefetch_accuracies.empty()) &&
      o.routing_from_trace.empty()) {
    usage_error(
        "--prefetch-accuracy and --prefetch-accuracies go with --routing-from-trace (without a "
        "trace the next layer's router predicts)");
  }
  if (o.prefetch_accuracy >= 0 && !o.prefetch_accuracies.empty()) {
    usage_error("give --prefetch-accuracy or --prefetch-accuracies, not both");
  }
  return o;
}

using bench::Median;
using bench::Seconds;

ExpertSlotCacheStats Minus(const ExpertSlotCacheStats& a, const ExpertSlotCacheStats& b) {
  ExpertSlotCacheStats d;
  d.hits = a.hits - b.hits;
  d.misses = a.misses - b.misses;
  d.misses_on_host = a.misses_on_host - b.misses_on_host;
  d.demand_fills = a.demand_fills - b.demand_fills;
  d.prefetch_issued = a.prefetch_issued - b.prefetch_issued;
  d.prefetch_used = a.prefetch_used - b.prefetch_used;
  d.prefetch_wasted = a.prefetch_wasted - b.prefetch_wasted;
  d.evictions = a.evictions - b.evictions;
  d.warm_fills = a.warm_fills - b.warm_fills;
  d.bytes_filled = a.bytes_filled - b.bytes_filled;
  return d;
}

// One configuration's engine and the cache it reports.
struct Engine {
  RoutingTraceHooks hooks;  // a fresh replay cursor per configuration
  // The passes a dynamic cache served while a trace is replayed, for MIN.
  std::unique_ptr<ServedPassRecorder> served;
  std::unique_ptr<SlotCachedExpertSource> host_cache;  // cpu
  std::unique_ptr<ForwardEngine> engine;
  const ExpertCacheReport* report = nullptr;
  CudaPhaseTimers* phase_timers = nullptr;  // cuda
};

struct Row {
  Config config;
  double prefetch_accuracy = -1;  // the replay's; -1 without a trace
  std::string skipped;  // why it did not run; empty when it ran
  double decode_tok_s = 0, prompt_tok_s = 0;
  ExpertSlotCacheStats decode;  // over the timed decode runs
  uint64_t copy_busy_ns = 0;    // over the timed decode runs
  uint64_t pool_bytes = 0;
  std::vector<int32_t> tokens;  // the first timed decode run's
  std::optional<MinTally> min;  // MIN on the served decode runs (replayed dynamic caches)
  // cuda: one more decode run's device time by phase, and its wall time.
  std::optional<CudaPhaseSeconds> decode_phases;
  double phase_run_s = 0;
};

class Bench {
 public:
  Bench(const Options& o, const Model& model, HostExpertStore& store)
      : o_(o), model_(model), store_(store) {
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> token(0, model.hparams.n_vocab - 1);
    for (int i = 0; i < o.context; ++i) context_.push_back(token(rng));
    for (int i = 0; i < o.prompt_tokens; ++i) prompt_.push_back(token(rng));
  }

  absl::StatusOr<Engine> Make(const Config& c, double prefetch_accuracy) const {
    const int max_ctx = std::min(model_.hparams.n_ctx_train,
                                 std::max(o_.context + o_.decode_tokens, o_.prompt_tokens) + 1);
    Engine out;
    if (!o_.routing_from_trace.empty()) {
      absl::StatusOr<RoutingTraceHooks> hooks =
          OpenRoutingTraceHooks("", o_.routing_from_trace, model_.hparams.n_layer,
                                model_.hparams.n_expert, model_.hparams.n_expert_used,
                                prefetch_accuracy);
      if (!hooks.ok()) return hooks.status();
      out.hooks = *std::move(hooks);
      if (c.kind == Config::Kind::kCache) out.served = std::make_unique<ServedPassRecorder>();
    }
    if (o_.device == "cpu") {
      ExpertWeightSource* source = &store_;
      if (c.kind != Config::Kind::kResident) {
        HostSlotCacheOptions h;
        h.policy = o_.policy;
        h.miss_policy = c.miss;
        h.prefetch = c.prefetch;
        const ExpertSlotCacheOptions geometry = SlotCacheOptionsFor(RoutedExpertShapesOf(model_), h);
        if (c.kind == Config::Kind::kStatic) {
          h.static_host_layers = c.host_layers;
          h.pool_bytes = StaticPoolBytes(geometry, c.host_layers);
        } else {
          h.pool_bytes = static_cast<uint64_t>(c.percent / 100.0 * FullPoolBytes(geometry));
        }
        absl::StatusOr<std::unique_ptr<SlotCachedExpertSource>> cache =
            SlotCachedExpertSource::Create(store_, RoutedExpertShapesOf(model_), h);
        if (!cache.ok()) return cache.status();
        out.host_cache = *std::move(cache);
        out.report = out.host_cache.get();
        source = out.host_cache.get();
      }
      EngineOptions e;
      e.max_ctx = max_ctx;
      e.n_threads = o_.threads;
      e.weight_pages = WeightPages::kAuto;
      e.expert_source = source;
      e.routing_override = out.hooks.replayer.get();
      e.routing_observer = out.served.get();
      absl::StatusOr<std::unique_ptr<ForwardEngine>> engine = CreateCpuEngine(model_, e);
      if (!engine.ok()) return engine.status();
      out.engine = *std::move(engine);
      return out;
    }
    CudaWorkerEngineOptions g;
    g.device = CudaOrdinalOf(o_.device);
    g.max_ctx = max_ctx;
    g.policy = o_.policy;
    g.miss_policy = c.miss;
    g.prefetch = c.prefetch;
    g.host_threads = o_.threads;
    g.routing_override = out.hooks.replayer.get();
    g.routing_observer = out.served.get();
    if (c.kind != Config::Kind::kResident) {
      g.expert_source = &store_;
      g.dma_ranges = {store_.bytes()};
      if (c.kind == Config::Kind::kStatic) {
        g.static_host_layers = c.host_layers;
      } else {
        g.cache_fraction = c.percent / 100.0;
      }
    }
    absl::StatusOr<CudaWorkerEngine> cuda = CreateCudaWorkerEngine(model_, g);
    if (!cuda.ok()) return cuda.status();
    for (const std::string& line : cuda->description) std::printf("  %s\n", line.c_str());
    out.engine = std::move(cuda->engine);
    out.report = cuda->cache_report;
    out.phase_timers = cuda->phase_timers;
    return out;
  }

  absl::StatusOr<Row> Run(const Config& c, double prefetch_accuracy) const {
    Row row;
    row.config = c;
    row.prefetch_accuracy = prefetch_accuracy;
    absl::StatusOr<Engine> made = Make(c, prefetch_accuracy);
    if (!made.ok()) {
      row.skipped = std::string(made.status().message());
      return row;
    }
    ForwardEngine& e = *made->engine;
    // Greedy decoding, sampled by the engine (on the device for a GPU): no
    // logits row goes to the host per token.
    absl::StatusOr<Sampler> greedy = Sampler::Create(e.n_vocab(), SamplingParams{.temperature = 0});
    if (!greedy.ok()) return greedy.status();
    std::unique_ptr<Sequence> seq;
    auto new_sequence = [&]() -> absl::Status {
      seq.reset();
      absl::StatusOr<std::unique_ptr<Sequence>> fresh = e.NewSequence();
      if (!fresh.ok()) return fresh.status();
      seq = *std::move(fresh);
      return absl::OkStatus();
    };
    // One decode run: the context, then greedy tokens; the seconds of the
    // tokens alone.
    std::vector<int32_t> generated;
    auto decode_run = [&](double& seconds) -> absl::Status {
      MOETIER_RETURN_IF_ERROR(new_sequence());
      MOETIER_RETURN_IF_ERROR(e.Forward(*seq, context_, LogitRows::kNone, nullptr));
      generated.clear();
      absl::StatusOr<int32_t> next = e.Sample(*greedy);
      if (!next.ok()) return next.status();
      const double t0 = Seconds();
      for (int i = 0; i < o_.decode_tokens; ++i) {
        const int32_t in[1] = {*next};
        MOETIER_RETURN_IF_ERROR(e.Forward(*seq, in, LogitRows::kNone, nullptr));
        next = e.Sample(*greedy);
        if (!next.ok()) return next.status();
        generated.push_back(*next);
      }
      seconds = Seconds() - t0;
      return absl::OkStatus();
    };
    std::vector<double> decode_rates;
    ExpertSlotCacheStats before;
    uint64_t busy_before = 0;
    ServedPassRecorder* served = made->served.get();
    for (int r = 0; r <= o_.runs; ++r) {
      // The warm-up's passes shape MIN's cache too; only the timed ones count.
      if (served != nullptr) served->Record(/*counted=*/r >= 1);
      if (r == 1 && made->report != nullptr) {
        before = made->report->cache().stats();
        busy_before = made->report->copy_busy_ns();
      }
      double dt = 0;
      MOETIER_RETURN_IF_ERROR(decode_run(dt));
      if (r == 1) row.tokens = generated;
      if (r >= 1) decode_rates.push_back(o_.decode_tokens / dt);
    }
    if (served != nullptr && made->report != nullptr) {
      served->Stop();
      const ExpertSlotCache& cache = made->report->cache();
      std::vector<uint32_t> budgets(cache.options().n_layer);
      for (uint32_t l = 0; l < budgets.size(); ++l) budgets[l] = cache.slot_budget(l);
      row.min = ServedMin(served->passes(), budgets);
    }
    if (made->report != nullptr) {
      row.decode = Minus(made->report->cache().stats(), before);
      row.copy_busy_ns = made->report->copy_busy_ns() - busy_before;
      row.pool_bytes =
          uint64_t{made->report->cache().n_slots()} * made->report->cache().options().slot_bytes;
    }
    row.decode_tok_s = Median(decode_rates);
    if (CudaPhaseTimers* timers = made->phase_timers; timers != nullptr) {
      // Where the time goes: one more decode run with the phase timers,
      // after the counted ones (its routing and cache traffic count nowhere).
      MOETIER_RETURN_IF_ERROR(timers->EnablePhaseTiming(true));
      timers->ResetPhaseTimes();
      MOETIER_RETURN_IF_ERROR(decode_run(row.phase_run_s));
      row.decode_phases = timers->phase_seconds();
      MOETIER_RETURN_IF_ERROR(timers->EnablePhaseTiming(false));
    }
    std::vector<double> prompt_rates;
    for (int r = 0; r <= o_.runs; ++r) {
      if (absl::Status s = new_sequence(); !s.ok()) return s;
      const double t0 = Seconds();
      if (absl::Status s = e.Forward(*seq, prompt_, LogitRows::kNone, nullptr); !s.ok()) {
        return s;
      }
      if (absl::StatusOr<int32_t> first = e.Sample(*greedy); !first.ok()) return first.status();
      if (r >= 1) prompt_rates.push_back(o_.prompt_tokens / (Seconds() - t0));
    }
    row.prompt_tok_s = Median(prompt_rates);
    return row;
  }

 private:
  const Options& o_;
  const Model& model_;
  HostExpertStore& store_;
  std::vector<int32_t> context_, prompt_;
};

// Host memcpy rate (cpu "copies" are memcpy), bytes/s, median of 5.
double MeasureMemcpy(uint64_t bytes) {
  std::vector<uint8_t> a(bytes, 1), b(bytes);
  std::vector<double> rates;
  for (int p = 0; p < 6; ++p) {
    const double t0 = Seconds();
    std::memcpy(b.data(), a.data(), bytes);
    const double dt = Seconds() - t0;
    if (p > 0 && dt > 0) rates.push_back(static_cast<double>(bytes) / dt);
  }
  return Median(rates);
}

// `text` as a JSON string literal.
std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "moetier-bench-cache: %s\n", std::string(s.message()).c_str());
  return 1;
}

int Main(const Options& o) {
  if (o.device != "cpu") {
    if (absl::Status s = CheckCudaDevice(CudaOrdinalOf(o.device)); !s.ok()) return Fail(s);
  }
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(o.model);
  if (!gguf.ok()) return Fail(gguf.status());
  absl::StatusOr<Model> model = LoadModel(**gguf);
  if (!model.ok()) return Fail(model.status());
  const ModelHparams& hp = model->hparams;
  std::vector<Config> configs;
  for (const std::string& text : o.configs) {
    absl::StatusOr<Config> c = ParseConfig(text, hp.n_layer);
    if (!c.ok()) return Fail(c.status());
    configs.push_back(*c);
  }
  const double t0 = Seconds();
  absl::StatusOr<std::unique_ptr<HostExpertStore>> store = HostExpertStore::Create(*model);
  if (!store.ok()) return Fail(store.status());
  std::printf("model: %s (%d layers x %d experts, top %d)\n", o.model.c_str(), hp.n_layer,
              hp.n_expert, hp.n_expert_used);
  std::printf("experts in host memory: %.2f GiB, copied in %.1f s\n",
              (*store)->bytes().size() / 1073741824.0, Seconds() - t0);
  const uint64_t probe = uint64_t{static_cast<uint32_t>(o.copy_probe_mib)} << 20;
  double copy_ceiling = 0;
  if (o.device == "cpu") {
    copy_ceiling = MeasureMemcpy(probe);
    std::printf("device: cpu, %d threads; memcpy rate (a slot fill's ceiling): %.2f GB/s\n",
                o.threads, copy_ceiling / 1e9);
  } else {
    absl::StatusOr<double> pinned =
        MeasurePinnedCopyBytesPerS(CudaOrdinalOf(o.device), probe, 5);
    if (!pinned.ok()) return Fail(pinned.status());
    copy_ceiling = *pinned;
    std::printf("device: %s, %d host threads; pinned host-to-device copy rate: %.2f GB/s\n",
                o.device.c_str(), o.threads, copy_ceiling / 1e9);
  }
  std::printf("decode %d tokens after %d of context, prompt %d tokens; %d timed runs each\n",
              o.decode_tokens, o.context, o.prompt_tokens, o.runs);
  // One accuracy per row: the sweep's, or the single one (-1: the default).
  const bool sweep = !o.prefetch_accuracies.empty();
  const std::vector<double> accuracies =
      sweep ? o.prefetch_accuracies : std::vector<double>{o.prefetch_accuracy};
  std::string routing = "the router's own choice";
  if (!o.routing_from_trace.empty()) {
    routing = sweep ? absl::StrFormat(
                          "routing replayed from %s, prefetch predicted from it at accuracies %s",
                          o.routing_from_trace, absl::StrJoin(accuracies, ", "))
                    : RoutingReplayLabel(o.routing_from_trace, o.prefetch_accuracy);
  }
  std::printf("experts: %s\n\n", routing.c_str());

  Bench bench(o, *model, **store);
  std::vector<Row> rows;
  for (const Config& c : configs) {
    // Accuracy changes nothing without a cache that prefetches.
    const bool prefetches = c.kind == Config::Kind::kCache && c.prefetch;
    for (size_t a = 0; a < (prefetches ? accuracies.size() : 1); ++a) {
      std::printf("running %s%s ...\n", c.label.c_str(),
                  sweep && prefetches ? absl::StrFormat(" at accuracy %g", accuracies[a]).c_str()
                                      : "");
      std::fflush(stdout);
      absl::StatusOr<Row> row = bench.Run(c, o.routing_from_trace.empty() ? -1 : accuracies[a]);
      if (!row.ok()) return Fail(row.status());
      if (!row->skipped.empty()) std::printf("  skipped: %s\n", row->skipped.c_str());
      if (sweep && prefetches) row->config.label += absl::StrFormat("@%g", accuracies[a]);
      rows.push_back(*row);
    }
  }
  const Row* resident = nullptr;
  for (const Row& r : rows) {
    if (r.config.kind == Config::Kind::kResident && r.skipped.empty()) resident = &r;
  }
  std::printf("\n%-18s %10s %7s %10s %7s %7s %7s %6s %7s %13s %10s %9s %6s\n", "config",
              "decode t/s", "x res", "prompt t/s", "x res", "hit%", "MIN%", "xMIN", "host%",
              "prefetch u/i", "pool GiB", "copy GB/s", "=res");
  for (const Row& r : rows) {
    if (!r.skipped.empty()) {
      std::printf("%-18s skipped\n", r.config.label.c_str());
      continue;
    }
    const ExpertSlotCacheStats& s = r.decode;
    const uint64_t placed = s.hits + s.misses;
    const double copy_s = r.copy_busy_ns * 1e-9;
    const bool has_min = r.min.has_value() && r.min->requests > 0;
    std::printf("%-18s %10.2f %7s %10.1f %7s %7s %7s %6s %7s %13s %10.2f %9s %6s\n",
                r.config.label.c_str(), r.decode_tok_s,
                resident ? absl::StrFormat("%.2f", r.decode_tok_s / resident->decode_tok_s).c_str()
                         : "-",
                r.prompt_tok_s,
                resident ? absl::StrFormat("%.2f", r.prompt_tok_s / resident->prompt_tok_s).c_str()
                         : "-",
                placed ? absl::StrFormat("%.1f", 100.0 * s.hits / placed).c_str() : "-",
                has_min ? absl::StrFormat("%.1f", 100.0 * r.min->hit_rate()).c_str() : "-",
                has_min && r.min->hits > 0
                    ? absl::StrFormat("%.3f", static_cast<double>(s.hits) / r.min->hits).c_str()
                    : "-",
                placed ? absl::StrFormat("%.1f", 100.0 * s.misses_on_host / placed).c_str() : "-",
                absl::StrFormat("%u/%u", s.prefetch_used, s.prefetch_issued).c_str(),
                r.pool_bytes / 1073741824.0,
                copy_s > 0 ? absl::StrFormat("%.2f", s.bytes_filled / copy_s / 1e9).c_str() : "-",
                resident ? (r.tokens == resident->tokens ? "yes" : "no") : "-");
  }
  std::printf("\nhit%%/host%%: of the experts placed during the timed decode runs, found in a "
              "slot / computed on the host; MIN%%: Belady's MIN on the same served sequence and "
              "slots (no prefetch; replayed traces only), xMIN: hits over MIN's; "
              "copy GB/s: bytes filled over the time a fill was in flight (ceiling: %.2f GB/s "
              "above); =res: same greedy tokens as resident\n",
              copy_ceiling / 1e9);
  bool phases_header = false;
  for (const Row& r : rows) {
    if (!r.decode_phases.has_value()) continue;
    if (!phases_header) {
      std::printf("\nwhere decode time goes (one more decode run per row, phase timers on):\n");
      phases_header = true;
    }
    std::printf("  %s\n",
                CudaPhaseLine(r.config.label.c_str(), *r.decode_phases, r.phase_run_s,
                              o.decode_tokens)
                    .c_str());
  }
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << "{\"model\": " << JsonString(o.model) << ", \"device\": " << JsonString(o.device)
        << ", \"routing\": " << JsonString(routing)
        << ", \"copy_ceiling_bytes_per_s\": " << copy_ceiling << ", \"rows\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const ExpertSlotCacheStats& s = r.decode;
      out << (i ? ", " : "") << "{\"config\": " << JsonString(r.config.label);
      if (!r.skipped.empty()) {
        out << ", \"skipped\": " << JsonString(r.skipped) << "}";
        continue;
      }
      out << ", \"percent\": " << (r.config.kind == Config::Kind::kCache ? r.config.percent : -1)
          << ", \"prefetch_accuracy\": " << r.prefetch_accuracy
          << ", \"decode_tok_s\": " << r.decode_tok_s << ", \"prompt_tok_s\": " << r.prompt_tok_s
          << ", \"hits\": " << s.hits << ", \"misses\": " << s.misses
          << ", \"misses_on_host\": " << s.misses_on_host
          << ", \"prefetch_issued\": " << s.prefetch_issued
          << ", \"prefetch_used\": " << s.prefetch_used
          << ", \"bytes_filled\": " << s.bytes_filled << ", \"copy_busy_ns\": " << r.copy_busy_ns
          << ", \"pool_bytes\": " << r.pool_bytes;
      if (r.min.has_value() && r.min->requests > 0) {
        out << ", \"min_hits\": " << r.min->hits << ", \"min_requests\": " << r.min->requests
            << ", \"min_hit_rate\": " << r.min->hit_rate() << ", \"ratio_to_min\": "
            << (r.min->hits > 0 ? absl::StrFormat("%g", static_cast<double>(s.hits) / r.min->hits)
                                : std::string("null"));
      }
      if (r.decode_phases.has_value()) {
        out << ", \"decode_phase_s_per_token\": {";
        for (size_t p = 0; p < kCudaPhaseCount; ++p) {
          const std::string name(CudaPhaseName(static_cast<CudaPhase>(p)));
          out << (p ? ", " : "") << JsonString(name) << ": "
              << (*r.decode_phases)[p] / o.decode_tokens;
        }
        out << "}, \"phase_run_s\": " << r.phase_run_s;
      }
      out << ", \"same_tokens_as_resident\": "
          << (resident && r.tokens == resident->tokens ? "true" : "false") << "}";
    }
    out << "]}\n";
    if (!out) return Fail(absl::DataLossError("cannot write --json " + o.json));
  }
  return 0;
}

}  // namespace
}  // namespace moetier

int main(int argc, char** argv) { return moetier::Main(moetier::ParseOptions(argc, argv)); }
