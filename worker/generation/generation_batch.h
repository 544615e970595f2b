// Continuous batching: the Generate requests a worker computes at once, as
// one ForwardEngine::ForwardMany per step. Each step gives every member its
// next tokens: a member still in its prompt its next chunk (at most
// prefill_chunk positions, stopping at its checkpoint and store
// positions), a decoding member the token it sampled last. A member joins at the next step after
// Add and leaves in the step it finishes (stop token, token limit, full
// context, cancel), so nobody waits for anybody's whole request: a new
// prompt's time to first token is bounded by its chunks, and the running
// members decode a token in every step meanwhile.
//
// Each member computes exactly what generation/generate_loop.h computes
// for it alone with the same prompt split (the engines' ForwardMany
// contract), samples from its own logits row with its own sampler, and
// reports through GenerationEvents what RunGeneration reports through its
// sink. An engine error fails every member of that step: the engine cannot
// say whose tokens it was computing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/forward_engine.h"
#include "generation/generate_loop.h"
#include "sampling/sampler.h"
#include "sampling/token_logprobs.h"

namespace moetier {

// Prompt positions a member runs per step next to others when the caller
// sets no other chunk (the worker's --ubatch-size).
inline constexpr int kBatchedPrefillChunk = 256;

struct BatchedGeneration {
  uint64_t id = 0;
  std::vector<int32_t> prompt;    // non-empty
  int max_new_tokens = 1;         // >= 1
  std::vector<int32_t> stop_ids;  // sorted ascending
  // As GenerationRequest: where the checkpoint is saved, 0: none.
  int checkpoint_position = 0;
  // Prompt positions, ascending, where the prefill stops and the events'
  // OnPrefixComputed sees the state (generation/prefix_pool.h).
  std::vector<int> store_positions;
  int top_logprobs = -1;  // as GenerationRequest
  SamplingParams sampling;
};

class GenerationEvents {
 public:
  virtual ~GenerationEvents() = default;
  // As TokenSink::OnToken, for the member `id`. An error ends the Step
  // with it.
  virtual absl::Status OnToken(uint64_t id, int32_t token, bool is_stop, double latency_ms,
                               const TokenLogprobs* logprobs) = 0;
  // The member `id` ended: `result` as RunGeneration returns it, with its
  // sequence and the tokens its positions hold (the prompt and every
  // sampled token, the last possibly never fed back), for a caller that
  // keeps it (generation/retained_sequence.h). An error ends the Step.
  // The member `id` has computed `prefix`, the start of its prompt, at one
  // of its store_positions: `seq` holds it, to be copied now.
  virtual void OnPrefixComputed(uint64_t id, const Sequence& seq, std::span<const int32_t> prefix) {
    (void)id, (void)seq, (void)prefix;
  }
  virtual absl::Status OnFinished(uint64_t id, const GenerationResult& result,
                                  std::unique_ptr<Sequence> seq, std::vector<int32_t> tokens) = 0;
};

class GenerationBatch {
 public:
  // prefill_chunk >= 1: prompt positions per member and step. `engine`
  // must outlive the batch.
  GenerationBatch(ForwardEngine& engine, int prefill_chunk);
  ~GenerationBatch();

  // Joins at the next Step. `seq` holds a prefix of the prompt, shorter
  // than it (RetainedSequence::TakeFor); its time to first token counts
  // from here. The ids of members are distinct.
  void Add(BatchedGeneration request, std::unique_ptr<Sequence> seq);
  // The member ends with kCancelled at the start of the next Step (its
  // Done then comes from OnFinished); false when no member has this id.
  bool Cancel(uint64_t id);
  // One engine pass for every member, then the tokens of those whose
  // logits it computed, and the members that ended. Errors only from the
  // events.
  absl::Status Step(GenerationEvents& events);

  size_t size() const { return members_.size(); }
  bool empty() const { return members_.empty(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Member;
  // Samples the member's next token from its row (here, or in the engine
  // with SampleStep), reports it and says whether the member ends there (an
  // engine error ends it with StopReason::kError).
  absl::StatusOr<bool> TakeToken(Member& m, GenerationEvents& events);
  absl::Status Finish(size_t index, StopReason stop, GenerationEvents& events);

  ForwardEngine& engine_;
  const int prefill_chunk_;
  std::vector<std::unique_ptr<Member>> members_;
  std::vector<SequenceStep> steps_;  // reused by every Step
  TokenLogprobs logprobs_;
};

}  // namespace moetier
