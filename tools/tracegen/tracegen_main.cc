// moetier-tracegen: writes expert-routing traces from a model calibrated to
// real ones, and shows how close the calibration is.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/flags/flag_set.h"
#include "cache/routing_trace.h"
#include "tracegen/trace_model.h"
#include "tracegen/trace_stats.h"

namespace moetier {
namespace {

constexpr int kExitFailure = 1;

constexpr std::string_view kUsage =
    R"(moetier-tracegen: expert-routing traces calibrated to real ones

usage: moetier-tracegen [shape] [model] [--seed N] [--model-seed N] [--weights] --out FILE [REAL...]
       moetier-tracegen --calibrate [--seed N] [--model-seed N] REAL...
       moetier-tracegen --print-model [REAL...]
       moetier-tracegen --stats TRACE...

Generates a routing trace (worker/cache/routing_trace.h format, with header)
for any layer count, expert count, top-k and token count. Per layer, each of
a token's k experts repeats an expert of a recent token with probability
reuse_prob (distance geometric with tail reuse_tail); otherwise, from the
second layer on and with probability cross_layer_prob, it is the successor
of one of the token's experts at the previous layer (a fixed random
one-to-one mapping per layer pair; among the successors not chosen yet, in
proportion to popularity); otherwise it is drawn from a Zipf-Mandelbrot popularity
(exponent zipf_exponent, rank shift zipf_shift) over a random ranking of the
experts. With REAL traces the per-layer parameters are fitted to them;
without, the built-in model fitted to the code, english_prose and math
decode traces of shared/traces/granite-3.0-1b-a400m is used. A model with
another layer count is stretched over the layers (layer l uses model layer
floor(l * model_layers / layers)).)";

struct CommandLine {
  GenerateOptions gen;
  std::vector<std::string> real;
  std::string out;
  double zipf = -1, zipf_shift = -1, noise = -1, reuse_prob = -1, reuse_tail = -1,
         cross_layer_prob = -1;
  // --layers / --experts / --top-k as given (0: not given); they override
  // the --shape preset wherever they stand.
  uint32_t layers = 0, experts = 0, top_k = 0;
  bool calibrate = false;
  bool print_model = false;
  bool stats = false;
};

struct Shape {
  const char* name;
  uint32_t n_layer, n_expert, top_k;
};
// MoE layers x routed experts, top-k, of the models the presets are named
// after. The first is the default.
constexpr Shape kShapes[] = {
    {"qwen3", 48, 128, 8},    // Qwen3-30B-A3B
    {"qwen3.6", 40, 256, 8},  // Qwen3.6-35B-A3B
    {"mixtral", 32, 8, 2},    // Mixtral 8x7B
    {"olmoe", 16, 64, 8},     // OLMoE-1B-7B
};

absl::Status ApplyShape(std::string_view flag, std::string_view name, GenerateOptions& gen) {
  std::string known;
  for (const Shape& s : kShapes) {
    if (name == s.name) {
      gen.n_layer = s.n_layer;
      gen.n_expert = s.n_expert;
      gen.top_k = s.top_k;
      return absl::OkStatus();
    }
    known += known.empty() ? s.name : std::string(", ") + s.name;
  }
  return FlagError(flag, absl::StrFormat("unknown shape '%s' (known: %s)", name, known));
}

