// moetier-policy-lab: replays expert-routing traces through the worker's
// expert cache policies and through Belady's MIN, and prints hit rates.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "base/flags/flag_set.h"
#include "cache/expert_cache_policy.h"
#include "cache/routing_trace.h"
#include "policy_lab/belady_policy.h"
#include "policy_lab/frequency_oracle_policy.h"
#include "policy_lab/replay.h"

namespace moetier {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

constexpr std::string_view kUsage =
    R"(moetier-policy-lab: expert cache policies against Belady's optimum

usage: moetier-policy-lab [flags] TRACE...

Replays each TRACE from a cold cache through every policy of the worker's
expert cache (linked from worker/cache, the code the worker runs) and through
Belady's MIN (the offline optimum), for several cache sizes, without and with
lookahead prefetch, and prints hit rates (hits / routed experts) and each
policy's ratio to the optimum. Results are summed over all TRACEs and layers.

TRACE: a routing trace in the text format of worker/cache/routing_trace.h:
  the files of shared/traces/*/ (one token per line, ';' between layers, ','
  between expert ids) or moetier's own (the same with a 'moetier-trace v1'
  header and optional router weights).

Columns: hit rate, and in brackets its ratio to MIN's hit rate under the same
conditions (with prefetch: MIN admits an offered expert when it is used
before its victim would be). The cost table: nanoseconds per routed expert of
the whole per-token protocol (Route, then Admit per miss), median of
--timing-repeats replays without prefetch, and the bytes of bookkeeping per
expert (slots, protection and the policy's scores; MIN's holds the future).
With prefetch, 'copies' is the expert copies
(demand + prefetch) per routed expert; MIN without prefetch copies the fewest
possible, so 'min copies ratio' = MIN's copies / the policy's copies <= 1.)";

struct SizeSpec {
  std::string label;      // "2k", "all", "24"
  uint32_t multiple = 0;  // of top_k; 0 with absolute or all
  uint32_t absolute = 0;
  bool all = false;
  uint32_t SlotsFor(const RoutingTrace& t) const {
    uint32_t s = all ? t.n_expert : multiple != 0 ? multiple * t.top_k : absolute;
    return std::min(std::max(s, t.top_k), t.n_expert);
  }
};

struct PolicySpec {
  std::string name;
  ExpertPolicyKind kind = ExpertPolicyKind::kLru;
  double lambda = 0;  // > 0: LRFU with this lambda
  bool min = false;
  bool frequency_oracle = false;
};

struct CommandLine {
  std::vector<std::string> traces;
  std::vector<PolicySpec> policies;
  std::vector<SizeSpec> sizes;  // empty: the ladder
  bool prefetch_off = true;
  bool prefetch_on = true;
  double accuracy = 0.8;
  uint64_t seed = 1;
  uint32_t n_expert = 0;
  std::vector<std::string> budget_traces;
  std::string budget_policy = "adaptive";
  uint32_t timing_repeats = 3;
  bool frequency_oracle = true;
  bool per_layer = false;
  bool json = false;
};

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t at = s.find(',', start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

bool ParseUnsigned(const std::string& s, uint64_t& out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  out = v;
  return true;
}

absl::StatusOr<SizeSpec> ParseSize(const std::string& s) {
  SizeSpec spec;
  spec.label = s;
  uint64_t v = 0;
  if (s == "all") {
    spec.all = true;
  } else if (s == "k") {
    spec.multiple = 1;
  } else if (s.size() > 1 && s.back() == 'k' && ParseUnsigned(s.substr(0, s.size() - 1), v) &&
             v > 0 && v <= 65536) {
    spec.multiple = static_cast<uint32_t>(v);
  } else if (ParseUnsigned(s, v) && v > 0 && v <= 65536) {
    spec.absolute = static_cast<uint32_t>(v);
  } else {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--slots: '%s' is not a slot count, a multiple of top-k like 2k, or all", s));
  }
  return spec;
}

// The flags; `extra` receives the --lrfu-lambda policies, which come after
// the named ones whatever the order of the flags.
FlagSet MakeFlags(CommandLine& cl, std::vector<PolicySpec>& extra, bool& policies_given) {
  FlagSet f;
  f.Add({"--policies"}, "LIST",
        "comma-separated policies to replay (default: all): lru, lfu, lrfu, reuse, adaptive, "
        "optgen (the default policy is adaptive); MIN is always replayed, and freq-oracle unless "
        "--no-frequency-oracle",
        [&cl, &policies_given](std::string_view flag, std::string_view v) -> absl::Status {
          policies_given = true;
          for (const std::string& name : SplitList(std::string(v))) {
            absl::StatusOr<ExpertPolicyKind> kind = ParseExpertPolicyKind(name);
            if (!kind.ok()) return FlagError(flag, std::string(kind.status().message()));
            cl.policies.push_back(PolicySpec{name, *kind, 0, false});
          }
          return absl::OkStatus();
        });
  f.Add({"--lrfu-lambda"}, "LIST",
        "also replay LRFU with each lambda in (0, 1], named lrfu(LAMBDA)",
        [&extra](std::string_view flag, std::string_view v) -> absl::Status {
          for (const std::string& item : SplitList(std::string(v))) {
            double lambda = 0;
            if (absl::Status s = ParseDoubleFlag(flag, item, 0, 1, &lambda); !s.ok()) return s;
            if (lambda == 0)
              return FlagError(flag, "a lambda of 0 is plain LFU; give one in (0, 1]");
            extra.push_back(PolicySpec{absl::StrFormat("lrfu(%g)", lambda), ExpertPolicyKind::kLrfu,
                                       lambda, false});
          }
          return absl::OkStatus();
        });
  f.Add({"--slots"}, "LIST",
        "cache sizes in slots per layer: numbers, multiples of top-k written as 'Mk' (2k = twice "
        "top-k), or 'all' (default: k, 2k, 4k, ... below the expert count, then all). Sizes are "
        "clamped to [top-k, experts].",
        [&cl](std::string_view, std::string_view v) -> absl::Status {
          for (const std::string& item : SplitList(std::string(v))) {
            absl::StatusOr<SizeSpec> size = ParseSize(item);
            if (!size.ok()) return size.status();
            cl.sizes.push_back(*size);
          }
          return absl::OkStatus();
        });
  f.Add({"--prefetch"}, "MODE",
        "off, on or both (default both). With prefetch, after layer l the experts predicted for "
        "layer l+1 are offered to the policy (Prefetch) and copied if it admits them; a "
        "prefetched expert that is routed is a hit. The prediction is the true top-k of layer "
        "l+1 with each expert replaced by a wrong one with probability 1 - accuracy; layer 0 is "
        "not prefetched.",
        [&cl](std::string_view flag, std::string_view v) -> absl::Status {
          if (v != "off" && v != "on" && v != "both") {
            return FlagError(flag, absl::StrFormat("'%s' is not off, on or both", v));
          }
          cl.prefetch_on = v != "off";
          cl.prefetch_off = v != "on";
          return absl::OkStatus();
        });
  f.AddFloat({"--prefetch-accuracy"}, "A",
             "fraction of the true experts predicted, in [0, 1] (default 0.8)", &cl.accuracy, 0, 1);
  f.AddInt({"--seed"}, "N", "seed of the prediction errors (default 1)", &cl.seed);
  f.AddInt({"--experts"}, "N", "expert count for traces without a header (default: largest id + 1)",
           &cl.n_expert, uint32_t{1}, static_cast<uint32_t>(kTraceMaxExperts));
  f.Add({"--budgets-from"}, "LIST",
        "comma-separated traces (of the same shape as TRACE) to profile per-layer budgets on: "
        "each layer's hit curve under --budget-policy, then the pool (layers x size) is shared "
        "out by marginal gain (UCP lookahead). Adds a table, without prefetch, of every policy "
        "under those budgets; profile on other traces than TRACE to measure rather than fit.",
        [&cl](std::string_view, std::string_view v) {
          cl.budget_traces = SplitList(std::string(v));
          return absl::OkStatus();
        });
  f.Add({"--budget-policy"}, "NAME",
        "policy whose hit curves size the budgets (default adaptive; min gives the offline "
        "optimum's curves)",
        [&cl](std::string_view flag, std::string_view v) -> absl::Status {
          if (v != "min" && !ParseExpertPolicyKind(std::string(v)).ok()) {
            return FlagError(flag, absl::StrFormat("unknown policy '%s'", v));
          }
          cl.budget_policy = std::string(v);
          return absl::OkStatus();
        });
  f.AddSwitch({"--no-frequency-oracle"},
              "leave out the freq-oracle column: LFU with the exact counts of the whole trace, "
              "future included (an offline reference like MIN: what knowing each sequence's "
              "popularity, but not its timing, gives)",
              [&cl] { cl.frequency_oracle = false; });
  f.AddInt({"--timing-repeats"}, "N",
           "replays per policy and size (without prefetch) whose median time gives the decision "
           "cost (default 3)",
           &cl.timing_repeats, uint32_t{1}, uint32_t{1000});
  f.AddSwitch({"--per-layer"}, "also print a table per layer for every size", &cl.per_layer);
  f.AddSwitch({"--json"}, "print JSON instead of tables (per-layer included)", &cl.json);
  return f;
}

absl::Status ParseCommandLine(int argc, char** argv, CommandLine& cl) {
  std::vector<PolicySpec> extra;
  bool policies_given = false;
  const FlagSet flags = MakeFlags(cl, extra, policies_given);
  cl.traces = ParseFlagsOrExit(flags, "moetier-policy-lab", kUsage, argc, argv);
  if (!policies_given) {
    for (const ExpertPolicyKind kind : AllExpertPolicyKinds()) {
      cl.policies.push_back(PolicySpec{std::string(ExpertPolicyName(kind)), kind, 0, false});
    }
  }
  for (const PolicySpec& p : extra) cl.policies.push_back(p);
  if (cl.frequency_oracle) {
    cl.policies.push_back(PolicySpec{"freq-oracle", ExpertPolicyKind::kLru, 0, false, true});
  }
  cl.policies.push_back(PolicySpec{"min", ExpertPolicyKind::kLru, 0, true});
  if (cl.traces.empty()) return absl::InvalidArgumentError("no TRACE given (see --help)");
  return absl::OkStatus();
}

std::vector<SizeSpec> Ladder(const std::vector<RoutingTrace>& traces) {
  // Multiples of top-k up to the largest expert count, then "all".
  uint32_t max_multiple = 1;
  for (const RoutingTrace& t : traces) {
    max_multiple = std::max(max_multiple, (t.n_expert + t.top_k - 1) / t.top_k);
  }
  std::vector<SizeSpec> sizes;
  for (uint32_t m = 1; m < max_multiple; m *= 2) {
    SizeSpec s;
    s.multiple = m;
    s.label = m == 1 ? "k" : absl::StrFormat("%uk", m);
    sizes.push_back(s);
  }
  SizeSpec all;
  all.all = true;
  all.label = "all";
  sizes.push_back(all);
  return sizes;
}

// Results, summed over traces: [size][prefetch 0/1][policy].
using Results = std::vector<std::array<std::vector<ReplayTally>, 2>>;

// What a policy costs to run, without prefetch, summed over traces.
struct DecisionCost {
  double ns = 0;  // median replay time, summed over traces
  uint64_t requests = 0;
  uint64_t state_bytes = 0;  // summed over traces
  uint64_t experts = 0;      // layers x experts, summed over traces
  double ns_per_request() const { return requests == 0 ? 0 : ns / static_cast<double>(requests); }
  double bytes_per_expert() const {
    return experts == 0 ? 0 : static_cast<double>(state_bytes) / static_cast<double>(experts);
  }
};
// [size][policy]
using Costs = std::vector<std::vector<DecisionCost>>;

absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> Build(const PolicySpec& p,
                                                         const ExpertCacheShape& shape,
                                                         const RoutingTrace& trace) {
  if (p.min) return MakeBeladyPolicy(shape, trace);
  if (p.frequency_oracle) return MakeFrequencyOraclePolicy(shape, trace);
  if (p.lambda > 0) return MakeLrfuPolicy(shape, p.lambda);
  return MakeExpertCachePolicy(p.kind, shape);
}

std::string SizeText(const SizeSpec& s, const std::vector<RoutingTrace>& traces) {
  // With one shape the slot count is known; show it.
  const uint32_t slots = s.SlotsFor(traces[0]);
  for (const RoutingTrace& t : traces) {
    if (s.SlotsFor(t) != slots) return s.label;
  }
  return s.label == std::to_string(slots) ? s.label : absl::StrFormat("%s (%u)", s.label, slots);
}

double Ratio(double a, double b) { return b == 0 ? 0 : a / b; }

void PrintTables(const CommandLine& cl, const std::vector<RoutingTrace>& traces,
                 const std::vector<SizeSpec>& sizes, const Results& results) {
  size_t tokens = 0;
  for (const RoutingTrace& t : traces) tokens += t.n_token();
  std::printf("traces: %zu file(s), %zu tokens\n", traces.size(), tokens);
  for (const RoutingTrace& t : traces) {
    std::printf("  %s: %zu tokens, %u layers x %u experts, top-%u%s\n", t.name.c_str(), t.n_token(),
                t.n_layer, t.n_expert, t.top_k, t.has_weights() ? ", weights" : "");
  }
  const size_t n_pol = cl.policies.size();
  const size_t min_index = n_pol - 1;
  for (int pf = 0; pf < 2; ++pf) {
    if ((pf == 0 && !cl.prefetch_off) || (pf == 1 && !cl.prefetch_on)) continue;
    if (pf == 0) {
      std::printf("\nno prefetch: hit rate (ratio to MIN)\n");
    } else {
      std::printf("\nprefetch, accuracy %.2f: hit rate (ratio to MIN with the same prefetch)\n",
                  cl.accuracy);
    }
    std::printf("%-12s", "slots/layer");
    for (const PolicySpec& p : cl.policies) std::printf(" %16s", p.name.c_str());
    std::printf("\n");
    for (size_t s = 0; s < sizes.size(); ++s) {
      const std::vector<ReplayTally>& row = results[s][pf];
      const double min_rate = row[min_index].Total().hit_rate();
      std::printf("%-12s", SizeText(sizes[s], traces).c_str());
      for (size_t p = 0; p < n_pol; ++p) {
        const double r = row[p].Total().hit_rate();
        if (p == min_index) {
          std::printf(" %16.4f", r);
        } else {
          std::printf("    %.4f (%.3f)", r, Ratio(r, min_rate));
        }
      }
      std::printf("\n");
    }
    if (pf == 1) {
      std::printf(
          "\nprefetch, accuracy %.2f: copies per routed expert (MIN without prefetch / "
          "policy)\n",
          cl.accuracy);
      std::printf("%-12s", "slots/layer");
      for (const PolicySpec& p : cl.policies) std::printf(" %16s", p.name.c_str());
      std::printf("\n");
      for (size_t s = 0; s < sizes.size(); ++s) {
        const std::vector<ReplayTally>& row = results[s][1];
        // MIN's demand copies: the fewest any policy can make.
        const LayerTally best =
            results[s][0].empty() ? LayerTally{} : results[s][0][min_index].Total();
        std::printf("%-12s", SizeText(sizes[s], traces).c_str());
        for (size_t p = 0; p < n_pol; ++p) {
          const LayerTally t = row[p].Total();
          const double copies =
              Ratio(static_cast<double>(t.copies), static_cast<double>(t.requests));
          if (best.requests == 0) {
            std::printf(" %16.4f", copies);
          } else {
            std::printf("    %.4f (%.3f)", copies,
                        Ratio(static_cast<double>(best.copies), static_cast<double>(t.copies)));
          }
        }
        std::printf("\n");
      }
    }
    if (!cl.per_layer) continue;
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::printf("\n%s, %s slots per layer: hit rate per layer\n",
                  pf == 0 ? "no prefetch" : "prefetch", SizeText(sizes[s], traces).c_str());
      std::printf("%-12s", "layer");
      for (const PolicySpec& p : cl.policies) std::printf(" %16s", p.name.c_str());
      std::printf("\n");
      const std::vector<ReplayTally>& row = results[s][pf];
      for (size_t l = 0; l < row[0].layer.size(); ++l) {
        const double min_rate = row[min_index].layer[l].hit_rate();
        std::printf("%-12zu", l);
        for (size_t p = 0; p < n_pol; ++p) {
          const double r = row[p].layer[l].hit_rate();
          if (p == min_index) {
            std::printf(" %16.4f", r);
          } else {
            std::printf("    %.4f (%.3f)", r, Ratio(r, min_rate));
          }
        }
        std::printf("\n");
      }
    }
  }
}

void PrintCostTable(const CommandLine& cl, const std::vector<RoutingTrace>& traces,
                    const std::vector<SizeSpec>& sizes, const Costs& costs) {
  std::printf(
      "\ndecision cost, no prefetch: ns per routed expert (bookkeeping bytes per expert)\n");
  std::printf("%-12s", "slots/layer");
  for (const PolicySpec& p : cl.policies) std::printf(" %16s", p.name.c_str());
  std::printf("\n");
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::printf("%-12s", SizeText(sizes[s], traces).c_str());
    for (const DecisionCost& c : costs[s]) {
      std::printf(" %7.1f (%6.1f)", c.ns_per_request(), c.bytes_per_expert());
    }
    std::printf("\n");
  }
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
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

void PrintJson(const CommandLine& cl, const std::vector<RoutingTrace>& traces,
               const std::vector<SizeSpec>& sizes, const Results& results, const Costs& costs,
               const std::vector<std::vector<uint32_t>>& budgets,
               const std::vector<std::vector<ReplayTally>>& budget_results) {
  std::string out = "{\n  \"traces\": [";
  for (size_t i = 0; i < traces.size(); ++i) {
    const RoutingTrace& t = traces[i];
    absl::StrAppendFormat(&out,
                          "%s\n    {\"name\": %s, \"tokens\": %u, \"layers\": %u, \"experts\": %u, "
                          "\"top_k\": %u}",
                          i ? "," : "", JsonString(t.name), t.n_token(), t.n_layer, t.n_expert,
                          t.top_k);
  }
  absl::StrAppendFormat(&out, "\n  ],\n  \"prefetch_accuracy\": %.17g,\n  \"seed\": %u,\n",
                        cl.accuracy, cl.seed);
  out += "  \"results\": [";
  bool first = true;
  const size_t min_index = cl.policies.size() - 1;
  for (size_t s = 0; s < sizes.size(); ++s) {
    for (int pf = 0; pf < 2; ++pf) {
      if ((pf == 0 && !cl.prefetch_off) || (pf == 1 && !cl.prefetch_on)) continue;
      const std::vector<ReplayTally>& row = results[s][pf];
      for (size_t p = 0; p < cl.policies.size(); ++p) {
        const LayerTally t = row[p].Total();
        const double min_rate = row[min_index].Total().hit_rate();
        absl::StrAppendFormat(
            &out,
            "%s\n    {\"slots\": %s, \"slots_per_layer\": %u, \"prefetch\": %s, \"policy\": %s, "
            "\"requests\": %u, \"hits\": %u, \"copies\": %u, \"hit_rate\": %.6f, "
            "\"ratio_to_min\": %.6f, \"ns_per_routed_expert\": %.3f, "
            "\"state_bytes_per_expert\": %.3f, \"per_layer_hit_rate\": [",
            first ? "" : ",", JsonString(sizes[s].label), sizes[s].SlotsFor(traces[0]),
            pf ? "true" : "false", JsonString(cl.policies[p].name), t.requests, t.hits, t.copies,
            t.hit_rate(), Ratio(t.hit_rate(), min_rate), costs[s][p].ns_per_request(),
            costs[s][p].bytes_per_expert());
        first = false;
        for (size_t l = 0; l < row[p].layer.size(); ++l) {
          absl::StrAppendFormat(&out, "%s%.6f", l ? ", " : "", row[p].layer[l].hit_rate());
        }
        out += "]}";
      }
    }
  }
  out += "\n  ]";
  if (!budgets.empty()) {
    out += ",\n  \"profiled_budgets\": [";
    for (size_t s = 0; s < sizes.size(); ++s) {
      absl::StrAppendFormat(&out, "%s\n    {\"slots\": %s, \"budgets\": [", s ? "," : "",
                            JsonString(sizes[s].label));
      for (size_t l = 0; l < budgets[s].size(); ++l) {
        absl::StrAppendFormat(&out, "%s%u", l ? ", " : "", budgets[s][l]);
      }
      out += "], \"hit_rate\": {";
      for (size_t p = 0; p < cl.policies.size(); ++p) {
        absl::StrAppendFormat(&out, "%s%s: %.6f", p ? ", " : "", JsonString(cl.policies[p].name),
                              budget_results[s][p].Total().hit_rate());
      }
      out += "}}";
    }
    out += "\n  ]";
  }
  out += "\n}\n";
  std::fputs(out.c_str(), stdout);
}

absl::Status ProfileBudgets(const CommandLine& cl, const std::vector<RoutingTrace>& traces,
                            const std::vector<SizeSpec>& sizes,
                            std::vector<std::vector<uint32_t>>& budgets,
                            std::vector<std::vector<ReplayTally>>& budget_results) {
  std::vector<RoutingTrace> profile;
  for (const std::string& path : cl.budget_traces) {
    absl::StatusOr<RoutingTrace> t = ReadRoutingTrace(path, cl.n_expert);
    if (!t.ok()) return t.status();
    profile.push_back(*std::move(t));
  }
  std::vector<const RoutingTrace*> ptrs;
  for (const RoutingTrace& t : profile) ptrs.push_back(&t);
  const RoutingTrace& shape_of = profile[0];
  for (const RoutingTrace& t : traces) {
    if (t.n_layer != shape_of.n_layer || t.n_expert != shape_of.n_expert ||
        t.top_k != shape_of.top_k) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--budgets-from: %s has %u layers x %u experts, top-%u; %s has another shape",
          shape_of.name, shape_of.n_layer, shape_of.n_expert, shape_of.top_k, t.name));
    }
  }
  PolicySpec spec;
  spec.name = cl.budget_policy;
  spec.min = cl.budget_policy == "min";
  if (!spec.min) spec.kind = *ParseExpertPolicyKind(cl.budget_policy);
  absl::StatusOr<std::vector<std::vector<uint64_t>>> curves = LayerHitCurves(
      ptrs,
      [&](const ExpertCacheShape& shape, const RoutingTrace& t) { return Build(spec, shape, t); });
  if (!curves.ok()) return curves.status();
  budgets.clear();
  budget_results.assign(sizes.size(), std::vector<ReplayTally>(cl.policies.size()));
  for (size_t s = 0; s < sizes.size(); ++s) {
    const uint32_t total = sizes[s].SlotsFor(shape_of) * shape_of.n_layer;
    budgets.push_back(AllocateBudgets(*curves, shape_of.top_k, total));
    for (size_t p = 0; p < cl.policies.size(); ++p) {
      for (const RoutingTrace& trace : traces) {
        ExpertCacheShape shape =
            ExpertCacheShape::Uniform(trace.n_layer, trace.n_expert, trace.top_k, trace.top_k);
        shape.slot_budget = budgets.back();
        absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> policy =
            Build(cl.policies[p], shape, trace);
        if (!policy.ok()) return policy.status();
        budget_results[s][p].Add(ReplayTrace(trace, **policy, PrefetchModel{}));
      }
    }
  }
  return absl::OkStatus();
}

void PrintBudgetTable(const CommandLine& cl, const std::vector<RoutingTrace>& traces,
                      const std::vector<SizeSpec>& sizes, const Results& results,
                      const std::vector<std::vector<uint32_t>>& budgets,
                      const std::vector<std::vector<ReplayTally>>& budget_results) {
  const size_t min_index = cl.policies.size() - 1;
  std::printf(
      "\nno prefetch, per-layer budgets profiled with %s on %zu trace(s): hit rate (ratio to "
      "MIN with equal budgets)\n",
      cl.budget_policy.c_str(), cl.budget_traces.size());
  std::printf("%-12s", "slots/layer");
  for (const PolicySpec& p : cl.policies) std::printf(" %16s", p.name.c_str());
  std::printf("\n");
  for (size_t s = 0; s < sizes.size(); ++s) {
    const double min_equal =
        results[s][0].empty() || !cl.prefetch_off ? 0 : results[s][0][min_index].Total().hit_rate();
    std::printf("%-12s", SizeText(sizes[s], traces).c_str());
    for (size_t p = 0; p < cl.policies.size(); ++p) {
      const double r = budget_results[s][p].Total().hit_rate();
      std::printf("    %.4f (%.3f)", r, Ratio(r, min_equal));
    }
    std::printf("\n");
  }
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::printf("budgets at %s:", SizeText(sizes[s], traces).c_str());
    for (const uint32_t b : budgets[s]) std::printf(" %u", b);
    std::printf("\n");
  }
}

int Run(int argc, char** argv) {
  CommandLine cl;
  if (absl::Status s = ParseCommandLine(argc, argv, cl); !s.ok()) {
    std::fprintf(stderr, "moetier-policy-lab: %s\n", std::string(s.message()).c_str());
    return kExitUsage;
  }
  std::vector<RoutingTrace> traces;
  for (const std::string& path : cl.traces) {
    absl::StatusOr<RoutingTrace> t = ReadRoutingTrace(path, cl.n_expert);
    if (!t.ok()) {
      std::fprintf(stderr, "moetier-policy-lab: %s\n", std::string(t.status().message()).c_str());
      return kExitFailure;
    }
    traces.push_back(*std::move(t));
  }
  const std::vector<SizeSpec> sizes = cl.sizes.empty() ? Ladder(traces) : cl.sizes;
  Results results(sizes.size());
  Costs costs(sizes.size(), std::vector<DecisionCost>(cl.policies.size()));
  for (size_t s = 0; s < sizes.size(); ++s) {
    for (int pf = 0; pf < 2; ++pf) {
      results[s][pf].resize(cl.policies.size());
      if ((pf == 0 && !cl.prefetch_off) || (pf == 1 && !cl.prefetch_on)) continue;
      PrefetchModel model;
      model.enabled = pf == 1;
      model.accuracy = cl.accuracy;
      model.seed = cl.seed;
      for (size_t p = 0; p < cl.policies.size(); ++p) {
        for (const RoutingTrace& trace : traces) {
          const ExpertCacheShape shape = ExpertCacheShape::Uniform(
              trace.n_layer, trace.n_expert, trace.top_k, sizes[s].SlotsFor(trace));
          // Without prefetch the replay is repeated for its median time.
          const uint32_t repeats = pf == 0 ? cl.timing_repeats : 1;
          std::vector<double> ns;
          for (uint32_t r = 0; r < repeats; ++r) {
            absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> policy =
                Build(cl.policies[p], shape, trace);
            if (!policy.ok()) {
              std::fprintf(stderr, "moetier-policy-lab: %s: %s\n", trace.name.c_str(),
                           std::string(policy.status().message()).c_str());
              return kExitFailure;
            }
            const auto start = std::chrono::steady_clock::now();
            ReplayTally tally = ReplayTrace(trace, **policy, model);
            ns.push_back(std::chrono::duration<double, std::nano>(
                             std::chrono::steady_clock::now() - start)
                             .count());
            if (r > 0) continue;
            if (pf == 0) {
              DecisionCost& c = costs[s][p];
              c.requests += tally.Total().requests;
              c.state_bytes += (*policy)->StateBytes();
              c.experts += static_cast<uint64_t>(trace.n_layer) * trace.n_expert;
            }
            results[s][pf][p].Add(tally);
          }
          if (pf == 0) {
            std::nth_element(ns.begin(), ns.begin() + ns.size() / 2, ns.end());
            costs[s][p].ns += ns[ns.size() / 2];
          }
        }
      }
    }
  }
  // Profiled per-layer budgets: [size] -> budgets and [size][policy] -> tally.
  std::vector<std::vector<uint32_t>> budgets;
  std::vector<std::vector<ReplayTally>> budget_results;
  if (!cl.budget_traces.empty()) {
    absl::Status s = ProfileBudgets(cl, traces, sizes, budgets, budget_results);
    if (!s.ok()) {
      std::fprintf(stderr, "moetier-policy-lab: %s\n", std::string(s.message()).c_str());
      return kExitFailure;
    }
  }
  if (cl.json) {
    PrintJson(cl, traces, sizes, results, costs, budgets, budget_results);
  } else {
    PrintTables(cl, traces, sizes, results);
    if (cl.prefetch_off) PrintCostTable(cl, traces, sizes, costs);
    if (!budgets.empty()) PrintBudgetTable(cl, traces, sizes, results, budgets, budget_results);
  }
  return 0;
}

}  // namespace
}  // namespace moetier

int main(int argc, char** argv) { return moetier::Run(argc, argv); }
