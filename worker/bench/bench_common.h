// What every benchmark program shares: the flags they all spell the same
// way, a monotonic clock and the median of timed runs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/flags/flag_set.h"
#include "model/kv_cache_types.h"
#include "model/model.h"

namespace moetier::bench {

// --model FILE (a GGUF file; the first shard of a split set).
void AddModelFlag(FlagSet& flags, std::string* model);
// --threads N, 1..1024; sets *threads to every core first, its default.
void AddThreadsFlag(FlagSet& flags, int* threads);
// --runs N, min..1000, with *runs as the default the help shows; `note`
// ends the help (how the runs are made).
void AddRunsFlag(FlagSet& flags, int* runs, int min, std::string_view note = "");
// --cache-type-k T and --cache-type-v T (f32, f16, q8_0, q4_0).
void AddKvCacheTypeFlags(FlagSet& flags, KvCacheTypes* types);

// Prints the weight bytes one decode token reads and the roofline they give
// at `bandwidth_gbs`, then what the roofline leaves out: the KV cache read
// per token over a run of `decode_tokens` after `context` (small at short
// contexts, comparable to the weights at long ones) and the recurrent state a
// recurrent layer reads and writes every token. Returns the roofline in tok/s.
double PrintDecodeRoofline(const Model& model, const KvCacheTypes& kv_types, int context,
                           int decode_tokens, double bandwidth_gbs);

// Seconds on the steady clock.
double Seconds();

struct RunStats {
  double median = 0, min = 0, max = 0;
};
// Of at least one value.
RunStats Summarize(std::vector<double> values);
// 0 when there are no values.
double Median(std::vector<double> values);

}  // namespace moetier::bench