FlagSet MakeFlags(CommandLine& cl) {
  FlagSet f;
  f.AddText("Shape (default: qwen3):");
  f.Add({"--shape"}, "NAME",
        "preset layers x experts, top-k: qwen3 (48 x 128, top-8, Qwen3-30B-A3B), qwen3.6 "
        "(40 x 256, top-8), mixtral (32 x 8, top-2), olmoe (16 x 64, top-8)",
        [&cl](std::string_view flag, std::string_view v) { return ApplyShape(flag, v, cl.gen); });
  f.AddInt({"--layers"}, "N", "MoE layers (default 48); overrides --shape wherever it stands",
           &cl.layers, uint32_t{1}, static_cast<uint32_t>(kTraceMaxLayers));
  f.AddInt({"--experts"}, "N", "routed experts per layer (default 128); overrides --shape",
           &cl.experts, uint32_t{1}, static_cast<uint32_t>(kTraceMaxExperts));
  f.AddInt({"--top-k"}, "N", "experts per token (default 8); overrides --shape", &cl.top_k,
           uint32_t{1}, static_cast<uint32_t>(kTraceMaxExperts));
  f.AddInt({"--tokens"}, "N", "tokens (default 1024)", &cl.gen.n_token, size_t{1}, size_t{1} << 28);

  f.AddText("Model (override every layer's fitted value):");
  f.AddFloat({"--zipf"}, "S", absl::StrFormat("popularity exponent, in [0, %g]", kMaxZipfExponent),
             &cl.zipf, 0, kMaxZipfExponent);
  f.AddFloat({"--zipf-shift"}, "Q",
             absl::StrFormat("popularity rank shift, times the expert count, in [0, %g]: weight "
                             "of rank r (from 1) = (r + Q * experts)^-S",
                             kMaxZipfShift),
             &cl.zipf_shift, 0, kMaxZipfShift);
  f.AddFloat({"--popularity-noise"}, "N",
             absl::StrFormat("per-sequence popularity noise, in [0, %g]: each sequence "
                             "multiplies each expert's weight by exp(N * z), z standard normal",
                             kMaxPopularityNoise),
             &cl.noise, 0, kMaxPopularityNoise);
  f.AddFloat({"--reuse-prob"}, "R", "probability of repeating a recent token's expert, in [0, 1]",
             &cl.reuse_prob, 0, 1);
  f.Add({"--reuse-tail"}, "G", "geometric tail of the reuse distance, in [0, 1)",
        [&cl](std::string_view flag, std::string_view v) {
          if (absl::Status s = ParseDoubleFlag(flag, v, 0, 1, &cl.reuse_tail); !s.ok()) return s;
          return cl.reuse_tail < 1 ? absl::OkStatus() : FlagError(flag, "must be below 1");
        });
  f.AddFloat({"--cross-layer-prob"}, "C",
             "probability that a selection not repeating a recent token's expert follows the "
             "previous layer, in [0, 1]",
             &cl.cross_layer_prob, 0, 1);

  f.AddText("Output:");
  f.AddString({"--out"}, "FILE", "trace file to write", &cl.out);
  f.AddSwitch({"--weights"},
              "also write router weights (decreasing with the rank, adding up to 1 per layer)",
              &cl.gen.weights);
  f.AddInt({"--seed"}, "N",
           "unsigned 64-bit seed of the sequence (default 1): the per-sequence popularity noise "
           "and every selection, i.e. which prompt",
           &cl.gen.seed);
  f.AddInt({"--model-seed"}, "N",
           "unsigned 64-bit seed of the model's structure (default 1): each layer's popularity "
           "ranking and the cross-layer successors, i.e. which model. Same model seed, other "
           "--seed: the same experts are hot. Same flags and seeds give the same file",
           &cl.gen.model_seed);

  f.AddText("Modes:");
  f.AddSwitch({"--calibrate"},
              "fit the model to the REAL traces, generate traces of the same shape and lengths, "
              "and print the statistics of both per layer: popularity entropy (normalised; 1 = "
              "uniform) over all sequences and within each (mean), share of the top 1/8 of "
              "experts (over all, and within each), fraction of a token's experts the previous "
              "token also used, the reuse-distance distribution (fraction of selections whose "
              "expert was last used d tokens before; cold = first use), and the cross-layer "
              "correlation with the layer before: xl-hit, the fraction of the layer's experts a "
              "co-occurrence table of the two layers predicts (learned on one half of each "
              "sequence, measured on the other), xl-shuf, the same with the layer's rows "
              "shuffled among tokens (popularity alone), and xlift = xl-hit - xl-shuf",
              &cl.calibrate);
  f.AddSwitch({"--print-model"}, "print the per-layer model (fitted to REAL, or built in)",
              &cl.print_model);
  f.AddSwitch({"--stats"},
              "print the statistics above for the given traces (one shape; no fitting, no "
              "output file)",
              &cl.stats);
  return f;
}

