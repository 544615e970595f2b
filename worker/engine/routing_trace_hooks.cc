#include "engine/routing_trace_hooks.h"

#include "cache/prefetch_prediction.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"

namespace moetier {
namespace {

absl::Status CheckCounts(std::string_view what, int n_layer, int n_expert, int top_k) {
  if (n_layer < 1 || n_layer > static_cast<int>(kTraceMaxLayers) || n_expert < 1 ||
      n_expert > static_cast<int>(kTraceMaxExperts) || top_k < 1 || top_k > n_expert) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: model counts out of range (layers %d, experts %d, top_k %d)", what,
                        n_layer, n_expert, top_k));
  }
  return absl::OkStatus();
}

// A batch must describe the model the hook was made for; anything else is
// an engine wired to the wrong hook.
absl::Status CheckBatch(std::string_view what, const RoutingBatch& batch, int n_layer,
                        int n_expert, int top_k) {
  if (batch.n_layer != n_layer || batch.n_expert != n_expert || batch.top_k != top_k ||
      batch.layer < 0 || batch.layer >= n_layer || batch.n_tokens < 1) {
    return absl::InternalError(absl::StrFormat(
        "%s: made for %d layers x %d experts (top %d), given layer %d of %d x %d (top %d) "
        "with %d tokens",
        what, n_layer, n_expert, top_k, batch.layer, batch.n_layer, batch.n_expert, batch.top_k,
        batch.n_tokens));
  }
  return absl::OkStatus();
}

}  // namespace

// ------------------------------------------------------------------ recorder

RoutingTraceRecorder::RoutingTraceRecorder(std::string path, int n_layer, int n_expert, int top_k,
                                           std::vector<bool> routed)
    : path_(std::move(path)),
      n_layer_(n_layer),
      n_expert_(n_expert),
      top_k_(top_k),
      routed_(std::move(routed)) {
  first_routed_ = NextRouted(-1);
  next_layer_ = first_routed_;
}

int RoutingTraceRecorder::NextRouted(int layer) const {
  int next = layer + 1;
  while (next < n_layer_ && !routed_[static_cast<size_t>(next)]) ++next;
  return next;
}

RoutingTraceRecorder::~RoutingTraceRecorder() { (void)writer_.Close(); }

absl::StatusOr<std::unique_ptr<RoutingTraceRecorder>> RoutingTraceRecorder::Create(
    const std::string& path, int n_layer, int n_expert, int top_k, std::vector<bool> routed) {
  if (absl::Status s = CheckCounts(path, n_layer, n_expert, top_k); !s.ok()) return s;
  if (routed.empty()) routed.assign(static_cast<size_t>(n_layer), true);
  if (routed.size() != static_cast<size_t>(n_layer) ||
      std::find(routed.begin(), routed.end(), true) == routed.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d routed-layer flags for %d layers, or no layer routes", path,
                        routed.size(), n_layer));
  }
  std::unique_ptr<RoutingTraceRecorder> recorder(
      new RoutingTraceRecorder(path, n_layer, n_expert, top_k, std::move(routed)));
  if (absl::Status s = recorder->writer_.Open(path, static_cast<uint32_t>(n_layer),
                                              static_cast<uint32_t>(n_expert),
                                              static_cast<uint32_t>(top_k), /*with_weights=*/true);
      !s.ok()) {
    return absl::Status(s.code(), absl::StrFormat("routing trace output: %s", s.message()));
  }
  return recorder;
}

