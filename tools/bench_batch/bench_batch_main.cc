// moetier-bench-batch: what decoding several sequences in one forward pass
// (ForwardEngine::ForwardMany) buys on the CPU engine: aggregate decode
// speed and routed-expert bytes per token at each batch width against one
// sequence, and the time to first token of a request that joins running
// ones, its prompt prefilled in chunks between their decode steps, with
// and without its start loaded from a kept state (the prefix cache).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench_common.h"
#include "cache/routing_trace.h"
#include "cpu_phase_report.h"
#include "engine/cpu_engine.h"
#include "engine/mapped_expert_source.h"
#include "gguf/gguf_reader.h"
#include "model/architectures.h"
#include "model/kv_cache_types.h"
#include "nlohmann/json.hpp"
#include "row_trace_replay.h"

namespace moetier {
namespace {

constexpr char kUsage[] = R"(moetier-bench-batch: batched decode across sequences on the CPU engine

usage: moetier-bench-batch --model FILE [options]

Decode: for each width W of --sequences, W sequences that each hold --context
tokens decode --decode-steps tokens apiece, all W in one forward call per
step, each step keeping every sequence's logits row (as a server samples
from). Prints the median aggregate tokens/s of --runs runs and its ratio to
the first width, the routed-expert bytes read per token against the first
width (a step reads each expert its tokens route to once, however many of
them do), and the memory bound: the speedup an engine limited by reading
weights would reach (the dense weights, shared expert and output matrix
included, read once per step), and how much of it was reached. Then where
each width's time went, by the engine's phases.

Join: --join-running sequences decode while a new request with a
--join-prompt-token prompt arrives; its prompt runs --chunk tokens per step
next to their decode tokens. Prints the time to its first token (p50, p99
over --join-runs arrivals) against the same prompt prefilled alone, and the
running sequences' step time during the join against their step alone.
With --shared-prefix-tokens N, each arrival comes again with its first N
tokens loaded from a state copied after computing them (what the worker's
prefix cache does for prompts that share a start), and the time to first
token is compared with the cold join's; the copy and load times are shown.

Tokens are seeded random ids; routing is the model's own router (synthetic
models route close to uniformly, which shares the fewest experts), or, with
--routing-from-trace, replayed per batch row from routing traces: each
sequence follows a stream of its own (tools/bench_batch/row_trace_replay.h),
as concurrent requests of a real workload would.)";

struct Options {
  std::string model;
  std::vector<int> widths = {1, 2, 4, 8};
  int context = 256;
  bool skip_context = false;
  int decode_steps = 16;
  int runs = 5;
  int join_running = 7;
  int join_prompt = 512;
  int chunk = 64;
  int join_runs = 9;
  int shared_prefix = 0;
  std::vector<std::string> routing_traces;
  int threads = 0;
  KvCacheTypes kv_types;
  uint32_t seed = 1;
  bool json = false;
};