absl::Status CheckCommandLine(CommandLine& cl) {
  if (cl.layers != 0) cl.gen.n_layer = cl.layers;
  if (cl.experts != 0) cl.gen.n_expert = cl.experts;
  if (cl.top_k != 0) cl.gen.top_k = cl.top_k;
  if (cl.gen.top_k > cl.gen.n_expert) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--top-k %u exceeds --experts %u", cl.gen.top_k, cl.gen.n_expert));
  }
  if ((cl.calibrate || cl.stats) && cl.real.empty()) {
    return absl::InvalidArgumentError("--calibrate and --stats need trace files");
  }
  if (!cl.calibrate && !cl.print_model && !cl.stats && cl.out.empty()) {
    return absl::InvalidArgumentError("--out FILE is needed (or --calibrate / --print-model)");
  }
  return absl::OkStatus();
}

void PrintStatsRow(const char* label, const LayerStats& s) {
  std::printf(" %-4s %7.3f %7.3f %7.3f %7.3f %7.3f", label, s.entropy, s.entropy_within,
              s.top_eighth_share, s.top_eighth_within, s.reuse_prev);
  for (size_t b = 0; b < kReuseBuckets; ++b) std::printf(" %6.3f", s.reuse_distance[b]);
  std::printf(" %6.3f", s.cold);
  if (s.has_cross_layer) {
    std::printf(" %7.3f %7.3f %6.3f\n", s.cross_layer_hit, s.cross_layer_hit_shuffled,
                s.cross_layer_lift);
  } else {
    std::printf(" %7s %7s %6s\n", "-", "-", "-");
  }
}

void PrintStatsHeader() {
  std::printf("%-6s %-4s %7s %7s %7s %7s %7s", "layer", "", "entropy", "ent/seq", "top1/8",
              "top/seq", "reuse1");
  for (size_t b = 0; b < kReuseBuckets; ++b) {
    std::printf(" %6s", ("d=" + ReuseBucketName(b)).c_str());
  }
  std::printf(" %6s %7s %7s %6s\n", "cold", "xl-hit", "xl-shuf", "xlift");
}

void PrintStats(const TraceStats& st) {
  PrintStatsHeader();
  for (uint32_t l = 0; l < st.n_layer; ++l) {
    std::printf("%-6u", l);
    PrintStatsRow("", st.layer[l]);
  }
  std::printf("%-6s", "mean");
  PrintStatsRow("", st.mean);
}

void PrintCalibration(const TraceStats& real, const TraceStats& gen) {
  PrintStatsHeader();
  for (uint32_t l = 0; l < real.n_layer; ++l) {
    std::printf("%-6u", l);
    PrintStatsRow("real", real.layer[l]);
    std::printf("%-6s", "");
    PrintStatsRow("gen", gen.layer[l]);
  }
  std::printf("%-6s", "mean");
  PrintStatsRow("real", real.mean);
  std::printf("%-6s", "");
  PrintStatsRow("gen", gen.mean);
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "moetier-tracegen: %s\n", std::string(s.message()).c_str());
  return kExitFailure;
}

