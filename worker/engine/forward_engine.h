// The forward pass as the rest of the worker sees it, one contract for
// every backend (the fp32 reference, the CPU engine, the CUDA engine) and
// every architecture: sequences hold the per-sequence state (KV cache, any
// recurrent state); Forward continues a sequence from its length; the
// engine keeps the last logits row (on the device, for a GPU) and samples
// from it, and copies logits to the host only when asked.
//
// A rewind is a new sequence, or a restore of the sequence's checkpoint:
// recurrent layers cannot forget what they have seen, so the state at an
// earlier length exists only where it was saved.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/expert_source.h"
#include "engine/routing_hook.h"
#include "engine/sequence.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace moetier {

// Which logits rows Forward copies to the host.
enum class LogitRows {
  kNone,  // none: the caller samples (Sample) or only wants the state
  kLast,  // the row of the last input token
  kAll,   // one row per input token, in input order
};

// One sequence's share of a ForwardMany step.
struct SequenceStep {
  Sequence* seq = nullptr;
  std::span<const int32_t> tokens;  // non-empty; run at seq->length(), ...
  // n_vocab() floats: the logits row of the step's last token; null: none.
  float* last_logits = nullptr;
  // Keep that row in the engine for SampleStep (an engine whose
  // SamplesStepsInPlace() is true; others ignore it).
  bool sample_in_engine = false;
};

// OK when every step names a sequence and no sequence appears twice.
inline absl::Status CheckDistinctSequences(std::span<const SequenceStep> steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].seq == nullptr) return absl::InvalidArgumentError("a step without a sequence");
    for (size_t j = 0; j < i; ++j) {
      if (steps[j].seq == steps[i].seq) {
        return absl::InvalidArgumentError(
            "one sequence in two steps of a batch: give it all its tokens in one step");
      }
    }
  }
  return absl::OkStatus();
}

// A copy of one sequence's state, held apart from the engine's slots so
// that another sequence can start from it (generation/prefix_pool.h keeps
// them): the KV rows of every attention layer below length() and the
// recurrent state at length(). Only the engine that made it can load it.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  virtual int length() const = 0;
  virtual uint64_t bytes() const = 0;  // memory it holds
};

class ForwardEngine {
 public:
  virtual ~ForwardEngine() = default;

  // A new empty sequence (length 0, capacity max_ctx()). Its state slot was
  // allocated with the engine; RESOURCE_EXHAUSTED when all max_sequences()
  // are held. The sequence must be destroyed before the engine.
  virtual absl::StatusOr<std::unique_ptr<Sequence>> NewSequence() = 0;

  // Runs `tokens` at positions seq.length(), seq.length() + 1, ...: their
  // keys and values (and recurrent state) join the sequence's state, each
  // token attends causally to the sequence so far, and the logits of the
  // last token are kept for Sample. `host_rows` selects the rows copied to
  // `host_logits` (row-major, n_vocab() floats per row; may be null with
  // kNone). Preconditions checked with a Status: tokens non-empty, every id
  // in [0, n_vocab()), `seq` one of this engine's, and the tokens fit its
  // capacity. On error seq.length() says how far the sequence is valid (the
  // last whole batch) and no logits are kept.
  virtual absl::Status Forward(Sequence& seq, std::span<const int32_t> tokens,
                               LogitRows host_rows, float* host_logits) = 0;

