#include "bench_common.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string_view>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "base/check.h"

namespace moetier::bench {

void AddModelFlag(FlagSet& flags, std::string* model) {
  flags.AddString({"--model"}, "FILE",
                  "GGUF model of a supported architecture (the first shard of a split set)", model);
}

void AddThreadsFlag(FlagSet& flags, int* threads) {
  *threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  flags.AddInt({"--threads"}, "N", "threads, the calling one included (default: all cores)",
               threads, 1, 1024);
}

void AddRunsFlag(FlagSet& flags, int* runs, int min, std::string_view note) {
  flags.AddInt({"--runs"}, "N",
               absl::StrFormat("timed runs per measurement, at least %d (default %d); the "
                               "median is reported%s%s",
                               min, *runs, note.empty() ? "" : ". ", note),
               runs, min, 1000);
}

void AddKvCacheTypeFlags(FlagSet& flags, KvCacheTypes* types) {
  const std::string choices = KvCacheTypeList(kKvCacheTypeChoices);
  for (const bool keys : {true, false}) {
    TensorType* out = keys ? &types->k : &types->v;
    flags.Add({keys ? "--cache-type-k" : "--cache-type-v"}, "T",
              absl::StrFormat("how the KV cache stores %s: %s (default %s)",
                              keys ? "keys" : "values", choices, KvCacheTypeName(*out)),
              [out](std::string_view flag, std::string_view value) -> absl::Status {
                absl::StatusOr<TensorType> type = ParseKvCacheType(value);
                if (!type.ok()) return FlagError(flag, std::string(type.status().message()));
                *out = *type;
                return absl::OkStatus();
              });
  }
}

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

RunStats Summarize(std::vector<double> values) {
  MOETIER_CHECK(!values.empty());
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const double median = n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return {median, values.front(), values.back()};
}

double Median(std::vector<double> values) {
  return values.empty() ? 0 : Summarize(std::move(values)).median;
}

double PrintDecodeRoofline(const Model& model, const KvCacheTypes& kv_types, int context,
                           int decode_tokens, double bandwidth_gbs) {
  const double bytes_per_token = static_cast<double>(DecodeWeightBytesPerToken(model));
  const double roofline = bandwidth_gbs * 1e9 / bytes_per_token;
  std::printf("weights read per decode token: %.1f MiB -> roofline %.2f tok/s\n",
              bytes_per_token / 1048576.0, roofline);
  const SequenceStateSize state = SequenceStateSizeOf(model, kv_types);
  // The middle token of the run stands for its mean: the reads grow
  // linearly with the position (or stop growing at a layer's window).
  const double kv_bytes =
      static_cast<double>(KvBytesReadAt(model, kv_types, context + decode_tokens / 2));
  std::printf("KV cache: keys %s, values %s, %llu bytes per token of context\n",
              KvCacheTypeName(kv_types.k).c_str(), KvCacheTypeName(kv_types.v).c_str(),
              static_cast<unsigned long long>(state.kv_bytes_per_token));
  std::printf(
      "KV cache read per decode token (mean over the run, not in the roofline): %.1f MiB "
      "(roofline with it: %.2f tok/s)\n",
      kv_bytes / 1048576.0, bandwidth_gbs * 1e9 / (bytes_per_token + kv_bytes));
  if (state.recurrent_bytes > 0) {
    std::printf(
        "recurrent state read and written per decode token (not in the roofline): 2 x %.1f MiB "
        "(roofline with it: %.2f tok/s)\n",
        state.recurrent_bytes / 1048576.0,
        bandwidth_gbs * 1e9 / (bytes_per_token + 2.0 * state.recurrent_bytes));
  }
  return roofline;
}

}  // namespace moetier::bench
