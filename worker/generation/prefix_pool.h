// Shared prompt prefixes: copies of sequence states taken during prefill,
// so that a later prompt beginning with the same tokens (a long system
// prompt, tool definitions, an earlier turn of some conversation) starts
// from there and computes only the rest. Unlike the retained sequence
// (generation/retained_sequence.h), which hands one finished sequence to
// its follow-up, the pool serves any number of requests, concurrent ones
// included, from states it copied out of their slots.
//
// What a state can supply depends on the model:
// - attention layers only: a state of a prompt's first n positions serves
//   any prompt sharing its first m <= n tokens (KV rows at a position
//   depend only on the tokens up to it), so each prompt is stored whole;
// - with recurrent layers (Gated DeltaNet) the state exists only at the
//   position where it was copied, so a prompt is stored where it forks from
//   one seen before (the length of their common start, a system prompt's
//   end) and at its checkpoint position (a conversation's history, or the
//   prompt but its last token).
//
// The states are kept least recently used first out, within a byte budget
// that counts their KV rows, recurrent state and tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/forward_engine.h"

namespace moetier {

// What a worker reports of its prefix cache (and of prompt reuse as a whole).
struct PrefixCacheReport {
  uint64_t states = 0;
  uint64_t bytes = 0;
  uint64_t prompt_tokens_reused = 0;  // prompt positions not computed, every source
};

// A shared start shorter than this is not worth a stored state.
inline constexpr int kMinSharedPrefixTokens = 16;

class PrefixPool {
 public:
  // budget_bytes 0 keeps nothing. `recurrent`: the model has recurrent
  // layers, so a state serves only its exact length.
  PrefixPool(uint64_t budget_bytes, bool recurrent);
  ~PrefixPool();

  // The most positions of `prompt` a kept state can supply; never its last
  // one, whose logits start generation.
  int UsableLength(std::span<const int32_t> prompt) const;
  // Loads that many positions into `seq` (its earlier state replaced) and
  // returns how many; 0 with `seq` untouched when no state serves.
  absl::StatusOr<int> LoadInto(ForwardEngine& engine, Sequence& seq,
                               std::span<const int32_t> prompt);
  // The positions in (from, prompt.size()] at which a prefill of `prompt`
  // starting at `from` should stop and Store, ascending; remembers the
  // prompt so that a later one can fork from it. `checkpoint_position` as
  // BatchedGeneration's.
  std::vector<int> PlanStores(std::span<const int32_t> prompt, int from, int checkpoint_position);
  // Copies the state of `seq`, whose positions hold `prefix`, into the
  // pool, dropping the least recently used states until it fits. A state
  // larger than the whole budget is not kept. Errors are the engine's.
  absl::Status Store(ForwardEngine& engine, const Sequence& seq, std::span<const int32_t> prefix);

  uint64_t budget_bytes() const { return budget_bytes_; }
  uint64_t bytes() const { return bytes_; }
  size_t states() const { return entries_.size(); }
  bool enabled() const { return budget_bytes_ > 0; }
  // Keeps nothing from now on (a backend that cannot copy state).
  void Disable();

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::unique_ptr<SequenceState> state;
    uint64_t bytes = 0;
    uint64_t last_use = 0;
  };
  // The index of the entry that supplies the most of `prompt`, and how
  // much; -1: none does.
  int Best(std::span<const int32_t> prompt, int* usable) const;
  void Evict(size_t index);

  uint64_t budget_bytes_;
  const bool recurrent_;
  uint64_t bytes_ = 0;
  uint64_t clock_ = 0;
  std::vector<Entry> entries_;
  // The last prompts planned, newest last, for fork points.
  std::deque<std::vector<int32_t>> recent_prompts_;
};

}  // namespace moetier
