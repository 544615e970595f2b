// Routing traces at the engine's routing hook (engine/routing_hook.h):
// recording what the router chose, and replaying a trace in place of the
// router. The file format is cache/routing_trace.h's; see engine/README.md
// for how the worker's flags use these and how the policy lab reads them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/routing_trace.h"
#include "engine/routing_hook.h"

namespace moetier {

// Writes every token the engine computes to a trace file, one line per
// token in the order the tokens were computed (a batch's tokens in
// sequence order, all layers of a token on its line), with the experts'
// mixing weights. Tokens of successive Forward calls (requests, re-scored
// prefixes) follow each other in the one file. A batch is buffered until
// its last layer has been seen; a batch that fails part-way is not written.
// The buffer grows to the largest batch once, so steady-state decoding
// allocates nothing.
class RoutingTraceRecorder final : public RoutingObserver {
 public:
  // Creates (truncates) `path` and writes the header for a model of these
  // counts. `routed` (n_layer entries; empty: all) says which layers route:
  // a layer without experts (FfnKind::kDense) never reports, and the trace
  // holds experts 0..top_k-1 with weight 0 for it, so that every token still
  // has every layer's choice.
  static absl::StatusOr<std::unique_ptr<RoutingTraceRecorder>> Create(
      const std::string& path, int n_layer, int n_expert, int top_k, std::vector<bool> routed = {});
  ~RoutingTraceRecorder() override;

  absl::Status OnRouting(const RoutingBatch& batch) override;
  // Flushes and closes the file; later tokens fail. Also done on
  // destruction, where an error cannot be reported.
  absl::Status Close();

  const std::string& path() const { return path_; }
  uint64_t tokens_written() const { return tokens_written_; }

 private:
  RoutingTraceRecorder(std::string path, int n_layer, int n_expert, int top_k,
                       std::vector<bool> routed);
  // The first routed layer after `layer`, or n_layer.
  int NextRouted(int layer) const;

  std::string path_;
  int n_layer_;
  int n_expert_;
  int top_k_;
  RoutingTraceWriter writer_;
  // The current batch, [token][layer][top_k].
  std::vector<uint32_t> experts_;
  std::vector<float> weights_;
  int batch_tokens_ = 0;
  int batch_pos0_ = 0;
  std::vector<bool> routed_;  // per layer
  int first_routed_ = 0;
  int next_layer_ = 0;  // the layer the batch expects next
  uint64_t tokens_written_ = 0;
};

// Replaces each token's experts with those of the trace's next token:
// layer l of the model takes layer l of the trace, and after the trace's
// last token it starts again at its first. Each token's experts are mixed
// with the router's softmax probabilities of the trace's experts,
// renormalized (the engine does that; the trace's own weights are not
// used), so everything but the choice is computed as the engine always
// does, and replaying a trace recorded from the same tokens gives the
// normal run's results bit for bit.
class RoutingTraceReplayer final : public RoutingOverride {
 public:
  // Reads `path` and checks that it fits a model of these counts: the same
  // number of layers and top_k, every expert id below n_expert. Errors name
  // the file and what does not fit.
  static absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> Create(const std::string& path,
                                                                      int n_layer, int n_expert,
                                                                      int top_k);
  // The same from a parsed trace (trace.name names it in errors).
  static absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> FromTrace(RoutingTrace trace,
                                                                         int n_layer,
                                                                         int n_expert, int top_k);

  absl::Status Override(const RoutingBatch& batch, std::span<int32_t> experts) override;
  // The trace's experts of batch.layer for the batch's tokens, degraded to
  // the prediction accuracy (cache/prefetch_prediction.h; the trace token's
  // index is the token, so the lab replaying the same trace with the same
  // seed predicts the same).
  bool PredictNext(const RoutingBatch& batch, std::span<int32_t> experts) override;

  // Fraction of a layer's experts the prefetch prediction gets right, in
  // [0, 1] (default kDefaultPrefetchAccuracy, the lab's middle value for
  // next-layer router prediction), and the seed of its errors.
  static constexpr double kDefaultPrefetchAccuracy = 0.8;
  void SetPrefetchAccuracy(double accuracy, uint64_t seed = 1) {
    prefetch_accuracy_ = accuracy;
    prefetch_seed_ = seed;
  }
  double prefetch_accuracy() const { return prefetch_accuracy_; }

  // The next token replayed is the trace's first (benchmarks rewind before
  // each timed run so that every run computes the same).
  void Rewind() { next_token_ = 0; }
  size_t next_token() const { return next_token_; }
  size_t n_token() const { return trace_.n_token(); }
  const std::string& name() const { return trace_.name; }

 private:
  explicit RoutingTraceReplayer(RoutingTrace trace) : trace_(std::move(trace)) {}

  RoutingTrace trace_;
  size_t next_token_ = 0;  // the trace token of the current batch's first token
  double prefetch_accuracy_ = kDefaultPrefetchAccuracy;
  uint64_t prefetch_seed_ = 1;
  std::vector<uint32_t> predicted_;
};

// What the worker's --routing-trace-out and --routing-from-trace flags
// build; either may be null.
struct RoutingTraceHooks {
  std::unique_ptr<RoutingTraceRecorder> recorder;
  std::unique_ptr<RoutingTraceReplayer> replayer;

  // "routing replayed from FILE, prefetch predicted from it at accuracy A",
  // or empty without a replayer: every output of a replaying run carries it.
  std::string ReplayLabel() const;
};

// What every output of a run replaying `path` says: "routing replayed from
// PATH, prefetch predicted from it at accuracy A" (a negative accuracy: the
// replayer's default).
std::string RoutingReplayLabel(const std::string& path, double prefetch_accuracy);

// Opens the hooks for a model of these counts: replays `replay_path` and
// records to `record_path` (each skipped when empty). The trace to replay
// is read before the recording is created, and the two paths must differ.
// `prefetch_accuracy` (negative: the default) is the replayer's, see
// RoutingTraceReplayer::SetPrefetchAccuracy.
// `routed_layers` as for RoutingTraceRecorder::Create.
absl::StatusOr<RoutingTraceHooks> OpenRoutingTraceHooks(const std::string& record_path,
                                                        const std::string& replay_path, int n_layer,
                                                        int n_expert, int top_k,
                                                        double prefetch_accuracy = -1,
                                                        std::vector<bool> routed_layers = {});

}  // namespace moetier
