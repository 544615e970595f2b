// The one generate loop of the worker, for standalone runs and daemon
// requests alike: prefill the prompt into a sequence, then sample, report
// and feed back one token at a time until a stop token, the token limit, a
// full context or the caller's stop.
//
// A sequence holds at most its capacity in tokens, generated ones included:
// generation ends (kContextFull) once prompt + generated tokens reach it.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/forward_engine.h"
#include "engine/sequence.h"
#include "request/stop_reason.h"
#include "sampling/sampler.h"
#include "sampling/token_logprobs.h"

namespace moetier {

struct GenerationRequest {
  std::span<const int32_t> prompt;    // non-empty, ids checked by the engine
  int max_new_tokens = -1;            // >= 1, or -1: no limit but the context
  std::span<const int32_t> stop_ids;  // sorted ascending
  // At most this many prompt positions per Forward call; 0: the whole
  // remaining prompt in one call. 1 runs the prompt through the decode path.
  int ubatch_size = 0;
  // The prompt position, in [1, prompt.size()], where the sequence's
  // checkpoint is saved, for a later request that shares the prompt up to
  // there but not what follows; 0: none. Short of the prompt's end it
  // splits the prefill in two calls.
  int checkpoint_position = 0;
  // >= 0: each token comes with its log-probability and this many most
  // likely alternatives (at most kMaxTopLogprobs); -1: none computed.
  int top_logprobs = -1;
};

// Where the tokens go. Errors from it end the loop with that error.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // Each sampled token in order, stop tokens included (flagged);
  // latency_ms is the time to compute it (the first includes the prefill);
  // logprobs is null unless the request asked for them (top_logprobs >= 0).
  virtual absl::Status OnToken(int32_t token, bool is_stop, double latency_ms,
                               const TokenLogprobs* logprobs) = 0;
  // Asked between tokens: true stops the loop with kCancelled.
  virtual absl::StatusOr<bool> ShouldStop() { return false; }
};

struct GenerationResult {
  // kEndOfGeneration, kMaxTokens, kContextFull, or kCancelled when the sink
  // asked to stop (a cancel, a closed channel).
  StopReason stop = StopReason::kMaxTokens;
  int generated = 0;        // tokens reported, stop token included
  int prompt_reused = 0;    // prompt positions already in the sequence, not computed
  double prefill_s = 0.0;   // the prompt's forward pass
  double decode_s = 0.0;    // from the end of the prefill to the end
  absl::Status engine_error;  // set when the engine failed; `stop` is then meaningless
};

// `seq` holds a prefix of the prompt: empty, or the state of the prompt's
// first seq.length() < prompt.size() tokens (the caller vouches for which
// tokens they were); only the rest is computed. The whole prompt and every
// sampled token go into `sampler`'s penalty window. Returns the sink's
// error, if any; an engine failure comes back in
// GenerationResult::engine_error with the times so far.
absl::StatusOr<GenerationResult> RunGeneration(ForwardEngine& engine, Sequence& seq,
                                               Sampler& sampler, const GenerationRequest& request,
                                               TokenSink& sink);

}  // namespace moetier
