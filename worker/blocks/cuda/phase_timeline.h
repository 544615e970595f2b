// Where a CUDA engine's device time goes, phase by phase.
//
// The blocks mark the end of each phase on the compute stream (an event
// recorded there); the time between two marks, as the device passed them,
// counts for the later mark's phase. Marks run in stream order, so an
// interval also holds the time the device sat idle before that phase's
// work could start. That is how waiting for the host shows: the device
// idles while the host reads the router's choice and places experts, and
// that idle time is the interval that ends at the kHostRouting mark.
//
// Plain C++ over an event interface (PhaseEventClock), so the bookkeeping
// is tested on machines without a GPU; the engine's clock records CUDA
// events (blocks/cuda/cuda_context.cc).
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moetier {

enum class CudaPhase : int {
  kEmbed = 0,              // token embeddings (and the ids' copy down)
  kAttentionProjections,   // attention norm, q/k/v (and a whole-projection q/k norm), output
                           // projection, residual
  kAttention,              // per-head q/k norm with RoPE, storing keys and values, attention
  kDeltaNetProjections,    // Gated DeltaNet norm, in and out projections, residual
  kDeltaNet,               // conv, q/k norms, gates, recurrence, gated norm
  kRouter,                 // FFN norm, router logits and top-k (and the device grouping)
  kHostRouting,            // the device idle while the host takes the choice and places experts
  kExpertFetch,            // the compute stream waiting for expert copies into VRAM slots
  kExperts,                // routed experts on the device, and their weighted sum
  kHostExperts,            // waiting for experts computed on the host, and their outputs' copy
  kSharedExpert,           // the shared expert and its gate
  kOutput,                 // final norm, output projection, logits to the host
  kCount,
};

inline constexpr size_t kCudaPhaseCount = static_cast<size_t>(CudaPhase::kCount);
using CudaPhaseSeconds = std::array<double, kCudaPhaseCount>;

inline std::string_view CudaPhaseName(CudaPhase phase) {
  static constexpr std::string_view kNames[kCudaPhaseCount] = {
      "embed",   "attention projections", "attention",    "deltanet projections",
      "deltanet", "router",               "host routing", "expert fetch",
      "experts", "host experts",          "shared expert", "output"};
  const auto i = static_cast<size_t>(phase);
  return i < kCudaPhaseCount ? kNames[i] : "unknown";
}

// An engine's phase timers as a benchmark sees them (CudaEngine's).
class CudaPhaseTimers {
 public:
  virtual ~CudaPhaseTimers() = default;
  // While on, every pass adds its phases' device time; off, nothing is
  // added. Fails only when the timers cannot be set up.
  virtual absl::Status EnablePhaseTiming(bool on) = 0;
  // Seconds per phase since the last reset.
  virtual CudaPhaseSeconds phase_seconds() const = 0;
  virtual void ResetPhaseTimes() = 0;
};

// A fixed set of events, by index 0..capacity()-1, recorded on one stream.
class PhaseEventClock {
 public:
  virtual ~PhaseEventClock() = default;
  virtual int capacity() const = 0;
  // Records event `i` at the stream's current end (it replaces an earlier
  // record of the same event).
  virtual absl::Status Record(int i) = 0;
  // Returns once the device has passed event `i`'s last record.
  virtual absl::Status Wait(int i) = 0;
  // Seconds from event `from` to event `to`, both passed.
  virtual absl::StatusOr<double> Seconds(int from, int to) = 0;
};

// The marks of the passes since Reset, summed per phase. The events are a
// ring: a pass with more marks than the clock holds waits for its newest
// mark, adds what it has, and goes on from there (a device wait, so only
// timed runs pay it; what a pass added that way stays added if the pass
// then fails). A clock of fewer than 2 events times nothing: Start fails.
class PhaseTimeline {
 public:
  explicit PhaseTimeline(PhaseEventClock& clock)
      : clock_(clock), phase_of_(static_cast<size_t>(clock.capacity())) {}

  // A pass's first event; what an earlier pass left uncollected is dropped
  // (it ended in an error).
  absl::Status Start() {
    started_ = false;
    first_ = 0;
    marks_ = 0;
    if (clock_.capacity() < 2) {
      return absl::FailedPreconditionError("phase timing needs a clock of at least 2 events");
    }
    if (absl::Status s = clock_.Record(first_); !s.ok()) return s;
    started_ = true;
    return absl::OkStatus();
  }

  // Ends the running interval as `phase`. Does nothing outside a pass.
  absl::Status Mark(CudaPhase phase) {
    if (!started_) return absl::OkStatus();
    if (marks_ + 1 == clock_.capacity()) {
      if (absl::Status s = AddPassed(); !s.ok()) return Abandon(std::move(s));
    }
    const int i = (first_ + marks_ + 1) % clock_.capacity();
    if (absl::Status s = clock_.Record(i); !s.ok()) return Abandon(std::move(s));
    phase_of_[static_cast<size_t>(i)] = phase;
    ++marks_;
    return absl::OkStatus();
  }

  // Adds the pass's intervals and ends it; call once the device has passed
  // the last mark (after the pass's stream sync) or it waits for it.
  absl::Status Collect() {
    if (!started_) return absl::OkStatus();
    absl::Status s = AddPassed();
    started_ = false;
    return s;
  }

  bool in_pass() const { return started_; }
  const CudaPhaseSeconds& seconds() const { return seconds_; }
  void Reset() {
    seconds_.fill(0.0);
    started_ = false;
  }

 private:
  // Waits for the newest mark, adds every interval up to it, and makes it
  // the start of what follows.
  absl::Status AddPassed() {
    if (marks_ == 0) return absl::OkStatus();
    const int cap = clock_.capacity();
    const int newest = (first_ + marks_) % cap;
    if (absl::Status s = clock_.Wait(newest); !s.ok()) return s;
    for (int m = 1; m <= marks_; ++m) {
      const int from = (first_ + m - 1) % cap;
      const int to = (first_ + m) % cap;
      absl::StatusOr<double> dt = clock_.Seconds(from, to);
      if (!dt.ok()) return dt.status();
      seconds_[static_cast<size_t>(phase_of_[static_cast<size_t>(to)])] += *dt;
    }
    first_ = newest;
    marks_ = 0;
    return absl::OkStatus();
  }
  absl::Status Abandon(absl::Status s) {
    started_ = false;
    return s;
  }

  PhaseEventClock& clock_;
  std::vector<CudaPhase> phase_of_;  // per event: the phase its interval closes
  CudaPhaseSeconds seconds_{};
  bool started_ = false;
  int first_ = 0;  // the event the pass's uncollected intervals start from
  int marks_ = 0;  // marks recorded after first_
};

}  // namespace moetier