Options ParseOptions(int argc, char** argv) {
  Options o;
  FlagSet f;
  bench::AddModelFlag(f, &o.model);
  f.Add({"--sequences"}, "LIST", "batch widths, comma-separated (default 1,2,4,8)",
        [&o](std::string_view flag, std::string_view value) -> absl::Status {
          o.widths.clear();
          for (absl::string_view part :
               absl::StrSplit(absl::string_view(value.data(), value.size()), ',')) {
            int w = 0;
            if (!absl::SimpleAtoi(part, &w) || w < 1 || w > 256) {
              return FlagError(flag, absl::StrFormat("'%s' is not a width in 1..256", part));
            }
            o.widths.push_back(w);
          }
          return absl::OkStatus();
        });
  f.AddInt({"--context"}, "N", "tokens each sequence holds before timing (default 256)", &o.context,
           0, 1 << 20);
  f.AddSwitch({"--skip-context"},
              "count the context as computed without computing it "
              "(CpuEngine::SkipPositionsForTiming; timing only)",
              &o.skip_context);
  f.AddInt({"--decode-steps"}, "N", "decode steps per run (default 16)", &o.decode_steps, 1, 4096);
  bench::AddRunsFlag(f, &o.runs, 3);
  f.AddInt({"--join-running"}, "N",
           "sequences decoding while one joins; 0 skips the join measurement (default 7)",
           &o.join_running, 0, 255);
  f.AddInt({"--join-prompt-tokens"}, "N", "the joining request's prompt (default 512)",
           &o.join_prompt, 1, 1 << 20);
  f.AddInt({"--chunk"}, "N", "prompt tokens of the joining request per step (default 64)", &o.chunk,
           1, 8192);
  f.AddInt({"--join-runs"}, "N", "arrivals timed (default 9)", &o.join_runs, 1, 1000);
  f.AddInt({"--shared-prefix-tokens"}, "N",
           "the joining prompt's start loaded from a kept state, less than "
           "--join-prompt-tokens; 0 skips (default 0)",
           &o.shared_prefix, 0, 1 << 20);
  f.Add({"--routing-from-trace"}, "LIST",
        "comma-separated routing traces of the model's shape (moetier-tracegen; one --seed per "
        "sequence gives independent requests); row r of a pass follows trace r mod their count",
        [&o](std::string_view flag, std::string_view value) -> absl::Status {
          o.routing_traces =
              absl::StrSplit(absl::string_view(value.data(), value.size()), ',', absl::SkipEmpty());
          return o.routing_traces.empty() ? FlagError(flag, "no trace file named")
                                          : absl::OkStatus();
        });
  bench::AddThreadsFlag(f, &o.threads);
  bench::AddKvCacheTypeFlags(f, &o.kv_types);
  f.AddInt({"--seed"}, "N", "token seed (default 1)", &o.seed);
  f.AddSwitch({"--json"}, "one JSON object per width and one for the join on stdout", &o.json);
  ParseOnlyFlagsOrExit(f, "moetier-bench-batch", kUsage, argc, argv);
  if (o.model.empty()) {
    ExitWithUsageError("moetier-bench-batch",
                       absl::InvalidArgumentError("--model FILE is required (see --help)"));
  }
  if (o.shared_prefix >= o.join_prompt) {
    ExitWithUsageError(
        "moetier-bench-batch",
        absl::InvalidArgumentError(absl::StrFormat(
            "--shared-prefix-tokens %d leaves nothing of the %d-token joining prompt to compute",
            o.shared_prefix, o.join_prompt)));
  }
  return o;
}

using bench::Seconds;

// The value at fraction q of the sorted values (nearest rank).
double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::min<double>(v.size() - 1, q * v.size()));
  return v[i];
}

// The experts straight from the mapping, counting the bytes of every one
// the engine acquires: what a fetch from a store or a copy into a cache
// would move.
class CountingSource final : public ExpertWeightSource {
 public:
  explicit CountingSource(const Model& model)
      : mapped_(model.weights), shapes_(RoutedExpertShapesOf(model)) {}
  absl::Status Acquire(int layer, std::span<const int32_t> experts,
                       std::span<ExpertMatrices> out) override {
    bytes_ += experts.size() * shapes_.layers[static_cast<size_t>(layer)].expert_bytes();
    return mapped_.Acquire(layer, experts, out);
  }
  void Release(int layer) override { mapped_.Release(layer); }
  int max_experts_held() const override { return mapped_.max_experts_held(); }
  uint64_t bytes() const { return bytes_; }

 private:
  MappedExpertSource mapped_;
  RoutedExpertShapes shapes_;
  uint64_t bytes_ = 0;
};

class Bench {
 public:
  Bench(const Options& o, const Model& model, CpuEngine& engine, CountingSource& source)
      : o_(o), model_(model), engine_(engine), source_(source), rng_(o.seed),
        row_(static_cast<size_t>(engine.n_vocab())),
        step_rows_(static_cast<size_t>(engine.max_sequences()) * engine.n_vocab()) {}

  std::vector<int32_t> RandomTokens(int n) {
    std::uniform_int_distribution<int32_t> id(0, model_.hparams.n_vocab - 1);
    std::vector<int32_t> out(static_cast<size_t>(n));
    for (int32_t& t : out) t = id(rng_);
    return out;
  }

  // `count` new sequences holding --context tokens each.
  absl::StatusOr<std::vector<std::unique_ptr<Sequence>>> Start(int count) {
    std::vector<std::unique_ptr<Sequence>> seqs;
    for (int i = 0; i < count; ++i) {
      absl::StatusOr<std::unique_ptr<Sequence>> seq = engine_.NewSequence();
      if (!seq.ok()) return seq.status();
      seqs.push_back(*std::move(seq));
    }
    if (o_.context == 0) return seqs;
    if (o_.skip_context) {
      for (auto& seq : seqs) {
        if (absl::Status s = engine_.SkipPositionsForTiming(*seq, o_.context); !s.ok()) return s;
      }
      return seqs;
    }
    std::vector<std::vector<int32_t>> prompts;
    std::vector<SequenceStep> steps;
    for (size_t i = 0; i < seqs.size(); ++i) prompts.push_back(RandomTokens(o_.context));
    for (size_t i = 0; i < seqs.size(); ++i) steps.push_back({seqs[i].get(), prompts[i], nullptr});
    if (absl::Status s = engine_.ForwardMany(steps); !s.ok()) return s;
    return seqs;
  }