absl::Status RoutingTraceRecorder::OnRouting(const RoutingBatch& batch) {
  if (absl::Status s = CheckBatch(path_, batch, n_layer_, n_expert_, top_k_); !s.ok()) return s;
  const size_t n_choices = static_cast<size_t>(batch.n_tokens) * top_k_;
  if (batch.experts.size() != n_choices || batch.weights.size() != n_choices) {
    return absl::InternalError(absl::StrFormat("%s: layer %d gave %d ids and %d weights for %d",
                                               path_, batch.layer, batch.experts.size(),
                                               batch.weights.size(), n_choices));
  }
  // The first routed layer starts a batch (dropping what a failed one
  // left); the others must continue the current one.
  if (batch.layer == first_routed_) {
    batch_tokens_ = batch.n_tokens;
    batch_pos0_ = batch.pos0;
    const size_t per_batch = static_cast<size_t>(batch.n_tokens) * n_layer_ * top_k_;
    if (experts_.size() < per_batch) {
      const size_t had = experts_.size();
      experts_.resize(per_batch);
      weights_.resize(per_batch);
      // Layers that never report hold the same placeholder choice always.
      for (size_t at = had; at < per_batch; at += static_cast<size_t>(top_k_)) {
        const size_t layer = (at / static_cast<size_t>(top_k_)) % static_cast<size_t>(n_layer_);
        if (routed_[layer]) continue;
        for (int j = 0; j < top_k_; ++j) {
          experts_[at + static_cast<size_t>(j)] = static_cast<uint32_t>(j);
          weights_[at + static_cast<size_t>(j)] = 0.0f;
        }
      }
    }
  } else if (batch.layer != next_layer_ || batch.n_tokens != batch_tokens_ ||
             batch.pos0 != batch_pos0_) {
    return absl::InternalError(absl::StrFormat(
        "%s: layer %d of %d tokens at position %d does not continue the batch of %d tokens at "
        "position %d (expected layer %d)",
        path_, batch.layer, batch.n_tokens, batch.pos0, batch_tokens_, batch_pos0_, next_layer_));
  }
  // Token-major per layer in, layer-major per token out.
  for (int t = 0; t < batch.n_tokens; ++t) {
    const size_t from = static_cast<size_t>(t) * top_k_;
    const size_t to = (static_cast<size_t>(t) * n_layer_ + batch.layer) * top_k_;
    for (int j = 0; j < top_k_; ++j) {
      experts_[to + j] = static_cast<uint32_t>(batch.experts[from + j]);
      weights_[to + j] = batch.weights[from + j];
    }
  }
  next_layer_ = NextRouted(batch.layer);
  if (next_layer_ < n_layer_) return absl::OkStatus();
  next_layer_ = first_routed_;
  const size_t per_token = static_cast<size_t>(n_layer_) * top_k_;
  for (int t = 0; t < batch.n_tokens; ++t) {
    const size_t at = static_cast<size_t>(t) * per_token;
    if (absl::Status s = writer_.AppendToken(absl::MakeConstSpan(experts_).subspan(at, per_token),
                                             absl::MakeConstSpan(weights_).subspan(at, per_token));
        !s.ok()) {
      return absl::Status(s.code(), absl::StrFormat("routing trace output: %s", s.message()));
    }
    ++tokens_written_;
  }
  // Once per batch (per token when decoding): the trace on disk stays whole
  // even if the worker is killed.
  if (absl::Status s = writer_.Flush(); !s.ok()) {
    return absl::Status(s.code(), absl::StrFormat("routing trace output: %s", s.message()));
  }
  return absl::OkStatus();
}

absl::Status RoutingTraceRecorder::Close() {
  absl::Status s = writer_.Close();
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrFormat("routing trace output: %s", s.message()));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ replayer

absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> RoutingTraceReplayer::Create(
    const std::string& path, int n_layer, int n_expert, int top_k) {
  // Read without an expert count so that a mismatch is reported against
  // the model below rather than as a parse error.
  absl::StatusOr<RoutingTrace> trace = ReadRoutingTrace(path);
  if (!trace.ok()) {
    return absl::Status(trace.status().code(),
                        absl::StrFormat("routing trace to replay: %s", trace.status().message()));
  }
  trace->name = path;
  return FromTrace(*std::move(trace), n_layer, n_expert, top_k);
}

absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> RoutingTraceReplayer::FromTrace(
    RoutingTrace trace, int n_layer, int n_expert, int top_k) {
  const std::string& name = trace.name;
  if (absl::Status s = CheckCounts(name, n_layer, n_expert, top_k); !s.ok()) return s;
  if (absl::Status s = trace.Validate(); !s.ok()) {
    return absl::Status(s.code(), absl::StrFormat("routing trace to replay: %s", s.message()));
  }
  if (trace.n_token() == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("routing trace %s holds no tokens; there is nothing to replay", name));
  }
  if (trace.n_layer != static_cast<uint32_t>(n_layer)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "routing trace %s has %u layers but the model has %d; replay a trace recorded from a "
        "model with the same layer count",
        name, trace.n_layer, n_layer));
  }
  if (trace.top_k != static_cast<uint32_t>(top_k)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "routing trace %s routes each token to %u experts per layer but the model to %d; "
        "replay a trace recorded from a model with the same top_k",
        name, trace.top_k, top_k));
  }
  // A header's expert count is the recording model's; a headerless trace's
  // is its largest id + 1. Either way every id must name one of this
  // model's experts.
  for (size_t t = 0; t < trace.n_token(); ++t) {
    for (uint32_t l = 0; l < trace.n_layer; ++l) {
      for (const uint32_t e : trace.Experts(t, l)) {
        if (e >= static_cast<uint32_t>(n_expert)) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "routing trace %s: token %d (0-based), layer %u routes to expert %u but the model "
              "has experts 0..%d",
              name, t, l, e, n_expert - 1));
        }
      }
    }
  }
  if (trace.n_expert > static_cast<uint32_t>(n_expert)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("routing trace %s was recorded from a model with %u experts per layer but "
                        "this model has %d",
                        name, trace.n_expert, n_expert));
  }
  return std::unique_ptr<RoutingTraceReplayer>(new RoutingTraceReplayer(std::move(trace)));
}