int Run(int argc, char** argv) {
  CommandLine cl;
  cl.gen.n_layer = kShapes[0].n_layer;
  cl.gen.n_expert = kShapes[0].n_expert;
  cl.gen.top_k = kShapes[0].top_k;
  cl.gen.n_token = 1024;
  const FlagSet flags = MakeFlags(cl);
  cl.real = ParseFlagsOrExit(flags, "moetier-tracegen", kUsage, argc, argv);
  if (absl::Status s = CheckCommandLine(cl); !s.ok()) ExitWithUsageError("moetier-tracegen", s);
  std::vector<RoutingTrace> real;
  for (const std::string& path : cl.real) {
    absl::StatusOr<RoutingTrace> t = ReadRoutingTrace(path);
    if (!t.ok()) return Fail(t.status());
    real.push_back(*std::move(t));
  }
  std::vector<const RoutingTrace*> real_ptrs;
  for (const RoutingTrace& t : real) real_ptrs.push_back(&t);
  if (cl.stats) {
    absl::StatusOr<TraceStats> st = MeasureTraceStats(real_ptrs);
    if (!st.ok()) return Fail(st.status());
    std::printf("%zu trace(s), %zu tokens, %u layers x %u experts, top-%u\n", real.size(),
                st->n_token, st->n_layer, st->n_expert, st->top_k);
    PrintStats(*st);
    return 0;
  }

  RoutingModel model = DefaultRoutingModel();
  if (!real.empty()) {
    absl::StatusOr<RoutingModel> fitted = FitRoutingModel(real_ptrs, cl.gen.seed);
    if (!fitted.ok()) return Fail(fitted.status());
    model = *std::move(fitted);
  }
  for (LayerRoutingModel& m : model.layer) {
    if (cl.zipf >= 0) m.zipf_exponent = cl.zipf;
    if (cl.zipf_shift >= 0) m.zipf_shift = cl.zipf_shift;
    if (cl.noise >= 0) m.popularity_noise = cl.noise;
    if (cl.reuse_prob >= 0) m.reuse_prob = cl.reuse_prob;
    if (cl.reuse_tail >= 0) m.reuse_tail = cl.reuse_tail;
    if (cl.cross_layer_prob >= 0) m.cross_layer_prob = cl.cross_layer_prob;
  }
  if (cl.print_model) std::fputs(model.ToString().c_str(), stdout);

  if (cl.calibrate) {
    // One generated sequence per real one, of the same length and shape,
    // from one model instance (the real ones are prompts to one model).
    GenerateOptions opt;
    opt.n_layer = real[0].n_layer;
    opt.n_expert = real[0].n_expert;
    opt.top_k = real[0].top_k;
    opt.seed = cl.gen.seed;
    opt.model_seed = cl.gen.model_seed;
    std::vector<size_t> lengths;
    for (const RoutingTrace& t : real) lengths.push_back(t.n_token());
    absl::StatusOr<std::vector<RoutingTrace>> seqs = GenerateSequences(model, opt, lengths);
    if (!seqs.ok()) return Fail(seqs.status());
    const std::vector<RoutingTrace> gen = *std::move(seqs);
    std::vector<const RoutingTrace*> gen_ptrs;
    for (const RoutingTrace& t : gen) gen_ptrs.push_back(&t);
    absl::StatusOr<TraceStats> rs = MeasureTraceStats(real_ptrs);
    if (!rs.ok()) return Fail(rs.status());
    absl::StatusOr<TraceStats> gs = MeasureTraceStats(gen_ptrs);
    if (!gs.ok()) return Fail(gs.status());
    std::printf(
        "calibration: %zu real trace(s), %zu tokens, %u layers x %u experts, top-%u; "
        "generated: as many, seed %llu\n",
        real.size(), rs->n_token, rs->n_layer, rs->n_expert, rs->top_k,
        static_cast<unsigned long long>(cl.gen.seed));
    PrintCalibration(*rs, *gs);
  }

  if (!cl.out.empty()) {
    cl.gen.name = cl.out;
    absl::StatusOr<RoutingTrace> t = GenerateTrace(model, cl.gen);
    if (!t.ok()) return Fail(t.status());
    if (absl::Status s = WriteRoutingTrace(cl.out, *t); !s.ok()) return Fail(s);
  }
  return 0;
}

}  // namespace
}  // namespace moetier

int main(int argc, char** argv) { return moetier::Run(argc, argv); }