  // One decode step of every sequence, plus `extra` when it has tokens.
  absl::Status Step(std::vector<std::unique_ptr<Sequence>>& seqs, SequenceStep* extra) {
    tokens_ = RandomTokens(static_cast<int>(seqs.size()));
    steps_.clear();
    for (size_t i = 0; i < seqs.size(); ++i) {
      // Each sequence's logits row, as a server needs it to sample.
      steps_.push_back({seqs[i].get(), std::span<const int32_t>(&tokens_[i], 1),
                        step_rows_.data() + i * static_cast<size_t>(engine_.n_vocab())});
    }
    if (extra != nullptr) steps_.push_back(*extra);
    return engine_.ForwardMany(steps_);
  }

  struct Width {
    int width = 0;
    double tokens_per_s = 0;
    double expert_bytes_per_token = 0;
    CpuPhaseSeconds phases{};  // the timed steps' time by engine phase
  };

  absl::StatusOr<Width> MeasureWidth(int width) {
    absl::StatusOr<std::vector<std::unique_ptr<Sequence>>> seqs = Start(width);
    if (!seqs.ok()) return seqs.status();
    if (absl::Status s = Step(*seqs, nullptr); !s.ok()) return s;  // warm-up
    std::vector<double> rates;
    const uint64_t bytes0 = source_.bytes();
    engine_.ResetPhaseTimes();
    for (int r = 0; r < o_.runs; ++r) {
      const double t0 = Seconds();
      for (int i = 0; i < o_.decode_steps; ++i) {
        if (absl::Status s = Step(*seqs, nullptr); !s.ok()) return s;
      }
      rates.push_back(static_cast<double>(width) * o_.decode_steps / (Seconds() - t0));
    }
    const double tokens = static_cast<double>(width) * o_.decode_steps * o_.runs;
    Width w{width, Quantile(rates, 0.5), (source_.bytes() - bytes0) / tokens};
    for (int p = 0; p < static_cast<int>(CpuPhase::kCount); ++p) {
      w.phases[static_cast<size_t>(p)] = engine_.phase_seconds(static_cast<CpuPhase>(p));
    }
    return w;
  }

  struct Join {
    double ttft_p50 = 0, ttft_p99 = 0;
    double alone_prefill_s = 0;
    double step_alone_s = 0, step_during_join_s = 0;
    // With --shared-prefix-tokens: the same arrivals from a loaded start.
    double hit_ttft_p50 = 0, hit_ttft_p99 = 0;
    double copy_s = 0, load_s = 0;
    // Steps an arrival shares with the running sequences until its first
    // token, cold and from the loaded start.
    int steps_to_first_token = 0, hit_steps_to_first_token = 0;
  };

  // Runs prompt[from..) next to the running sequences, --chunk tokens per
  // step, the last chunk's logits kept; the step times go to `steps`.
  // Returns the number of steps.
  absl::StatusOr<int> JoinFrom(std::vector<std::unique_ptr<Sequence>>& running, Sequence& joining,
                               const std::vector<int32_t>& prompt, int from,
                               std::vector<double>* steps) {
    const int n = static_cast<int>(prompt.size());
    int taken = 0;
    for (int done = from; done < n; ++taken) {
      const int take = std::min(o_.chunk, n - done);
      const bool last = done + take == n;
      SequenceStep extra{&joining, std::span(prompt).subspan(done, take),
                         last ? row_.data() : nullptr};
      const double t0 = Seconds();
      if (absl::Status s = Step(running, &extra); !s.ok()) return s;
      if (steps != nullptr) steps->push_back(Seconds() - t0);
      done += take;
    }
    return taken;
  }

