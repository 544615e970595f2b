// Expert-routing traces: which experts the router chose, token by token and
// layer by layer. The policy lab replays them; the worker writes them.
//
// Text format (one format, two dialects):
//
//   moetier-trace v1 layers=48 experts=128 top_k=8 weights=1   <- header, optional
//   # comment lines start with '#'; blank lines are skipped
//   3:0.41,17:0.22,...;5:0.30,...;...                          <- one line per token
//
// One line per token in sequence order; the layers' fields separated by ';'
// (layer 0 first); within a field the top_k selected expert ids separated by
// ',', highest router score first, each optionally followed by ':' and its
// router weight. A file is one sequence (replays start cold at each file).
//
// * Without the header (the dialect of shared/traces/, recorded from real
//   models): ids only; the layer count and top_k are those of the first line
//   and the expert count is the largest id + 1 unless the reader is told.
// * With the header (what moetier writes): the counts are declared, and
//   weights=1 means every entry carries a weight, weights=0 that none does.
//
// Every line must have the same number of layers and every field exactly
// top_k distinct ids below the expert count. Errors name file and line.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace moetier {

struct RoutingTrace {
  std::string name;               // where it came from (file name), for reports
  uint32_t n_layer = 0;           // MoE layers
  uint32_t n_expert = 0;          // routed experts per layer
  uint32_t top_k = 0;             // experts per token and layer
  std::vector<uint32_t> experts;  // [token][layer][top_k]
  std::vector<float> weights;     // same shape, or empty when not recorded

  size_t n_token() const {
    const size_t per_token = static_cast<size_t>(n_layer) * top_k;
    return per_token == 0 ? 0 : experts.size() / per_token;
  }
  bool has_weights() const { return !weights.empty(); }
  absl::Span<const uint32_t> Experts(size_t token, uint32_t layer) const {
    return absl::MakeConstSpan(experts).subspan(Offset(token, layer), top_k);
  }
  absl::Span<const float> Weights(size_t token, uint32_t layer) const {
    if (weights.empty()) return {};
    return absl::MakeConstSpan(weights).subspan(Offset(token, layer), top_k);
  }
  // Checks shape, ids and distinctness; says what is wrong where.
  absl::Status Validate() const;

 private:
  size_t Offset(size_t token, uint32_t layer) const {
    return (token * n_layer + layer) * static_cast<size_t>(top_k);
  }
};

// Limits of what the reader accepts (far above any real model).
inline constexpr uint32_t kTraceMaxLayers = 4096;
inline constexpr uint32_t kTraceMaxExperts = 65536;
inline constexpr size_t kTraceMaxFileBytes = size_t{1} << 30;

// Parses `text`; `source` names it in errors ("source:line: ..."). A
// non-zero `n_expert` sets the expert count of a headerless trace (ids must
// stay below it); a header's count must agree with it.
absl::StatusOr<RoutingTrace> ParseRoutingTrace(std::string_view text, std::string_view source,
                                               uint32_t n_expert = 0);
absl::StatusOr<RoutingTrace> ReadRoutingTrace(const std::string& path, uint32_t n_expert = 0);

// The trace in the header dialect; ParseRoutingTrace gives it back
// (weights to 9 significant digits, i.e. exactly).
std::string FormatRoutingTrace(const RoutingTrace& trace);
absl::Status WriteRoutingTrace(const std::string& path, const RoutingTrace& trace);

// Writes a trace token by token as a run goes (the worker's recorder).
// Each AppendToken writes one line; nothing is kept in memory.
class RoutingTraceWriter {
 public:
  RoutingTraceWriter() = default;
  ~RoutingTraceWriter();
  RoutingTraceWriter(const RoutingTraceWriter&) = delete;
  RoutingTraceWriter& operator=(const RoutingTraceWriter&) = delete;

  absl::Status Open(const std::string& path, uint32_t n_layer, uint32_t n_expert, uint32_t top_k,
                    bool with_weights);
  // `experts`: n_layer * top_k ids, layer-major; `weights`: as many, or
  // empty when opened without weights.
  absl::Status AppendToken(absl::Span<const uint32_t> experts, absl::Span<const float> weights);
  // Hands what was appended to the kernel, so that a reader (or a process
  // killed later) sees every whole token written so far.
  absl::Status Flush();
  absl::Status Close();

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  std::string line_;
  uint32_t n_layer_ = 0;
  uint32_t n_expert_ = 0;
  uint32_t top_k_ = 0;
  bool with_weights_ = false;
};

}  // namespace moetier