absl::Status RoutingTraceReplayer::Override(const RoutingBatch& batch,
                                            std::span<int32_t> experts) {
  if (absl::Status s = CheckBatch(trace_.name, batch, static_cast<int>(trace_.n_layer),
                                  batch.n_expert, static_cast<int>(trace_.top_k));
      !s.ok()) {
    return s;
  }
  const size_t top_k = trace_.top_k;
  if (experts.size() != static_cast<size_t>(batch.n_tokens) * top_k) {
    return absl::InternalError(absl::StrFormat("%s: %d ids for %d tokens of %d experts",
                                               trace_.name, experts.size(), batch.n_tokens, top_k));
  }
  const size_t n_token = trace_.n_token();
  const uint32_t layer = static_cast<uint32_t>(batch.layer);
  for (int t = 0; t < batch.n_tokens; ++t) {
    const absl::Span<const uint32_t> ids =
        trace_.Experts((next_token_ + static_cast<size_t>(t)) % n_token, layer);
    for (size_t j = 0; j < top_k; ++j) {
      experts[static_cast<size_t>(t) * top_k + j] = static_cast<int32_t>(ids[j]);
    }
  }
  // The batch's tokens are done with the trace once the last layer has
  // taken its experts.
  if (layer + 1 == trace_.n_layer) {
    next_token_ = (next_token_ + static_cast<size_t>(batch.n_tokens)) % n_token;
  }
  return absl::OkStatus();
}

bool RoutingTraceReplayer::PredictNext(const RoutingBatch& batch, std::span<int32_t> experts) {
  const size_t top_k = trace_.top_k;
  if (batch.layer < 0 || static_cast<uint32_t>(batch.layer) >= trace_.n_layer ||
      experts.size() != static_cast<size_t>(batch.n_tokens) * top_k) {
    return false;  // not a batch of this trace's shape: the engine guesses
  }
  const uint32_t layer = static_cast<uint32_t>(batch.layer);
  for (int t = 0; t < batch.n_tokens; ++t) {
    const size_t token = (next_token_ + static_cast<size_t>(t)) % trace_.n_token();
    DegradedPrediction(trace_.Experts(token, layer), trace_.n_expert, prefetch_accuracy_,
                       prefetch_seed_, token, layer, predicted_);
    for (size_t j = 0; j < top_k; ++j) {
      experts[static_cast<size_t>(t) * top_k + j] = static_cast<int32_t>(predicted_[j]);
    }
  }
  return true;
}

// ------------------------------------------------------------------ both

std::string RoutingReplayLabel(const std::string& path, double prefetch_accuracy) {
  return absl::StrFormat(
      "routing replayed from %s, prefetch predicted from it at accuracy %.2f", path,
      prefetch_accuracy >= 0 ? prefetch_accuracy : RoutingTraceReplayer::kDefaultPrefetchAccuracy);
}

std::string RoutingTraceHooks::ReplayLabel() const {
  if (replayer == nullptr) return "";
  return RoutingReplayLabel(replayer->name(), replayer->prefetch_accuracy());
}

absl::StatusOr<RoutingTraceHooks> OpenRoutingTraceHooks(const std::string& record_path,
                                                        const std::string& replay_path, int n_layer,
                                                        int n_expert, int top_k,
                                                        double prefetch_accuracy,
                                                        std::vector<bool> routed_layers) {
  RoutingTraceHooks hooks;
  if (!record_path.empty() && record_path == replay_path) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s is both the routing trace to replay and the one to record; give two files",
        record_path));
  }
  if (!replay_path.empty()) {
    absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> replayer =
        RoutingTraceReplayer::Create(replay_path, n_layer, n_expert, top_k);
    if (!replayer.ok()) return replayer.status();
    hooks.replayer = *std::move(replayer);
    if (prefetch_accuracy >= 0) hooks.replayer->SetPrefetchAccuracy(prefetch_accuracy);
  }
  if (!record_path.empty()) {
    absl::StatusOr<std::unique_ptr<RoutingTraceRecorder>> recorder = RoutingTraceRecorder::Create(
        record_path, n_layer, n_expert, top_k, std::move(routed_layers));
    if (!recorder.ok()) return recorder.status();
    hooks.recorder = *std::move(recorder);
  }
  return hooks;
}

}  // namespace moetier