  absl::StatusOr<Join> MeasureJoin() {
    absl::StatusOr<std::vector<std::unique_ptr<Sequence>>> running = Start(o_.join_running);
    if (!running.ok()) return running.status();
    if (absl::Status s = Step(*running, nullptr); !s.ok()) return s;  // warm-up
    Join j;
    std::vector<double> alone_steps;
    for (int i = 0; i < o_.decode_steps; ++i) {
      const double t0 = Seconds();
      if (absl::Status s = Step(*running, nullptr); !s.ok()) return s;
      alone_steps.push_back(Seconds() - t0);
    }
    j.step_alone_s = Quantile(alone_steps, 0.5);
    std::vector<double> ttfts, alone_prefills, join_steps, hit_ttfts, copies, loads;
    for (int r = 0; r < o_.join_runs; ++r) {
      const std::vector<int32_t> prompt = RandomTokens(o_.join_prompt);
      {
        // The same prompt with nothing else running: the floor of its TTFT.
        absl::StatusOr<std::unique_ptr<Sequence>> seq = engine_.NewSequence();
        if (!seq.ok()) return seq.status();
        const double t0 = Seconds();
        if (absl::Status s = engine_.Forward(**seq, prompt, LogitRows::kLast, row_.data());
            !s.ok()) {
          return s;
        }
        alone_prefills.push_back(Seconds() - t0);
      }
      {
        absl::StatusOr<std::unique_ptr<Sequence>> joining = engine_.NewSequence();
        if (!joining.ok()) return joining.status();
        const double arrived = Seconds();
        absl::StatusOr<int> steps = JoinFrom(*running, **joining, prompt, 0, &join_steps);
        if (!steps.ok()) return steps.status();
        ttfts.push_back(Seconds() - arrived);
        j.steps_to_first_token = *steps;
      }
      if (o_.shared_prefix == 0) continue;
      std::unique_ptr<SequenceState> kept;
      {
        // The start computed once and copied out, as the prefix cache does.
        absl::StatusOr<std::unique_ptr<Sequence>> seq = engine_.NewSequence();
        if (!seq.ok()) return seq.status();
        const std::span<const int32_t> start =
            std::span(prompt).first(static_cast<size_t>(o_.shared_prefix));
        if (absl::Status s = engine_.Forward(**seq, start, LogitRows::kNone, nullptr); !s.ok()) {
          return s;
        }
        const double t0 = Seconds();
        absl::StatusOr<std::unique_ptr<SequenceState>> copied = engine_.CopyState(**seq);
        if (!copied.ok()) return copied.status();
        copies.push_back(Seconds() - t0);
        kept = *std::move(copied);
      }
      absl::StatusOr<std::unique_ptr<Sequence>> joining = engine_.NewSequence();
      if (!joining.ok()) return joining.status();
      const double arrived = Seconds();
      if (absl::Status s = engine_.LoadState(**joining, *kept, o_.shared_prefix); !s.ok()) {
        return s;
      }
      loads.push_back(Seconds() - arrived);
      absl::StatusOr<int> steps = JoinFrom(*running, **joining, prompt, o_.shared_prefix, nullptr);
      if (!steps.ok()) return steps.status();
      hit_ttfts.push_back(Seconds() - arrived);
      j.hit_steps_to_first_token = *steps;
    }
    j.ttft_p50 = Quantile(ttfts, 0.5);
    j.ttft_p99 = Quantile(ttfts, 0.99);
    j.alone_prefill_s = Quantile(alone_prefills, 0.5);
    j.step_during_join_s = Quantile(join_steps, 0.5);
    if (!hit_ttfts.empty()) {
      j.hit_ttft_p50 = Quantile(hit_ttfts, 0.5);
      j.hit_ttft_p99 = Quantile(hit_ttfts, 0.99);
      j.copy_s = Quantile(copies, 0.5);
      j.load_s = Quantile(loads, 0.5);
    }
    return j;
  }

 private:
  const Options& o_;
  const Model& model_;
  CpuEngine& engine_;
  CountingSource& source_;
  std::mt19937 rng_;
  std::vector<float> row_;
  std::vector<float> step_rows_;  // [max_sequences][n_vocab]: a step's logits rows
  std::vector<int32_t> tokens_;
  std::vector<SequenceStep> steps_;
};