  // Runs several sequences at once, each step as Forward would run it
  // alone (the same logits, within the kernels' rounding: the CPU engine's
  // are bit-identical), in as few engine passes as its batch allows, so
  // that the weights of a layer, routed experts included, are read once for
  // all of them. The sequences must be distinct. Every step is checked as
  // Forward checks it before anything runs; on a later error each
  // sequence's length says how far it is valid. Keeps no logits for Sample:
  // each step's row goes to its last_logits (and stays in the engine for
  // SampleStep where the step asks). This default runs the steps one after
  // another.
  virtual absl::Status ForwardMany(std::span<const SequenceStep> steps) {
    if (absl::Status s = CheckDistinctSequences(steps); !s.ok()) return s;
    for (const SequenceStep& step : steps) {
      if (absl::Status s = Forward(*step.seq, step.tokens,
                                   step.last_logits != nullptr ? LogitRows::kLast : LogitRows::kNone,
                                   step.last_logits);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  // Saves `seq`'s state at its current length as its checkpoint, replacing
  // any earlier one: the recurrent state of every recurrent layer (attention
  // layers need nothing saved; their KV rows below the length stay). The
  // storage was allocated with the engine.
  virtual absl::Status SaveCheckpoint(Sequence& seq) = 0;
  // Rewinds `seq` to its checkpoint: its length becomes the checkpoint's
  // and the recurrent state is the saved one. The checkpoint stays.
  // FailedPrecondition when the sequence has none.
  virtual absl::Status RestoreCheckpoint(Sequence& seq) = 0;

  // A copy of `seq`'s state at its current length (>= 1), in host memory.
  // Unimplemented where the backend cannot copy state out.
  virtual absl::StatusOr<std::unique_ptr<SequenceState>> CopyState(const Sequence& seq) {
    (void)seq;
    return absl::UnimplementedError("this engine cannot copy a sequence's state");
  }
  // Makes `seq` hold `state`'s first `length` positions (1 <= length <=
  // state.length()): its length becomes `length` and it has no checkpoint.
  // Recurrent layers hold their state only at state.length(), so with them
  // a shorter length is InvalidArgument (as is another engine's state).
  virtual absl::Status LoadState(Sequence& seq, const SequenceState& state, int length) {
    (void)seq, (void)state, (void)length;
    return absl::UnimplementedError("this engine cannot load a sequence's state");
  }

  // The next token, drawn by `sampler` (its settings, generator and penalty
  // window) from the last logits row of the most recent successful Forward,
  // of any sequence. Does not Accept the token. FailedPrecondition when no
  // logits are kept.
  virtual absl::StatusOr<int32_t> Sample(Sampler& sampler) = 0;

  // Whether SampleStep works: the engine keeps a ForwardMany step's row
  // where it computed it and samples it there (a GPU engine then copies no
  // row to the host). Otherwise callers sample the rows ForwardMany copied.
  virtual bool SamplesStepsInPlace() const { return false; }
  // The next token `sampler` draws from the last logits row of steps[step]
  // of the most recent successful ForwardMany, which set sample_in_engine
  // for it: the token Sample would draw from that row. Valid until the next
  // Forward or ForwardMany; FailedPrecondition for a step whose row is not
  // kept, or an engine that keeps none. Does not Accept the token.
  virtual absl::StatusOr<int32_t> SampleStep(size_t step, Sampler& sampler) {
    (void)step, (void)sampler;
    return absl::FailedPreconditionError("this engine keeps no ForwardMany rows to sample");
  }

  // The last logits row Sample draws from, on the host (a GPU engine copies
  // it there, so call this only when the caller wants the numbers, such as
  // a request's logprobs). Valid until the next Forward, Sample or
  // checkpoint restore. FailedPrecondition when no logits are kept.
  virtual absl::StatusOr<std::span<const float>> LastLogitsRow() = 0;

  virtual int n_vocab() const = 0;
  // The capacity of every sequence.
  virtual int max_ctx() const = 0;
  virtual int max_sequences() const = 0;
};

// Where the CPU engine reads weights from.
enum class WeightPages {
  // Huge pages when the kernel offers transparent huge pages, the weights
  // are large enough for TLB misses to matter and they fit in available RAM;
  // the file mapping otherwise.
  kAuto,
  kHuge,    // copy into transparent huge pages; an error when that is impossible
  kMapped,  // read the GGUF file mapping (4 KiB pages, shared with the page cache)
};

struct EngineOptions {
  int max_ctx = 4096;     // positions per sequence; at most hparams.n_ctx_train
  int max_sequences = 1;  // sequences alive at once (their state is allocated at creation)
  int n_threads = 1;      // worker threads for backends that use them
  // How the KV caches store keys and values (model/kv_cache_types.h); a
  // backend refuses at creation a type it lacks, naming the ones it has.
  KvCacheTypes kv_types;
  WeightPages weight_pages = WeightPages::kAuto;  // CPU backend only
  // CPU backend: where the routed experts come from; null reads them from
  // the model's mapping. When set, huge pages (if chosen) hold only the
  // dense weights, and the source must outlive the engine.
  ExpertWeightSource* expert_source = nullptr;
  // CPU backend: routing hooks (engine/routing_hook.h); null: none. Not
  // owned; must outlive the engine.
  RoutingObserver* routing_observer = nullptr;
  RoutingOverride* routing_override = nullptr;
};

// The multithreaded CPU engine (engine/cpu_engine.h) for any architecture
// its blocks cover. `model` (and the GGUF mapping behind it) must outlive
// the engine.
absl::StatusOr<std::unique_ptr<ForwardEngine>> CreateCpuEngine(const Model& model,
                                                               const EngineOptions& options);

}  // namespace moetier