int Run(const Options& o) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(o.model);
  if (!gguf.ok()) {
    std::fprintf(stderr, "moetier-bench-batch: %s\n", std::string(gguf.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<Model> model = LoadModel(**gguf);
  if (!model.ok()) {
    std::fprintf(stderr, "moetier-bench-batch: %s: %s\n", o.model.c_str(),
                 std::string(model.status().message()).c_str());
    return 1;
  }
  const int widest = std::max(*std::max_element(o.widths.begin(), o.widths.end()),
                              o.join_running + 1);
  // Room for the context, every timed step and the joins' decode steps.
  const int64_t steps_per_join = (o.join_prompt + o.chunk - 1) / o.chunk +
                                 (o.join_prompt - o.shared_prefix + o.chunk - 1) / o.chunk;
  const int64_t positions =
      static_cast<int64_t>(o.context) + 1 + static_cast<int64_t>(o.decode_steps) * (o.runs + 1) +
      std::max<int64_t>(o.join_prompt, steps_per_join * o.join_runs);
  if (positions > model->hparams.n_ctx_train) {
    std::fprintf(stderr,
                 "moetier-bench-batch: the run needs %lld positions per sequence, more than the "
                 "model's training context %d; lower --context, --decode-steps or --runs\n",
                 static_cast<long long>(positions), model->hparams.n_ctx_train);
    return 2;
  }
  // Timed steps must not fault in the mapping's pages (each step reads
  // experts no step before it read).
  (*gguf)->TouchTensorPages();
  std::optional<RowTraceReplay> replay;
  if (!o.routing_traces.empty()) {
    std::vector<RoutingTrace> traces;
    for (const std::string& path : o.routing_traces) {
      absl::StatusOr<RoutingTrace> trace =
          ReadRoutingTrace(path, static_cast<uint32_t>(model->hparams.n_expert));
      if (!trace.ok()) {
        std::fprintf(stderr, "moetier-bench-batch: %s\n",
                     std::string(trace.status().message()).c_str());
        return 2;
      }
      traces.push_back(*std::move(trace));
    }
    absl::StatusOr<RowTraceReplay> made = RowTraceReplay::Create(std::move(traces), model->hparams);
    if (!made.ok()) {
      std::fprintf(stderr, "moetier-bench-batch: %s\n", std::string(made.status().message()).c_str());
      return 2;
    }
    replay.emplace(*std::move(made));
  }
  CountingSource source(*model);
  CpuEngineConfig config;
  config.routing_override = replay.has_value() ? &*replay : nullptr;
  config.max_ctx = static_cast<int>(positions);
  config.max_sequences = widest;
  config.n_threads = o.threads;
  config.kv_types = o.kv_types;
  config.expert_source = &source;
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(*model, config);
  if (!engine.ok()) {
    std::fprintf(stderr, "moetier-bench-batch: %s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  Bench bench(o, *model, **engine, source);
  if (!o.json) {
    std::printf("%s: %s, %d threads, context %d%s, KV %s/%s, %d decode steps x %d runs\n",
                o.model.c_str(), model->hparams.architecture.c_str(), o.threads, o.context,
                o.skip_context ? " (skipped)" : "", KvCacheTypeName(o.kv_types.k).c_str(),
                KvCacheTypeName(o.kv_types.v).c_str(), o.decode_steps, o.runs);
    if (replay.has_value()) {
      std::printf("  routing replayed per row from %zu trace(s): %s\n", o.routing_traces.size(),
                  absl::StrJoin(o.routing_traces, ", ").c_str());
    }
    std::printf("  width  tok/s (median)  vs 1 seq  expert MiB/token  vs 1 seq  "
                "bytes bound  of bound\n");
  }
  double base_rate = 0, base_bytes = 0, base_tokens_per_byte = 0;
  const double dense_bytes = static_cast<double>(DenseWeightBytesPerStep(*model));
  for (const int width : o.widths) {
    absl::StatusOr<Bench::Width> w = bench.MeasureWidth(width);
    if (!w.ok()) {
      std::fprintf(stderr, "moetier-bench-batch: width %d: %s\n", width,
                   std::string(w.status().message()).c_str());
      return 1;
    }
    if (base_rate == 0) {
      base_rate = w->tokens_per_s;
      base_bytes = w->expert_bytes_per_token;
    }
    const double speedup = w->tokens_per_s / base_rate;
    const double bytes_ratio = base_bytes > 0 ? w->expert_bytes_per_token / base_bytes : 0;
    // What a memory-bound engine would gain: tokens per weight byte read
    // (a step reads the dense weights once and each routed expert once)
    // against the first width's.
    const double tokens_per_byte =
        width / (dense_bytes + static_cast<double>(width) * w->expert_bytes_per_token);
    if (base_tokens_per_byte == 0) base_tokens_per_byte = tokens_per_byte;
    const double bound = tokens_per_byte / base_tokens_per_byte;
    if (o.json) {
      nlohmann::json row = {{"model", o.model},
                            {"routing", replay.has_value() ? "trace" : "router"},
                            {"width", width},
                            {"tokens_per_s", w->tokens_per_s},
                            {"speedup_vs_first_width", speedup},
                            {"expert_bytes_per_token", w->expert_bytes_per_token},
                            {"expert_bytes_vs_first_width", bytes_ratio},
                            {"dense_bytes_per_step", dense_bytes},
                            {"memory_bound_speedup", bound},
                            {"speedup_of_memory_bound", speedup / bound}};
      double total = 0;
      for (double seconds : w->phases) total += seconds;
      for (int p = 0; p < static_cast<int>(CpuPhase::kCount) && total > 0; ++p) {
        row["time_share_by_phase"][std::string(CpuPhaseName(static_cast<CpuPhase>(p)))] =
            w->phases[static_cast<size_t>(p)] / total;
      }
      std::printf("%s\n", row.dump().c_str());
    } else {
      std::printf("  %5d  %14.2f  %7.2fx  %16.2f  %7.2fx  %10.2fx  %7.0f%%\n", width,
                  w->tokens_per_s, speedup, w->expert_bytes_per_token / (1 << 20), bytes_ratio,
                  bound, 100 * speedup / bound);
      PrintPhases(absl::StrFormat("         width %d", width).c_str(), w->phases, "");
    }
    std::fflush(stdout);
  }
  if (o.join_running == 0) return 0;
  absl::StatusOr<Bench::Join> j = bench.MeasureJoin();
  if (!j.ok()) {
    std::fprintf(stderr, "moetier-bench-batch: join: %s\n", std::string(j.status().message()).c_str());
    return 1;
  }
  if (o.json) {
    nlohmann::json row = {{"model", o.model},
                          {"join_running", o.join_running},
                          {"join_prompt_tokens", o.join_prompt},
                          {"chunk", o.chunk},
                          {"ttft_p50_s", j->ttft_p50},
                          {"ttft_p99_s", j->ttft_p99},
                          {"alone_prefill_s", j->alone_prefill_s},
                          {"step_alone_s", j->step_alone_s},
                          {"step_during_join_s", j->step_during_join_s},
                          {"steps_to_first_token", j->steps_to_first_token}};
    if (o.shared_prefix > 0) {
      row["shared_prefix_tokens"] = o.shared_prefix;
      row["hit_ttft_p50_s"] = j->hit_ttft_p50;
      row["hit_ttft_p99_s"] = j->hit_ttft_p99;
      row["hit_steps_to_first_token"] = j->hit_steps_to_first_token;
      row["state_copy_s"] = j->copy_s;
      row["state_load_s"] = j->load_s;
    }
    std::printf("%s\n", row.dump().c_str());
  } else {
    std::printf(
        "  join: a %d-token prompt, %d per step, next to %d decoding sequences (%d arrivals)\n"
        "    TTFT p50 %.3f s, p99 %.3f s = %.2fx / %.2fx the prompt alone (%.3f s)\n"
        "    their step %.1f ms during the join against %.1f ms alone (%.2fx)\n",
        o.join_prompt, o.chunk, o.join_running, o.join_runs, j->ttft_p50, j->ttft_p99,
        j->ttft_p50 / j->alone_prefill_s, j->ttft_p99 / j->alone_prefill_s, j->alone_prefill_s,
        j->step_during_join_s * 1e3, j->step_alone_s * 1e3, j->step_during_join_s / j->step_alone_s);
    if (o.shared_prefix > 0) {
      std::printf(
          "    its first %d tokens loaded from a kept state: TTFT p50 %.3f s, p99 %.3f s = "
          "%.2fx / %.2fx the cold join's (copy %.1f ms, load %.1f ms)\n",
          o.shared_prefix, j->hit_ttft_p50, j->hit_ttft_p99, j->hit_ttft_p50 / j->ttft_p50,
          j->hit_ttft_p99 / j->ttft_p99, j->copy_s * 1e3, j->load_s * 1e3);
    }
  }
  return 0;
}

}  // namespace
}  // namespace moetier

int main(int argc, char** argv) { return moetier::Run(moetier::ParseOptions(argc, argv)); }
